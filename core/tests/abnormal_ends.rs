//! Abnormal ends the attempt machine handles itself (rule 11, rule 12): a store that never
//! answers, a key that holds a value that is not a record, and an action that panics.

mod common;

use std::time::Duration;

use common::at;
use idem_core::confirmed_lease;
use idem_core::record::{Command, apply};
use idem_core::{
    ActionResult, Attempt, Body, Execution, LeaseState, Options, Outcome, OwnerToken, Protection,
    ProtocolError, Record, Recording, Reply, Step, StoreFailurePolicy, StoredResult,
};

fn policy(fail_closed: bool) -> Options {
    Options::builder()
        .on_store_failure(if fail_closed {
            StoreFailurePolicy::FailClosed
        } else {
            StoreFailurePolicy::FailOpen
        })
        .build()
        .unwrap()
}

/// Sends whatever the attempt asks, applying it to `store` and feeding the reply, until the
/// attempt runs its action or ends.
fn until_run_or_done(a: &mut Attempt, store: &mut Option<Record>, now: u64) -> Step {
    loop {
        match a.poll(at(now)) {
            Step::Send { command, .. } => {
                let reply = apply(store.as_ref(), command, at(now)).apply_to(store);
                a.handle_reply(reply, at(now)).unwrap();
            }
            step => return step,
        }
    }
}

#[test]
fn a_store_that_never_answers_ends_the_call_at_the_machines_own_deadlines() {
    for fail_closed in [true, false] {
        let options = policy(fail_closed);
        let mut a = common::attempt(1, options.clone(), 0);
        let mut now = 0;
        let mut sends = Vec::new();
        // Every reply deadline passes; the driver only sleeps until the instants it is given.
        let end = loop {
            match a.poll(at(now)) {
                Step::Send { command, reply_by } => {
                    assert!(matches!(command, Command::Reserve { .. }));
                    assert_eq!(reply_by, at(now).saturating_add(options.reply_timeout()));
                    assert!(a.awaiting_reply());
                    sends.push(now);
                }
                Step::Wait { until: Some(until) } => now = until.as_millis(),
                step => break step,
            }
        };
        assert_eq!(sends.len(), 1 + options.store_retries() as usize);
        assert!(!a.awaiting_reply());
        // The call is over within the reply deadlines plus the backoff between tries.
        let bound = (options.reply_timeout() + options.backoff_max()).as_millis() as u64
            * sends.len() as u64;
        assert!(now <= bound, "{now} ms > {bound} ms");
        if fail_closed {
            assert_eq!(end, Step::Done(Outcome::StoreUnavailable));
        } else {
            assert_eq!(end, Step::Run, "fail-open runs the action unprotected");
            assert_eq!(a.lease(at(now)), LeaseState::Unprotected);
        }
    }
}

#[test]
fn a_late_reply_after_the_deadline_is_refused_as_a_driver_bug() {
    let mut a = common::attempt(1, Options::default(), 0);
    let Step::Send { reply_by, .. } = a.poll(at(0)) else {
        panic!("expected a reserve")
    };
    let Step::Wait { .. } = a.poll(reply_by) else {
        panic!("the timed-out reserve is retried after a backoff")
    };
    let granted = Reply::Reserved(idem_core::Reservation {
        owner: OwnerToken::from_u128(1),
        lease_until: None,
        fence: None,
    });
    assert_eq!(
        a.handle_reply(granted, reply_by),
        Err(ProtocolError::NoCommandOutstanding)
    );
}

#[test]
fn a_renewal_that_is_never_answered_is_given_up_and_sent_again_before_the_lease_ends() {
    let options = Options::default();
    let mut store = None;
    let mut a = common::attempt(1, options.clone(), 0);
    assert_eq!(until_run_or_done(&mut a, &mut store, 0), Step::Run);
    let renew_every = options.renew_every().as_millis() as u64;
    let lease = confirmed_lease(options.lease()).as_millis() as u64;
    let Step::Send {
        command: Command::Renew { .. },
        reply_by,
    } = a.poll(at(renew_every))
    else {
        panic!("expected a renewal")
    };
    // The renewal hangs. While it is out the machine wakes at its deadline…
    assert_eq!(
        a.poll(at(renew_every + 1)),
        Step::Wait {
            until: Some(reply_by)
        }
    );
    // …then gives it up, and sends another that the store answers, long before the lease
    // would run out.
    let mut now = reply_by.as_millis();
    let renewed_at = loop {
        match a.poll(at(now)) {
            Step::Send { command, .. } => {
                let reply = apply(store.as_ref(), command, at(now)).apply_to(&mut store);
                a.handle_reply(reply, at(now)).unwrap();
                break now;
            }
            Step::Wait { until: Some(until) } => now = until.as_millis(),
            other => panic!("unexpected {other:?}"),
        }
    };
    assert!(renewed_at < lease, "{renewed_at} ms");
    assert_eq!(
        a.lease_confirmed_until(),
        Some(at(renewed_at).saturating_add(confirmed_lease(options.lease())))
    );
    assert_eq!(a.lease(at(lease)), LeaseState::Held);
}

