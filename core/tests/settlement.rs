//! What an abandoned attempt leaves to settle (`Attempt::settlement`): the driver sends it
//! when its caller goes away mid-call, or after a fail-closed refusal.

mod common;

use common::at;
use idem_core::record::{Command, apply};
use idem_core::{
    ActionResult, Attempt, Body, Options, Outcome, OwnerToken, Record, Step, StoreFailurePolicy,
};

fn attempt(owner: u128, options: Options) -> Attempt {
    common::attempt(owner, options, 0)
}

fn is_release(command: Option<Command>) -> bool {
    matches!(command, Some(Command::Release { owner }) if owner == OwnerToken::from_u128(1))
}

fn completes_with(command: Option<Command>) -> Option<Option<Body>> {
    match command {
        Some(Command::Complete { owner, body, .. }) if owner == OwnerToken::from_u128(1) => {
            Some(body)
        }
        _ => None,
    }
}

/// Polls at 0 and applies the command to `store`, feeding the reply.
fn step(a: &mut Attempt, store: &mut Option<Record>) {
    let Step::Send(cmd) = a.poll(at(0)) else {
        panic!("expected a command")
    };
    let reply = apply(store.as_ref(), cmd, at(0)).apply_to(store);
    a.handle_reply(reply, at(0)).unwrap();
}

#[test]
fn nothing_sent_nothing_to_settle_a_sent_reserve_is_released() {
    let mut a = attempt(1, Options::default());
    assert_eq!(a.settlement(), None);
    let Step::Send(_) = a.poll(at(0)) else {
        panic!("expected a reserve")
    };
    // The reserve is out: it may land, so it is released.
    assert!(is_release(a.settlement()));
    // Its reply was lost: still possibly held.
    a.handle_store_error(at(0)).unwrap();
    assert!(is_release(a.settlement()));
}

#[test]
fn a_running_or_failed_action_releases_a_successful_one_completes() {
    let mut store = None;
    let mut a = attempt(1, Options::default());
    step(&mut a, &mut store);
    assert_eq!(a.poll(at(0)), Step::Run);
    assert!(is_release(a.settlement()));
    a.handle_action_result(ActionResult::Succeeded(Body::new("ch_1")), at(1))
        .unwrap();
    assert_eq!(
        completes_with(a.settlement()),
        Some(Some(Body::new("ch_1")))
    );
    // Once the complete is under way it is still the complete that settles it.
    let Step::Send(_) = a.poll(at(1)) else {
        panic!("expected the complete")
    };
    assert_eq!(
        completes_with(a.settlement()),
        Some(Some(Body::new("ch_1")))
    );

    let mut failed = attempt(1, Options::default());
    step(&mut failed, &mut None);
    assert_eq!(failed.poll(at(0)), Step::Run);
    failed
        .handle_action_result(ActionResult::Failed, at(1))
        .unwrap();
    assert!(is_release(failed.settlement()));
}

#[test]
fn a_result_the_record_cannot_hold_completes_without_a_body() {
    let options = Options::builder().max_body_bytes(4).build().unwrap();
    for result in [
        ActionResult::Succeeded(Body::new("too long")),
        ActionResult::Unrecordable,
    ] {
        let mut a = attempt(1, options.clone());
        step(&mut a, &mut None);
        assert_eq!(a.poll(at(0)), Step::Run);
        a.handle_action_result(result, at(1)).unwrap();
        assert_eq!(completes_with(a.settlement()), Some(None));
    }
}

#[test]
fn an_ended_attempt_settles_only_a_fail_closed_refusal() {
    // Refused as in progress: nothing of its own is left.
    let mut store = None;
    let mut first = attempt(2, Options::default());
    step(&mut first, &mut store);
    let mut waiter = attempt(
        1,
        Options::builder()
            .in_flight(idem_core::InFlightPolicy::Raise)
            .build()
            .unwrap(),
    );
    step(&mut waiter, &mut store);
    assert_eq!(waiter.poll(at(0)), Step::Done(Outcome::InProgress));
    assert_eq!(waiter.settlement(), None);
    // Fail closed after every reserve failed: one of them may have landed.
    let options = Options::builder()
        .on_store_failure(StoreFailurePolicy::FailClosed)
        .store_retries(0)
        .build()
        .unwrap();
    let mut closed = attempt(1, options);
    let Step::Send(_) = closed.poll(at(0)) else {
        panic!("expected a reserve")
    };
    closed.handle_store_error(at(0)).unwrap();
    assert_eq!(closed.poll(at(0)), Step::Done(Outcome::StoreUnavailable));
    assert!(is_release(closed.settlement()));
}
