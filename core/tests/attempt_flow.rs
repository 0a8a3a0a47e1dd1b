//! The attempt machine driven against the real record machine, with a scripted clock.

use std::time::Duration;

use idem_core::record::apply;
use idem_core::{
    ActionResult, Attempt, Body, Fingerprint, InFlightPolicy, Key, Operation, Options, Outcome,
    OwnerToken, Record, Recording, Step, StoreFailurePolicy, StoredResult, Timestamp,
};

fn attempt(owner: u128, fp: u8, options: Options, now: u64) -> Attempt {
    Attempt::new(
        Operation::new("payment.charge").unwrap(),
        Key::new("order-1").unwrap(),
        Fingerprint::of_bytes(&[fp]),
        OwnerToken::from_u128(owner),
        owner as u64,
        options,
        Timestamp::from_millis(now),
    )
}

/// Drives one attempt to its end; the action succeeds with `body` (or fails) at once.
fn drive(
    a: &mut Attempt,
    store: &mut Option<Record>,
    result: Option<&str>,
    now: &mut u64,
) -> Outcome {
    for _ in 0..10_000 {
        match a.poll(Timestamp::from_millis(*now)) {
            Step::Send { command: cmd, .. } => {
                let reply =
                    apply(store.as_ref(), cmd, Timestamp::from_millis(*now)).apply_to(store);
                a.handle_reply(reply, Timestamp::from_millis(*now)).unwrap();
            }
            Step::Run => {
                let r = match result {
                    Some(b) => ActionResult::Succeeded(Body::new(b)),
                    None => ActionResult::Failed,
                };
                a.handle_action_result(r, Timestamp::from_millis(*now))
                    .unwrap();
            }
            Step::Wait { until } => *now = until.expect("machine stalled").as_millis(),
            Step::Done(outcome) => return outcome,
        }
    }
    panic!("attempt did not finish");
}

#[test]
fn fresh_then_replay() {
    let mut store = None;
    let mut now = 0;
    let o = drive(
        &mut attempt(1, 1, Options::default(), 0),
        &mut store,
        Some("ch_1"),
        &mut now,
    );
    assert!(matches!(o, Outcome::Executed(e) if e.record == Recording::Stored && !e.lease_lost));
    let o = drive(
        &mut attempt(2, 1, Options::default(), now),
        &mut store,
        Some("ch_2"),
        &mut now,
    );
    assert_eq!(
        o,
        Outcome::Replayed {
            result: StoredResult::Value(Body::new("ch_1"))
        }
    );
}

#[test]
fn other_fingerprint_is_key_reuse() {
    let mut store = None;
    let mut now = 0;
    drive(
        &mut attempt(1, 1, Options::default(), 0),
        &mut store,
        Some("ch_1"),
        &mut now,
    );
    let o = drive(
        &mut attempt(2, 5, Options::default(), now),
        &mut store,
        Some("x"),
        &mut now,
    );
    assert_eq!(
        o,
        Outcome::KeyReuse {
            stored: Fingerprint::of_bytes(&[1]),
            given: Fingerprint::of_bytes(&[5])
        }
    );
}

#[test]
fn failure_is_released_then_retry_runs() {
    let mut store = None;
    let mut now = 0;
    let o = drive(
        &mut attempt(1, 1, Options::default(), 0),
        &mut store,
        None,
        &mut now,
    );
    assert_eq!(o, Outcome::ActionFailed { released: true });
    assert_eq!(store, None);
    let o = drive(
        &mut attempt(2, 1, Options::default(), now),
        &mut store,
        Some("ch_1"),
        &mut now,
    );
    assert!(matches!(o, Outcome::Executed(_)));
}

