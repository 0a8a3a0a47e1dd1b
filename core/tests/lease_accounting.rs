//! How the attempt machine counts its lease when replies are lost, and the inputs that
//! shortcut or replace a result: a value that cannot be recorded, a store's change notice.

mod common;

use common::at;
use idem_core::confirmed_lease;
use idem_core::record::apply;
use idem_core::{
    ActionResult, Attempt, Body, LeaseState, Options, Outcome, OwnerToken, Record, Recording,
    Reply, Step, StoredResult,
};

fn attempt(owner: u128, now: u64) -> Attempt {
    common::attempt(owner, Options::default(), now)
}

/// Polls at `now` and applies the command it sends to `store`, returning the reply.
fn send_and_apply(a: &mut Attempt, store: &mut Option<Record>, now: u64) -> Reply {
    match a.poll(at(now)) {
        Step::Send { command: cmd, .. } => apply(store.as_ref(), cmd, at(now)).apply_to(store),
        other => panic!("expected a command at {now}, got {other:?}"),
    }
}

/// The first poll at or after `now` that is not a wait; returns it and the time it came.
fn next_step(a: &mut Attempt, mut now: u64) -> (Step, u64) {
    for _ in 0..1_000 {
        match a.poll(at(now)) {
            Step::Wait { until: Some(t) } => now = t.as_millis().max(now),
            step => return (step, now),
        }
    }
    panic!("no step after {now}");
}

/// Waits out the machine's own delay after `from`, then applies the command it sends and
/// feeds back the reply; returns when that happened.
fn resend_and_feed(a: &mut Attempt, store: &mut Option<Record>, from: u64) -> u64 {
    let (step, t) = next_step(a, from);
    let Step::Send { command: cmd, .. } = step else {
        panic!("expected a command after {from}, got {step:?}")
    };
    let reply = apply(store.as_ref(), cmd, at(t)).apply_to(store);
    a.handle_reply(reply, at(t)).unwrap();
    t
}

#[test]
fn a_reserve_retried_after_a_lost_reply_counts_its_lease_from_the_first_send() {
    let lease = confirmed_lease(Options::default().lease()).as_millis() as u64;
    let mut store = None;
    let mut a = attempt(1, 0);
    // The first reserve is applied at 0, but its reply is lost.
    let lost = send_and_apply(&mut a, &mut store, 0);
    assert!(matches!(lost, Reply::Reserved(_)));
    a.handle_store_error(at(500)).unwrap();
    // The retry gets the same reservation back, unchanged (I11), some time later.
    let t = resend_and_feed(&mut a, &mut store, 500);
    assert_eq!(a.poll(at(t)), Step::Run);
    // The store's lease ends a lease after the first send (or later), so the machine must
    // not claim it past its confirmed part, and must renew on the first send's schedule.
    assert_eq!(a.lease(at(lease - 1)), LeaseState::Held);
    assert_eq!(a.lease(at(lease)), LeaseState::Unconfirmed);
    let renew_at = Options::default().renew_every().as_millis() as u64;
    assert!(matches!(a.poll(at(renew_at)), Step::Send { .. }));
}

#[test]
fn an_in_flight_answer_restarts_the_lease_count() {
    // A waiter's first reserve is answered "in flight": no grant of ours exists, so the
    // reservation it gets later is counted from that later reserve's own send.
    let lease = confirmed_lease(Options::default().lease()).as_millis() as u64;
    let mut store = None;
    let mut holder = attempt(2, 0);
    let reply = send_and_apply(&mut holder, &mut store, 0);
    holder.handle_reply(reply, at(0)).unwrap();
    let mut a = attempt(1, 10);
    let reply = send_and_apply(&mut a, &mut store, 10);
    assert!(matches!(reply, Reply::InFlight { .. }));
    a.handle_reply(reply, at(10)).unwrap();
    // The holder's action fails and it releases at 1 s.
    assert_eq!(holder.poll(at(0)), Step::Run);
    holder
        .handle_action_result(ActionResult::Failed, at(1_000))
        .unwrap();
    let reply = send_and_apply(&mut holder, &mut store, 1_000);
    holder.handle_reply(reply, at(1_000)).unwrap();
    let t = resend_and_feed(&mut a, &mut store, 1_000);
    assert_eq!(a.poll(at(t)), Step::Run);
    assert!(t >= 1_000);
    assert_eq!(a.lease(at(t + lease - 1)), LeaseState::Held);
}

