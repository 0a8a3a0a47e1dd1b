//! The claim's view of its lease, with time paused (MODEL.md, "Counting the lease on the
//! caller's clock"): `lease_lost()` resolves when the lease can no longer be confirmed on
//! the caller's clock, whether or not the store still answers, at the instant `lease()`
//! turns from `Held` and before the store frees the key; `lease_left()` counts down to it.

mod common;

use std::time::Duration;

use common::{Fault, FlakyStore, ProviderTimeout, fingerprint, read};
use idem::{
    Claim, Coordinator, Error, InFlightPolicy, LeaseState, MemoryStore, Options, Provenance,
    Recording, Refusal,
};
use idem_core::Record;
use idem_core::record::CommandKind;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

const OP: &str = "export.run";

/// A lease of 1 s (renewed every 333 ms); `Raise`, so another caller is answered at once.
fn one_second() -> Options {
    Options::builder()
        .lease(Duration::from_secs(1))
        .in_flight(InFlightPolicy::Raise)
        .build()
        .unwrap()
}

/// What the holder's action saw, in milliseconds from its start.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    /// `lease()` and `lease_left()` one millisecond before the turn.
    before: (LeaseState, Option<Duration>),
    /// When `lease_lost()` resolved, and what the claim said then.
    fired_ms: u128,
    at_fire: (LeaseState, Option<Duration>, bool),
    /// Whether the store still held the holder's reservation at that instant.
    store_held_it: bool,
}

#[tokio::test(start_paused = true)]
async fn a_store_that_stops_answering_is_seen_before_the_key_can_be_taken_over() {
    // Every renewal hangs: the store no longer confirms the lease, and never refuses it.
    let store =
        FlakyStore::new(MemoryStore::new()).fault(CommandKind::Renew, 0..usize::MAX, Fault::Hang);
    let coordinator = Coordinator::new(store, one_second()).with_seed(41);
    let (fired_tx, fired_rx) = oneshot::channel::<()>();
    let (taken_tx, taken_rx) = oneshot::channel::<()>();
    let (seen_tx, seen_rx) = oneshot::channel::<Seen>();
    let holder = {
        let coordinator = coordinator.clone();
        tokio::spawn(async move {
            let inner = coordinator.clone();
            coordinator
                .execute_with_provenance(OP, "k", fingerprint("o", 1), move |claim| async move {
                    let start = Instant::now();
                    let lost = claim.lease_lost();
                    tokio::pin!(lost);
                    // 984 ms in: the view (1 s less 1% and 5 ms) still holds, for 1 ms more.
                    tokio::select! {
                        () = &mut lost => panic!("lease_lost fired early"),
                        () = tokio::time::sleep_until(start + Duration::from_millis(984)) => {}
                    }
                    let before = (claim.lease(), claim.lease_left());
                    tokio::select! {
                        () = &mut lost => {}
                        () = tokio::time::sleep(Duration::from_secs(30)) => {
                            panic!("lease_lost never fired while the store did not answer")
                        }
                    }
                    let fired_ms = start.elapsed().as_millis();
                    let at_fire = (claim.lease(), claim.lease_left(), claim.is_lease_lost());
                    let store_held_it = matches!(
                        read(&inner.store().inner, OP, "k").await,
                        Some(Record::Pending { owner, .. }) if owner == claim.owner()
                    );
                    let _ = fired_tx.send(());
                    // Keep running until the key has been taken over.
                    let _ = taken_rx.await;
                    let _ = seen_tx.send(Seen {
                        before,
                        fired_ms,
                        at_fire,
                        store_held_it,
                    });
                    Ok::<_, ProviderTimeout>("holder".to_owned())
                })
                .await
        })
    };
    // Another caller keeps trying to take the key over, from the instant the holder saw
    // its lease go.
    fired_rx.await.unwrap();
    let start = Instant::now();
    let taker = loop {
        match coordinator
            .execute_with_provenance(OP, "k", fingerprint("o", 1), |_claim| async {
                Ok::<_, ProviderTimeout>("taker".to_owned())
            })
            .await
        {
            Err(Error::InProgress) => tokio::time::sleep(Duration::from_millis(1)).await,
            other => break other.unwrap(),
        }
    };
    assert!(taker.provenance.executed(), "{taker:?}");
    // The store freed the key at 1 s from the reserve; the holder had seen it go 15 ms
    // earlier (1% and 5 ms of the lease).
    assert_eq!(start.elapsed().as_millis(), 15);
    let _ = taken_tx.send(());

    let holder = holder.await.unwrap().unwrap();
    assert_eq!(
        seen_rx.await.unwrap(),
        Seen {
            before: (LeaseState::Held, Some(Duration::from_millis(1))),
            fired_ms: 985,
            at_fire: (LeaseState::Unconfirmed, Some(Duration::ZERO), true),
            // The store still held the holder's reservation when its future fired.
            store_held_it: true,
        }
    );
    // Its complete is refused (another owner holds the key): the outcome says so.
    assert_eq!(
        holder.provenance,
        Provenance::Executed {
            lease_lost: true,
            recording: Recording::Refused(Refusal::NotOwner)
        }
    );
}

