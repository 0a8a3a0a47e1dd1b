//! The caller's view of its lease (MODEL.md, "Counting the lease on the caller's clock"):
//! counted from when the confirming command was sent, less 1% and 5 ms, so that it ends
//! before the store's lease does; the instant it turns is the same for `lease`, `lease_left`
//! and the machine's own wake-up.

mod common;

use std::time::Duration;

use common::at;
use idem_core::record::{Command, apply};
use idem_core::{
    ActionResult, Attempt, Body, LeaseState, Options, OptionsError, Record, Reply, Step,
    StoreFailurePolicy, confirmed_lease,
};
use proptest::prelude::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn lease_of(secs: u64) -> Options {
    Options::builder()
        .lease(Duration::from_secs(secs))
        .build()
        .unwrap()
}

/// Reserves at `now` against `store` (applied at the same instant) and hands the action out.
fn running(options: Options, store: &mut Option<Record>, now: u64) -> Attempt {
    let mut a = common::attempt(1, options, now);
    let Step::Send { command, .. } = a.poll(at(now)) else {
        panic!("expected a reserve")
    };
    let reply = apply(store.as_ref(), command, at(now)).apply_to(store);
    a.handle_reply(reply, at(now)).unwrap();
    assert_eq!(a.poll(at(now)), Step::Run);
    a
}

#[test]
fn the_confirmed_part_of_a_lease_is_the_lease_less_one_percent_and_five_milliseconds() {
    assert_eq!(confirmed_lease(Duration::from_secs(1)), ms(985));
    assert_eq!(confirmed_lease(Duration::from_secs(30)), ms(29_695));
    assert_eq!(confirmed_lease(Duration::from_secs(3_600)), ms(3_563_995));
    // Never more than the lease, and nothing of a lease too short to leave any.
    assert_eq!(confirmed_lease(ms(4)), Duration::ZERO);
    assert!(confirmed_lease(Duration::MAX) < Duration::MAX);
}

#[test]
fn the_view_turns_at_the_confirmed_end_for_lease_lease_left_and_the_wake_up_alike() {
    // A 1 s lease reserved at 100: confirmed until 100 + 985 = 1 085.
    let mut a = running(lease_of(1), &mut None, 100);
    assert_eq!(a.lease_confirmed_until(), Some(at(1_085)));
    assert_eq!(a.lease(at(1_084)), LeaseState::Held);
    assert_eq!(a.lease_left(at(1_084)), Some(ms(1)));
    assert_eq!(a.lease(at(1_085)), LeaseState::Unconfirmed);
    assert_eq!(a.lease_left(at(1_085)), Some(Duration::ZERO));
    assert_eq!(a.lease_left(at(5_000)), Some(Duration::ZERO));
    assert_eq!(a.lease_left(at(100)), Some(ms(985)));

    // Renewals never answered: the machine wakes at the very instant the view turns (a
    // driver tells the action then), whatever its renewals are doing.
    let mut now = 100;
    let mut wakes = Vec::new();
    while now < 2_000 {
        match a.poll(at(now)) {
            Step::Send {
                command: Command::Renew { .. },
                ..
            } => {}
            Step::Wait { until: Some(until) } => {
                wakes.push(until.as_millis());
                now = until.as_millis();
            }
            other => panic!("unexpected {other:?} at {now}"),
        }
    }
    assert!(wakes.contains(&1_085), "{wakes:?}");
    assert_eq!(a.lease(at(1_085)), LeaseState::Unconfirmed);
}

#[test]
fn a_confirmed_renewal_moves_the_turn_to_its_own_send_plus_the_confirmed_part() {
    let options = lease_of(3);
    let mut store = None;
    let mut a = running(options.clone(), &mut store, 0);
    assert_eq!(a.lease_confirmed_until(), Some(at(2_965)));
    // The renewal is sent at 1 000 and applied (and answered) at 1 040: counted from the send.
    let Step::Send { command, .. } = a.poll(at(1_000)) else {
        panic!("expected a renewal")
    };
    let reply = apply(store.as_ref(), command, at(1_040)).apply_to(&mut store);
    assert!(matches!(reply, Reply::Renewed(_)));
    a.handle_reply(reply, at(1_040)).unwrap();
    assert_eq!(a.lease_confirmed_until(), Some(at(3_965)));
    assert_eq!(a.lease(at(3_964)), LeaseState::Held);
    assert_eq!(a.lease(at(3_965)), LeaseState::Unconfirmed);
    // The store's record lasts until 1 040 + 3 000: the caller's view ends 75 ms before.
    let Some(Record::Pending { lease_until, .. }) = store else {
        panic!("expected the reservation")
    };
    assert_eq!(lease_until, at(4_040));
}

