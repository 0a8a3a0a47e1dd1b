//! The consumer's decision (MODEL.md `C1`): a delivery is acknowledged only when its message's
//! effect is recorded, a refused message is dead-lettered at once, a retryable one is delivered
//! again with the attempt's backoff until its deliveries are spent, and one in progress
//! elsewhere is never dead-lettered for it.

use std::time::Duration;

use idem_core::{CallEnd, DeadLetterReason, Disposition, Redelivery, RedeliveryError};

fn policy(max: u32) -> Redelivery {
    Redelivery::new(max, Duration::from_millis(100), Duration::from_secs(2)).unwrap()
}

fn after(disposition: Disposition) -> Duration {
    match disposition {
        Disposition::Redeliver { after } => after,
        other => panic!("not a redelivery: {other:?}"),
    }
}

#[test]
fn only_a_recorded_message_is_acknowledged() {
    let policy = policy(3);
    for delivery in 1..=10 {
        assert_eq!(
            policy.dispose(CallEnd::Recorded, delivery, 7),
            Disposition::Ack
        );
        assert_ne!(
            policy.dispose(CallEnd::Retryable, delivery, 7),
            Disposition::Ack
        );
        assert_ne!(
            policy.dispose(CallEnd::InProgress, delivery, 7),
            Disposition::Ack
        );
    }
}

#[test]
fn a_retryable_message_is_delivered_again_until_its_deliveries_are_spent() {
    let policy = policy(3);
    assert!(matches!(
        policy.dispose(CallEnd::Retryable, 1, 1),
        Disposition::Redeliver { .. }
    ));
    assert!(matches!(
        policy.dispose(CallEnd::Retryable, 2, 1),
        Disposition::Redeliver { .. }
    ));
    for delivery in [3, 4, u32::MAX] {
        assert_eq!(
            policy.dispose(CallEnd::Retryable, delivery, 1),
            Disposition::DeadLetter(DeadLetterReason::Exhausted)
        );
    }
    // One delivery allowed: the first failure is the last.
    assert_eq!(
        Redelivery::new(1, Duration::ZERO, Duration::ZERO)
            .unwrap()
            .dispose(CallEnd::Retryable, 1, 0),
        Disposition::DeadLetter(DeadLetterReason::Exhausted)
    );
}

#[test]
fn the_delay_is_the_attempts_backoff_doubling_to_its_cap_with_half_jitter() {
    let policy = Redelivery::new(100, Duration::from_millis(100), Duration::from_secs(2)).unwrap();
    for seed in 0..200 {
        for (delivery, full) in [
            (1, 100),
            (2, 200),
            (3, 400),
            (5, 1_600),
            (6, 2_000),
            (60, 2_000),
        ] {
            let delay = after(policy.dispose(CallEnd::Retryable, delivery, seed));
            let full = Duration::from_millis(full);
            assert!(delay >= full / 2 && delay <= full, "{delay:?} for {full:?}");
        }
    }
    // The same seed, the same delay; the jitter spreads across seeds.
    let one = |seed| after(policy.dispose(CallEnd::Retryable, 4, seed));
    assert_eq!(one(9), one(9));
    let spread: std::collections::HashSet<Duration> = (0..50).map(one).collect();
    assert!(spread.len() > 40, "{} distinct delays", spread.len());
}

#[test]
fn a_message_in_progress_elsewhere_waits_and_is_never_dead_lettered_for_it() {
    let policy = policy(2);
    for delivery in [1, 2, 3, 1_000] {
        let delay = after(policy.dispose(CallEnd::InProgress, delivery, 3));
        assert!(delay <= Duration::from_secs(2));
    }
}

#[test]
fn a_refused_message_is_dead_lettered_at_once_with_its_reason() {
    let policy = policy(5);
    for reason in [
        DeadLetterReason::NoKey,
        DeadLetterReason::InvalidKey,
        DeadLetterReason::KeyReuse,
        DeadLetterReason::CorruptRecord,
        DeadLetterReason::OutcomeUnknown,
        DeadLetterReason::Undecodable,
    ] {
        assert_eq!(
            policy.dispose(CallEnd::Refused(reason), 1, 0),
            Disposition::DeadLetter(reason)
        );
    }
    let names: std::collections::HashSet<&str> = [
        DeadLetterReason::NoKey,
        DeadLetterReason::InvalidKey,
        DeadLetterReason::KeyReuse,
        DeadLetterReason::CorruptRecord,
        DeadLetterReason::OutcomeUnknown,
        DeadLetterReason::Undecodable,
        DeadLetterReason::Exhausted,
    ]
    .into_iter()
    .map(DeadLetterReason::name)
    .collect();
    assert_eq!(names.len(), 7);
}

