//! Abandoned attempts (`Attempt::abandon`, MODEL.md "Abandoned attempts"): a driver whose
//! caller went away, or whose call ended fail-closed, abandons the attempt and pumps it to
//! settle what it may hold. The machine decides what is sent: a release only while no
//! effect can have happened, the complete of an action that ended, and nothing at all for
//! an action dropped mid-run (its key is left to its lease, `I7`).

mod common;

use common::at;
use idem_core::record::{Command, apply};
use idem_core::{
    Abandonment, ActionResult, Attempt, Body, Execution, InFlightPolicy, Options, Outcome,
    OwnerToken, Protection, Record, Recording, Reply, Step, StoreFailurePolicy, StoredResult,
};

const ME: u128 = 1;

fn attempt(options: Options) -> Attempt {
    common::attempt(ME, options, 0)
}

/// Polls at `now`; if the machine asks for a command, applies it to `store` at `now` and
/// feeds the reply. Returns the command sent, if any.
fn step(a: &mut Attempt, store: &mut Option<Record>, now: u64) -> Option<Command> {
    match a.poll(at(now)) {
        Step::Send { command, .. } => {
            let reply = apply(store.as_ref(), command.clone(), at(now)).apply_to(store);
            a.handle_reply(reply, at(now)).unwrap();
            Some(command)
        }
        _ => None,
    }
}

/// Pumps an abandoned attempt to its end against `store`, as a driver's settling task does,
/// and returns every command it sent and the outcome. It must never ask to run the action.
fn settle(a: &mut Attempt, store: &mut Option<Record>, mut now: u64) -> (Vec<Command>, Outcome) {
    let mut sent = Vec::new();
    for _ in 0..100 {
        match a.poll(at(now)) {
            Step::Send { command, .. } => {
                let reply = apply(store.as_ref(), command.clone(), at(now)).apply_to(store);
                a.handle_reply(reply, at(now)).unwrap();
                sent.push(command);
            }
            Step::Wait { until: Some(until) } => now = until.as_millis(),
            Step::Done(outcome) => return (sent, outcome),
            other => panic!("an abandoned attempt asked for {other:?}"),
        }
    }
    panic!("the settlement did not end")
}

fn is_release(command: &Command) -> bool {
    matches!(command, Command::Release { owner } if *owner == OwnerToken::from_u128(ME))
}

/// Reserves the key and hands the action out.
fn running(options: Options, store: &mut Option<Record>) -> Attempt {
    let mut a = attempt(options);
    step(&mut a, store, 0);
    assert_eq!(a.poll(at(0)), Step::Run);
    a
}

#[test]
fn nothing_sent_leaves_nothing_to_settle() {
    let mut a = attempt(Options::default());
    a.abandon(at(0));
    assert!(a.is_abandoned());
    let (sent, outcome) = settle(&mut a, &mut None, 0);
    assert!(sent.is_empty());
    assert_eq!(outcome, Outcome::Abandoned(Abandonment::Settled));
}

#[test]
fn a_reserve_that_may_have_landed_is_released_and_the_action_never_runs() {
    // The reserve landed, but its reply was dropped with the caller.
    let mut store = None;
    let mut a = attempt(Options::default());
    let Step::Send { command, .. } = a.poll(at(0)) else {
        panic!("expected a reserve")
    };
    let _ = apply(store.as_ref(), command, at(0)).apply_to(&mut store);
    a.abandon(at(5));
    assert!(
        !a.awaiting_reply(),
        "the dropped reply is no longer awaited"
    );
    let (sent, outcome) = settle(&mut a, &mut store, 5);
    assert!(sent.iter().all(is_release) && sent.len() == 1, "{sent:?}");
    assert_eq!(outcome, Outcome::Abandoned(Abandonment::Settled));
    assert_eq!(store, None, "the key is free for a retry at once");
}

#[test]
fn a_grant_whose_action_never_started_is_released() {
    let mut store = None;
    let mut a = attempt(Options::default());
    step(&mut a, &mut store, 0);
    a.abandon(at(1));
    let (sent, outcome) = settle(&mut a, &mut store, 1);
    assert!(sent.iter().all(is_release) && sent.len() == 1, "{sent:?}");
    assert_eq!(outcome, Outcome::Abandoned(Abandonment::Settled));
    assert_eq!(store, None);
}