#[test]
fn lease_left_is_zero_once_lost_and_none_without_a_reservation() {
    let mut store = None;
    let mut a = running(lease_of(1), &mut store, 0);
    // Another owner took the key: the renewal is refused, the lease is lost.
    store = Some(Record::Pending {
        owner: idem_core::OwnerToken::from_u128(9),
        fingerprint: idem_core::Fingerprint::of_bytes(b"amount=100"),
        lease_until: at(60_000),
        fence: None,
    });
    let Step::Send { command, .. } = a.poll(at(400)) else {
        panic!("expected a renewal")
    };
    let reply = apply(store.as_ref(), command, at(400)).apply_to(&mut store);
    a.handle_reply(reply, at(400)).unwrap();
    assert_eq!(a.lease(at(401)), LeaseState::Lost);
    assert_eq!(a.lease_left(at(401)), Some(Duration::ZERO));
    // After the action: nothing runs, nothing to count.
    a.handle_action_result(ActionResult::Succeeded(Body::new("ch_1")), at(500))
        .unwrap();
    let _ = a.poll(at(500));
    assert_eq!(a.lease_left(at(500)), None);

    // Before the reserve, and for an action that runs unprotected (fail-open).
    let options = Options::builder()
        .on_store_failure(StoreFailurePolicy::FailOpen)
        .store_retries(0)
        .build()
        .unwrap();
    let mut b = common::attempt(2, options, 0);
    assert_eq!(b.lease_left(at(0)), None);
    let Step::Send { .. } = b.poll(at(0)) else {
        panic!("expected a reserve")
    };
    b.handle_store_error(at(1)).unwrap();
    assert_eq!(b.poll(at(1)), Step::Run);
    assert_eq!(b.lease(at(1)), LeaseState::Unprotected);
    assert_eq!(b.lease_left(at(1)), None);
}

#[test]
fn a_renewal_interval_must_fall_inside_the_confirmed_part_of_the_lease() {
    let build = |renew| {
        Options::builder()
            .lease(Duration::from_secs(1))
            .renew_every(renew)
            .reply_timeout(ms(100))
            .build()
    };
    assert_eq!(build(ms(984)).unwrap().renew_every(), ms(984));
    assert_eq!(
        build(ms(985)),
        Err(OptionsError::RenewNotWithinLease {
            renew_every: ms(985),
            lease: Duration::from_secs(1)
        })
    );
    assert!(build(ms(999)).is_err());
}

/// Two clocks in microseconds of real time: the caller's at rate 1 and an offset, the
/// store's at a rate within 1% of it and another offset. Each counts whole milliseconds
/// (rounded down), on grids that need not line up.
#[derive(Debug, Clone, Copy)]
struct Clocks {
    caller_offset_us: u64,
    store_offset_us: u64,
    /// Store microseconds per million real ones.
    store_rate_ppm: u64,
}

impl Clocks {
    fn caller_ms(self, real_us: u64) -> u64 {
        (real_us + self.caller_offset_us) / 1_000
    }
    fn store_us(self, real_us: u64) -> u64 {
        self.store_offset_us + real_us * self.store_rate_ppm / 1_000_000
    }
    /// The first real microsecond at which the store's clock reads at least `store_ms`.
    fn real_us_when_store_reads(self, store_ms: u64) -> u64 {
        let target = (store_ms * 1_000).saturating_sub(self.store_offset_us);
        target * 1_000_000 / self.store_rate_ppm
    }
}

proptest! {
    /// The caller's view of a granted lease ends strictly before the store frees the key:
    /// whatever the send instant, the request's delay, the two clocks' sub-millisecond
    /// phases and a rate difference of up to 1% (`I1` is the store's; the view only leads it).
    /// With one rate, it leads by at least 4 ms and 1% of the lease.
    #[test]
    fn the_callers_view_ends_before_the_stores_lease(
        lease_s in 1u64..120,
        send_us in 0u64..10_000_000,
        delay_us in 0u64..50_000,
        caller_offset_us in 0u64..1_000_000,
        store_offset_us in 0u64..1_000_000,
        store_rate_ppm in prop::sample::select(vec![990_100u64, 999_000, 1_000_000, 1_001_000, 1_010_000]),
    ) {
        let clocks = Clocks { caller_offset_us, store_offset_us, store_rate_ppm };
        let options = lease_of(lease_s);
        let lease_ms = lease_s * 1_000;
        let sent = clocks.caller_ms(send_us);
        let mut a = common::attempt(1, options, sent);
        let Step::Send { command, .. } = a.poll(at(sent)) else {
            panic!("expected a reserve")
        };
        // The store applies the reserve `delay_us` later, at its own millisecond.
        let apply_us = send_us + delay_us;
        let store_now = clocks.store_us(apply_us) / 1_000;
        let mut store = None;
        let reply = apply(None, command, at(store_now)).apply_to(&mut store);
        let Some(Record::Pending { lease_until, .. }) = store else {
            panic!("expected the reservation")
        };
        prop_assert_eq!(lease_until.as_millis(), store_now + lease_ms);
        a.handle_reply(reply, at(clocks.caller_ms(apply_us))).unwrap();
        prop_assert_eq!(a.poll(at(clocks.caller_ms(apply_us))), Step::Run);
        let until = a.lease_confirmed_until().unwrap().as_millis();
        // The first real instant the caller's clock reads `until` (the view says Unconfirmed
        // from then), against the first real instant the store's clock reads the lease end
        // (the key is free from then).
        let view_ends_us = (until * 1_000).saturating_sub(caller_offset_us);
        let store_frees_us = clocks.real_us_when_store_reads(lease_until.as_millis());
        prop_assert!(
            view_ends_us < store_frees_us,
            "view ends at {view_ends_us} us, store frees at {store_frees_us} us"
        );
        if store_rate_ppm == 1_000_000 {
            let lead = store_frees_us - view_ends_us;
            prop_assert!(lead >= 4_000 + lease_ms * 10 + delay_us, "lead {lead} us");
        }
        // Just before its end, the view still says held; at it, unconfirmed.
        prop_assert_eq!(a.lease(at(until - 1)), LeaseState::Held);
        prop_assert_eq!(a.lease(at(until)), LeaseState::Unconfirmed);
    }
}
