//! The single-command reserve: `SET key <reservation> NX PX <lease-1> GET`.
//!
//! A reserve is the first command of every call, and on a free key (a fresh call) or a
//! completed one (a replay) the record machine's answer needs no clock: a free key is
//! reserved, a completed one is replayed, one held under another fingerprint is key reuse.
//! `SET … NX … GET` does all of that in one plain command, which costs the server a
//! fraction of a script: it writes the fast reserve only if the key is absent and returns what
//! the key held. Redis holds a key exactly while its record is live (keys expire one
//! millisecond before their deadline, [`crate::codec`]), so the reply describes the key at
//! the command's own instant, and `decide` asks the record machine (`record::apply`) for
//! its answer at that instant.
//!
//! Two answers need more than the bytes: "in flight" needs the holder's lease end, which a
//! bare reservation keeps in the key's expiry, and, on a store that announces changes, a mark on the
//! record so that its end is announced to the waiter. For those, and for any value that does
//! not decode, `decide` hands the reserve to the script, which runs as its own atomic step
//! (the `SET` changed nothing, since the key was taken). A grant made by the fast reserve does
//! not know the server's clock, so its [`Reservation::lease_until`] is `None`.

use idem_core::record::{self, Record, Reply};
use idem_core::{Fingerprint, OwnerToken, Reservation, Timestamp};

use crate::codec::{self, Stored};

/// The record machine's answer, or "run the reserve script".
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    /// The record machine's reply at the instant the `SET` ran.
    Answer(Reply),
    /// The bytes do not settle it: run the reserve script.
    Script,
}