#[test]
fn an_action_dropped_mid_run_leaves_the_key_held_until_its_lease_ends() {
    let mut store = None;
    let mut a = running(Options::default(), &mut store);
    a.abandon(at(10));
    let (sent, outcome) = settle(&mut a, &mut store, 10);
    assert!(
        sent.is_empty(),
        "nothing may free a key whose effect may have happened: {sent:?}"
    );
    assert_eq!(outcome, Outcome::Abandoned(Abandonment::ActionDropped));
    let Some(Record::Pending {
        owner, lease_until, ..
    }) = store.clone()
    else {
        panic!("the reservation must stay: {store:?}")
    };
    assert_eq!(owner, OwnerToken::from_u128(ME));
    // A retry within the lease is told the key is in flight; after it, the key is free.
    let reserve = Command::Reserve {
        owner: OwnerToken::from_u128(9),
        fingerprint: idem_core::Fingerprint::of_bytes(b"amount=100"),
        lease: Options::default().lease(),
    };
    let before = apply(
        store.as_ref(),
        reserve.clone(),
        at(lease_until.as_millis() - 1),
    )
    .reply;
    assert!(matches!(before, Reply::InFlight { .. }), "{before:?}");
    let after = apply(store.as_ref(), reserve, lease_until).reply;
    assert!(matches!(after, Reply::Reserved(_)), "{after:?}");
}

#[test]
fn an_action_dropped_while_a_renewal_is_out_is_still_left_to_its_lease() {
    let mut store = None;
    let options = Options::default();
    let mut a = running(options.clone(), &mut store);
    let renew_at = options.renew_every().as_millis() as u64;
    assert!(matches!(
        a.poll(at(renew_at)),
        Step::Send {
            command: Command::Renew { .. },
            ..
        }
    ));
    a.abandon(at(renew_at + 1));
    let (sent, outcome) = settle(&mut a, &mut store, renew_at + 1);
    assert!(sent.is_empty(), "{sent:?}");
    assert_eq!(outcome, Outcome::Abandoned(Abandonment::ActionDropped));
}

#[test]
fn an_ended_action_is_recorded_as_if_the_caller_had_stayed() {
    let cases = [
        (
            ActionResult::Succeeded(Body::new("ch_1")),
            StoredResult::Value(Body::new("ch_1")),
        ),
        (ActionResult::Unrecordable, StoredResult::NotStored),
        (ActionResult::Panicked, StoredResult::Panicked),
    ];
    for (result, stored) in cases {
        let panicked = result == ActionResult::Panicked;
        let mut store = None;
        let mut a = running(Options::default(), &mut store);
        a.handle_action_result(result, at(3)).unwrap();
        a.abandon(at(3));
        let (sent, outcome) = settle(&mut a, &mut store, 3);
        assert!(
            matches!(&sent[..], [Command::Complete { result, .. }] if *result == stored),
            "{sent:?}"
        );
        let execution = Execution {
            protection: Protection::Reserved,
            record: if stored == StoredResult::NotStored {
                Recording::StoredWithoutBody
            } else {
                Recording::Stored
            },
            lease_lost: false,
        };
        let expected = if panicked {
            Outcome::Panicked(execution)
        } else {
            Outcome::Executed(execution)
        };
        assert_eq!(outcome, expected);
        assert!(matches!(&store, Some(Record::Completed { result, .. }) if *result == stored));
    }
}

#[test]
fn a_complete_dropped_with_its_caller_is_sent_again() {
    let mut store = None;
    let mut a = running(Options::default(), &mut store);
    a.handle_action_result(ActionResult::Succeeded(Body::new("ch_1")), at(3))
        .unwrap();
    // The complete leaves and lands; its reply goes with the caller.
    let Step::Send { command, .. } = a.poll(at(3)) else {
        panic!("expected the complete")
    };
    let _ = apply(store.as_ref(), command, at(3)).apply_to(&mut store);
    a.abandon(at(4));
    let (sent, outcome) = settle(&mut a, &mut store, 4);
    assert!(matches!(&sent[..], [Command::Complete { .. }]), "{sent:?}");
    assert!(
        matches!(outcome, Outcome::Executed(e) if e.record == Recording::Stored && !e.lease_lost)
    );
}

#[test]
fn a_failed_action_is_released() {
    let mut store = None;
    let mut a = running(Options::default(), &mut store);
    a.handle_action_result(ActionResult::Failed, at(3)).unwrap();
    a.abandon(at(3));
    let (sent, outcome) = settle(&mut a, &mut store, 3);
    assert!(sent.iter().all(is_release) && sent.len() == 1, "{sent:?}");
    assert_eq!(outcome, Outcome::ActionFailed { released: true });
    assert_eq!(store, None);
}