#[test]
fn raise_reports_in_progress_and_wait_times_out() {
    let mut store = None;
    let mut holder = attempt(1, 1, Options::default(), 0);
    let Step::Send { command: cmd, .. } = holder.poll(Timestamp::ZERO) else {
        panic!()
    };
    apply(store.as_ref(), cmd, Timestamp::ZERO).apply_to(&mut store);
    let raise = Options::builder()
        .in_flight(InFlightPolicy::Raise)
        .build()
        .unwrap();
    let mut now = 50;
    assert_eq!(
        drive(
            &mut attempt(2, 1, raise, 50),
            &mut store,
            Some("x"),
            &mut now
        ),
        Outcome::InProgress
    );
    let wait = Options::builder()
        .wait_deadline(Duration::from_secs(2))
        .build()
        .unwrap();
    let mut now = 50;
    assert_eq!(
        drive(
            &mut attempt(3, 1, wait, 50),
            &mut store,
            Some("x"),
            &mut now
        ),
        Outcome::InProgress
    );
    assert!((2050..=2100).contains(&now), "waited until {now}");
}

#[test]
fn fail_closed_runs_nothing_fail_open_runs() {
    for (policy, expect_run) in [
        (StoreFailurePolicy::FailClosed, false),
        (StoreFailurePolicy::FailOpen, true),
    ] {
        let opts = Options::builder().on_store_failure(policy).build().unwrap();
        let mut a = attempt(1, 1, opts, 0);
        let mut ran = false;
        let mut now = 0u64;
        let outcome = loop {
            match a.poll(Timestamp::from_millis(now)) {
                Step::Send { .. } => a.handle_store_error(Timestamp::from_millis(now)).unwrap(),
                Step::Run => {
                    ran = true;
                    a.handle_action_result(
                        ActionResult::Succeeded(Body::new("ch_1")),
                        Timestamp::from_millis(now),
                    )
                    .unwrap();
                }
                Step::Wait { until } => now = until.unwrap().as_millis(),
                Step::Done(o) => break o,
            }
        };
        assert_eq!(ran, expect_run);
        if expect_run {
            assert!(matches!(outcome, Outcome::Executed(e) if e.record == Recording::Unknown));
        } else {
            assert_eq!(outcome, Outcome::StoreUnavailable);
        }
    }
}

#[test]
fn slow_action_renews_its_lease_and_keeps_the_key() {
    let mut store = None;
    let mut a = attempt(1, 1, Options::default(), 0);
    let mut now = 0u64;
    let mut renewals = 0;
    let mut fed = false;
    let finish_at = 100_000; // over three leases
    let outcome = loop {
        let ts = Timestamp::from_millis(now);
        match a.poll(ts) {
            Step::Send { command: cmd, .. } => {
                if matches!(cmd, idem_core::Command::Renew { .. }) {
                    renewals += 1;
                }
                let reply = apply(store.as_ref(), cmd, ts).apply_to(&mut store);
                a.handle_reply(reply, ts).unwrap();
            }
            Step::Run => {}
            Step::Wait { until } => {
                let next = until.map_or(finish_at, |u| u.as_millis().min(finish_at));
                now = next;
                if now == finish_at && !fed {
                    // Confirmed by the renewals, the lease still holds at the end.
                    assert_eq!(
                        a.lease(Timestamp::from_millis(now)),
                        idem_core::LeaseState::Held
                    );
                    fed = true;
                    a.handle_action_result(
                        ActionResult::Succeeded(Body::new("ch_1")),
                        Timestamp::from_millis(now),
                    )
                    .unwrap();
                }
            }
            Step::Done(o) => break o,
        }
    };
    assert!(renewals >= 9, "renewed {renewals} times");
    assert!(
        matches!(outcome, Outcome::Executed(e) if e.record == Recording::Stored && !e.lease_lost)
    );
}

#[test]
fn oversized_result_completes_without_body() {
    let opts = Options::builder().max_body_bytes(3).build().unwrap();
    let mut store = None;
    let mut now = 0;
    let o = drive(
        &mut attempt(1, 1, opts.clone(), 0),
        &mut store,
        Some("ch_1"),
        &mut now,
    );
    assert!(matches!(o, Outcome::Executed(e) if e.record == Recording::StoredWithoutBody));
    let o = drive(
        &mut attempt(2, 1, opts, now),
        &mut store,
        Some("ch_2"),
        &mut now,
    );
    assert_eq!(
        o,
        Outcome::Replayed {
            result: StoredResult::NotStored
        }
    );
}
