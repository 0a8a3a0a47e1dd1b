//! The fence a grant carries (MODEL.md `F1`): the record machine puts the store's next fence
//! on every grant of a free key and nowhere else, keeps the holder's fence through renewals
//! and a repeated reserve, and with a counter like `MemoryStore`'s
//! ([`Fence::next_after`]) every grant of a key is fenced above all earlier ones, across
//! releases, expiries and takeovers. The same check run against a source that hands a
//! takeover the fence it gave the holder before finds the repeat.

use std::time::Duration;

use idem_core::record::{Command, Record, Reply, apply, apply_fenced};
use idem_core::{
    ActionResult, Body, Fence, Fingerprint, Options, OwnerToken, Step, StoredResult, Timestamp,
};
use proptest::prelude::*;

mod common;

fn owner(n: u8) -> OwnerToken {
    OwnerToken::from_u128(u128::from(n) + 1)
}

fn fp() -> Fingerprint {
    Fingerprint::from_bytes([7; 32])
}

#[derive(Debug, Clone)]
enum Op {
    Reserve(u8),
    Complete(u8),
    Renew(u8),
    Release(u8),
    Read,
    /// Time moves on by this many milliseconds (a lease is 100 ms, retention 300 ms).
    Wait(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..3_u8).prop_map(Op::Reserve),
        1 => (0..3_u8).prop_map(Op::Complete),
        1 => (0..3_u8).prop_map(Op::Renew),
        2 => (0..3_u8).prop_map(Op::Release),
        1 => Just(Op::Read),
        3 => prop_oneof![Just(0_u64), 0..5_u64, 90..400_u64].prop_map(Op::Wait),
    ]
}

fn command(op: &Op) -> Option<Command> {
    let lease = Duration::from_millis(100);
    Some(match *op {
        Op::Reserve(n) => Command::Reserve {
            owner: owner(n),
            fingerprint: fp(),
            lease,
        },
        Op::Complete(n) => Command::Complete {
            owner: owner(n),
            fingerprint: fp(),
            result: StoredResult::Value(Body::new(b"ok")),
            retention: Duration::from_millis(300),
        },
        Op::Renew(n) => Command::Renew {
            owner: owner(n),
            lease,
        },
        Op::Release(n) => Command::Release { owner: owner(n) },
        Op::Read => Command::Read,
        Op::Wait(_) => return None,
    })
}

/// How a store draws its next fence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// `MemoryStore`'s: one above the last, at least the clock in microseconds.
    Counter,
    /// Broken: a takeover gets the fence the key's last holder had.
    ReusedAfterTakeover,
}

/// What went wrong, if anything, with the fences of one run.
fn first_fault(ops: &[Op], source: Source) -> Option<String> {
    let mut state: Option<Record> = None;
    let mut now = 1_000_u64;
    let mut last: Option<Fence> = None;
    // The holder of the current grant and its fence, as the replies told them.
    let mut holder: Option<(OwnerToken, Fence)> = None;
    for op in ops {
        let Some(command) = command(op) else {
            if let Op::Wait(ms) = op {
                now += ms;
            }
            continue;
        };
        let at = Timestamp::from_millis(now);
        let mut drawn = None;
        let transition = apply_fenced(state.as_ref(), command.clone(), at, || {
            let fence = match (source, last) {
                (Source::ReusedAfterTakeover, Some(previous)) => previous,
                _ => Fence::next_after(last, at),
            };
            drawn = Some(fence);
            fence
        });
        // Without a fence source the machine answers the same, only without fences.
        let plain = apply(state.as_ref(), command.clone(), at);
        if strip(&transition.reply) != strip(&plain.reply) {
            return Some(format!(
                "{op:?}: {:?} vs {:?}",
                transition.reply, plain.reply
            ));
        }
        let reply = transition.apply_to(&mut state);
        match (&command, &reply) {
            (Command::Reserve { owner, .. }, Reply::Reserved(grant)) => {
                let Some(fence) = grant.fence else {
                    return Some(format!("{op:?}: a grant without a fence"));
                };
                match (drawn, holder) {
                    // A fresh grant: the fence just drawn, above every earlier one.
                    (Some(new), _) => {
                        if fence != new {
                            return Some(format!("{op:?}: granted {fence:?}, drew {new:?}"));
                        }
                        if last.is_some_and(|previous| fence <= previous) {
                            return Some(format!(
                                "{op:?}: {fence:?} is not above the earlier {last:?}"
                            ));
                        }
                        last = Some(fence);
                        holder = Some((*owner, fence));
                    }
                    // I11: the holder's own reservation, its fence unchanged.
                    (None, Some((held_by, held))) if held_by == *owner && held == fence => {}
                    (None, other) => {
                        return Some(format!("{op:?}: repeated grant {fence:?}, held {other:?}"));
                    }
                }
            }
            (Command::Renew { owner, .. }, Reply::Renewed(renewal)) => match renewal.fence {
                Some(fence) if holder == Some((*owner, fence)) => {}
                _ => return Some(format!("{op:?}: renewal {renewal:?}, held {holder:?}")),
            },
            _ if drawn.is_some() => {
                return Some(format!("{op:?}: a fence drawn for {reply:?}"));
            }
            _ => {}
        }
    }
    None
}