#[test]
fn a_corrupt_record_runs_nothing_under_either_policy_and_is_not_retried() {
    for fail_closed in [true, false] {
        let mut a = common::attempt(1, policy(fail_closed), 0);
        let Step::Send { .. } = a.poll(at(0)) else {
            panic!("expected a reserve")
        };
        a.handle_corrupt_record(at(0)).unwrap();
        assert_eq!(a.poll(at(0)), Step::Done(Outcome::CorruptRecord));
    }
}

#[test]
fn a_corrupt_record_met_later_is_named_in_the_outcome() {
    // A renewal that finds garbage: the key is not the attempt's any more.
    let mut store = None;
    let mut a = common::attempt(1, Options::default(), 0);
    assert_eq!(until_run_or_done(&mut a, &mut store, 0), Step::Run);
    let renew_at = Options::default().renew_every().as_millis() as u64;
    let Step::Send { .. } = a.poll(at(renew_at)) else {
        panic!("expected a renewal")
    };
    a.handle_corrupt_record(at(renew_at)).unwrap();
    assert_eq!(a.lease(at(renew_at)), LeaseState::Lost);
    // Its complete finds the garbage too: nothing recorded, nothing overwritten.
    a.handle_action_result(ActionResult::Succeeded(Body::new("ch_1")), at(renew_at))
        .unwrap();
    let Step::Send {
        command: Command::Complete { .. },
        ..
    } = a.poll(at(renew_at))
    else {
        panic!("expected the complete")
    };
    a.handle_corrupt_record(at(renew_at)).unwrap();
    assert_eq!(
        a.poll(at(renew_at)),
        Step::Done(Outcome::Executed(Execution {
            protection: Protection::Reserved,
            record: Recording::CorruptRecord,
            lease_lost: true,
        }))
    );
    // A release that finds garbage: nothing of the attempt's is left.
    let mut store = None;
    let mut failed = common::attempt(2, Options::default(), 0);
    assert_eq!(until_run_or_done(&mut failed, &mut store, 0), Step::Run);
    failed
        .handle_action_result(ActionResult::Failed, at(1))
        .unwrap();
    let Step::Send {
        command: Command::Release { .. },
        ..
    } = failed.poll(at(1))
    else {
        panic!("expected the release")
    };
    failed.handle_corrupt_record(at(1)).unwrap();
    assert_eq!(
        failed.poll(at(1)),
        Step::Done(Outcome::ActionFailed { released: true })
    );
    // Corrupt with no command out is a driver bug.
    assert_eq!(
        failed.handle_corrupt_record(at(1)),
        Err(ProtocolError::NoCommandOutstanding)
    );
}

#[test]
fn a_panicked_action_is_recorded_as_such_and_never_released() {
    let mut store = None;
    let mut a = common::attempt(1, Options::default(), 0);
    assert_eq!(until_run_or_done(&mut a, &mut store, 0), Step::Run);
    a.handle_action_result(ActionResult::Panicked, at(5))
        .unwrap();
    let Step::Send { command, .. } = a.poll(at(5)) else {
        panic!("expected the complete")
    };
    assert!(
        matches!(
            &command,
            Command::Complete {
                result: StoredResult::Panicked,
                ..
            }
        ),
        "{command:?}"
    );
    let reply = apply(store.as_ref(), command, at(5)).apply_to(&mut store);
    a.handle_reply(reply, at(5)).unwrap();
    assert_eq!(
        a.poll(at(5)),
        Step::Done(Outcome::Panicked(Execution {
            protection: Protection::Reserved,
            record: Recording::Stored,
            lease_lost: false,
        }))
    );
    // An identical retry is told the outcome is unknown; it is never run.
    let mut retry = common::attempt(2, Options::default(), 10);
    assert_eq!(
        until_run_or_done(&mut retry, &mut store, 10),
        Step::Done(Outcome::Replayed {
            result: StoredResult::Panicked
        })
    );
}

#[test]
fn the_confirmed_lease_end_is_known_only_while_the_action_runs_under_it() {
    let options = Options::builder()
        .lease(Duration::from_secs(3))
        .build()
        .unwrap();
    let mut store = None;
    let mut a = common::attempt(1, options, 0);
    assert_eq!(a.lease_confirmed_until(), None);
    assert_eq!(a.lease(at(0)), LeaseState::NotRunning);
    assert_eq!(until_run_or_done(&mut a, &mut store, 0), Step::Run);
    // A 3 s lease is counted as 3 s less 1% and 5 ms: 2 965 ms.
    assert_eq!(a.lease_confirmed_until(), Some(at(2_965)));
    assert_eq!(a.lease(at(2_964)), LeaseState::Held);
    assert_eq!(a.lease(at(2_965)), LeaseState::Unconfirmed);
    a.handle_action_result(ActionResult::Failed, at(10))
        .unwrap();
    let _ = a.poll(at(10));
    assert_eq!(a.lease_confirmed_until(), None);
}

