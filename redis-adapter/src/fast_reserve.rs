//! The single-command reserve: `SET key <pending record> NX PX <lease-1> GET`.
//!
//! A reserve is the first command of every call, and on a free key (a fresh call) or a
//! completed one (a replay) the record machine's answer needs no clock: a free key is
//! reserved, a completed one is replayed, one held under another fingerprint is key reuse.
//! `SET … NX … GET` does all of that in one plain command, which costs the server a fraction
//! of a script: it writes the caller's pending record only if the key is absent, and returns
//! what the key held. In layout 2 a record is live exactly while its key exists
//! ([`crate::codec`]), so a value returned is a live record at the command's own instant, and
//! the store's decision answers with `record::reserve_live`, the record machine's own clock-free answer
//! for a live record: no deadline is made up, none is needed.
//!
//! The one answer that can need more than the bytes is "in flight": on a store that announces
//! changes, a record a waiter is told about must carry the waiter's mark, so that its end is
//! announced, and marking is a write. For a record not yet marked, and for any value that does
//! not decode, the decision hands the reserve to the script, which runs as its own atomic step
//! (the `SET` changed nothing, since the key was taken); a waiter's later reserves of the
//! marked record are answered here, one plain command each. The fast reserve does not know
//! the server's clock, so a grant's [`Reservation::lease_until`] and an "in flight"'s
//! `lease_until` are `None`, and a replay does not say how long its record has left.

use idem_core::record::{self, LiveReserve, Reply};
use idem_core::{Fingerprint, OwnerToken, Reservation};

use crate::codec::{self, StoredState};

/// The record machine's answer, or "run the reserve script".
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    /// The record machine's reply at the instant the `SET` ran.
    Answer(Reply),
    /// The bytes do not settle it: run the reserve script.
    Script,
}

/// What the record machine answers `owner`'s reserve of `fingerprint`, given the value the key
/// held when the fast reserve ran (`None`: the key was free, and is now reserved). `watch` is
/// whether the store announces changes, so that a waiter must find the record marked.
pub(crate) fn decide(
    held: Option<&[u8]>,
    owner: OwnerToken,
    fingerprint: Fingerprint,
    watch: bool,
) -> Decision {
    let Some(held) = held else {
        // I1: the key was free, and the `SET` made this caller its holder.
        return Decision::Answer(Reply::Reserved(Reservation {
            owner,
            lease_until: None,
            fence: None,
        }));
    };
    // Not a value this adapter wrote: the script names the defect.
    let Ok(stored) = codec::decode(held) else {
        return Decision::Script;
    };
    // The key exists, so its record is live: the machine's answer for a live record, which
    // reads no clock.
    let answer = record::reserve_live(stored.live(), owner, fingerprint);
    let unmarked = stored.state == (StoredState::Pending { watched: false });
    if answer == LiveReserve::InFlight && watch && unmarked {
        // A waiter on a store that announces changes: the record needs its mark, a write.
        return Decision::Script;
    }
    Decision::Answer(answer.reply_without_clock())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use idem_core::record::{Command, StoredResult, apply};
    use idem_core::{Body, Timestamp};
    use proptest::prelude::*;

    use super::*;
    use crate::codec::Stored;

    fn owner(n: u128) -> OwnerToken {
        OwnerToken::from_u128(n)
    }

    fn fp(n: u8) -> Fingerprint {
        Fingerprint::from_bytes([n; 32])
    }

    /// A live value under the key: a pending record (marked or not) or a completed one.
    fn held() -> impl Strategy<Value = Stored> {
        let state = prop_oneof![
            any::<bool>().prop_map(|watched| StoredState::Pending { watched }),
            proptest::collection::vec(any::<u8>(), 0..8)
                .prop_map(|bytes| StoredState::Completed(StoredResult::Value(Body::new(bytes)))),
            Just(StoredState::Completed(StoredResult::NotStored)),
            Just(StoredState::Completed(StoredResult::Panicked)),
        ];
        (1..=2_u128, 0..2_u8, state).prop_map(|(holder, print, state)| Stored {
            owner: owner(holder),
            fingerprint: fp(print),
            state,
            fence: None,
        })
    }

    fn bytes(stored: &Stored) -> Vec<u8> {
        let mut out = codec::encode(&stored.clone().until(Timestamp::from_millis(1)));
        if stored.state == (StoredState::Pending { watched: true }) {
            out[3] = 4;
        }
        out
    }

    /// `got` is `expected` without its times: a grant's lease end and a replay's time left
    /// are unsaid.
    fn agrees(got: &Reply, expected: &Reply) -> bool {
        match (got, expected) {
            (Reply::InFlight { lease_until: None }, Reply::InFlight { .. }) => true,
            (Reply::Reserved(g), Reply::Reserved(e)) => {
                g.owner == e.owner && g.lease_until.is_none()
            }
            (
                Reply::Replay {
                    result: g,
                    remaining: None,
                },
                Reply::Replay { result: e, .. },
            ) => g == e,
            _ => got == expected,
        }
    }

    proptest! {
        /// Every answer the fast reserve gives is the record machine's at any instant the
        /// record is live, whatever its deadline: the decision needs neither.
        #[test]
        fn every_answer_is_the_record_machines(
            stored in held(),
            caller in 1..=2_u128,
            print in 0..2_u8,
            watch in any::<bool>(),
            now in 0..50_000_u64,
            deadline in 50_001..60_000_u64,
        ) {
            let (caller, print) = (owner(caller), fp(print));
            let record = stored.clone().until(Timestamp::from_millis(deadline));
            let command = Command::Reserve {
                owner: caller,
                fingerprint: print,
                lease: Duration::from_secs(30),
            };
            let expected = apply(Some(&record), command, Timestamp::from_millis(now));
            let marked = stored.state == (StoredState::Pending { watched: true });
            match decide(Some(&bytes(&stored)), caller, print, watch) {
                Decision::Answer(reply) => {
                    prop_assert!(agrees(&reply, &expected.reply), "{reply:?} vs {:?}", expected.reply);
                    // A waiter on a store that announces changes is only answered here if
                    // the record already carries a waiter's mark.
                    let in_flight = matches!(reply, Reply::InFlight { .. });
                    prop_assert!(!in_flight || !watch || marked, "an unmarked waiter");
                }
                Decision::Script => {
                    // Only a waiter that must mark the record goes to the script.
                    let in_flight = matches!(expected.reply, Reply::InFlight { .. });
                    prop_assert!(in_flight && watch && !marked, "script for {:?}", expected.reply);
                }
            }
        }
    }

    #[test]
    fn a_free_key_is_granted_without_a_lease_end() {
        let Decision::Answer(reply) = decide(None, owner(1), fp(0), true) else {
            panic!("a free key needs no script")
        };
        assert_eq!(
            reply,
            Reply::Reserved(Reservation {
                owner: owner(1),
                lease_until: None,
                fence: None,
            })
        );
    }

    #[test]
    fn values_this_adapter_did_not_write_go_to_the_script() {
        let mut layout_1 = codec::encode_pending(owner(2), fp(0));
        layout_1[2] = 1;
        for foreign in [&b"hello"[..], &[0; 52][..], &[b'i'; 80][..], &layout_1[..]] {
            assert_eq!(
                decide(Some(foreign), owner(1), fp(0), false),
                Decision::Script
            );
        }
    }
}
