//! Detached actions at the boundary of a service's life: a bound on how many run at once
//! (over it, nothing runs and the key is free for a retry), a gauge of those running, and a
//! graceful stop that refuses new calls, lets running actions finish and be recorded, and
//! cuts those still running at its deadline, leaving their keys to their leases (rule 11).

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Provider, ProviderTimeout, fingerprint, one_effect, read};
use idem::{Coordinator, Error, MemoryStore, Options, StoredResult};
use idem_core::Record;

const OP: &str = "payment.charge";

/// A detached charge under `key` that takes `takes` after charging.
fn charge(
    coordinator: &Coordinator<MemoryStore>,
    provider: &Arc<Provider>,
    key: &'static str,
    takes: Duration,
) -> tokio::task::JoinHandle<Result<u64, Error<ProviderTimeout>>> {
    let (coordinator, provider) = (coordinator.clone(), Arc::clone(provider));
    tokio::spawn(async move {
        coordinator
            .execute(OP, key, fingerprint("o", 1), move |claim| async move {
                provider
                    .charge("o", 1, claim.key().as_str(), Duration::ZERO)
                    .await;
                tokio::time::sleep(takes).await;
                Ok::<_, ProviderTimeout>(1)
            })
            .await
    })
}

#[tokio::test(start_paused = true)]
async fn over_the_bound_nothing_runs_and_the_key_is_free_for_a_retry() {
    let coordinator = common::coordinator(Options::default()).with_max_detached(1);
    let provider = Arc::new(Provider::default());
    let first = charge(&coordinator, &provider, "a", Duration::from_secs(2));
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(coordinator.metrics().detached_running, 1, "the gauge");
    assert_eq!(coordinator.metrics().max_detached, 1);

    let refused = charge(&coordinator, &provider, "b", Duration::ZERO)
        .await
        .unwrap();
    assert!(matches!(refused, Err(Error::Overloaded)), "{refused:?}");
    assert_eq!(refused.as_ref().unwrap_err().http_status(), Some(503));
    assert!(refused.unwrap_err().is_retryable());
    // Nothing ran, and the reservation was given back.
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(read(&**coordinator.store(), OP, "b").await, None);
    assert_eq!(provider.charges().len(), 1);

    assert_eq!(first.await.unwrap().unwrap(), 1);
    assert_eq!(coordinator.metrics().detached_running, 0);
    let retried = charge(&coordinator, &provider, "b", Duration::ZERO).await;
    assert_eq!(retried.unwrap().unwrap(), 1, "runs once there is room");
    assert_eq!(provider.charges().len(), 2);
    assert_eq!(coordinator.metrics().overloaded, 1);
}

#[tokio::test(start_paused = true)]
async fn a_stop_lets_running_actions_finish_and_refuses_new_calls() {
    let coordinator = common::coordinator(Options::default());
    let provider = Arc::new(Provider::default());
    let running = charge(&coordinator, &provider, "a", Duration::from_secs(3));
    tokio::time::sleep(Duration::from_millis(10)).await;

    let stop = {
        let coordinator = coordinator.clone();
        tokio::spawn(async move { coordinator.shutdown(Duration::from_secs(10)).await })
    };
    tokio::time::sleep(Duration::from_millis(10)).await;
    let late = charge(&coordinator, &provider, "b", Duration::ZERO)
        .await
        .unwrap();
    assert!(matches!(late, Err(Error::ShuttingDown)), "{late:?}");
    assert!(late.unwrap_err().is_retryable());

    let report = stop.await.unwrap();
    assert_eq!((report.finished, report.cut), (1, 0));
    assert_eq!(
        running.await.unwrap().unwrap(),
        1,
        "it finished and was recorded"
    );
    let record = read(&**coordinator.store(), OP, "a").await;
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
    assert_eq!(provider.charges().len(), 1);
    let metrics = coordinator.metrics();
    assert_eq!((metrics.shutting_down, metrics.shutdown_cut), (1, 0));
}

#[tokio::test(start_paused = true)]
async fn at_the_deadline_running_actions_are_cut_and_their_keys_left_to_their_leases() {
    let lease = Duration::from_secs(5);
    let options = Options::builder().lease(lease).build().unwrap();
    let coordinator = common::coordinator(options.clone());
    let provider = Arc::new(Provider::default());
    let slow = charge(&coordinator, &provider, "a", Duration::from_secs(60));
    tokio::time::sleep(Duration::from_millis(10)).await;

    let report = coordinator.shutdown(Duration::from_secs(1)).await;
    assert_eq!((report.finished, report.cut), (0, 1));
    let answer = slow.await.unwrap();
    assert!(matches!(answer, Err(Error::RuntimeShutdown)), "{answer:?}");
    let metrics = coordinator.metrics();
    assert_eq!((metrics.shutdown_cut, metrics.detached_running), (1, 0));
    // Never released: the charge happened, and the key stays held until its lease ends.
    let record = read(&**coordinator.store(), OP, "a").await;
    assert!(matches!(record, Some(Record::Pending { .. })), "{record:?}");

    // A new process on the same store: within the lease it waits; after it, it takes the
    // key over and runs (the extra effect MODEL.md names, counted here as shutdown_cut).
    let restarted = Coordinator::from_shared(Arc::clone(coordinator.store()), options);
    tokio::time::sleep(lease).await;
    let provider_after = Arc::new(Provider::default());
    let again = charge(&restarted, &provider_after, "a", Duration::ZERO).await;
    assert_eq!(again.unwrap().unwrap(), 1);
    assert_eq!(one_effect(&provider_after), Ok(()));
}

#[tokio::test(start_paused = true)]
async fn the_cut_reaches_an_action_whose_caller_hung_up() {
    // A lease long enough that no renewal wakes the action during the stop: only the cut
    // can.
    let options = Options::builder()
        .lease(Duration::from_secs(60))
        .build()
        .unwrap();
    let coordinator = common::coordinator(options);
    let provider = Arc::new(Provider::default());
    let caller = charge(&coordinator, &provider, "a", Duration::from_secs(600));
    tokio::time::sleep(Duration::from_millis(10)).await;
    // The caller goes away mid-action: the rest of the call moves to a task of its own,
    // which waits for the cut under a waker of its own.
    caller.abort();
    assert!(caller.await.unwrap_err().is_cancelled());
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(
        coordinator.metrics().detached_running,
        1,
        "the action runs on"
    );

    let report = coordinator.shutdown(Duration::from_secs(1)).await;
    assert_eq!((report.finished, report.cut), (0, 1));
    let metrics = coordinator.metrics();
    assert_eq!(
        (metrics.shutdown_cut, metrics.detached_running),
        (1, 0),
        "cut on its own task, not left running past the stop"
    );
    assert_eq!(provider.charges().len(), 1);
}
