//! Transactional actions (`Attempt::in_transaction`, MODEL.md "Effects that commit with the
//! record"): the complete joins the action's transaction and commits only if the record
//! machine recorded the result, so a holder that lost its key cannot commit its writes.

mod common;

use std::time::Duration;

use common::at;
use idem_core::record::{Command, apply, commits};
use idem_core::{
    ActionResult, Attempt, Body, Execution, Options, Outcome, OwnerToken, Protection, Record,
    Recording, Reply, Step,
};

fn options() -> Options {
    Options::builder()
        .lease(Duration::from_secs(1))
        .build()
        .unwrap()
}

fn transactional(owner: u128, now: u64) -> Attempt {
    common::attempt(owner, options(), now).in_transaction()
}

/// Reserves at `now` against `store` and hands the action out.
fn running(owner: u128, store: &mut Option<Record>, now: u64) -> Attempt {
    // An attempt is transactional only when its driver says so.
    assert!(!common::attempt(owner, options(), now).is_transactional());
    let mut a = transactional(owner, now);
    assert!(a.is_transactional());
    let Step::Send { command, .. } = a.poll(at(now)) else {
        panic!("expected a reserve")
    };
    let reply = apply(store.as_ref(), command, at(now)).apply_to(store);
    a.handle_reply(reply, at(now)).unwrap();
    assert_eq!(a.poll(at(now)), Step::Run);
    a
}

/// The action succeeded at `now`; the complete is applied inside its transaction, which
/// commits (the write kept) only when `commits` says so. Returns whether it committed.
fn complete_in_transaction(a: &mut Attempt, store: &mut Option<Record>, now: u64) -> bool {
    a.handle_action_result(ActionResult::Succeeded(Body::new("order-1")), at(now))
        .unwrap();
    let Step::Send { command, .. } = a.poll(at(now)) else {
        panic!("expected the complete")
    };
    assert!(matches!(command, Command::Complete { .. }));
    let transition = apply(store.as_ref(), command, at(now));
    let committed = commits(&transition.reply);
    let reply = if committed {
        transition.apply_to(store)
    } else {
        // Rolled back: the write is discarded with the transaction.
        transition.reply
    };
    a.handle_reply(reply, at(now)).unwrap();
    committed
}

fn executed() -> Outcome {
    Outcome::Executed(Execution {
        protection: Protection::Reserved,
        record: Recording::Stored,
        lease_lost: false,
    })
}

#[test]
fn a_commit_in_time_is_an_execution() {
    let mut store = None;
    let mut a = running(1, &mut store, 0);
    assert!(complete_in_transaction(&mut a, &mut store, 500));
    assert_eq!(a.poll(at(500)), Step::Done(executed()));
}

#[test]
fn a_holder_paused_past_its_lease_and_taken_over_commits_nothing() {
    let mut store = None;
    let mut paused = running(1, &mut store, 0);
    // The lease ends at 1 000; another caller takes the key over and commits.
    let mut taker = running(2, &mut store, 1_500);
    assert!(complete_in_transaction(&mut taker, &mut store, 1_600));
    assert_eq!(taker.poll(at(1_600)), Step::Done(executed()));
    // The paused holder wakes: its complete is refused, so its writes roll back.
    assert!(!complete_in_transaction(&mut paused, &mut store, 2_000));
    assert_eq!(
        paused.poll(at(2_000)),
        Step::Done(Outcome::RolledBack { released: true })
    );
    // One committed effect: the taker's, whose record is unchanged.
    assert!(
        matches!(store, Some(Record::Completed { owner, .. }) if owner == OwnerToken::from_u128(2))
    );
}

#[test]
fn a_lease_that_ran_out_unclaimed_still_commits_and_loses_nothing() {
    // Nobody took the key: the late complete records the result, the writes commit with it,
    // and no other holder can have committed an effect, so no lapse is reported.
    let mut store = None;
    let mut a = running(1, &mut store, 0);
    assert!(complete_in_transaction(&mut a, &mut store, 5_000));
    assert_eq!(a.poll(at(5_000)), Step::Done(executed()));
}

