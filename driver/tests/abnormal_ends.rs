//! Abnormal ends never buy a silent second effect (rule 11): calls dropped mid-way, actions
//! that panic, a key that holds a value that is not a record, and a store that never
//! answers. Each test also shows its checker catching the old, broken behaviour.
//!
//! - detached (the default): a call dropped mid-action runs on to its end and is recorded;
//!   a retry gets its value, and the statement shows one charge;
//! - attached: a call dropped mid-action leaves the key held until its lease ends, counted
//!   and logged; a call dropped after its action succeeded completes the result;
//! - a panic (in the action, while making its future, or in the value's `Serialize`) is
//!   recorded as "outcome unknown"; the panic resumes in the caller and a retry gets
//!   `OutcomeUnknown`, never a second charge;
//! - a corrupt record runs nothing under the default, fail-open options;
//! - a store that never answers ends the call at the attempt's own deadlines.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Fault, FlakyStore, Provider, ProviderTimeout, fingerprint, one_effect, read};
use idem::{
    Claim, Coordinator, Error, InFlightPolicy, LeaseState, MemoryStore, Options, OwnerToken,
    Provenance, Recording, Store, StoreFailurePolicy, StoredResult,
};
use idem_core::Record;
use idem_core::record::{Command, CommandKind, Reply};
use serde::{Deserialize, Serialize};

const OP: &str = "payment.charge";

/// The provider of the issue: it records the charge the moment the request reaches it,
/// then takes `answers_after` to answer.
async fn charge_then_answer(provider: &Provider, claim: &Claim, answers_after: Duration) -> String {
    let id = provider
        .charge("o", 100, claim.key().as_str(), Duration::ZERO)
        .await
        .id;
    tokio::time::sleep(answers_after).await;
    id
}

/// A charge call of `key` whose action charges at once and answers after 200 ms; dropped
/// (aborted) 10 ms after the charge reached the provider.
async fn dropped_10ms_after_the_charge<S: Store>(
    coordinator: &Coordinator<S>,
    provider: &Arc<Provider>,
    attached: bool,
    owner: Arc<Mutex<Option<OwnerToken>>>,
) {
    let call = {
        let (coordinator, provider) = (coordinator.clone(), Arc::clone(provider));
        tokio::spawn(async move {
            let action = move |claim: Claim| async move {
                *owner.lock().unwrap() = Some(claim.owner());
                Ok::<_, ProviderTimeout>(
                    charge_then_answer(&provider, &claim, Duration::from_millis(200)).await,
                )
            };
            if attached {
                coordinator
                    .execute_attached(OP, "k", fingerprint("o", 100), action)
                    .await
            } else {
                coordinator
                    .execute(OP, "k", fingerprint("o", 100), action)
                    .await
            }
        })
    };
    while provider.charges().is_empty() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    call.abort();
    assert!(call.await.unwrap_err().is_cancelled());
}

async fn retry<S: Store>(
    coordinator: &Coordinator<S>,
    provider: &Arc<Provider>,
) -> Result<idem::Answer<String>, Error<ProviderTimeout>> {
    let provider = Arc::clone(provider);
    coordinator
        .execute_with_provenance(OP, "k", fingerprint("o", 100), move |claim| async move {
            Ok(charge_then_answer(&provider, &claim, Duration::from_millis(200)).await)
        })
        .await
}

#[tokio::test(start_paused = true)]
async fn a_detached_call_dropped_after_its_charge_leaves_one_charge_and_the_retry_gets_its_value() {
    let coordinator = common::coordinator(Options::default());
    let provider = Arc::new(Provider::default());
    dropped_10ms_after_the_charge(&coordinator, &provider, false, Arc::default()).await;
    // Retried at once: the retry waits for the dropped call's action, which ran on.
    let answer = retry(&coordinator, &provider).await.unwrap();
    assert_eq!(answer.value, "ch_1");
    assert_eq!(answer.provenance, Provenance::Replayed);
    assert_eq!(one_effect(&provider), Ok(()));
    let counted = coordinator.metrics();
    assert_eq!(
        (counted.executed, counted.replayed, counted.abandoned),
        (1, 1, 0)
    );
}