/// A reply without its fences.
fn strip(reply: &Reply) -> Reply {
    match reply {
        Reply::Reserved(r) => Reply::Reserved(idem_core::Reservation { fence: None, ..*r }),
        Reply::Renewed(r) => Reply::Renewed(idem_core::Reservation { fence: None, ..*r }),
        Reply::Read(Some(Record::Pending {
            owner,
            fingerprint,
            lease_until,
            ..
        })) => Reply::Read(Some(Record::Pending {
            owner: *owner,
            fingerprint: *fingerprint,
            lease_until: *lease_until,
            fence: None,
        })),
        other => other.clone(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    /// F1 on the record machine with `MemoryStore`'s counter: every grant is fenced above all
    /// earlier ones, the fence is drawn for grants only, and renewals and repeated reserves
    /// carry the holder's.
    #[test]
    fn every_grant_is_fenced_above_the_ones_before(ops in proptest::collection::vec(op(), 1..60)) {
        let fault = first_fault(&ops, Source::Counter);
        prop_assert!(fault.is_none(), "{}", fault.unwrap_or_default());
    }
}

#[test]
fn a_release_then_a_takeover_in_the_same_millisecond_is_fenced_above() {
    // Release, then another owner reserves at the very same store instant: the clock gives
    // the same microsecond count, so only the counter keeps the second fence above.
    let ops = [Op::Reserve(0), Op::Release(0), Op::Reserve(1)];
    assert_eq!(first_fault(&ops, Source::Counter), None);
    let ops = [
        Op::Reserve(0),
        Op::Wait(150),
        Op::Reserve(1),
        Op::Renew(1),
        Op::Reserve(1),
    ];
    assert_eq!(first_fault(&ops, Source::Counter), None);
}

#[test]
fn the_check_finds_a_fence_reused_after_a_takeover() {
    // The holder's lease runs out and another owner takes the key over: a source that hands
    // the new holder the old fence is caught at that grant.
    let ops = [Op::Reserve(0), Op::Wait(150), Op::Reserve(1)];
    let fault = first_fault(&ops, Source::ReusedAfterTakeover).expect("the repeat is found");
    assert!(fault.contains("is not above"), "{fault}");
    // And a release followed by a new grant, too.
    let ops = [Op::Reserve(0), Op::Release(0), Op::Reserve(2)];
    assert!(first_fault(&ops, Source::ReusedAfterTakeover).is_some());
}

#[test]
fn the_attempt_knows_its_fence_while_its_action_runs() {
    let options = Options::default();
    let mut store: Option<Record> = None;
    let mut a = common::attempt(1, options.clone(), 0);
    assert_eq!(a.fence(), None, "before the grant");
    let Step::Send { command, .. } = a.poll(common::at(0)) else {
        panic!("expected a reserve")
    };
    let fence = Fence::new(41).unwrap();
    let reply = apply_fenced(store.as_ref(), command, common::at(0), || fence).apply_to(&mut store);
    a.handle_reply(reply, common::at(0)).unwrap();
    assert_eq!(a.poll(common::at(0)), Step::Run);
    assert_eq!(a.fence(), Some(fence));
    // A renewal keeps it.
    let renew_at = options.renew_every().as_millis() as u64;
    let Step::Send { command, .. } = a.poll(common::at(renew_at)) else {
        panic!("expected a renewal")
    };
    let reply = apply(store.as_ref(), command, common::at(renew_at)).apply_to(&mut store);
    a.handle_reply(reply, common::at(renew_at)).unwrap();
    assert_eq!(a.fence(), Some(fence));
    // Once the result is handed in, the action no longer runs under it.
    a.handle_action_result(
        ActionResult::Succeeded(Body::new(b"ok")),
        common::at(renew_at),
    )
    .unwrap();
    assert_eq!(a.fence(), None);

    // The same grant from a store without fences: none.
    let mut store: Option<Record> = None;
    let mut b = common::attempt(2, options, 0);
    let Step::Send { command, .. } = b.poll(common::at(0)) else {
        panic!("expected a reserve")
    };
    let reply = apply(store.as_ref(), command, common::at(0)).apply_to(&mut store);
    b.handle_reply(reply, common::at(0)).unwrap();
    assert_eq!(b.poll(common::at(0)), Step::Run);
    assert_eq!(b.fence(), None);
}

#[test]
fn a_counter_remembers_the_last_fence_it_granted_and_a_fence_shows_its_number() {
    let mut counter = idem_core::FenceCounter::default();
    assert_eq!(counter.last(), None);
    let first = counter.next(Timestamp::from_millis(5));
    assert_eq!(counter.last(), Some(first));
    let second = counter.next(Timestamp::from_millis(5));
    assert!(second > first);
    assert_eq!(counter.last(), Some(second));
    let fence = Fence::new(42).unwrap();
    assert_eq!(format!("{fence:?}"), "Fence(42)");
    assert_eq!(fence.to_string(), "42");
}
