//! An operator's session with `idem` on a real Redis Cluster and on PostgreSQL: a key held
//! by a service process that was paused (SIGSTOP) is listed with its lease counting down,
//! `release` refuses while the lease lives and succeeds after, and `inspect` of a completed
//! key shows its result size and retention left. Then `health` on a Redis that may evict.
//!
//! The holder is a real process: this test binary started again (`harness = false`) with
//! the store in an environment variable, running the library's `Coordinator` as a service
//! would. The tool is the built `idem` binary, run as an operator runs it.

use std::process::Command;
use std::time::{Duration, Instant};

use idem::{Coordinator, Fingerprint, Options};
use idem_tests::postgres::TestDb;
use idem_tests::process::{ExampleProcess, child_args, run_test, serve};
use idem_tests::redis::{RedisCluster, RedisServer};
use serde_json::Value;

/// The variable that makes this binary a holder process.
const HOLDER: &str = "IDEM_CLI_TEST_HOLDER";
const OPERATION: &str = "payment.charge";
/// The size of the completed key's stored result: the JSON of a 298-character string.
const BODY_BYTES: u64 = 300;
const LEASE: Duration = Duration::from_secs(3);
const RETENTION: Duration = Duration::from_secs(3_600);

fn main() {
    if let Some(args) = child_args(HOLDER, "holder") {
        serve(hold(args));
        return;
    }
    run_test("redis_cluster_session", async {
        let cluster = RedisCluster::start();
        let urls = cluster.urls();
        session(&["--redis-cluster", &urls.join(",")], false).await;
    });
    run_test("postgres_session", async {
        let db = TestDb::create().await;
        let store = idem_postgres::PostgresStore::connect(&db.url())
            .await
            .unwrap();
        store.migrate().await.unwrap();
        session(&["--postgres", &db.url()], true).await;
    });
    run_test("health_on_an_evicting_redis", async {
        let evicting = RedisServer::start_with(&["--maxmemory-policy", "allkeys-lru"]);
        let (code, text) = idem(&["--redis", &evicting.url(), "health"]);
        assert_eq!(code, 2, "a failed check exits 2:\n{text}");
        assert!(text.contains("fail  eviction "), "{text}");
        // Read as one line: where the text wraps depends on the port's length.
        let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(flat.contains("allkeys-lru"), "{text}");
        assert!(flat.contains("runs the action again"), "{text}");
        fits(&text);
        let (_, json) = idem_json(&["--redis", &evicting.url(), "health"]);
        assert_eq!(json["status"], "fail");
        let safe = RedisServer::start();
        let (code, json) = idem_json(&["--redis", &safe.url(), "health"]);
        assert_eq!(code, 0, "{json}");
        assert_eq!(json["status"], "ok", "{json}");
    });
}

/// The holder: completes `order-done`, then holds `order-stuck` in an action that never
/// ends, renewing its lease until it is paused.
async fn hold(args: Vec<String>) -> Result<(), Box<dyn std::error::Error>> {
    let options = Options::builder()
        .lease(LEASE)
        .retention(RETENTION)
        .build()?;
    let store = match args[1].as_str() {
        "--redis-cluster" => idem::AnyStore::new(
            idem_redis::RedisStore::builder()
                .connect_cluster(args[2].split(','))
                .await?,
        ),
        _ => idem::AnyStore::new(idem_postgres::PostgresStore::connect(&args[2]).await?),
    };
    let coordinator = Coordinator::new(store, options);
    let done = Fingerprint::of_bytes(b"order-done");
    coordinator
        .execute(OPERATION, "order-done", done, |_claim| async {
            Ok::<_, std::io::Error>("x".repeat(BODY_BYTES as usize - 2))
        })
        .await?;
    let stuck = Fingerprint::of_bytes(b"order-stuck");
    coordinator
        .execute(OPERATION, "order-stuck", stuck, |_claim| async {
            println!("holding");
            std::future::pending::<Result<(), std::io::Error>>().await
        })
        .await?;
    Ok(())
}

