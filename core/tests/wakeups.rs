//! When the attempt machine asks to be woken: the lease end while a command is out, the
//! growing backoff of store retries, and which change notices move a waiter.

mod common;

use std::time::Duration;

use common::at;
use idem_core::record::apply;
use idem_core::{ActionResult, Attempt, Options, Record, Reply, Step};

fn attempt(owner: u128) -> Attempt {
    common::attempt(owner, Options::default(), 0)
}

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

/// A running attempt with `options` that reserved at 0.
fn running_with(options: Options, store: &mut Option<Record>) -> Attempt {
    let mut a = common::attempt(1, options, 0);
    let Step::Send { command: cmd, .. } = a.poll(at(0)) else {
        panic!("expected a reserve")
    };
    let reply = apply(store.as_ref(), cmd, at(0)).apply_to(store);
    a.handle_reply(reply, at(0)).unwrap();
    assert_eq!(a.poll(at(0)), Step::Run);
    a
}

fn running(store: &mut Option<Record>) -> Attempt {
    running_with(Options::default(), store)
}

#[test]
fn while_a_renewal_is_out_the_machine_wakes_at_its_reply_deadline_or_the_lease_end() {
    // With the defaults the reply deadline comes first.
    let options = Options::default();
    let renew = ms(options.renew_every());
    let mut a = running(&mut None);
    let Step::Send { reply_by, .. } = a.poll(at(renew)) else {
        panic!("expected a renewal")
    };
    assert!(reply_by < at(ms(options.lease())));
    assert_eq!(
        a.poll(at(renew + 1)),
        Step::Wait {
            until: Some(reply_by)
        }
    );

    // A renewal late in the lease, awaited longer than the lease has left: the lease end
    // comes first, and is worth waking for (a driver then tells the action).
    let late = Options::builder()
        .lease(Duration::from_secs(30))
        .renew_every(Duration::from_secs(29))
        .reply_timeout(Duration::from_secs(28))
        .build()
        .unwrap();
    let (lease, renew) = (
        ms(idem_core::confirmed_lease(late.lease())),
        ms(late.renew_every()),
    );
    let mut a = running_with(late.clone(), &mut None);
    let Step::Send { reply_by, .. } = a.poll(at(renew)) else {
        panic!("expected a renewal")
    };
    assert_eq!(
        a.poll(at(renew + 1)),
        Step::Wait {
            until: Some(at(lease))
        }
    );
    // Past it, only the reply deadline is left to wake for.
    assert_eq!(
        a.poll(at(lease)),
        Step::Wait {
            until: Some(reply_by)
        }
    );
    // Once the action's result is in, the lease end no longer matters either.
    let mut b = running_with(late.clone(), &mut None);
    let Step::Send { reply_by, .. } = b.poll(at(renew)) else {
        panic!("expected a renewal")
    };
    b.handle_action_result(ActionResult::Failed, at(renew + 1))
        .unwrap();
    assert_eq!(
        b.poll(at(renew + 1)),
        Step::Wait {
            until: Some(reply_by)
        }
    );
    // Nor after the store refused the renewal: the lease is lost.
    let mut c = running_with(late, &mut None);
    let Step::Send { .. } = c.poll(at(renew)) else {
        panic!("expected a renewal")
    };
    c.handle_reply(Reply::Refused(idem_core::Refusal::NotOwner), at(renew + 1))
        .unwrap();
    // A lost lease stops renewals; the machine waits on the action alone.
    assert_eq!(c.poll(at(renew + 1)), Step::Wait { until: None });
}

#[test]
fn store_retries_back_off_further_each_time() {
    let options = Options::default();
    let initial = ms(options.backoff_initial());
    let mut a = attempt(1);
    let mut now = 0;
    for n in 0..options.store_retries() {
        let Step::Send { .. } = a.poll(at(now)) else {
            panic!("expected a reserve at {now}")
        };
        a.handle_store_error(at(now)).unwrap();
        let Step::Wait { until: Some(next) } = a.poll(at(now)) else {
            panic!("expected a backoff")
        };
        // Half the nominal delay is fixed, half is jitter (equal jitter).
        let nominal = (initial << n).min(ms(options.backoff_max()));
        let delay = next.as_millis() - now;
        assert!(
            (nominal / 2..=nominal).contains(&delay),
            "retry {n}: {delay} ms, nominal {nominal} ms"
        );
        now = next.as_millis();
    }
}

#[test]
fn only_a_waiter_that_is_backing_off_is_moved_by_a_notice() {
    // A reserve that failed is backing off too, but not waiting for a holder: a notice
    // about the key does not cut its backoff.
    let mut a = attempt(1);
    let Step::Send { .. } = a.poll(at(0)) else {
        panic!("expected a reserve")
    };
    a.handle_store_error(at(0)).unwrap();
    assert!(!a.handle_record_changed(at(0)));
    // A waiter whose backoff is already over is not moved: it reserves at its next poll
    // anyway.
    let mut store = None;
    let _holder = running(&mut store);
    let mut w = attempt(2);
    let Step::Send { command: cmd, .. } = w.poll(at(0)) else {
        panic!("expected a reserve")
    };
    let reply = apply(store.as_ref(), cmd, at(0)).apply_to(&mut store);
    w.handle_reply(reply, at(0)).unwrap();
    let Step::Wait { until: Some(next) } = w.poll(at(0)) else {
        panic!("a waiter backs off")
    };
    assert!(!w.handle_record_changed(next));
    assert!(w.handle_record_changed(at(next.as_millis() - 1)));
}

#[test]
fn a_notice_that_proves_spurious_mutes_notices_for_one_initial_backoff() {
    let initial = ms(Options::default().backoff_initial());
    let mut store = None;
    let _holder = running(&mut store);
    let mut w = attempt(2);
    // Not waiting yet: no notices to listen for.
    assert_eq!(w.notices_from(at(0)), None);
    let reserve_now = |w: &mut Attempt, store: &mut Option<Record>, t: u64| {
        let Step::Send { command: cmd, .. } = w.poll(at(t)) else {
            panic!("expected a reserve at {t}")
        };
        let reply = apply(store.as_ref(), cmd, at(t)).apply_to(store);
        w.handle_reply(reply, at(t)).unwrap();
    };
    reserve_now(&mut w, &mut store, 0);
    assert_eq!(w.notices_from(at(1)), Some(at(1)));
    // A notice moves the waiter; its reserve finds the key still held.
    assert!(w.handle_record_changed(at(1)));
    reserve_now(&mut w, &mut store, 1);
    // So notices are muted for one initial backoff.
    assert_eq!(w.notices_from(at(2)), Some(at(1 + initial)));
    assert!(!w.handle_record_changed(at(initial)));
    assert!(w.handle_record_changed(at(1 + initial)));
}