#[tokio::test(start_paused = true)]
async fn renewals_that_are_confirmed_keep_the_future_pending_and_the_time_left_grows_back() {
    let coordinator = Coordinator::new(MemoryStore::new(), one_second()).with_seed(42);
    let left = coordinator
        .execute(OP, "k", fingerprint("o", 1), |claim: Claim| async move {
            let lost = claim.lease_lost();
            tokio::pin!(lost);
            let mut left = Vec::new();
            for _ in 0..40 {
                tokio::select! {
                    () = &mut lost => panic!("the lease was kept"),
                    () = tokio::time::sleep(Duration::from_millis(100)) => {}
                }
                assert_eq!(claim.lease(), LeaseState::Held);
                assert!(!claim.is_lease_lost());
                left.push(claim.lease_left().unwrap().as_millis());
            }
            Ok::<_, ProviderTimeout>(left)
        })
        .await
        .unwrap();
    // Four seconds under a 1 s lease: never below what one renewal interval leaves, never
    // above the confirmed part of the lease, and growing back after each renewal.
    assert!(left.iter().all(|&ms| (500..=985).contains(&ms)), "{left:?}");
    assert!(left.windows(2).any(|w| w[1] > w[0]), "{left:?}");
}

#[tokio::test(start_paused = true)]
async fn the_future_never_resolves_once_the_action_returned_or_without_a_lease() {
    // The claim outlives its action: after the call, the lease no longer matters.
    let coordinator = Coordinator::new(MemoryStore::new(), one_second()).with_seed(43);
    let (claims, mut taken) = mpsc::unbounded_channel::<Claim>();
    coordinator
        .execute(
            OP,
            "k",
            fingerprint("o", 1),
            move |claim: Claim| async move {
                claims.send(claim).unwrap();
                Ok::<_, ProviderTimeout>(1)
            },
        )
        .await
        .unwrap();
    let claim = taken.recv().await.unwrap();
    let waited = tokio::time::timeout(Duration::from_secs(60), claim.lease_lost()).await;
    assert!(waited.is_err(), "resolved after the action returned");

    // Fail-open: no lease to lose, no time to count.
    let store = FlakyStore::new(MemoryStore::new());
    store.set_down(true);
    let coordinator = Coordinator::new(store, one_second()).with_seed(44);
    let seen = coordinator
        .execute(OP, "k", fingerprint("o", 1), |claim: Claim| async move {
            let waited = tokio::time::timeout(Duration::from_secs(5), claim.lease_lost()).await;
            Ok::<_, ProviderTimeout>(format!(
                "{:?} {:?} {}",
                claim.lease(),
                claim.lease_left(),
                waited.is_err()
            ))
        })
        .await
        .unwrap();
    assert_eq!(seen, "Unprotected None true");
}

/// A renewal the store refuses (here: the key turned out to hold a value that is not a
/// record) ends the lease at once: the future resolves when the refusal comes back, not when
/// the lease confirmed before it would have run out on the caller's clock. The claim is told
/// of every change of its view as it happens, not only at the instants it counts to.
#[tokio::test(start_paused = true)]
async fn a_refused_renewal_resolves_the_future_when_it_comes_back() {
    let lease = Duration::from_secs(30);
    let store = FlakyStore::new(MemoryStore::new()).fault(CommandKind::Renew, 0..1, Fault::Corrupt);
    let options = Options::builder()
        .lease(lease)
        .in_flight(InFlightPolicy::Raise)
        .build()
        .unwrap();
    let coordinator = Coordinator::new(store, options).with_seed(45);
    let fired = coordinator
        .execute(
            OP,
            "k",
            fingerprint("o", 1),
            move |claim: Claim| async move {
                let start = Instant::now();
                let left_before = claim.lease_left().unwrap_or_default();
                claim.lease_lost().await;
                Ok::<_, ProviderTimeout>((start.elapsed(), left_before, claim.is_lease_lost()))
            },
        )
        .await;
    let (elapsed, left_before, lost) = match fired {
        Ok(seen) => seen,
        Err(err) => panic!("{err:?}"),
    };
    // The first renewal goes out a third of the way into the lease and is refused: the
    // future resolves then, long before the 30 s confirmed at the start would have lapsed.
    assert!(lost);
    assert!(left_before > Duration::from_secs(29), "{left_before:?}");
    assert!(
        elapsed < Duration::from_secs(20),
        "resolved only at {elapsed:?}, when the confirmed lease ran out"
    );
}