#[test]
fn a_policy_that_delivers_nothing_or_shrinks_its_delays_is_refused() {
    assert_eq!(
        Redelivery::new(0, Duration::ZERO, Duration::ZERO),
        Err(RedeliveryError::NoDelivery)
    );
    assert!(matches!(
        Redelivery::new(3, Duration::from_secs(2), Duration::from_secs(1)),
        Err(RedeliveryError::InitialAboveCap { .. })
    ));
    assert_eq!(Redelivery::default().max_deliveries(), 5);
}

/// The attempt's own outcome, classified as the consumer classifies the driver's answer:
/// every execution and every replay of a result is recorded (acknowledged), a panic now or
/// replayed is refused as outcome unknown, and a call that recorded nothing is retryable.
#[test]
fn an_attempts_outcome_classifies_as_the_driver_answer_would() {
    use idem_core::{
        Abandonment, Body, Execution, Fingerprint, Outcome, Protection, Recording, StoredResult,
    };
    let execution = |protection, record, lease_lost| Execution {
        protection,
        record,
        lease_lost,
    };
    for executed in [
        execution(Protection::Reserved, Recording::Stored, false),
        execution(Protection::Reserved, Recording::StoredWithoutBody, false),
        execution(Protection::Reserved, Recording::Unknown, false),
        execution(Protection::Reserved, Recording::Stored, true),
        execution(Protection::FailedOpen, Recording::Unknown, false),
    ] {
        assert_eq!(
            CallEnd::of_outcome(&Outcome::Executed(executed)),
            CallEnd::Recorded
        );
        assert_eq!(
            CallEnd::of_outcome(&Outcome::Panicked(executed)),
            CallEnd::Refused(DeadLetterReason::OutcomeUnknown)
        );
    }
    let replay = |result| Outcome::Replayed { result };
    assert_eq!(
        CallEnd::of_outcome(&replay(StoredResult::Value(Body::new(b"ch_1".as_slice())))),
        CallEnd::Recorded
    );
    assert_eq!(
        CallEnd::of_outcome(&replay(StoredResult::NotStored)),
        CallEnd::Recorded
    );
    assert_eq!(
        CallEnd::of_outcome(&replay(StoredResult::Panicked)),
        CallEnd::Refused(DeadLetterReason::OutcomeUnknown)
    );
    assert_eq!(
        CallEnd::of_outcome(&Outcome::InProgress),
        CallEnd::InProgress
    );
    let (a, b) = (Fingerprint::of_bytes(b"a"), Fingerprint::of_bytes(b"b"));
    assert_eq!(
        CallEnd::of_outcome(&Outcome::KeyReuse {
            stored: a,
            given: b
        }),
        CallEnd::Refused(DeadLetterReason::KeyReuse)
    );
    assert_eq!(
        CallEnd::of_outcome(&Outcome::CorruptRecord),
        CallEnd::Refused(DeadLetterReason::CorruptRecord)
    );
    // Dropped mid-action, its effect may have happened: never delivered again to run.
    assert_eq!(
        CallEnd::of_outcome(&Outcome::Abandoned(Abandonment::ActionDropped)),
        CallEnd::Refused(DeadLetterReason::OutcomeUnknown)
    );
    for nothing_recorded in [
        Outcome::ActionFailed { released: true },
        Outcome::StoreUnavailable,
        Outcome::RolledBack { released: false },
        Outcome::CommitUnknown,
        Outcome::Abandoned(Abandonment::Settled),
        Outcome::Abandoned(Abandonment::LeftToLease),
    ] {
        assert_eq!(
            CallEnd::of_outcome(&nothing_recorded),
            CallEnd::Retryable,
            "{nothing_recorded:?}"
        );
    }
}