/// Reserves at 0, runs, and finishes the action at `done`, without renewals in between.
fn run_until(a: &mut Attempt, store: &mut Option<Record>, done: u64) {
    let reply = send_and_apply(a, store, 0);
    a.handle_reply(reply, at(0)).unwrap();
    assert_eq!(a.poll(at(0)), Step::Run);
    a.handle_action_result(ActionResult::Succeeded(Body::new("ch_1")), at(done))
        .unwrap();
}

#[test]
fn a_late_complete_whose_reply_was_lost_still_reports_the_lapse() {
    let lease = Options::default().lease().as_millis() as u64;
    let mut store = None;
    let mut a = attempt(1, 0);
    run_until(&mut a, &mut store, lease + 1_000);
    // Recorded after the lease ran out, but the reply is lost...
    let reply = send_and_apply(&mut a, &mut store, lease + 1_000);
    assert!(matches!(reply, Reply::Completed(_)));
    a.handle_store_error(at(lease + 1_000)).unwrap();
    // ...and the retry only hears "already completed by you".
    let t = resend_and_feed(&mut a, &mut store, lease + 1_000);
    let Step::Done(Outcome::Executed(execution)) = a.poll(at(t)) else {
        panic!("expected an executed outcome")
    };
    assert_eq!(execution.record, Recording::Stored);
    assert!(execution.lease_lost, "the lapse must not be hidden (I7)");
}

#[test]
fn a_repeated_complete_inside_the_lease_is_in_time() {
    let mut store = None;
    let mut a = attempt(1, 0);
    run_until(&mut a, &mut store, 1_000);
    let _lost = send_and_apply(&mut a, &mut store, 1_000);
    a.handle_store_error(at(1_000)).unwrap();
    let t = resend_and_feed(&mut a, &mut store, 1_000);
    let Step::Done(Outcome::Executed(execution)) = a.poll(at(t)) else {
        panic!("expected an executed outcome")
    };
    assert!(!execution.lease_lost);
}

#[test]
fn an_unrecordable_result_completes_the_key_without_a_body() {
    let mut store = None;
    let mut a = attempt(1, 0);
    let reply = send_and_apply(&mut a, &mut store, 0);
    a.handle_reply(reply, at(0)).unwrap();
    assert_eq!(a.poll(at(0)), Step::Run);
    a.handle_action_result(ActionResult::Unrecordable, at(5))
        .unwrap();
    let reply = send_and_apply(&mut a, &mut store, 5);
    a.handle_reply(reply, at(5)).unwrap();
    let Step::Done(Outcome::Executed(execution)) = a.poll(at(5)) else {
        panic!("expected an executed outcome")
    };
    assert_eq!(execution.record, Recording::StoredWithoutBody);
    // The key is not given back: a retry replays "not stored", never runs again.
    let mut retry = attempt(2, 10);
    let reply = send_and_apply(&mut retry, &mut store, 10);
    retry.handle_reply(reply, at(10)).unwrap();
    assert_eq!(
        retry.poll(at(10)),
        Step::Done(Outcome::Replayed {
            result: StoredResult::NotStored
        })
    );
}

