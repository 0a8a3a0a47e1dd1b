//! Real processes on one SQLite file, killed with SIGKILL (no destructor, no checkpoint,
//! nothing flushed by the process):
//!
//! - a holder killed in the middle of its action: a retry from another process is told
//!   "in progress" while the lease lasts, takes the key over once it has run out, and runs
//!   the action once; every later call replays that run;
//! - a process that completed N records and is killed: another process opening the file
//!   replays every one of them, running nothing.
//!
//! The child process is this test binary itself, started again with its arguments in
//! `IDEM_SQLITE_CHILD_ARGS` (hence `harness = false`, as for idem-http's and
//! idem-postgres's process tests, whose support module this reuses).

use idem_tests::process;
mod support;

use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use idem::{Coordinator, Error, Fingerprint, InFlightPolicy, Options, StoreFailurePolicy};
use idem_sqlite::SqliteStore;
use process::{ExampleProcess, child_args, run_test, serve};
use support::TempDir;

const CHILD: &str = "IDEM_SQLITE_CHILD_ARGS";
const LEASE: Duration = Duration::from_secs(1);
const RECORDS: usize = 200;

fn main() {
    if let Some(args) = child_args(CHILD, "child") {
        match args[1].as_str() {
            "hold" => serve(hold(args[2].clone())),
            "complete" => serve(complete(args[2].clone())),
            other => panic!("unknown child {other}"),
        }
    } else {
        run_test(
            "a holder killed mid-action is taken over once, after its lease",
            killed_holder_is_taken_over_after_its_lease(),
        );
        run_test(
            "a restart keeps every completed record",
            a_restart_keeps_every_completed_record(),
        );
    }
}

fn options() -> Options {
    Options::builder()
        .lease(LEASE)
        .in_flight(InFlightPolicy::Raise)
        .on_store_failure(StoreFailurePolicy::FailClosed)
        .build()
        .unwrap()
}

/// Appends `who` to the effects file: the card statement, one line per run of the action.
fn effect(dir: &Path, who: &str) {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("effects"))
        .unwrap();
    writeln!(file, "{who}").unwrap();
    file.sync_all().unwrap();
}

fn effects(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("effects"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The holder: takes the key, makes its effect, says so, and never finishes.
async fn hold(dir: String) -> Result<(), Box<dyn std::error::Error>> {
    let dir = Path::new(&dir).to_path_buf();
    let store = SqliteStore::open(dir.join("idem.db")).await?;
    store.migrate().await?;
    let coordinator = Coordinator::new(store, options());
    println!("child started");
    coordinator
        .execute(
            "payment.charge",
            "k-kill",
            Fingerprint::of_bytes(b"charge 100"),
            move |_claim| async move {
                effect(&dir, "child");
                println!("running");
                std::future::pending::<()>().await;
                Ok::<_, std::io::Error>("child".to_owned())
            },
        )
        .await?;
    Ok(())
}

/// Completes `RECORDS` records, says so, and waits to be killed.
async fn complete(dir: String) -> Result<(), Box<dyn std::error::Error>> {
    let store = SqliteStore::open(Path::new(&dir).join("idem.db")).await?;
    store.migrate().await?;
    let coordinator = Coordinator::new(store, options());
    println!("child started");
    for i in 0..RECORDS {
        coordinator
            .execute(
                "order.create",
                format!("k-{i}"),
                Fingerprint::of_bytes(format!("order {i}").as_bytes()),
                move |_claim| async move { Ok::<_, std::io::Error>(format!("order-{i}")) },
            )
            .await?;
    }
    println!("completed {RECORDS}");
    std::future::pending::<()>().await;
    Ok(())
}

async fn killed_holder_is_taken_over_after_its_lease() {
    let dir = TempDir::new();
    let dir_arg = dir.path().to_str().unwrap().to_owned();
    let holder = ExampleProcess::start(CHILD, &["hold", &dir_arg], "child started");
    assert_eq!(holder.line(Duration::from_secs(20)), "running");
    let granted_by = Instant::now();
    holder.signal("-KILL");
    let store = SqliteStore::open(dir.db()).await.unwrap();
    let coordinator = Coordinator::new(store, options());
    let runs = Arc::new(AtomicU32::new(0));
    let mut in_progress = 0;
    let took_over = loop {
        let (runs, dir) = (runs.clone(), dir.path().to_path_buf());
        let call = coordinator
            .execute(
                "payment.charge",
                "k-kill",
                Fingerprint::of_bytes(b"charge 100"),
                move |_claim| async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    effect(&dir, "retry");
                    Ok::<_, std::io::Error>("retry".to_owned())
                },
            )
            .await;
        match call {
            Err(Error::InProgress) => {
                in_progress += 1;
                assert!(granted_by.elapsed() < LEASE * 3, "never taken over");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Ok(value) => break value,
            Err(other) => panic!("{other}"),
        }
    };
    let waited = granted_by.elapsed();
    assert_eq!(took_over, "retry");
    // Refused while the dead holder's lease lasted (the kill came right after its grant).
    assert!(
        in_progress > 0,
        "no call was refused while the lease lasted"
    );
    assert!(
        waited >= LEASE - Duration::from_millis(200),
        "taken over after {waited:?}, before the lease of {LEASE:?} ran out"
    );
    // Later calls replay the retry's run.
    for _ in 0..3 {
        let runs = runs.clone();
        let replay = coordinator
            .execute(
                "payment.charge",
                "k-kill",
                Fingerprint::of_bytes(b"charge 100"),
                move |_claim| async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, std::io::Error>("again".to_owned())
                },
            )
            .await
            .unwrap();
        assert_eq!(replay, "retry");
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(effects(dir.path()), ["child", "retry"]);
    println!("taken over after {waited:?}, {in_progress} calls refused before");
}

async fn a_restart_keeps_every_completed_record() {
    let dir = TempDir::new();
    let dir_arg = dir.path().to_str().unwrap().to_owned();
    let child = ExampleProcess::start(CHILD, &["complete", &dir_arg], "child started");
    assert_eq!(
        child.line(Duration::from_secs(30)),
        format!("completed {RECORDS}")
    );
    child.signal("-KILL");
    drop(child);
    let store = SqliteStore::open(dir.db()).await.unwrap();
    let coordinator = Coordinator::new(store, options());
    let runs = Arc::new(AtomicU32::new(0));
    for i in 0..RECORDS {
        let runs = runs.clone();
        let value = coordinator
            .execute(
                "order.create",
                format!("k-{i}"),
                Fingerprint::of_bytes(format!("order {i}").as_bytes()),
                move |_claim| async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, std::io::Error>("ran again".to_owned())
                },
            )
            .await
            .unwrap();
        assert_eq!(value, format!("order-{i}"));
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    println!("{RECORDS} records replayed after SIGKILL");
}