/// An attempt under `policy` with no store retries whose one reserve landed in `store` and
/// whose reply was lost.
fn reserve_landed_reply_lost(policy: StoreFailurePolicy, store: &mut Option<Record>) -> Attempt {
    let options = Options::builder()
        .on_store_failure(policy)
        .store_retries(0)
        .build()
        .unwrap();
    let mut a = attempt(options);
    let Step::Send { command, .. } = a.poll(at(0)) else {
        panic!("expected a reserve")
    };
    let _ = apply(store.as_ref(), command, at(0)).apply_to(store);
    a.handle_store_error(at(0)).unwrap();
    a
}

#[test]
fn a_fail_closed_refusal_releases_what_its_reserves_may_have_left() {
    let mut store = None;
    let mut a = reserve_landed_reply_lost(StoreFailurePolicy::FailClosed, &mut store);
    assert_eq!(a.poll(at(0)), Step::Done(Outcome::StoreUnavailable));
    a.abandon(at(1));
    let (sent, outcome) = settle(&mut a, &mut store, 1);
    assert!(sent.iter().all(is_release) && sent.len() == 1, "{sent:?}");
    assert_eq!(outcome, Outcome::Abandoned(Abandonment::Settled));
    assert_eq!(store, None);
}

#[test]
fn a_release_that_never_lands_leaves_the_key_to_its_lease_after_the_attempts_own_retries() {
    let options = Options::builder().store_retries(3).build().unwrap();
    let mut a = attempt(options.clone());
    let Step::Send { .. } = a.poll(at(0)) else {
        panic!("expected a reserve")
    };
    a.abandon(at(0));
    // The store never answers: each release is given up at its reply deadline, and retried
    // with the attempt's own growing, jittered backoff.
    let mut now = 0;
    let mut sends = Vec::new();
    let outcome = loop {
        match a.poll(at(now)) {
            Step::Send { command, reply_by } => {
                assert!(is_release(&command));
                assert_eq!(reply_by, at(now).saturating_add(options.reply_timeout()));
                sends.push(now);
            }
            Step::Wait { until: Some(until) } => now = until.as_millis(),
            Step::Done(outcome) => break outcome,
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!(outcome, Outcome::Abandoned(Abandonment::LeftToLease));
    assert_eq!(sends.len(), 4, "one send and three retries: {sends:?}");
    let gaps: Vec<u64> = sends.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        gaps.iter()
            .all(|gap| *gap >= options.reply_timeout().as_millis() as u64),
        "{gaps:?}"
    );
}

#[test]
fn an_attempt_that_ended_otherwise_has_nothing_to_settle() {
    let mut store = None;
    let mut holder = attempt(Options::default());
    step(&mut holder, &mut store, 0);
    let raise = Options::builder()
        .in_flight(InFlightPolicy::Raise)
        .build()
        .unwrap();
    let mut waiter = common::attempt(2, raise, 0);
    step(&mut waiter, &mut store, 0);
    assert_eq!(waiter.poll(at(0)), Step::Done(Outcome::InProgress));
    waiter.abandon(at(1));
    let (sent, outcome) = settle(&mut waiter, &mut store, 1);
    assert!(sent.is_empty());
    assert_eq!(outcome, Outcome::InProgress);
}

#[test]
fn a_waiter_abandoned_while_it_waits_sends_nothing() {
    let mut store = None;
    let mut holder = common::attempt(2, Options::default(), 0);
    step(&mut holder, &mut store, 0);
    let mut waiter = attempt(Options::default());
    step(&mut waiter, &mut store, 0);
    assert!(
        waiter.notices_from(at(0)).is_some(),
        "it waits for the holder"
    );
    waiter.abandon(at(1));
    let (sent, outcome) = settle(&mut waiter, &mut store, 1);
    assert!(sent.is_empty(), "{sent:?}");
    assert_eq!(outcome, Outcome::Abandoned(Abandonment::Settled));
    assert!(
        matches!(store, Some(Record::Pending { owner, .. }) if owner == OwnerToken::from_u128(2))
    );
}

#[test]
fn abandoning_twice_is_abandoning_once() {
    let mut store = None;
    let mut a = running(Options::default(), &mut store);
    a.abandon(at(1));
    let once = a.clone();
    a.abandon(at(2));
    assert_eq!(format!("{a:?}"), format!("{once:?}"));
}

#[test]
fn an_action_that_ended_while_a_renewal_was_out_keeps_its_lease_count_when_abandoned() {
    let options = Options::default();
    let mut store = None;
    let mut a = running(options.clone(), &mut store);
    // The first renewal leaves and is never answered; the action ends while it is out.
    let renew_at = options.renew_every().as_millis() as u64;
    let Step::Send {
        command: Command::Renew { .. },
        ..
    } = a.poll(at(renew_at))
    else {
        panic!("expected a renewal")
    };
    a.handle_action_result(ActionResult::Succeeded(Body::new("ch_1")), at(renew_at + 1))
        .unwrap();
    // The caller goes away past the lease, and every complete of the settlement fails: the
    // result may have landed after the confirmed lease ended, which the outcome must say
    // (rule 5, I7), as it would had the caller stayed.
    let mut now = options.lease().as_millis() as u64 + 1_000;
    a.abandon(at(now));
    let outcome = loop {
        match a.poll(at(now)) {
            Step::Send {
                command: Command::Complete { .. },
                ..
            } => a.handle_store_error(at(now)).unwrap(),
            Step::Wait { until: Some(until) } => now = until.as_millis(),
            Step::Done(outcome) => break outcome,
            other => panic!("unexpected {other:?}"),
        }
    };
    assert!(
        matches!(outcome, Outcome::Executed(e) if e.record == Recording::Unknown && e.lease_lost),
        "{outcome:?}"
    );
}

/// Pumps an abandoned attempt against a store that never answers; returns how many commands
/// it sent, and its outcome.
fn settle_unanswered(a: &mut Attempt, mut now: u64) -> (usize, Outcome) {
    let mut sent = 0;
    loop {
        match a.poll(at(now)) {
            Step::Send { .. } => {
                sent += 1;
                a.handle_store_error(at(now)).unwrap();
            }
            Step::Wait { until: Some(until) } => now = until.as_millis(),
            Step::Done(outcome) => return (sent, outcome),
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[test]
fn a_release_dropped_with_its_caller_counts_as_one_failed_try() {
    let options = Options::builder().store_retries(1).build().unwrap();
    let mut store = None;
    let mut a = running(options, &mut store);
    a.handle_action_result(ActionResult::Failed, at(3)).unwrap();
    let Step::Send { command, .. } = a.poll(at(3)) else {
        panic!("expected the release")
    };
    assert!(is_release(&command));
    // The caller goes away while the release is out: that try is lost with it.
    a.abandon(at(4));
    let (sent, outcome) = settle_unanswered(&mut a, 4);
    assert_eq!(sent, 1, "one retry is left of the attempt's one");
    assert_eq!(outcome, Outcome::ActionFailed { released: false });
}

#[test]
fn a_release_backing_off_when_its_caller_goes_away_keeps_its_backoff_and_its_count() {
    let options = Options::builder().store_retries(2).build().unwrap();
    let mut store = None;
    let mut a = running(options, &mut store);
    a.handle_action_result(ActionResult::Failed, at(3)).unwrap();
    let Step::Send { .. } = a.poll(at(3)) else {
        panic!("expected the release")
    };
    a.handle_store_error(at(3)).unwrap();
    let Step::Wait {
        until: Some(retry_at),
    } = a.poll(at(3))
    else {
        panic!("expected a backoff before the retry")
    };
    assert!(retry_at > at(3));
    // Nothing is out when the caller goes away: the settlement keeps the same schedule.
    a.abandon(at(3));
    assert_eq!(
        a.poll(at(3)),
        Step::Wait {
            until: Some(retry_at)
        }
    );
    let (sent, outcome) = settle_unanswered(&mut a, 3);
    assert_eq!(sent, 2, "the two retries left");
    assert_eq!(outcome, Outcome::ActionFailed { released: false });
}

#[test]
fn a_fail_open_run_abandoned_before_its_action_releases_what_its_reserves_may_have_left() {
    // The policy runs the action unprotected; the caller goes away before it is handed out:
    // no effect can have happened, so what the reserve may have left is released (rule 6),
    // as after a fail-closed refusal.
    let mut store = None;
    let mut a = reserve_landed_reply_lost(StoreFailurePolicy::FailOpen, &mut store);
    a.abandon(at(1));
    let (sent, outcome) = settle(&mut a, &mut store, 1);
    assert!(sent.iter().all(is_release) && sent.len() == 1, "{sent:?}");
    assert_eq!(outcome, Outcome::Abandoned(Abandonment::Settled));
    assert_eq!(store, None);
}