/// Where a detached action runs: in the caller's task while the caller waits (no task is
/// spawned for a call whose caller stays), and on a task of its own from the moment the
/// caller's future is dropped, where it goes on from where it was and is recorded. The action
/// waits on a channel across the move, so the test also shows its wake-ups follow it.
#[tokio::test(start_paused = true)]
async fn a_detached_action_runs_in_its_callers_task_and_moves_to_its_own_when_the_caller_goes() {
    let coordinator = common::coordinator(Options::default());
    let (go_on, wait) = tokio::sync::oneshot::channel::<()>();
    let (started, running) = tokio::sync::oneshot::channel();
    let (ended, finished) = tokio::sync::oneshot::channel();
    let caller = {
        let coordinator = coordinator.clone();
        tokio::spawn(async move {
            let caller_task = tokio::task::id();
            coordinator
                .execute(OP, "k", fingerprint("o", 1), move |_claim| async move {
                    let _ = started.send(tokio::task::id() == caller_task);
                    let _ = wait.await;
                    let _ = ended.send(tokio::task::id() == caller_task);
                    Ok::<_, ProviderTimeout>(7_u32)
                })
                .await
        })
    };
    assert!(
        running.await.unwrap(),
        "the action started in its caller's task"
    );
    caller.abort();
    assert!(caller.await.unwrap_err().is_cancelled());
    let held = read(&**coordinator.store(), OP, "k").await;
    assert!(matches!(held, Some(Record::Pending { .. })), "{held:?}");
    go_on.send(()).unwrap();
    assert!(
        !finished.await.unwrap(),
        "once its caller was gone, the action ended on a task of its own"
    );
    // The moved call records the action's value: a retry replays it.
    let replay = coordinator
        .execute_with_provenance(OP, "k", fingerprint("o", 1), |_claim| async {
            Ok::<_, ProviderTimeout>(8_u32)
        })
        .await
        .unwrap();
    assert_eq!((replay.value, replay.provenance), (7, Provenance::Replayed));
    let counted = coordinator.metrics();
    assert_eq!(
        (counted.executed, counted.abandoned, counted.left_to_lease),
        (1, 0, 0)
    );
}

/// A detached call whose future is dropped outside its runtime (kept by a caller that left
/// `block_on`) still goes on: its rest is handed to the runtime it began on, and runs as soon
/// as that runtime runs again.
#[test]
fn a_detached_call_dropped_outside_its_runtime_goes_on_when_the_runtime_runs() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    let coordinator = runtime.block_on(async { common::coordinator(Options::default()) });
    let (started, running) = tokio::sync::oneshot::channel();
    let mut call = Box::pin({
        let coordinator = coordinator.clone();
        async move {
            coordinator
                .execute(OP, "k", fingerprint("o", 1), move |_claim| async move {
                    let _ = started.send(());
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    Ok::<_, ProviderTimeout>(7_u32)
                })
                .await
        }
    });
    let mut running = running;
    runtime.block_on(async {
        tokio::select! {
            _ = &mut call => unreachable!("the action sleeps"),
            started = &mut running => started.unwrap(),
        }
    });
    // Outside the runtime now.
    drop(call);
    runtime.block_on(async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let done = read(&**coordinator.store(), OP, "k").await;
        assert!(matches!(done, Some(Record::Completed { .. })), "{done:?}");
        assert_eq!(coordinator.metrics().left_to_lease, 0);
    });
}

/// The runtime ends while a detached call's action runs in its caller's task: the caller's
/// task is dropped with the runtime, the rest of the call it held has no runtime left to
/// move to and is dropped too (never leaked, never run on), and its key is left to its lease,
/// never released, and counted `left_to_lease` (MODEL.md, "Detached and attached calls").
#[test]
fn a_runtime_that_ends_mid_action_leaves_the_detached_key_to_its_lease_and_counts_it() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let coordinator = runtime.block_on(async { common::coordinator(Options::default()) });
    let (started, running) = std::sync::mpsc::channel();
    runtime.spawn({
        let coordinator = coordinator.clone();
        async move {
            coordinator
                .execute(OP, "k", fingerprint("o", 1), move |_claim| async move {
                    let _ = started.send(());
                    std::future::pending::<Result<u32, ProviderTimeout>>().await
                })
                .await
        }
    });
    running.recv_timeout(Duration::from_secs(10)).unwrap();
    drop(runtime);
    assert_eq!(coordinator.metrics().left_to_lease, 1);
    let after = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let held = after.block_on(read(&**coordinator.store(), OP, "k"));
    assert!(matches!(held, Some(Record::Pending { .. })), "{held:?}");
}

