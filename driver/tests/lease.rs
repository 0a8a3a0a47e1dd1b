//! The lease while the action runs, with time paused: renewals keep a slow action's key;
//! a lost lease is told to the action (its claim) and reported in the outcome.

mod common;

use std::time::Duration;

use common::{Fault, FlakyStore, InFront, ProviderTimeout, fingerprint};
use idem::{
    Coordinator, Error, InFlightPolicy, MemoryStore, Options, Provenance, Recording, Refusal, Store,
};
use idem_check::Variant;

const OP: &str = "payment.charge";

/// A lease of 1 s renewed every 333 ms; `Raise`, so a second caller shows who holds the key.
fn short_lease() -> Options {
    Options::builder()
        .lease(Duration::from_secs(1))
        .in_flight(InFlightPolicy::Raise)
        .build()
        .unwrap()
}

/// A 10 s action under a 1 s lease; at 5 s a second caller tries the key. Returns the
/// holder's outcome, the second caller's answer, and the statuses the action saw.
async fn slow_action_and_a_second_caller<S: Store>(
    store: S,
) -> (
    Result<idem::Answer<Vec<String>>, Error<ProviderTimeout>>,
    Result<Vec<String>, Error<ProviderTimeout>>,
) {
    let coordinator = Coordinator::new(store, short_lease()).with_seed(5);
    let holder = {
        let coordinator = coordinator.clone();
        tokio::spawn(async move {
            coordinator
                .execute_with_provenance(OP, "k", fingerprint("o", 1), move |claim| async move {
                    let mut seen = Vec::new();
                    for _ in 0..10 {
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        seen.push(format!("{:?}", claim.lease()));
                    }
                    Ok::<_, ProviderTimeout>(seen)
                })
                .await
        })
    };
    tokio::time::sleep(Duration::from_secs(5)).await;
    let second = coordinator
        .execute(OP, "k", fingerprint("o", 1), move |_claim| async move {
            Ok(Vec::new())
        })
        .await;
    (holder.await.unwrap(), second)
}

#[tokio::test(start_paused = true)]
async fn renewals_keep_a_slow_actions_key() {
    let (holder, second) = slow_action_and_a_second_caller(MemoryStore::new()).await;
    // I1 while the holder renews: the second caller is refused, ten lease lengths in.
    assert!(matches!(second, Err(Error::InProgress)), "{second:?}");
    let holder = holder.unwrap();
    assert_eq!(holder.value, vec!["Held"; 10]);
    assert_eq!(
        holder.provenance,
        Provenance::Executed {
            lease_lost: false,
            recording: Recording::Stored
        }
    );
}

/// The broken variant: a store that acknowledges renewals without extending the lease. The
/// second caller takes the key over, which the check above would catch.
#[tokio::test(start_paused = true)]
async fn a_store_that_ignores_renewals_is_caught_losing_the_key() {
    let (_holder, second) =
        slow_action_and_a_second_caller(InFront::new(Variant::IgnoresRenewals)).await;
    assert!(
        second.is_ok(),
        "the second caller should have taken the key: {second:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_lost_lease_is_told_to_the_action_and_reported() {
    // Renewals fail until the test lets them through again.
    let store = FlakyStore::new(MemoryStore::new()).fault(
        idem_core::record::CommandKind::Renew,
        0..usize::MAX,
        Fault::Fail,
    );
    let coordinator = Coordinator::new(store, short_lease()).with_seed(9);
    let holder = {
        let coordinator = coordinator.clone();
        tokio::spawn(async move {
            coordinator
                .execute_with_provenance(OP, "k", fingerprint("o", 1), move |claim| async move {
                    let lost = claim.lease_lost();
                    tokio::pin!(lost);
                    let mut seen = vec![format!("{:?}", claim.lease())];
                    loop {
                        tokio::select! {
                            () = &mut lost => {
                                // The future and the claim agree at the instant it fires.
                                seen.push(format!("{:?}", claim.lease()));
                                break;
                            }
                            () = tokio::time::sleep(Duration::from_millis(100)) => {
                                seen.push(format!("{:?}", claim.lease()));
                            }
                        }
                    }
                    assert!(claim.is_lease_lost());
                    // The action goes on past the takeover at 1.2 s (as one that cannot stop
                    // would), so its complete meets the taker's record.
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    Ok::<_, ProviderTimeout>(seen)
                })
                .await
        })
    };
    // The caller's view of the lease runs out at 985 ms, the store's at 1 s; another caller
    // takes the key at 1.2 s and completes.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let taker = coordinator
        .execute_with_provenance(OP, "k", fingerprint("o", 1), move |_claim| async move {
            Ok::<_, ProviderTimeout>(Vec::<String>::new())
        })
        .await
        .unwrap();
    assert!(taker.provenance.executed());
    coordinator.store().clear_faults();

    let holder = holder.await.unwrap().unwrap();
    assert_eq!(holder.value.first().map(String::as_str), Some("Held"));
    assert!(
        holder.value.iter().any(|seen| seen == "Unconfirmed"),
        "{:?}",
        holder.value
    );
    // I2: the stale holder's complete changed nothing; the outcome says the lease lapsed.
    assert_eq!(
        holder.provenance,
        Provenance::Executed {
            lease_lost: true,
            recording: Recording::Refused(Refusal::NotOwner)
        }
    );
    let counted = coordinator.metrics();
    assert_eq!(counted.lease_lost, 1);
    assert!(counted.store_errors.renew >= 1);
    // The record is the taker's: a replay gets its (empty) result.
    let replay = coordinator
        .execute(OP, "k", fingerprint("o", 1), move |_claim| async move {
            Ok::<_, ProviderTimeout>(vec!["unused".to_owned()])
        })
        .await
        .unwrap();
    assert!(replay.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_lease_that_lapsed_unnoticed_is_reported_by_the_late_complete() {
    // Renewals keep failing; nobody takes the key; the action finishes at 3 s.
    let store = FlakyStore::new(MemoryStore::new()).fault(
        idem_core::record::CommandKind::Renew,
        0..usize::MAX,
        Fault::Fail,
    );
    let coordinator = Coordinator::new(store, short_lease()).with_seed(11);
    let outcome = coordinator
        .execute_with_provenance(OP, "k", fingerprint("o", 1), move |_claim| async move {
            tokio::time::sleep(Duration::from_secs(3)).await;
            Ok::<_, ProviderTimeout>(7)
        })
        .await
        .unwrap();
    // The result is recorded after the lease ended, and the lapse is reported.
    assert_eq!(
        outcome.provenance,
        Provenance::Executed {
            lease_lost: true,
            recording: Recording::Stored
        }
    );
    let replay = coordinator
        .execute(OP, "k", fingerprint("o", 1), move |_claim| async move {
            Ok::<_, ProviderTimeout>(8)
        })
        .await
        .unwrap();
    assert_eq!(replay, 7);
}