async fn session(store: &[&str], sql: bool) {
    let holder = ExampleProcess::start(HOLDER, store, "holding");
    holder.signal("-STOP");
    let paused = Instant::now();
    let with = |args: &[&str]| -> Vec<String> {
        store
            .iter()
            .chain(args)
            .map(|arg| arg.to_string())
            .collect()
    };

    // Listed, its lease counting down.
    let (code, first) = idem_json(&with(&["list"]));
    assert_eq!(code, 0, "{first}");
    let row = only_record(&first, "order-stuck");
    assert_eq!(row["state"], "pending", "{first}");
    let left_first = row["lease_left_ms"].as_u64().unwrap();
    assert!(left_first <= LEASE.as_millis() as u64, "{first}");
    tokio::time::sleep(Duration::from_millis(600)).await;
    let (_, second) = idem_json(&with(&["list"]));
    let left_second = only_record(&second, "order-stuck")["lease_left_ms"]
        .as_u64()
        .unwrap();
    assert!(
        left_second + 400 <= left_first,
        "the lease counts down: {left_first} ms, then {left_second} ms"
    );
    let (_, text) = idem(&with(&["list"]));
    assert!(
        text.contains("pending") && text.contains("order-stuck"),
        "{text}"
    );
    fits(&text);

    // Refused while the lease lives: nothing changed.
    let (code, refused) = idem_json(&with(&["release", OPERATION, "order-stuck"]));
    assert_eq!(code, 2, "{refused}");
    assert_eq!(refused["outcome"], "refused");
    let (_, text) = idem(&with(&["release", OPERATION, "order-stuck"]));
    assert!(text.contains("refused: the lease has"), "{text}");
    fits(&text);
    let (_, still) = idem_json(&with(&["inspect", OPERATION, "order-stuck"]));
    assert_eq!(still["state"], "pending", "{still}");

    // The holder stays paused; its lease runs out by the store's clock.
    let ran_out = loop {
        let (_, now) = idem_json(&with(&["inspect", OPERATION, "order-stuck"]));
        if now["state"] != "pending" {
            break now;
        }
        assert!(
            paused.elapsed() < LEASE * 3,
            "the lease never ran out: {now}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    if sql {
        // A SQL store keeps the record until a takeover or a sweep: listed as expired.
        assert_eq!(ran_out["state"], "expired", "{ran_out}");
        let (_, listed) = idem_json(&with(&["list"]));
        assert_eq!(only_record(&listed, "order-stuck")["state"], "expired");
        let (code, released) = idem_json(&with(&["release", OPERATION, "order-stuck"]));
        assert_eq!(
            (code, &released["outcome"]),
            (0, &"released".into()),
            "{released}"
        );
    } else {
        // Redis drops the record with its key's expiry: the key is free already.
        assert_eq!(ran_out["state"], "absent", "{ran_out}");
        let (code, released) = idem_json(&with(&["release", OPERATION, "order-stuck"]));
        assert_eq!(
            (code, &released["outcome"]),
            (0, &"free".into()),
            "{released}"
        );
    }
    let (_, gone) = idem_json(&with(&["inspect", OPERATION, "order-stuck"]));
    assert_eq!(gone["state"], "absent", "{gone}");
    let (_, listed) = idem_json(&with(&["list"]));
    assert_eq!(
        listed["records"].as_array().map(Vec::len),
        Some(0),
        "{listed}"
    );

    // The completed key: its result's size and retention left.
    let (code, done) = idem_json(&with(&["inspect", OPERATION, "order-done"]));
    assert_eq!(code, 0, "{done}");
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(done["record"]["body_bytes"], BODY_BYTES, "{done}");
    let retention_left = done["record"]["retention_left_ms"].as_u64().unwrap();
    assert!(
        retention_left <= RETENTION.as_millis() as u64
            && retention_left > (RETENTION - Duration::from_secs(60)).as_millis() as u64,
        "{done}"
    );
    let (_, text) = idem(&with(&["inspect", OPERATION, "order-done", "--show-body"]));
    assert!(
        text.contains(&format!("result       {BODY_BYTES} bytes")),
        "{text}"
    );
    assert!(text.contains("retention    59 m"), "{text}");
    fits(&text);
    let (code, text) = idem(&with(&["release", OPERATION, "order-done"]));
    assert_eq!(
        code, 2,
        "a completed record is kept without --completed:\n{text}"
    );

    // Counts, and every text fitting the terminal.
    let (_, stats) = idem_json(&with(&["stats"]));
    let charge = &stats["operations"][0];
    assert_eq!(
        (
            &charge["operation"],
            &charge["completed"],
            &charge["pending"]
        ),
        (&OPERATION.into(), &1.into(), &0.into()),
        "{stats}"
    );
    assert_eq!(charge["body_bytes"], BODY_BYTES, "{stats}");
    for args in [&["stats"][..], &["health"][..], &["list", "--all"][..]] {
        let (code, text) = idem(&with(args));
        assert_eq!(code, 0, "{args:?}: {text}");
        fits(&text);
    }
    drop(holder);
}

/// The one record of `key` in a `list --json` page.
fn only_record<'a>(page: &'a Value, key: &str) -> &'a Value {
    let rows: Vec<&Value> = page["records"]
        .as_array()
        .unwrap_or_else(|| panic!("no records in {page}"))
        .iter()
        .filter(|row| row["key"] == key)
        .collect();
    assert_eq!(rows.len(), 1, "{page}");
    rows[0]
}

/// Runs `idem args`: its exit code and its output (stdout, then stderr).
fn idem<A: AsRef<std::ffi::OsStr>>(args: &[A]) -> (i32, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(args)
        .env_remove("IDEM_REDIS")
        .env_remove("IDEM_POSTGRES")
        .output()
        .expect("run idem");
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    (output.status.code().unwrap_or(-1), text)
}

/// Runs `idem --json args`: its exit code and its JSON.
fn idem_json<A: AsRef<str>>(args: &[A]) -> (i32, Value) {
    let args: Vec<&str> = std::iter::once("--json")
        .chain(args.iter().map(AsRef::as_ref))
        .collect();
    let (code, text) = idem(&args);
    let json = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    (code, json)
}

/// Every line fits an 80-column terminal.
fn fits(text: &str) {
    for line in text.lines() {
        assert!(line.chars().count() <= 80, "over 80 columns: {line:?}");
    }
}
