//! Every decision is a `tracing` event carrying the operation and the key, and the counters
//! add up to what happened.

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Fault, FlakyStore, ProviderTimeout, fingerprint};
use idem::{
    Coordinator, Error, InFlightPolicy, MemoryStore, MetricsSnapshot, Options, StoreFailurePolicy,
};

const OP: &str = "payment.charge";

/// Collects what the subscriber writes.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A subscriber for this thread that writes every event, as plain text, into the buffer.
fn capture() -> (Captured, tracing::subscriber::DefaultGuard) {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_max_level(tracing::Level::TRACE)
        // Plain text whatever features other crates of the workspace turn on.
        .with_ansi(false)
        .without_time()
        .finish();
    (captured, tracing::subscriber::set_default(subscriber))
}

impl Captured {
    fn lines(&self) -> Vec<String> {
        let bytes = self.0.lock().unwrap();
        String::from_utf8_lossy(&bytes)
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

/// One call of each kind on a store whose first reserve fails, then the counters.
async fn one_of_each(policy: StoreFailurePolicy) -> MetricsSnapshot {
    let store = FlakyStore::new(MemoryStore::new()).fault(
        idem_core::record::CommandKind::Reserve,
        0..1,
        Fault::Fail,
    );
    let options = Options::builder()
        .in_flight(InFlightPolicy::Raise)
        .on_store_failure(policy)
        .build()
        .unwrap();
    let coordinator = Coordinator::new(store, options).with_seed(13);
    let ok = move |_claim| async move { Ok::<_, ProviderTimeout>(1) };
    // Executed (after one failed reserve), then replayed.
    coordinator
        .execute(OP, "k1", fingerprint("o", 1), ok)
        .await
        .unwrap();
    coordinator
        .execute(OP, "k1", fingerprint("o", 1), ok)
        .await
        .unwrap();
    // Key reuse, invalid key, action failure.
    let reused = coordinator.execute(OP, "k1", fingerprint("o", 2), ok).await;
    assert!(matches!(reused, Err(Error::KeyReuse { .. })));
    assert!(
        coordinator
            .execute(OP, "", fingerprint("o", 1), ok)
            .await
            .is_err()
    );
    let failed = coordinator
        .execute(OP, "k2", fingerprint("o", 1), move |_claim| async move {
            Err::<u32, _>(ProviderTimeout)
        })
        .await;
    assert!(failed.is_err());
    // In progress: a holder runs while a second call is refused.
    let holder = common::spawn_call(
        &coordinator,
        "k3",
        fingerprint("o", 1),
        Duration::from_secs(1),
        Ok(1),
    );
    tokio::time::sleep(Duration::from_millis(10)).await;
    let busy = coordinator.execute(OP, "k3", fingerprint("o", 1), ok).await;
    assert!(matches!(busy, Err(Error::InProgress)));
    holder.await.unwrap().unwrap();
    // The store goes down for one call.
    coordinator.store().set_down(true);
    let _ = coordinator.execute(OP, "k4", fingerprint("o", 1), ok).await;
    // The settlement's first release goes out while the store is still down.
    tokio::time::sleep(Duration::from_millis(1)).await;
    coordinator.store().set_down(false);
    tokio::time::sleep(Duration::from_secs(1)).await;
    coordinator.metrics()
}

#[tokio::test(start_paused = true)]
async fn every_decision_is_an_event_with_operation_and_key() {
    let (captured, _default) = capture();
    one_of_each(StoreFailurePolicy::FailClosed).await;

    let lines = captured.lines();
    for decision in [
        "store command failed",
        "store replied",
        "running the action",
        "executed",
        "replayed",
        "refused: key reuse",
        "refused: invalid input",
        "the action failed",
        "refused: in progress",
        "refused: store unavailable",
    ] {
        let events: Vec<_> = lines
            .iter()
            .filter(|line| line.contains(decision))
            .collect();
        assert!(
            !events.is_empty(),
            "no event for {decision:?} in {lines:#?}"
        );
        for event in events {
            // Refused input is logged quoted (it may hold control characters).
            let operation = ["operation=payment.charge", "operation=\"payment.charge\""];
            assert!(
                operation.iter().any(|field| event.contains(field)),
                "{event}"
            );
            assert!(event.contains("key="), "{event}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn the_counters_add_up() {
    // A subscriber here too: every test of this binary then agrees on which events are of
    // interest, so a callsite first reached here is not cached as uninteresting while the
    // other test is capturing.
    let (_captured, _default) = capture();
    let counted = one_of_each(StoreFailurePolicy::FailClosed).await;
    let mut expected = MetricsSnapshot::default();
    expected.executed = 2;
    expected.replayed = 1;
    expected.in_progress = 1;
    expected.key_reuse = 1;
    expected.store_unavailable = 1;
    expected.action_failed = 1;
    expected.invalid_input = 1;
    // The first reserve failed once; the down store failed one reserve and its 2 retries,
    // and the release that settles the fail-closed refusal, sent while it was still down.
    expected.store_errors.reserve = 1 + 3;
    expected.store_errors.release = 1;
    // The bound on detached actions, not a count.
    expected.max_detached = idem::detached::DEFAULT_MAX_DETACHED as u64;
    assert_eq!(counted, expected);

    let counted = one_of_each(StoreFailurePolicy::FailOpen).await;
    assert_eq!(counted.executed, 3);
    assert_eq!(counted.failed_open, 1);
    assert_eq!(counted.store_unavailable, 0);
    assert_eq!(counted.store_errors.complete, 3);
}

/// The warnings "the running action's lease is no longer confirmed" in what was captured.
fn lease_warnings(captured: &Captured) -> Vec<String> {
    captured
        .lines()
        .into_iter()
        .filter(|line| line.contains("the running action's lease is no longer confirmed"))
        .collect()
}

/// An operator is warned once, at WARN, when a running action's lease stops being
/// confirmed, and never while it is confirmed: a renewal refused is one warning however
/// long the action then runs, and an action that outlives its lease by renewing it is none.
#[tokio::test(start_paused = true)]
async fn a_lease_that_stops_being_confirmed_is_one_warning() {
    let (captured, _default) = capture();
    let run_for = |time: Duration| {
        move |_claim: idem::Claim| async move {
            tokio::time::sleep(time).await;
            Ok::<_, ProviderTimeout>(1)
        }
    };
    let options = || {
        Options::builder()
            .lease(Duration::from_secs(3))
            .in_flight(InFlightPolicy::Raise)
            .build()
            .unwrap()
    };
    // Renewed every second through a 10 s action: confirmed throughout.
    let renewed = Coordinator::new(MemoryStore::new(), options()).with_seed(7);
    renewed
        .execute(
            OP,
            "kept",
            fingerprint("o", 1),
            run_for(Duration::from_secs(10)),
        )
        .await
        .unwrap();
    assert_eq!(lease_warnings(&captured), Vec::<String>::new());
    // The first renewal is refused (the key holds a value that is not a record): the lease
    // is lost there, and the action runs 9 s more.
    let store = FlakyStore::new(MemoryStore::new()).fault(
        idem_core::record::CommandKind::Renew,
        0..1,
        Fault::Corrupt,
    );
    let refused = Coordinator::new(store, options()).with_seed(8);
    let _ = refused
        .execute(
            OP,
            "lost",
            fingerprint("o", 2),
            run_for(Duration::from_secs(10)),
        )
        .await;
    let warnings = lease_warnings(&captured);
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert!(warnings[0].contains("WARN"), "{warnings:#?}");
    assert!(warnings[0].contains("key=lost"), "{warnings:#?}");
}