/// A detached call polled outside any tokio runtime cannot outlive its caller (there is no
/// runtime to move it to), so its action is never started: the caller is told
/// `RuntimeShutdown`, and nothing ran. No panic.
#[test]
fn a_detached_call_outside_any_runtime_is_refused_before_its_action_starts() {
    let coordinator = Coordinator::new(MemoryStore::new(), Options::default());
    let ran = Arc::new(Mutex::new(false));
    let answer = futures::executor::block_on(coordinator.execute(OP, "k", fingerprint("o", 1), {
        let ran = Arc::clone(&ran);
        move |_claim| async move {
            *ran.lock().unwrap() = true;
            Ok::<_, ProviderTimeout>(1_u32)
        }
    }));
    assert!(matches!(answer, Err(Error::RuntimeShutdown)), "{answer:?}");
    assert!(!*ran.lock().unwrap());
}

#[tokio::test(start_paused = true)]
async fn under_raise_the_retry_is_told_in_progress_then_replays() {
    let raise = Options::builder()
        .in_flight(InFlightPolicy::Raise)
        .build()
        .unwrap();
    let coordinator = common::coordinator(raise);
    let provider = Arc::new(Provider::default());
    dropped_10ms_after_the_charge(&coordinator, &provider, false, Arc::default()).await;
    let early = retry(&coordinator, &provider).await.unwrap_err();
    assert!(matches!(early, Error::InProgress), "{early:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(retry(&coordinator, &provider).await.unwrap().value, "ch_1");
    assert_eq!(one_effect(&provider), Ok(()));
}

/// The old behaviour as a deliberately broken driver: whoever drops the call releases the
/// key with the dropped attempt's owner token. The one-charge check above catches it.
#[tokio::test(start_paused = true)]
async fn releasing_on_abandon_is_caught_charging_twice() {
    let coordinator = common::coordinator(Options::default());
    let provider = Arc::new(Provider::default());
    let owner = Arc::new(Mutex::new(None));
    dropped_10ms_after_the_charge(&coordinator, &provider, true, Arc::clone(&owner)).await;
    let owner = owner.lock().unwrap().expect("the action ran");
    let (operation, key) = (
        idem::Operation::new(OP).unwrap(),
        idem::Key::new("k").unwrap(),
    );
    let released = coordinator
        .store()
        .apply(&operation, &key, Command::Release { owner })
        .await
        .unwrap();
    assert_eq!(released, Reply::Released);
    let answer = retry(&coordinator, &provider).await.unwrap();
    assert!(answer.provenance.executed());
    assert!(one_effect(&provider).is_err(), "{:?}", provider.charges());
}

#[tokio::test(start_paused = true)]
async fn an_attached_call_dropped_mid_action_leaves_the_key_held_until_its_lease_ends() {
    let options = Options::builder()
        .in_flight(InFlightPolicy::Raise)
        .lease(Duration::from_secs(2))
        .build()
        .unwrap();
    let coordinator = common::coordinator(options);
    let provider = Arc::new(Provider::default());
    dropped_10ms_after_the_charge(&coordinator, &provider, true, Arc::default()).await;
    tokio::time::sleep(Duration::from_millis(1)).await;
    let held = read(&**coordinator.store(), OP, "k").await;
    assert!(matches!(held, Some(Record::Pending { .. })), "{held:?}");
    let counted = coordinator.metrics();
    assert_eq!((counted.abandoned, counted.left_to_lease), (1, 1));
    // Within the lease the retry is refused, never run.
    let early = retry(&coordinator, &provider).await.unwrap_err();
    assert!(matches!(early, Error::InProgress), "{early:?}");
    assert_eq!(one_effect(&provider), Ok(()));
    // After it the key is free, as after a crash: the second charge is the named cause,
    // counted above (`left_to_lease`).
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        retry(&coordinator, &provider)
            .await
            .unwrap()
            .provenance
            .executed()
    );
    assert_eq!(provider.charges().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn an_attached_call_dropped_after_its_action_succeeded_completes_the_result() {
    // The first complete takes 10 s to answer, past its reply deadline: the call is dropped
    // while it is out, and the settlement sends it again.
    let store = FlakyStore::new(MemoryStore::new()).fault(CommandKind::Complete, 0..1, Fault::Hang);
    let coordinator = Coordinator::new(store, Options::default()).with_seed(4);
    let provider = Arc::new(Provider::default());
    let call = {
        let (coordinator, provider) = (coordinator.clone(), provider.clone());
        tokio::spawn(async move {
            coordinator
                .execute_attached(OP, "k", fingerprint("o", 1), move |claim| async move {
                    provider
                        .charge_for(claim, "o", 1, Duration::from_millis(100))
                        .await
                })
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    call.abort();
    assert!(call.await.unwrap_err().is_cancelled());
    tokio::time::sleep(Duration::from_secs(1)).await;
    let record = read(&coordinator.store().inner, OP, "k").await;
    assert!(
        matches!(
            record,
            Some(Record::Completed {
                result: StoredResult::Value(_),
                ..
            })
        ),
        "{record:?}"
    );
    assert_eq!(coordinator.store().calls(CommandKind::Release), 0);
    let again = coordinator
        .execute_attached(OP, "k", fingerprint("o", 1), |claim| {
            provider.charge_for(claim, "o", 1, Duration::ZERO)
        })
        .await
        .unwrap();
    assert_eq!(again.id, "ch_1");
    assert_eq!(one_effect(&provider), Ok(()));
}

#[test]
fn an_attached_call_dropped_outside_a_runtime_leaves_the_key_to_the_lease() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    let options = Options::builder()
        .lease(Duration::from_secs(2))
        .build()
        .unwrap();
    let (coordinator, mut call) = runtime.block_on(async {
        let coordinator = Coordinator::new(MemoryStore::new(), options).with_seed(6);
        let (started, running) = tokio::sync::oneshot::channel();
        let call = Box::pin({
            let coordinator = coordinator.clone();
            async move {
                coordinator
                    .execute_attached(OP, "k", fingerprint("o", 1), move |_claim| async move {
                        let _ = started.send(());
                        std::future::pending::<Result<u32, ProviderTimeout>>().await
                    })
                    .await
            }
        });
        (coordinator, (call, running))
    });
    runtime.block_on(async {
        tokio::select! {
            _ = &mut call.0 => unreachable!("the action never ends"),
            started = &mut call.1 => started.unwrap(),
        }
    });
    // Outside the runtime now: nothing can be spawned.
    drop(call);
    runtime.block_on(async {
        let held = read(&**coordinator.store(), OP, "k").await;
        assert!(matches!(held, Some(Record::Pending { .. })), "{held:?}");
        // I6: the key frees itself when the lease ends.
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(read(&**coordinator.store(), OP, "k").await, None);
    });
}

#[tokio::test(start_paused = true)]
async fn a_dropped_waiter_sends_nothing_and_leaves_the_holder_alone() {
    let store = FlakyStore::new(MemoryStore::new());
    let coordinator = Coordinator::new(store, Options::default()).with_seed(8);
    let holder = common::spawn_call(
        &coordinator,
        "k",
        fingerprint("o", 1),
        Duration::from_secs(2),
        Ok(1),
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    let waiter = {
        let coordinator = coordinator.clone();
        tokio::spawn(async move {
            coordinator
                .execute_attached(OP, "k", fingerprint("o", 1), move |_claim| async move {
                    Ok::<_, ProviderTimeout>(2)
                })
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    waiter.abort();
    assert!(waiter.await.unwrap_err().is_cancelled());
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(coordinator.store().calls(CommandKind::Release), 0);
    assert_eq!(holder.await.unwrap().unwrap(), 1);
}

/// Runs an action that charges and then panics, detached or attached, and returns the
/// panic's message.
async fn charge_then_panic(
    coordinator: &Coordinator<MemoryStore>,
    provider: &Arc<Provider>,
    attached: bool,
) -> String {
    let (coordinator, provider) = (coordinator.clone(), Arc::clone(provider));
    let call = tokio::spawn(async move {
        let action = move |claim: Claim| async move {
            provider
                .charge("o", 1, claim.key().as_str(), Duration::from_millis(10))
                .await;
            if true {
                panic!("post-processing on fire");
            }
            Ok::<u32, ProviderTimeout>(1)
        };
        if attached {
            coordinator
                .execute_attached(OP, "k", fingerprint("o", 1), action)
                .await
        } else {
            coordinator
                .execute(OP, "k", fingerprint("o", 1), action)
                .await
        }
    });
    let panic = call.await.unwrap_err().into_panic();
    panic.downcast_ref::<&str>().unwrap().to_string()
}

#[tokio::test(start_paused = true)]
async fn a_panic_after_the_charge_is_recorded_and_the_retry_gets_outcome_unknown() {
    for attached in [false, true] {
        let coordinator = common::coordinator(Options::default());
        let provider = Arc::new(Provider::default());
        let message = charge_then_panic(&coordinator, &provider, attached).await;
        assert_eq!(message, "post-processing on fire");
        // Recorded by the call itself, before the panic resumed.
        let record = read(&**coordinator.store(), OP, "k").await;
        assert!(
            matches!(
                record,
                Some(Record::Completed {
                    result: StoredResult::Panicked,
                    ..
                })
            ),
            "{record:?}"
        );
        let again = retry_u32(&coordinator, &provider).await.unwrap_err();
        assert!(matches!(again, Error::OutcomeUnknown), "{again:?}");
        assert_eq!(again.http_status(), Some(500));
        assert!(!again.is_retryable());
        assert_eq!(one_effect(&provider), Ok(()));
        let counted = coordinator.metrics();
        assert_eq!(
            (
                counted.panicked,
                counted.outcome_unknown,
                counted.action_failed
            ),
            (1, 1, 0)
        );
    }
}

async fn retry_u32(
    coordinator: &Coordinator<MemoryStore>,
    provider: &Arc<Provider>,
) -> Result<u32, Error<ProviderTimeout>> {
    let provider = Arc::clone(provider);
    coordinator
        .execute(OP, "k", fingerprint("o", 1), move |claim| async move {
            provider
                .charge("o", 1, claim.key().as_str(), Duration::ZERO)
                .await;
            Ok(2)
        })
        .await
}

/// The old behaviour as a deliberately broken driver: a panic counted as a failure, so the
/// key is released. Played here by an action that swallows its own panic and fails; the
/// one-charge check above catches the retry's second charge.
#[tokio::test(start_paused = true)]
async fn releasing_on_a_panic_is_caught_charging_twice() {
    let coordinator = common::coordinator(Options::default());
    let provider = Arc::new(Provider::default());
    let failed = {
        let provider = Arc::clone(&provider);
        coordinator
            .execute(OP, "k", fingerprint("o", 1), move |claim| async move {
                provider
                    .charge("o", 1, claim.key().as_str(), Duration::ZERO)
                    .await;
                let caught = std::panic::catch_unwind(|| panic!("swallowed"));
                caught.map(|()| 1u32).map_err(|_| ProviderTimeout)
            })
            .await
    };
    assert!(matches!(failed, Err(Error::Action(ProviderTimeout))));
    assert_eq!(retry_u32(&coordinator, &provider).await.unwrap(), 2);
    assert!(one_effect(&provider).is_err());
}

/// A value whose `Serialize` panics: the effect happened, and encoding it panicked.
#[derive(Debug, Deserialize)]
struct Explosive;

impl Serialize for Explosive {
    fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        panic!("serializer on fire")
    }
}

#[tokio::test(start_paused = true)]
async fn a_panic_while_encoding_the_value_or_making_the_future_is_a_panic_too() {
    let coordinator = common::coordinator(Options::default());
    let encoding = {
        let coordinator = coordinator.clone();
        tokio::spawn(async move {
            coordinator
                .execute(OP, "encode", fingerprint("o", 1), |_claim| async {
                    Ok::<_, ProviderTimeout>(Explosive)
                })
                .await
        })
    };
    assert!(encoding.await.unwrap_err().is_panic());
    let making = {
        let coordinator = coordinator.clone();
        tokio::spawn(async move {
            coordinator
                .execute(
                    OP,
                    "make",
                    fingerprint("o", 1),
                    |_claim: Claim| -> std::future::Ready<Result<u32, ProviderTimeout>> {
                        panic!("constructor on fire")
                    },
                )
                .await
        })
    };
    assert!(making.await.unwrap_err().is_panic());
    for key in ["encode", "make"] {
        let record = read(&**coordinator.store(), OP, key).await;
        assert!(
            matches!(
                record,
                Some(Record::Completed {
                    result: StoredResult::Panicked,
                    ..
                })
            ),
            "{key}: {record:?}"
        );
    }
    assert_eq!(coordinator.metrics().panicked, 2);
}

#[tokio::test(start_paused = true)]
async fn a_corrupt_record_runs_nothing_on_any_call_under_the_default_options() {
    let store =
        FlakyStore::new(MemoryStore::new()).fault(CommandKind::Reserve, 0..100, Fault::Corrupt);
    let coordinator = Coordinator::new(store, Options::default()).with_seed(14);
    assert_eq!(
        coordinator.options().on_store_failure(),
        StoreFailurePolicy::FailOpen
    );
    let provider = Arc::new(Provider::default());
    for _ in 0..3 {
        let provider = Arc::clone(&provider);
        let error = coordinator
            .execute(OP, "k", fingerprint("o", 1), move |claim| async move {
                provider.charge_for(claim, "o", 1, Duration::ZERO).await
            })
            .await
            .unwrap_err();
        match &error {
            Error::CorruptRecord {
                operation,
                key,
                detail,
            } => {
                assert_eq!((operation.as_str(), key.as_str()), (OP, "k"));
                assert!(detail.contains("not a record"), "{detail}");
            }
            other => panic!("expected CorruptRecord, got {other:?}"),
        }
        assert_eq!(error.http_status(), Some(500));
        assert!(!error.is_retryable());
        let shown = error.to_string();
        assert!(shown.contains(OP) && shown.contains('k'), "{shown}");
    }
    assert!(provider.charges().is_empty());
    // Never retried, never failed open: one reserve per call.
    assert_eq!(coordinator.store().calls(CommandKind::Reserve), 3);
    let counted = coordinator.metrics();
    assert_eq!(
        (
            counted.corrupt_record,
            counted.failed_open,
            counted.store_errors.total()
        ),
        (3, 0, 0)
    );
}

#[tokio::test(start_paused = true)]
async fn a_store_that_never_answers_ends_the_call_within_its_reply_deadlines() {
    for policy in [StoreFailurePolicy::FailClosed, StoreFailurePolicy::FailOpen] {
        let store = FlakyStore::new(MemoryStore::new())
            .fault(CommandKind::Reserve, 0..100, Fault::Hang)
            .fault(CommandKind::Complete, 0..100, Fault::Hang);
        let options = Options::builder().on_store_failure(policy).build().unwrap();
        let coordinator = Coordinator::new(store, options.clone()).with_seed(16);
        let started = tokio::time::Instant::now();
        let answer = coordinator
            .execute_with_provenance(OP, "k", fingerprint("o", 1), |_claim| async {
                Ok::<_, ProviderTimeout>(7)
            })
            .await;
        let tries = options.store_retries() + 1;
        let bound = (options.reply_timeout() + options.backoff_max()) * tries;
        let reserve_took = coordinator.store().calls(CommandKind::Reserve);
        assert_eq!(reserve_took, tries as usize);
        match policy {
            StoreFailurePolicy::FailClosed => {
                assert!(started.elapsed() <= bound, "{:?}", started.elapsed());
                assert!(
                    matches!(answer, Err(Error::StoreUnavailable(_))),
                    "{answer:?}"
                );
            }
            StoreFailurePolicy::FailOpen => {
                // Reserves and completes each give up at their deadlines.
                assert!(started.elapsed() <= bound * 2, "{:?}", started.elapsed());
                let answer = answer.unwrap();
                assert_eq!(answer.value, 7);
                assert_eq!(
                    answer.provenance,
                    Provenance::ExecutedUnprotected {
                        recording: Recording::Unknown
                    }
                );
            }
        }
        let counted = coordinator.metrics();
        assert_eq!(counted.store_errors.reserve, u64::from(tries));
    }
}

#[test]
fn a_claim_read_after_a_pause_past_its_lease_says_unconfirmed() {
    // A real pause: the action blocks its thread (as a stopped process would) past its
    // lease while every renewal fails; when it asks before its next effect, the claim
    // judges the lease at that instant.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store =
            FlakyStore::new(MemoryStore::new()).fault(CommandKind::Renew, 0..1_000, Fault::Fail);
        let options = Options::builder()
            .lease(Duration::from_secs(1))
            .build()
            .unwrap();
        let coordinator = Coordinator::new(store, options).with_seed(18);
        let seen = coordinator
            .execute(OP, "k", fingerprint("o", 1), |claim: Claim| async move {
                let before = claim.lease();
                std::thread::sleep(Duration::from_millis(1_200));
                let after = claim.lease();
                Ok::<_, ProviderTimeout>(format!("{before:?} {after:?}"))
            })
            .await
            .unwrap();
        assert_eq!(
            seen,
            format!("{:?} {:?}", LeaseState::Held, LeaseState::Unconfirmed)
        );
    });
}

#[tokio::test(start_paused = true)]
async fn a_renewal_given_up_in_the_poll_that_sends_the_complete_is_counted() {
    // The renewal at 10 s never answers; the action ends at 10.2 s, so the poll at the
    // renewal's deadline gives it up and sends the complete at once.
    let store = FlakyStore::new(MemoryStore::new()).fault(CommandKind::Renew, 0..1, Fault::Hang);
    let coordinator = Coordinator::new(store, Options::default()).with_seed(26);
    let value = coordinator
        .execute(OP, "k", fingerprint("o", 1), |_claim| async {
            tokio::time::sleep(Duration::from_millis(10_200)).await;
            Ok::<_, ProviderTimeout>(5)
        })
        .await
        .unwrap();
    assert_eq!(value, 5);
    let counted = coordinator.metrics();
    assert_eq!(counted.store_errors.renew, 1);
    assert_eq!(counted.store_errors.total(), 1);
}

/// An action that says its effect is unknown (`Ending::Unknown`: the provider's reply never
/// came) is recorded as a panic is, never released: the caller gets its own error as
/// `ActionUnknown`, every retry `OutcomeUnknown`, and nothing runs twice. `Failed` releases.
#[tokio::test(start_paused = true)]
async fn an_unknown_ending_is_recorded_as_outcome_unknown_and_never_runs_again() {
    let coordinator = common::coordinator(Options::default());
    let handle = coordinator.operation::<u32, ProviderTimeout>(OP).unwrap();
    let provider = Arc::new(Provider::default());
    let charging = Arc::clone(&provider);
    let first = handle
        .execute_with_ending("k", fingerprint("o", 1), move |claim| async move {
            charging
                .charge("o", 1, claim.key().as_str(), Duration::ZERO)
                .await;
            idem::Ending::Unknown(ProviderTimeout)
        })
        .await
        .unwrap_err();
    assert!(
        matches!(first, Error::ActionUnknown(ProviderTimeout)),
        "{first:?}"
    );
    assert_eq!(
        first.http_status(),
        None,
        "the action's own error: the caller's"
    );
    assert!(!first.is_retryable());
    let record = read(&**coordinator.store(), OP, "k").await;
    assert!(
        matches!(
            record,
            Some(Record::Completed {
                result: StoredResult::Panicked,
                ..
            })
        ),
        "{record:?}"
    );
    for _ in 0..2 {
        let again = retry_u32(&coordinator, &provider).await.unwrap_err();
        assert!(matches!(again, Error::OutcomeUnknown), "{again:?}");
    }
    assert_eq!(one_effect(&provider), Ok(()));

    // A failure before any effect is given back: the retry runs.
    let failed = handle
        .execute_with_ending("k-2", fingerprint("o", 1), |_claim| async {
            idem::Ending::Failed(ProviderTimeout)
        })
        .await
        .unwrap_err();
    assert!(
        matches!(failed, Error::Action(ProviderTimeout)),
        "{failed:?}"
    );
    assert_eq!(read(&**coordinator.store(), OP, "k-2").await, None);
    let counted = coordinator.metrics();
    assert_eq!(
        (
            counted.action_unknown,
            counted.outcome_unknown,
            counted.panicked,
            counted.action_failed
        ),
        (1, 2, 0, 1)
    );
}
