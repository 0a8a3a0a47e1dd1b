//! The store conformance kit (`idem-conformance`) on every store of the workspace, and on the
//! kit's broken stores, from one command:
//!
//! ```text
//! cargo test -p idem-tests --test conformance -- --nocapture
//! ```
//!
//! Each store gets a [`Subject`]: the store, its clock, and (where the store keeps bytes) a
//! way to plant a value it did not write. Every report is printed; every store must conform,
//! every broken store must be caught.

use std::time::Duration;

use idem::{BoxError, MemoryStore, StoreError};
use idem_conformance::broken::{BrokenStore, Flaw};
use idem_conformance::{Check, Config, Report, Subject, Timing, run};
use idem_core::record::{Command, CommandKind, Reply};
use idem_core::{Key, Operation, Timestamp};
use idem_postgres::PostgresStore;
use idem_redis::RedisStore;
use idem_tests::postgres::TestDb;
use idem_tests::redis::{RedisCluster, RedisServer};
use redis::aio::ConnectionLike;

fn unavailable(command: CommandKind) -> impl FnOnce(redis::RedisError) -> StoreError {
    move |error| StoreError::Unavailable {
        command,
        source: Box::new(error),
    }
}

/// A Redis store, standalone or on a Cluster, with a plain connection for the server's clock
/// (`TIME`) and for planting values. Commands go through `Store::apply`, fast paths and all,
/// and are placed between two reads of the clock.
struct OnRedis<C> {
    store: RedisStore,
    conn: C,
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> Subject for OnRedis<C> {
    type Store = RedisStore;

    fn store(&self) -> &RedisStore {
        &self.store
    }

    async fn now(&self) -> Result<Timestamp, StoreError> {
        let (secs, micros): (u64, u64) = redis::cmd("TIME")
            .query_async(&mut self.conn.clone())
            .await
            .map_err(unavailable(CommandKind::Read))?;
        Ok(Timestamp::from_millis(secs * 1000 + micros / 1000))
    }

    async fn plant_corrupt(&self, operation: &Operation, key: &Key) -> Result<bool, BoxError> {
        redis::cmd("SET")
            .arg(self.store.layout().record_key(operation, key))
            .arg("not a record of idem")
            .query_async::<()>(&mut self.conn.clone())
            .await?;
        Ok(true)
    }
}

/// PostgreSQL: every statement says the server instant it judged by, so the kit judges it
/// exactly.
struct OnPostgres {
    store: PostgresStore,
    pool: sqlx::PgPool,
}

impl Subject for OnPostgres {
    type Store = PostgresStore;

    fn store(&self) -> &PostgresStore {
        &self.store
    }

    async fn now(&self) -> Result<Timestamp, StoreError> {
        let millis: i64 =
            sqlx::query_scalar("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint")
                .fetch_one(&self.pool)
                .await
                .map_err(|error| StoreError::Unavailable {
                    command: CommandKind::Read,
                    source: Box::new(error),
                })?;
        Ok(Timestamp::from_millis(u64::try_from(millis).unwrap_or(0)))
    }

    async fn apply_timed(
        &self,
        operation: &Operation,
        key: &Key,
        command: Command,
    ) -> Result<(Reply, Timing), StoreError> {
        let (reply, now) = self.store.apply_timed(operation, key, command).await?;
        Ok((reply, Timing::At(now)))
    }

    async fn plant_corrupt(&self, operation: &Operation, key: &Key) -> Result<bool, BoxError> {
        // State 9 is none the store writes.
        sqlx::query(
            "INSERT INTO idem_records (operation, key, state, owner, fingerprint, body, expires_at)
             VALUES ($1, $2, 9, '\\x00'::bytea, '\\x00'::bytea, NULL,
                     (extract(epoch FROM clock_timestamp()) * 1000)::bigint + 600000)",
        )
        .bind(operation.as_str())
        .bind(key.as_str())
        .execute(&self.pool)
        .await?;
        Ok(true)
    }
}

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

#[test]
fn memory_store_conforms() {
    let report = runtime().block_on(run("MemoryStore", &MemoryStore::new(), &Config::default()));
    conforms(&report);
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
        assert!(report.skipped().next().is_none(), "{report}");
        drop(subject);
        drop(db);
    });
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
