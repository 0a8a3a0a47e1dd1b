//! The in-flight policies, with time paused: `Raise` answers at once, `Wait` waits for the
//! holder (replay, or run after a release, or take over a dead holder's key) until its own
//! deadline.

mod common;

use std::time::Duration;

use common::{ProviderTimeout, fingerprint};
use idem::{
    Coordinator, Error, InFlightPolicy, MemoryStore, Options, OwnerToken, Provenance, Store,
};
use idem_core::record::{Command, Reply};
use tokio::time::Instant;

const OP: &str = "payment.charge";

/// Starts a holder whose action takes `takes` and then returns `Ok(1)` or fails.
fn hold(
    coordinator: &Coordinator<MemoryStore>,
    takes: Duration,
    succeeds: bool,
) -> tokio::task::JoinHandle<Result<u32, Error<ProviderTimeout>>> {
    let result = if succeeds {
        Ok(1)
    } else {
        Err(ProviderTimeout)
    };
    common::spawn_call(coordinator, "k", fingerprint("o", 1), takes, result)
}

async fn second_call(
    coordinator: &Coordinator<MemoryStore>,
) -> Result<idem::Answer<u32>, Error<ProviderTimeout>> {
    coordinator
        .execute_with_provenance(
            OP,
            "k",
            fingerprint("o", 1),
            move |_claim| async move { Ok(2) },
        )
        .await
}

fn with(policy: InFlightPolicy, wait_deadline: Duration) -> Coordinator<MemoryStore> {
    let options = Options::builder()
        .in_flight(policy)
        .wait_deadline(wait_deadline)
        .build()
        .unwrap();
    common::coordinator(options)
}

#[tokio::test(start_paused = true)]
async fn raise_answers_in_progress_at_once() {
    let coordinator = with(InFlightPolicy::Raise, Duration::from_secs(10));
    let holder = hold(&coordinator, Duration::from_secs(5), true);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let start = Instant::now();
    let answer = second_call(&coordinator).await;
    assert!(matches!(answer, Err(Error::InProgress)), "{answer:?}");
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(holder.await.unwrap().unwrap(), 1);
    assert_eq!(coordinator.metrics().in_progress, 1);
}

#[tokio::test(start_paused = true)]
async fn wait_gives_up_at_its_own_deadline_while_the_holder_lives() {
    let coordinator = with(InFlightPolicy::Wait, Duration::from_secs(2));
    let holder = hold(&coordinator, Duration::from_secs(60), true);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let start = Instant::now();
    let answer = second_call(&coordinator).await;
    assert!(matches!(answer, Err(Error::InProgress)), "{answer:?}");
    // The last reserve is sent at the deadline itself, not before and not later.
    assert_eq!(start.elapsed(), Duration::from_secs(2));
    // The holder renewed its 30 s lease past its first end and finished normally.
    assert_eq!(holder.await.unwrap().unwrap(), 1);
}

#[tokio::test(start_paused = true)]
async fn wait_replays_the_holders_result() {
    let coordinator = with(InFlightPolicy::Wait, Duration::from_secs(10));
    let holder = hold(&coordinator, Duration::from_secs(3), true);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let answer = second_call(&coordinator).await.unwrap();
    assert_eq!((answer.value, answer.provenance), (1, Provenance::Replayed));
    assert_eq!(holder.await.unwrap().unwrap(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_waiter_runs_the_action_itself_after_the_holder_fails() {
    let coordinator = with(InFlightPolicy::Wait, Duration::from_secs(10));
    let holder = hold(&coordinator, Duration::from_secs(1), false);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let start = Instant::now();
    let answer = second_call(&coordinator).await.unwrap();
    assert_eq!(answer.value, 2);
    assert!(answer.provenance.executed());
    // Woken by the release, not by its backoff.
    assert_eq!(start.elapsed(), Duration::from_millis(900));
    assert!(matches!(
        holder.await.unwrap(),
        Err(Error::Action(ProviderTimeout))
    ));
}

#[tokio::test(start_paused = true)]
async fn a_waiter_takes_over_a_dead_holders_key_when_its_lease_ends() {
    let coordinator = with(InFlightPolicy::Wait, Duration::from_secs(10));
    // A holder that reserved for 5 s and died: nobody renews, completes or releases.
    let reserve = Command::Reserve {
        owner: OwnerToken::from_u128(99),
        fingerprint: fingerprint("o", 1),
        lease: Duration::from_secs(5),
    };
    let store = coordinator.store();
    let granted = store
        .apply(&OP.parse().unwrap(), &"k".parse().unwrap(), reserve)
        .await
        .unwrap();
    assert!(matches!(granted, Reply::Reserved(_)));
    let start = Instant::now();
    let answer = second_call(&coordinator).await.unwrap();
    assert_eq!(answer.value, 2);
    assert!(answer.provenance.executed());
    // I6: the key is free exactly when the dead holder's lease ends.
    assert_eq!(start.elapsed(), Duration::from_secs(5));
}

#[tokio::test(start_paused = true)]
async fn an_answer_says_whether_its_call_waited_for_a_holder() {
    let coordinator = with(InFlightPolicy::Wait, Duration::from_secs(10));
    let holder = hold(&coordinator, Duration::from_secs(3), true);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let waiter = second_call(&coordinator).await.unwrap();
    assert_eq!(waiter.provenance, Provenance::Replayed);
    assert!(
        waiter.waited,
        "the second call found the key held and waited"
    );
    holder.await.unwrap().unwrap();
    // A replay of a completed record, and a fresh execution, did not wait.
    let replay = second_call(&coordinator).await.unwrap();
    assert_eq!(replay.provenance, Provenance::Replayed);
    assert!(!replay.waited);
    let fresh = coordinator
        .execute_with_provenance(OP, "fresh", fingerprint("o", 1), |_claim| async {
            Ok::<_, ProviderTimeout>(3)
        })
        .await
        .unwrap();
    assert!(fresh.provenance.executed() && !fresh.waited);
}
