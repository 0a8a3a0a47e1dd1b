//! Many concurrent callers: one effect per key (`I1`, `I7`), the same answer for all
//! (`I8`), and waiters woken by the store instead of polling.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{Charge, FlakyStore, InFront, Provider, ProviderTimeout, Silent, fingerprint};
use idem::{Coordinator, Error, MemoryStore, Options, Provenance, Store};
use idem_check::Variant;

const TASKS: usize = 64;

/// `TASKS` tasks on one key on a multi-threaded runtime; returns the answers and the
/// statement. The action yields a few times so that callers really overlap.
async fn many_on_one_key<S: Store>(
    store: S,
) -> (Vec<Result<Charge, Error<ProviderTimeout>>>, Arc<Provider>) {
    let options = Options::builder()
        .wait_deadline(Duration::from_secs(30))
        .build()
        .unwrap();
    let payments = Coordinator::new(store, options);
    let provider = Arc::new(Provider::default());
    let barrier = Arc::new(tokio::sync::Barrier::new(TASKS));
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (payments, provider, barrier) =
                (payments.clone(), provider.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                payments
                    .execute(
                        "payment.charge",
                        "order-1",
                        fingerprint("o-1", 100),
                        move |claim| async move {
                            let takes = Duration::from_millis(20);
                            provider.charge_for(claim, "o-1", 100, takes).await
                        },
                    )
                    .await
            })
        })
        .collect();
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    (answers, provider)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_tasks_on_one_key_make_one_charge_and_get_one_answer() {
    let (answers, provider) = many_on_one_key(MemoryStore::new()).await;
    assert_eq!(common::one_effect(&provider), Ok(()));
    for answer in answers {
        assert_eq!(answer.unwrap().id, "ch_1");
    }
}

/// The broken variant: a store that grants every reserve. The same checker must see the
/// extra charges.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_store_without_reservations_is_caught_charging_many_times() {
    let (_answers, provider) = many_on_one_key(InFront::new(Variant::GrantsEveryReserve)).await;
    assert!(common::one_effect(&provider).is_err());
    assert!(provider.charges().len() > 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_keys_many_tasks_make_one_charge_per_key() {
    let payments = Coordinator::new(MemoryStore::with_shards(4), Options::default());
    let runs = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..256)
        .map(|i| {
            let (payments, runs) = (payments.clone(), runs.clone());
            tokio::spawn(async move {
                let key = format!("k-{}", i % 16);
                payments
                    .execute_with_provenance(
                        "payment.charge",
                        &key,
                        fingerprint(&key, 1),
                        move |claim| async move {
                            runs.fetch_add(1, Ordering::SeqCst);
                            tokio::task::yield_now().await;
                            Ok::<_, ProviderTimeout>(claim.key().as_str().to_owned())
                        },
                    )
                    .await
                    .map(|outcome| (key, outcome))
            })
        })
        .collect();
    let mut executed = 0;
    for task in tasks {
        let (key, outcome) = task.await.unwrap().unwrap();
        assert_eq!(outcome.value, key);
        if outcome.provenance.executed() {
            executed += 1;
        }
    }
    assert_eq!(runs.load(Ordering::SeqCst), 16);
    assert_eq!(executed, 16);
    assert_eq!(payments.metrics().executed, 16);
    assert_eq!(payments.metrics().replayed, 256 - 16);
    assert_eq!(payments.store().len(), 16);
}