/// Sends the complete, applies it (or not) as the commit would, loses its reply, then
/// answers every read from `store`. Returns the outcome.
fn complete_reply_lost(landed: bool, store: &mut Option<Record>, a: &mut Attempt) -> Outcome {
    a.handle_action_result(ActionResult::Succeeded(Body::new("order-1")), at(10))
        .unwrap();
    let Step::Send { command, .. } = a.poll(at(10)) else {
        panic!("expected the complete")
    };
    if landed {
        let _ = apply(store.as_ref(), command, at(10)).apply_to(store);
    }
    a.handle_store_error(at(10)).unwrap();
    let mut now = 10;
    let mut sent = Vec::new();
    loop {
        match a.poll(at(now)) {
            Step::Send { command, .. } => {
                sent.push(command.kind());
                let reply = apply(store.as_ref(), command, at(now)).apply_to(store);
                a.handle_reply(reply, at(now)).unwrap();
            }
            Step::Wait { until: Some(until) } => now = until.as_millis(),
            Step::Done(outcome) => {
                // Never a second complete outside the transaction.
                assert!(
                    !sent.contains(&idem_core::CommandKind::Complete),
                    "{sent:?}"
                );
                return outcome;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[test]
fn a_lost_commit_reply_is_settled_by_reading_the_record() {
    // The commit landed: the record is completed by this attempt.
    let mut store = None;
    let mut a = running(1, &mut store, 0);
    assert_eq!(complete_reply_lost(true, &mut store, &mut a), executed());
    // It did not: the reservation is still ours, and is given back.
    let mut store = None;
    let mut a = running(1, &mut store, 0);
    assert_eq!(
        complete_reply_lost(false, &mut store, &mut a),
        Outcome::RolledBack { released: true }
    );
    assert_eq!(store, None);
}

#[test]
fn a_commit_whose_fate_cannot_be_read_is_reported_unknown() {
    let mut store = None;
    let mut a = running(1, &mut store, 0);
    a.handle_action_result(ActionResult::Succeeded(Body::new("order-1")), at(10))
        .unwrap();
    let mut now = 10;
    let outcome = loop {
        match a.poll(at(now)) {
            Step::Send { .. } => a.handle_store_error(at(now)).unwrap(),
            Step::Wait { until: Some(until) } => now = until.as_millis(),
            Step::Done(outcome) => break outcome,
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!(outcome, Outcome::CommitUnknown);
}

#[test]
fn a_panic_or_a_drop_takes_the_transaction_with_it_and_the_key_is_released() {
    let mut store = None;
    let mut a = running(1, &mut store, 0);
    a.handle_action_result(ActionResult::Panicked, at(5))
        .unwrap();
    let Step::Send {
        command: Command::Release { .. },
        ..
    } = a.poll(at(5))
    else {
        panic!("a transactional panic releases")
    };
    // Dropped mid-run (attached): nothing can have committed, so the key is given back.
    let mut store = None;
    let mut b = running(2, &mut store, 0);
    b.abandon(at(5));
    let Step::Send { command, .. } = b.poll(at(5)) else {
        panic!("expected a release")
    };
    assert!(matches!(command, Command::Release { .. }));
    let reply = apply(store.as_ref(), command, at(5)).apply_to(&mut store);
    assert_eq!(reply, Reply::Released);
    b.handle_reply(reply, at(5)).unwrap();
    assert_eq!(
        b.poll(at(5)),
        Step::Done(Outcome::RolledBack { released: true })
    );
}

#[test]
fn only_a_recorded_result_commits() {
    assert!(commits(&Reply::Completed(idem_core::Completion::InTime)));
    assert!(commits(&Reply::Completed(
        idem_core::Completion::AfterLeaseExpiry
    )));
    assert!(!commits(&Reply::Refused(idem_core::Refusal::NotOwner)));
    assert!(!commits(&Reply::Released));
}

/// The action succeeds at 10 and its complete goes out; its reply never comes. Returns the
/// complete (to be applied, or not, as the test says) and the first read the machine sends
/// after giving the complete up, with the instant it sends it.
fn complete_out_then_read(a: &mut Attempt) -> (Command, Command, u64) {
    a.handle_action_result(ActionResult::Succeeded(Body::new("order-1")), at(10))
        .unwrap();
    let Step::Send {
        command: complete, ..
    } = a.poll(at(10))
    else {
        panic!("expected the complete")
    };
    a.handle_store_error(at(10)).unwrap();
    let mut now = 10;
    loop {
        match a.poll(at(now)) {
            Step::Send { command, .. } => {
                assert_eq!(command, Command::Read);
                return (complete, command, now);
            }
            Step::Wait { until: Some(until) } => now = until.as_millis(),
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[test]
fn a_read_that_finds_no_record_is_commit_unknown_and_the_insert_may_still_land() {
    // The holder's lease ran out and its record was swept (deleted) before its complete: the
    // complete inserts the record, invisible to a read until its transaction commits.
    let mut store = None;
    let mut a = running(1, &mut store, 0);
    store = None;
    let (complete, read, t) = complete_out_then_read(&mut a);
    // The read overtakes the commit in progress and finds nothing…
    let reply = apply(store.as_ref(), read, at(t)).apply_to(&mut store);
    assert_eq!(reply, Reply::Read(None));
    a.handle_reply(reply, at(t)).unwrap();
    let outcome = a.poll(at(t));
    // …so the attempt cannot say nothing was committed:
    assert_eq!(outcome, Step::Done(Outcome::CommitUnknown));
    // …and indeed the commit then lands: the record is completed by this attempt, its writes
    // committed with it (one effect, which `RolledBack` would have denied).
    let transition = apply(store.as_ref(), complete, at(t + 50));
    assert!(commits(&transition.reply));
    transition.apply_to(&mut store);
    assert!(
        matches!(store, Some(Record::Completed { owner, .. }) if owner == OwnerToken::from_u128(1))
    );
}

#[test]
fn a_read_that_finds_another_owners_record_is_commit_unknown() {
    let taker = OwnerToken::from_u128(2);
    let fingerprint = idem_core::Fingerprint::of_bytes(b"amount=100");
    for record in [
        Record::Pending {
            owner: taker,
            fingerprint,
            lease_until: at(60_000),
            fence: None,
        },
        Record::Completed {
            owner: taker,
            fingerprint,
            result: idem_core::StoredResult::Value(Body::new("order-2")),
            expires_at: at(60_000),
        },
    ] {
        let mut store = None;
        let mut a = running(1, &mut store, 0);
        let (_complete, read, t) = complete_out_then_read(&mut a);
        store = Some(record.clone());
        let reply = apply(store.as_ref(), read, at(t)).apply_to(&mut store);
        a.handle_reply(reply, at(t)).unwrap();
        assert_eq!(
            a.poll(at(t)),
            Step::Done(Outcome::CommitUnknown),
            "{record:?}"
        );
        // Nothing of the other owner's was touched by the read.
        assert_eq!(store, Some(record));
    }
}

#[test]
fn only_a_refused_complete_or_our_own_reservation_read_back_is_rolled_back() {
    // Refused inside the transaction: definite.
    let mut store = None;
    let mut paused = running(1, &mut store, 0);
    let _taker = running(2, &mut store, 1_500);
    assert!(!complete_in_transaction(&mut paused, &mut store, 1_600));
    assert_eq!(
        paused.poll(at(1_600)),
        Step::Done(Outcome::RolledBack { released: true })
    );
    // Our own reservation read back: definite, and given back.
    let mut store = None;
    let mut a = running(1, &mut store, 0);
    let (_complete, read, t) = complete_out_then_read(&mut a);
    let reply = apply(store.as_ref(), read, at(t)).apply_to(&mut store);
    assert!(matches!(reply, Reply::Read(Some(Record::Pending { .. }))));
    a.handle_reply(reply, at(t)).unwrap();
    let Step::Send {
        command: Command::Release { .. },
        ..
    } = a.poll(at(t))
    else {
        panic!("expected the release")
    };
}

#[test]
fn the_read_after_a_lost_commit_reply_waits_out_the_backoff() {
    let mut store = None;
    let mut a = running(1, &mut store, 0);
    a.handle_action_result(ActionResult::Succeeded(Body::new("order-1")), at(10))
        .unwrap();
    let Step::Send { .. } = a.poll(at(10)) else {
        panic!("expected the complete")
    };
    a.handle_store_error(at(10)).unwrap();
    // Not at once: a store that just failed is given the attempt's backoff, as for any
    // retry, before it is asked what became of the commit.
    let Step::Wait {
        until: Some(read_at),
    } = a.poll(at(10))
    else {
        panic!("expected a wait before the read")
    };
    assert!(read_at > at(10), "{read_at:?}");
    let Step::Send { command, .. } = a.poll(read_at) else {
        panic!("expected the read")
    };
    assert_eq!(command.kind(), idem_core::CommandKind::Read);
}

#[test]
fn a_commit_whose_fate_cannot_be_read_is_read_as_often_as_any_command_is_retried() {
    let options = Options::builder()
        .lease(Duration::from_secs(1))
        .store_retries(2)
        .build()
        .unwrap();
    let mut store = None;
    let mut a = common::attempt(1, options, 0).in_transaction();
    let Step::Send { command, .. } = a.poll(at(0)) else {
        panic!("expected a reserve")
    };
    let reply = apply(store.as_ref(), command, at(0)).apply_to(&mut store);
    a.handle_reply(reply, at(0)).unwrap();
    assert_eq!(a.poll(at(0)), Step::Run);
    a.handle_action_result(ActionResult::Succeeded(Body::new("order-1")), at(10))
        .unwrap();
    let mut now = 10;
    let mut reads = 0;
    let outcome = loop {
        match a.poll(at(now)) {
            Step::Send { command, .. } => {
                reads += usize::from(command.kind() == idem_core::CommandKind::Read);
                a.handle_store_error(at(now)).unwrap();
            }
            Step::Wait { until: Some(until) } => now = until.as_millis(),
            Step::Done(outcome) => break outcome,
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!(outcome, Outcome::CommitUnknown);
    assert_eq!(reads, 3, "one read and its two retries");
}
