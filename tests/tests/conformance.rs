//! The store conformance kit (`idem-conformance`) on every store of the workspace, and on the
//! kit's broken stores, from one command:
//!
//! ```text
//! cargo test -p idem-tests --test conformance -- --nocapture
//! ```
//!
//! Each store gets a `Subject` (the store, its clock, and where the store keeps bytes a way
//! to plant a value it did not write), kept with the store's own tests. Every report is printed; every store must conform,
//! every broken store must be caught.

use std::time::Duration;

#[path = "../../mysql-adapter/tests/support/subject.rs"]
mod mysql_subject;
#[path = "../../postgres-adapter/tests/support/subject.rs"]
mod postgres_subject;
#[path = "../../redis-adapter/tests/support/subject.rs"]
mod redis_subject;
#[path = "../../sqlite-adapter/tests/support/subject.rs"]
mod sqlite_subject;

use idem::MemoryStore;
use idem_conformance::broken::{BrokenStore, Flaw};
use idem_conformance::{Check, Config, Report, run};
use idem_mysql::MySqlStore;
use idem_postgres::PostgresStore;
use idem_redis::RedisStore;
use idem_sqlite::SqliteStore;
use idem_tests::postgres::TestDb;
use idem_tests::redis::{RedisCluster, RedisServer};
use mysql_subject::OnMySql;
use postgres_subject::OnPostgres;
use redis_subject::OnRedis;
use sqlite_subject::OnSqlite;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

fn conforms(report: &Report) {
    println!("{report}");
    assert!(report.passed(), "{report}");
}

/// The checks a store could not take: never a failure, but each said and asserted here, so a
/// check that stopped running would show.
fn skipped(report: &Report) -> Vec<Check> {
    report.skipped().map(|result| result.check).collect()
}

#[test]
fn memory_store_conforms() {
    let report = runtime().block_on(run("MemoryStore", &MemoryStore::new(), &Config::default()));
    conforms(&report);
    assert_eq!(skipped(&report), [Check::Corrupt], "{report}");
}

#[test]
fn redis_conforms() {
    let server = RedisServer::start();
    let runtime = runtime();
    runtime.block_on(async {
        for fences in [false, true] {
            let subject = OnRedis {
                store: RedisStore::builder()
                    .fences(fences)
                    .connect(&server.url())
                    .await
                    .expect("connect"),
                conn: server.conn().await,
            };
            let name = if fences { "Redis, fenced" } else { "Redis" };
            let report = run(name, &subject, &Config::default()).await;
            conforms(&report);
            assert!(report.skipped().next().is_none(), "{report}");
        }
    });
}

#[test]
fn redis_cluster_conforms() {
    let cluster = RedisCluster::start();
    let runtime = runtime();
    runtime.block_on(async {
        let client = redis::cluster::ClusterClient::new(cluster.urls()).expect("cluster client");
        let subject = OnRedis {
            store: RedisStore::builder()
                .fences(true)
                .connect_cluster(cluster.urls())
                .await
                .expect("connect"),
            conn: client.get_async_connection().await.expect("connect"),
        };
        let report = run("Redis Cluster, fenced", &subject, &Config::default()).await;
        conforms(&report);
        assert!(report.skipped().next().is_none(), "{report}");
    });
}

#[test]
fn postgres_conforms() {
    let runtime = runtime();
    runtime.block_on(async {
        let db = TestDb::create().await;
        let pool = db.pool(4).await;
        let store = PostgresStore::builder().build(pool.clone());
        store.migrate().await.expect("migrate");
        let subject = OnPostgres { store, pool };
        let report = run("PostgreSQL", &subject, &Config::default()).await;
        conforms(&report);
        assert_eq!(skipped(&report), [Check::Notices], "{report}");
        drop(subject);
        drop(db);
    });
}

#[test]
fn mariadb_conforms() {
    let runtime = runtime();
    runtime.block_on(async {
        let db = idem_tests::mysql::TestDb::create().await;
        let store = MySqlStore::builder().build(db.pool(4).await);
        store.migrate().await.expect("migrate");
        let subject = OnMySql(store);
        let report = run("MariaDB", &subject, &Config::default()).await;
        conforms(&report);
        assert_eq!(skipped(&report), [Check::Notices], "{report}");
        drop(subject);
        drop(db);
    });
}

#[test]
fn sqlite_conforms() {
    let dir = std::env::temp_dir().join(format!("idem-conformance-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    let runtime = runtime();
    runtime.block_on(async {
        let store = SqliteStore::open(dir.join("idem.db")).await.expect("open");
        store.migrate().await.expect("migrate");
        let report = run("SQLite", &OnSqlite(store), &Config::default()).await;
        conforms(&report);
        assert_eq!(skipped(&report), [Check::Notices], "{report}");
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// Each broken store is caught, by the check written for its bug.
#[test]
fn every_broken_store_is_caught() {
    let runtime = runtime();
    for (flaw, check) in [
        (Flaw::SkipsOwnerCheck, Check::Owners),
        (
            Flaw::ClientClock {
                ahead: Duration::from_millis(30),
            },
            Check::Expiry,
        ),
        (Flaw::Unlocked, Check::Races),
        (Flaw::WatchFromFirstPoll, Check::Notices),
        (Flaw::CaseInsensitiveKeys, Check::Names),
        (Flaw::TruncatesBodies, Check::Sizes),
    ] {
        let report = runtime.block_on(run(
            &format!("broken: {flaw:?}"),
            &BrokenStore::new(flaw),
            &Config::default(),
        ));
        println!("{report}");
        let failed: Vec<Check> = report.failures().map(|result| result.check).collect();
        assert!(
            failed.contains(&check),
            "{flaw:?} not caught by {check}: {report}"
        );
    }
}