/// A waiter reserves again when the holder completes, not at its next backoff: with a
/// backoff of 400 ms, the waiter's answer comes the moment the holder's does.
async fn waiter_answer_time<S: Store>(store: S) -> (u128, Provenance) {
    let options = Options::builder()
        .backoff_initial(Duration::from_millis(400))
        .backoff_max(Duration::from_millis(400))
        .build()
        .unwrap();
    let payments = Coordinator::new(store, options).with_seed(3);
    let start = tokio::time::Instant::now();
    let holder = {
        let payments = payments.clone();
        tokio::spawn(async move {
            payments
                .execute(
                    "payment.charge",
                    "k",
                    fingerprint("o", 1),
                    move |_claim| async move {
                        tokio::time::sleep(Duration::from_millis(1_000)).await;
                        Ok::<_, ProviderTimeout>(1)
                    },
                )
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(10)).await;
    let waited = payments
        .execute_with_provenance(
            "payment.charge",
            "k",
            fingerprint("o", 1),
            move |_claim| async move { Ok::<_, ProviderTimeout>(2) },
        )
        .await
        .unwrap();
    let at = common::elapsed_ms(start);
    assert_eq!(holder.await.unwrap().unwrap(), 1);
    assert_eq!(waited.value, 1);
    (at, waited.provenance)
}

#[tokio::test(start_paused = true)]
async fn a_waiter_is_woken_when_the_holder_completes() {
    let (at, provenance) = waiter_answer_time(MemoryStore::new()).await;
    assert_eq!(provenance, Provenance::Replayed);
    assert_eq!(at, 1_000);
}

/// The broken variant: a store that never notifies leaves the waiter to its backoff, and
/// the timing check above sees the delay.
#[tokio::test(start_paused = true)]
async fn without_notifications_the_waiter_answers_late() {
    let (at, provenance) = waiter_answer_time(Silent::default()).await;
    assert_eq!(provenance, Provenance::Replayed);
    assert!(at > 1_000, "answered at {at} ms");
}

/// A store whose notices always fire at once, as if the key changed all the time.
#[derive(Debug)]
struct Chatty(FlakyStore<MemoryStore>);

impl Store for Chatty {
    fn apply<'a>(
        &'a self,
        operation: &'a idem::Operation,
        key: &'a idem::Key,
        command: idem_core::record::Command,
    ) -> impl Future<Output = Result<idem_core::record::Reply, idem::StoreError>> + Send + 'a {
        self.0.apply(operation, key, command)
    }

    fn changed(&self, _: &idem::Operation, _: &idem::Key) -> impl Future<Output = ()> + Send {
        std::future::ready(())
    }
}

/// Spurious notices cannot make a waiter spin: once a notice proves spurious, the next is
/// honoured only after the initial backoff (10 ms), so a 1 s wait sends about 100 reserves.
#[tokio::test(start_paused = true)]
async fn spurious_notices_do_not_make_a_waiter_spin() {
    let store = Chatty(FlakyStore::new(MemoryStore::new()));
    let payments = Coordinator::new(store, Options::default()).with_seed(21);
    let holder = common::spawn_call(
        &payments,
        "k",
        fingerprint("o", 1),
        Duration::from_secs(1),
        Ok(1),
    );
    tokio::time::sleep(Duration::from_millis(1)).await;
    let start = tokio::time::Instant::now();
    let waited = payments
        .execute(
            "payment.charge",
            "k",
            fingerprint("o", 1),
            move |_claim| async move { Ok::<_, ProviderTimeout>(2) },
        )
        .await
        .unwrap();
    assert_eq!(waited, 1);
    assert!(
        start.elapsed() <= Duration::from_millis(1_010),
        "{:?}",
        start.elapsed()
    );
    let reserves = payments
        .store()
        .0
        .calls(idem_core::record::CommandKind::Reserve);
    // The holder's reserve; the waiter's first, and the first notice's (not yet known to
    // be spurious); then at most one per 10 ms of the remaining second.
    assert!(reserves <= 1 + 2 + 100, "{reserves} reserves");
    holder.await.unwrap().unwrap();
}

/// A watch is what a waiter pays for its wake-up: an uncontended call registers none, and a
/// waiter registers one before it reserves again.
#[tokio::test(start_paused = true)]
async fn only_a_waiter_watches_and_only_before_it_reserves_again() {
    let payments =
        Coordinator::new(FlakyStore::new(MemoryStore::new()), Options::default()).with_seed(22);
    let charged = payments
        .execute(
            "payment.charge",
            "alone",
            fingerprint("o", 1),
            |_claim| async { Ok::<_, ProviderTimeout>(1) },
        )
        .await
        .unwrap();
    assert_eq!(charged, 1);
    assert_eq!(payments.store().watches(), 0);

    let holder = common::spawn_call(
        &payments,
        "k",
        fingerprint("o", 2),
        Duration::from_millis(300),
        Ok(2),
    );
    tokio::time::sleep(Duration::from_millis(1)).await;
    let waited = payments
        .execute("payment.charge", "k", fingerprint("o", 2), |_claim| async {
            Ok::<_, ProviderTimeout>(3)
        })
        .await
        .unwrap();
    assert_eq!(waited, 2, "the waiter replays the holder's result");
    holder.await.unwrap().unwrap();
    let watches = payments.store().watches();
    assert!(watches >= 1, "the waiter reserved again without a watch");
}