#[test]
fn a_change_notice_wakes_a_waiter_at_once() {
    let mut store = None;
    let mut holder = attempt(1, 0);
    let reply = send_and_apply(&mut holder, &mut store, 0);
    holder.handle_reply(reply, at(0)).unwrap();
    let mut waiter = attempt(2, 0);
    // Not waiting yet: a notice does nothing.
    assert!(!waiter.handle_record_changed(at(0)));
    let reply = send_and_apply(&mut waiter, &mut store, 0);
    waiter.handle_reply(reply, at(0)).unwrap();
    let Step::Wait {
        until: Some(backoff),
    } = waiter.poll(at(1))
    else {
        panic!("a waiter backs off")
    };
    assert!(backoff > at(1));
    assert!(waiter.handle_record_changed(at(1)));
    assert!(matches!(waiter.poll(at(1)), Step::Send { .. }));
    // With the reserve outstanding, a notice changes nothing.
    assert!(!waiter.handle_record_changed(at(1)));
}

#[test]
fn a_complete_refused_after_a_takeover_reports_the_lapse() {
    let lease = Options::default().lease().as_millis() as u64;
    let mut store = None;
    let mut a = attempt(1, 0);
    run_until(&mut a, &mut store, lease + 10);
    // Another caller took the key over once the lease ran out.
    let mut other = attempt(2, lease + 5);
    let reply = send_and_apply(&mut other, &mut store, lease + 5);
    assert!(matches!(reply, Reply::Reserved(_)));
    let reply = send_and_apply(&mut a, &mut store, lease + 10);
    a.handle_reply(reply, at(lease + 10)).unwrap();
    let Step::Done(Outcome::Executed(execution)) = a.poll(at(lease + 10)) else {
        panic!("expected an executed outcome")
    };
    assert_eq!(
        execution.record,
        Recording::Refused(idem_core::Refusal::NotOwner)
    );
    assert!(
        execution.lease_lost,
        "a refused complete means the key was lost (I7)"
    );
}

#[test]
fn a_grant_naming_another_owner_is_not_taken_as_ours() {
    // A store that answers a reserve with someone else's reservation is broken; the machine
    // must not run the action on it, and treats the answer as a failed command.
    let mut a = attempt(1, 0);
    let Step::Send { .. } = a.poll(at(0)) else {
        panic!("expected a reserve")
    };
    let foreign = idem_core::Reservation {
        owner: OwnerToken::from_u128(2),
        lease_until: Some(at(30_000)),
        fence: None,
    };
    a.handle_reply(Reply::Reserved(foreign), at(0)).unwrap();
    assert_ne!(a.poll(at(0)), Step::Run);
    let (step, _) = next_step(&mut a, 0);
    assert!(
        matches!(step, Step::Send { .. }),
        "the reserve is retried: {step:?}"
    );
}

#[test]
fn a_renewal_granted_to_another_owner_does_not_extend_this_callers_lease() {
    let lease = confirmed_lease(Options::default().lease()).as_millis() as u64;
    let mut store = None;
    let mut a = attempt(1, 0);
    let granted = send_and_apply(&mut a, &mut store, 0);
    a.handle_reply(granted, at(0)).unwrap();
    assert_eq!(a.poll(at(0)), Step::Run);
    // The renewal goes out; its reply names another owner (a store bug or a mix-up).
    let (step, t) = next_step(&mut a, 1);
    let Step::Send {
        command: idem_core::record::Command::Renew { .. },
        ..
    } = step
    else {
        panic!("expected a renewal, got {step:?}")
    };
    let foreign = idem_core::Reservation {
        owner: OwnerToken::from_u128(2),
        lease_until: Some(at(t + 10 * lease)),
        fence: None,
    };
    a.handle_reply(Reply::Renewed(foreign), at(t)).unwrap();
    // Only the lease confirmed by the reserve counts: it still ends where the reserve's
    // confirmed part ends.
    assert_eq!(a.lease(at(lease - 1)), LeaseState::Held);
    assert_eq!(a.lease(at(lease)), LeaseState::Unconfirmed);
}