#[test]
fn a_give_up_is_reported_once_even_when_the_same_poll_sends_the_next_command() {
    let mut store = None;
    let options = Options::default();
    let mut a = common::attempt(1, options.clone(), 0);
    assert_eq!(until_run_or_done(&mut a, &mut store, 0), Step::Run);
    let renew_at = options.renew_every().as_millis() as u64;
    let Step::Send { reply_by, .. } = a.poll(at(renew_at)) else {
        panic!("expected a renewal")
    };
    a.handle_action_result(ActionResult::Succeeded(Body::new("ch_1")), at(renew_at + 1))
        .unwrap();
    assert_eq!(a.take_given_up(), None);
    // At the renewal's deadline: given up, and the complete goes out in the same poll.
    let Step::Send {
        command: Command::Complete { .. },
        ..
    } = a.poll(reply_by)
    else {
        panic!("expected the complete")
    };
    assert!(a.awaiting_reply(), "the complete is awaited now");
    assert_eq!(a.take_given_up(), Some(idem_core::CommandKind::Renew));
    assert_eq!(a.take_given_up(), None);
}

#[test]
fn a_transactional_complete_that_meets_a_corrupt_value_rolls_its_writes_back() {
    let mut store = None;
    let mut a = common::attempt(1, Options::default(), 0).in_transaction();
    assert_eq!(until_run_or_done(&mut a, &mut store, 0), Step::Run);
    a.handle_action_result(ActionResult::Succeeded(Body::new("tx_1")), at(1))
        .unwrap();
    let Step::Send { command, .. } = a.poll(at(1)) else {
        panic!("expected the complete")
    };
    assert_eq!(command.kind(), idem_core::CommandKind::Complete);
    // The key now holds a value that is not a record: the complete inside the transaction
    // is refused, so its writes never commit.
    a.handle_corrupt_record(at(1)).unwrap();
    assert_eq!(
        a.poll(at(1)),
        Step::Done(Outcome::RolledBack { released: true })
    );
    assert_eq!(a.outcome(), Some(&Outcome::RolledBack { released: true }));
}

#[test]
fn an_attempt_says_its_outcome_and_whether_it_was_abandoned_only_once_it_is_so() {
    let mut store = None;
    let mut a = common::attempt(1, Options::default(), 0);
    assert_eq!(
        (a.outcome(), a.is_done(), a.is_abandoned()),
        (None, false, false)
    );
    assert_eq!(until_run_or_done(&mut a, &mut store, 0), Step::Run);
    assert_eq!(a.outcome(), None);
    a.handle_action_result(ActionResult::Succeeded(Body::new("ch_1")), at(1))
        .unwrap();
    let step = until_run_or_done(&mut a, &mut store, 1);
    let Step::Done(outcome) = step else {
        panic!("expected the outcome, got {step:?}")
    };
    assert_eq!(a.outcome(), Some(&outcome));
    assert!(a.is_done() && !a.is_abandoned());
    let mut b = common::attempt(2, Options::default(), 0);
    b.abandon(at(0));
    assert!(b.is_abandoned());
}

#[test]
fn no_lease_end_is_confirmed_to_an_unprotected_action_or_after_a_lost_lease() {
    // Failed open: the action runs with no reservation, so nothing is confirmed.
    let fail_open = Options::builder()
        .on_store_failure(StoreFailurePolicy::FailOpen)
        .store_retries(0)
        .build()
        .unwrap();
    let mut a = common::attempt(1, fail_open, 0);
    let Step::Send { .. } = a.poll(at(0)) else {
        panic!("expected a reserve")
    };
    a.handle_store_error(at(0)).unwrap();
    assert_eq!(a.poll(at(0)), Step::Run);
    assert_eq!(a.lease(at(0)), LeaseState::Unprotected);
    assert_eq!(a.lease_confirmed_until(), None);

    // Reserved, then a renewal refused (another owner holds the key): the lease is lost,
    // and its old end is no longer confirmed.
    let mut store = None;
    let mut b = common::attempt(2, Options::default(), 0);
    assert_eq!(until_run_or_done(&mut b, &mut store, 0), Step::Run);
    assert!(b.lease_confirmed_until().is_some());
    let renew_at = Options::default().renew_every().as_millis() as u64;
    let Step::Send { .. } = b.poll(at(renew_at)) else {
        panic!("expected a renewal")
    };
    let taken = Record::Pending {
        owner: OwnerToken::from_u128(3),
        fingerprint: idem_core::Fingerprint::of_bytes(b"amount=100"),
        lease_until: at(renew_at + 30_000),
        fence: None,
    };
    let reply = apply(
        Some(&taken),
        Command::Renew {
            owner: OwnerToken::from_u128(2),
            lease: Options::default().lease(),
        },
        at(renew_at),
    )
    .reply;
    b.handle_reply(reply, at(renew_at)).unwrap();
    assert_eq!(b.lease(at(renew_at)), LeaseState::Lost);
    assert_eq!(b.lease_confirmed_until(), None);
}