/// What the record machine answers `owner`'s reserve of `fingerprint`, given the value the
/// key held when the fast reserve ran (`None`: the key was free, and is now reserved). `watch` is
/// whether the store announces changes, so that a waiter must mark the record.
///
/// The answer is `record::apply`'s own: the key exists, so its record is live at the `SET`'s
/// instant, and the machine's reserve of a live record reads no clock, so any instant
/// before the deadline stands in for it. This function only says which answers the bytes
/// cannot give.
pub(crate) fn decide(
    held: Option<&[u8]>,
    owner: OwnerToken,
    fingerprint: Fingerprint,
    watch: bool,
) -> Decision {
    let (record, bare, watched) = match held.map(codec::decode_stored) {
        // I1: the key was free, and the `SET` made this caller its holder.
        None => {
            return Decision::Answer(Reply::Reserved(Reservation {
                owner,
                lease_until: None,
            }));
        }
        // Not a value this adapter wrote: the script names the defect.
        Some(Err(_)) => return Decision::Script,
        Some(Ok(Stored::Record { record, watched })) => (record, false, watched),
        // A bare reservation's lease end is the key's expiry, not in its bytes: live, until some time.
        Some(Ok(Stored::BareReservation { owner, fingerprint })) => {
            let pending = Record::Pending {
                owner,
                fingerprint,
                lease_until: Timestamp::from_millis(u64::MAX),
            };
            (pending, true, false)
        }
    };
    if !bare && record.is_expired(Timestamp::from_millis(0)) {
        // A zero deadline in a key that exists: the bytes contradict the key's liveness,
        // so the script judges by `TIME`.
        return Decision::Script;
    }
    // The machine's answer for a live record, which needs no clock.
    let reply = record::reserve_live(&record, owner, fingerprint);
    match reply {
        // I11: the owner's own bare reservation; its lease end is in the key's expiry.
        Reply::Reserved(granted) if bare => Decision::Answer(Reply::Reserved(Reservation {
            owner: granted.owner,
            lease_until: None,
        })),
        // "In flight" needs the lease end of a bare reservation, or a waiter's mark, which is a write:
        // the script has both.
        Reply::InFlight { .. } if bare || (watch && !watched) => Decision::Script,
        reply => Decision::Answer(reply),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use idem_core::record::{Command, StoredResult, apply};
    use idem_core::{Body, Timestamp};
    use proptest::prelude::*;

    use super::*;

    fn owner(n: u128) -> OwnerToken {
        OwnerToken::from_u128(n)
    }

    fn fp(n: u8) -> Fingerprint {
        Fingerprint::from_bytes([n; 32])
    }

    /// A live value under the key: a record (with its waiter mark) or a bare reservation.
    fn held() -> impl Strategy<Value = Stored> {
        // Every completed state: a value (state 3), none (2), a panic (6).
        let result = prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..8)
                .prop_map(|bytes| StoredResult::Value(Body::new(bytes))),
            Just(StoredResult::NotStored),
            Just(StoredResult::Panicked),
        ];
        (0..4_u8, 1..=2_u128, 0..2_u8, result, any::<bool>()).prop_map(
            |(kind, holder, print, result, watched)| {
                let (owner, fingerprint) = (owner(holder), fp(print));
                let deadline = Timestamp::from_millis(50_000);
                match kind {
                    0 => Stored::BareReservation { owner, fingerprint },
                    1 => Stored::Record {
                        record: Record::Pending {
                            owner,
                            fingerprint,
                            lease_until: deadline,
                        },
                        watched,
                    },
                    _ => Stored::Record {
                        record: Record::Completed {
                            owner,
                            fingerprint,
                            result,
                            expires_at: deadline,
                        },
                        watched: false,
                    },
                }
            },
        )
    }

    fn bytes(stored: &Stored) -> Vec<u8> {
        match stored {
            Stored::BareReservation { owner, fingerprint } => {
                codec::encode_bare_reservation(*owner, *fingerprint)
            }
            Stored::Record { record, watched } => {
                let mut bytes = codec::encode(record);
                if *watched {
                    bytes[3] = 4;
                }
                bytes
            }
        }
    }

    /// The record machine's view of `stored`, with the fast reserve's lease end (the key's expiry
    /// plus one) at `bare_until`.
    fn as_record(stored: &Stored, bare_until: Timestamp) -> Record {
        match stored {
            Stored::Record { record, .. } => record.clone(),
            Stored::BareReservation { owner, fingerprint } => Record::Pending {
                owner: *owner,
                fingerprint: *fingerprint,
                lease_until: bare_until,
            },
        }
    }

    /// `got` is `expected`, except that a grant may leave its lease end unsaid, and a replay
    /// how long its record has left.
    fn agrees(got: &Reply, expected: &Reply) -> bool {
        match (got, expected) {
            (Reply::Reserved(g), Reply::Reserved(e)) => {
                g.owner == e.owner && (g.lease_until.is_none() || g.lease_until == e.lease_until)
            }
            // Without a clock, how long a completed record has left stays unsaid.
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
        /// Every answer the fast reserve gives is the record machine's at any instant the key
        /// is live: the decision needs no clock.
        #[test]
        fn every_answer_is_the_record_machines(
            stored in held(),
            caller in 1..=2_u128,
            print in 0..2_u8,
            watch in any::<bool>(),
            now in 0..50_000_u64,
            bare_until in 50_000..60_000_u64,
        ) {
            let (caller, print) = (owner(caller), fp(print));
            let record = as_record(&stored, Timestamp::from_millis(bare_until));
            let command = Command::Reserve {
                owner: caller,
                fingerprint: print,
                lease: Duration::from_secs(30),
            };
            let expected = apply(Some(&record), command, Timestamp::from_millis(now));
            match decide(Some(&bytes(&stored)), caller, print, watch) {
                Decision::Answer(reply) => {
                    prop_assert!(agrees(&reply, &expected.reply), "{reply:?} vs {:?}", expected.reply);
                    // A waiter on a store that announces changes is only answered here if
                    // the record already carries a waiter's mark.
                    let marked = matches!(stored, Stored::Record { watched: true, .. });
                    let in_flight = matches!(reply, Reply::InFlight { .. });
                    prop_assert!(!in_flight || !watch || marked, "an unmarked waiter");
                }
                Decision::Script => {
                    // Only when the answer needs the lease end of a bare reservation or a waiter's mark.
                    let Reply::InFlight { .. } = expected.reply else {
                        return Err(TestCaseError::fail(format!("script for {:?}", expected.reply)));
                    };
                    let bare = matches!(stored, Stored::BareReservation { .. });
                    let unmarked = matches!(stored, Stored::Record { watched: false, .. });
                    prop_assert!(bare || (watch && unmarked));
                }
            }
        }
    }

    #[test]
    fn a_free_key_is_granted_without_a_lease_end() {
        let got = decide(None, owner(1), fp(0), true);
        let expected = apply(
            None,
            Command::Reserve {
                owner: owner(1),
                fingerprint: fp(0),
                lease: Duration::from_secs(30),
            },
            Timestamp::from_millis(7),
        );
        let Decision::Answer(reply) = got else {
            panic!("a free key needs no script")
        };
        assert!(agrees(&reply, &expected.reply));
        assert!(matches!(reply, Reply::Reserved(r) if r.lease_until.is_none()));
    }

    #[test]
    fn a_record_the_machine_holds_expired_goes_to_the_script() {
        // A live key whose record has a zero deadline: the bytes contradict the key.
        let stale = Record::Completed {
            owner: owner(2),
            fingerprint: fp(0),
            result: StoredResult::NotStored,
            expires_at: Timestamp::from_millis(0),
        };
        let bytes = codec::encode(&stale);
        assert_eq!(
            decide(Some(&bytes), owner(1), fp(0), false),
            Decision::Script
        );
    }

    #[test]
    fn values_this_adapter_did_not_write_go_to_the_script() {
        for foreign in [&b"hello"[..], &[0; 60][..], &[b'i'; 80][..]] {
            assert_eq!(
                decide(Some(foreign), owner(1), fp(0), false),
                Decision::Script
            );
        }
    }
}
