//! The record encoding, versions 2 and 3: how one record is laid out in one Redis string.
//!
//! ```text
//! offset  size  field
//!      0     2  magic "id"
//!      2     1  version: 2, or 3 for a pending record that carries its fence
//!      3     1  state: 1 pending, 2 completed without a body, 3 completed with a body,
//!               4 pending with a waiter told about it (its complete or release is announced),
//!               6 completed as "outcome unknown" (the action panicked), without a body
//!      4    16  owner token, big-endian
//!     20    32  fingerprint (SHA-256)
//!     52     …  version 2: the body (state 3 only; may be empty)
//!     52     8  version 3: the grant's fence (MODEL.md `F1`), big-endian; states 1 and 4 only
//! ```
//!
//! A store that hands out fences ([`RedisStoreBuilder::fences`]) writes every reservation it
//! grants as version 3; everything else is version 2. Every version of this adapter that reads
//! version 3 reads both; one that reads only version 2 reports a version-3 record as not its
//! own, so fences are turned on once every process reads version 3.
//!
//! [`RedisStoreBuilder::fences`]: crate::RedisStoreBuilder::fences
//!
//! **The value holds no deadline: a record is live exactly while its key exists** (layout 2,
//! MODEL.md "Redis"). Its deadline (the lease end of a pending record, the retention end of a
//! completed one) is the key's expiry plus one millisecond: every write sets the key to expire
//! one millisecond before the deadline (`PXAT deadline - 1`, or `PX duration - 1`), since
//! Redis keeps a key while its clock is at or before the expiry and the record machine treats
//! a record as gone once `now` reaches the deadline. A key without an expiry (an operator's
//! `PERSIST`) holds a record that never ends, and every path (the fast reserve, every script)
//! agrees, because none of them reads a deadline anywhere else.
//!
//! So the value alone is a [`Stored`]: a record without its deadline. [`Stored::live`] is what
//! a reserve of it needs (`idem_core::record::reserve_live`, which reads no clock), and
//! [`Stored::until`] makes the full [`Record`] once the key's expiry is known (the read script
//! returns it beside the value).
//!
//! The Lua scripts ([`crate::scripts`]) read and write exactly this layout; this module is its
//! Rust half. A value that does not decode (another magic, another version (version 1 is
//! layout 1's, which kept a deadline in the value), an unknown state, a wrong length) is not
//! one this adapter wrote: the scripts refuse to touch it and the store reports
//! `StoreError::Corrupt`.
//!
//! Deadlines are kept below 2^53 ms (the largest integer a Lua number holds exactly, some
//! 285,000 years after 1970): a lease or retention that would end later ends at
//! [`MAX_DEADLINE_MS`], which is also the deadline of a key without an expiry.

use idem_core::record::LiveRecord;
use idem_core::{Body, Fence, Fingerprint, OwnerToken, Record, StoredResult, Timestamp};
use thiserror::Error;

/// The first two bytes of every record.
pub const MAGIC: [u8; 2] = *b"id";

/// The encoding version this adapter writes, but for a fenced reservation.
pub const VERSION: u8 = 2;

/// The encoding version of a pending record that carries its fence.
pub const VERSION_FENCED: u8 = 3;

/// The length of the fixed header; a record without a body is exactly this long.
pub const HEADER_LEN: usize = 52;

/// The length of a pending record that carries its fence (version 3).
pub const FENCED_LEN: usize = HEADER_LEN + 8;

/// The latest deadline a record can carry, in milliseconds: 2^53 - 1.
pub const MAX_DEADLINE_MS: u64 = (1 << 53) - 1;

const STATE_PENDING: u8 = 1;
const STATE_COMPLETED_NO_BODY: u8 = 2;
const STATE_COMPLETED: u8 = 3;
const STATE_PENDING_WATCHED: u8 = 4;
const STATE_COMPLETED_PANICKED: u8 = 6;

/// Why bytes under a key are not a record this adapter wrote.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// Shorter than the fixed header.
    #[error("{len} bytes, shorter than the {HEADER_LEN}-byte record header")]
    TooShort {
        /// The value's length.
        len: usize,
    },
    /// The value does not start with [`MAGIC`].
    #[error("the value does not start with the record magic \"id\"")]
    BadMagic,
    /// A version this adapter does not read: 1 is layout 1's, which kept the deadline in the
    /// value; a higher one was written by a newer adapter.
    #[error("unknown record version {0}")]
    UnknownVersion(u8),
    /// A state byte that is not one of the states above.
    #[error("unknown record state {0}")]
    UnknownState(u8),
    /// A record without a body that is longer than its header.
    #[error("a record without a body is {len} bytes, not {HEADER_LEN}")]
    TrailingBytes {
        /// The value's length.
        len: usize,
    },
    /// A version-3 record that is not a pending one of [`FENCED_LEN`] bytes with a fence.
    #[error(
        "a fenced record is a pending one of {FENCED_LEN} bytes with a fence, not {len} bytes in state {state}"
    )]
    BadFenced {
        /// The value's length.
        len: usize,
        /// Its state byte.
        state: u8,
    },
}

/// What a value holds: a record without its deadline (which is the key's expiry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// The holder of a pending record, the attempt that completed a completed one.
    pub owner: OwnerToken,
    /// The request the record belongs to.
    pub fingerprint: Fingerprint,
    /// Pending or completed.
    pub state: StoredState,
    /// The fence of a pending record granted by a store that hands out fences (version 3).
    pub fence: Option<Fence>,
}

/// A [`Stored`] record's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoredState {
    /// Pending; `watched` is the waiter mark (state 4): a waiter was told "in flight", so the
    /// record's complete or release is announced.
    Pending {
        /// Whether a waiter was told about it.
        watched: bool,
    },
    /// Completed with this result.
    Completed(StoredResult),
}

impl Stored {
    /// The record as a reserve of it sees it while its key exists.
    pub fn live(&self) -> LiveRecord<'_> {
        match &self.state {
            StoredState::Pending { .. } => LiveRecord::Pending {
                owner: self.owner,
                fingerprint: self.fingerprint,
                fence: self.fence,
            },
            StoredState::Completed(result) => LiveRecord::Completed {
                fingerprint: self.fingerprint,
                result,
            },
        }
    }

    /// The full record, live until `deadline` (the key's expiry plus one millisecond).
    pub fn until(self, deadline: Timestamp) -> Record {
        let Stored {
            owner,
            fingerprint,
            state,
            fence,
        } = self;
        match state {
            StoredState::Pending { .. } => Record::Pending {
                owner,
                fingerprint,
                lease_until: deadline,
                fence,
            },
            StoredState::Completed(result) => Record::Completed {
                owner,
                fingerprint,
                result,
                expires_at: deadline,
            },
        }
    }
}

/// The value of `owner`'s pending record for `fingerprint`, unmarked: what a reserve of a free
/// key writes (the fast reserve's `SET … NX` and the reserve script alike), and what the
/// owner's complete expects to find ([`crate::scripts`], the fast complete).
pub fn encode_pending(owner: OwnerToken, fingerprint: Fingerprint) -> Vec<u8> {
    header(VERSION, STATE_PENDING, owner, fingerprint, 0)
}

/// The value of `owner`'s pending record for `fingerprint` granted under `fence`, unmarked
/// (version 3): what the reserve script of a store that hands out fences writes.
pub fn encode_fenced(owner: OwnerToken, fingerprint: Fingerprint, fence: Fence) -> Vec<u8> {
    let mut out = fenced_header(owner, fingerprint);
    out.extend_from_slice(&fence.get().to_be_bytes());
    out
}

/// The first [`HEADER_LEN`] bytes of `owner`'s unmarked pending record for `fingerprint` granted
/// under a fence, the fence not yet known: what the fenced fast reserve sends, for the server
/// to append the fence its clock gives (`reserve_fenced.lua`).
pub fn fenced_header(owner: OwnerToken, fingerprint: Fingerprint) -> Vec<u8> {
    header(VERSION_FENCED, STATE_PENDING, owner, fingerprint, 0)
}

/// The value of a completed record: `owner` completed `fingerprint` with `result`.
pub fn encode_completed(
    owner: OwnerToken,
    fingerprint: Fingerprint,
    result: &StoredResult,
) -> Vec<u8> {
    let (state, body) = match result {
        StoredResult::Value(body) => (STATE_COMPLETED, Some(body)),
        StoredResult::NotStored => (STATE_COMPLETED_NO_BODY, None),
        StoredResult::Panicked => (STATE_COMPLETED_PANICKED, None),
    };
    let mut out = header(
        VERSION,
        state,
        owner,
        fingerprint,
        body.map_or(0, Body::len),
    );
    if let Some(body) = body {
        out.extend_from_slice(body.as_bytes());
    }
    out
}

/// The value of `record`: its deadline is not part of it (it belongs in the key's expiry).
pub fn encode(record: &Record) -> Vec<u8> {
    match record {
        Record::Pending {
            owner,
            fingerprint,
            fence,
            ..
        } => match fence {
            Some(fence) => encode_fenced(*owner, *fingerprint, *fence),
            None => encode_pending(*owner, *fingerprint),
        },
        Record::Completed {
            owner,
            fingerprint,
            result,
            ..
        } => encode_completed(*owner, *fingerprint, result),
    }
}

fn header(
    version: u8,
    state: u8,
    owner: OwnerToken,
    fingerprint: Fingerprint,
    body: usize,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + body);
    out.extend_from_slice(&MAGIC);
    out.push(version);
    out.push(state);
    out.extend_from_slice(&owner.to_bytes());
    out.extend_from_slice(&fingerprint.to_bytes());
    out
}

/// Decodes a version-2 or version-3 value, or says why `bytes` are not one.
pub fn decode(bytes: &[u8]) -> Result<Stored, DecodeError> {
    let Some((header, body)) = bytes.split_first_chunk::<HEADER_LEN>() else {
        return Err(DecodeError::TooShort { len: bytes.len() });
    };
    let (magic, rest) = split::<2>(header);
    if magic != MAGIC {
        return Err(DecodeError::BadMagic);
    }
    let ([version, state], rest) = split::<2>(rest);
    let (owner, rest) = split::<16>(rest);
    let (fingerprint, _) = split::<32>(rest);
    let (owner, fingerprint) = (
        OwnerToken::from_bytes(owner),
        Fingerprint::from_bytes(fingerprint),
    );
    if version == VERSION_FENCED {
        let fence = <[u8; 8]>::try_from(body)
            .ok()
            .and_then(|bytes| Fence::new(u64::from_be_bytes(bytes)));
        let watched = match state {
            STATE_PENDING => false,
            STATE_PENDING_WATCHED => true,
            _ => {
                return Err(DecodeError::BadFenced {
                    len: bytes.len(),
                    state,
                });
            }
        };
        let Some(fence) = fence else {
            return Err(DecodeError::BadFenced {
                len: bytes.len(),
                state,
            });
        };
        return Ok(Stored {
            owner,
            fingerprint,
            state: StoredState::Pending { watched },
            fence: Some(fence),
        });
    }
    if version != VERSION {
        return Err(DecodeError::UnknownVersion(version));
    }
    let without_body = |state: StoredState| {
        if body.is_empty() {
            Ok(state)
        } else {
            Err(DecodeError::TrailingBytes { len: bytes.len() })
        }
    };
    let state = match state {
        STATE_PENDING => without_body(StoredState::Pending { watched: false })?,
        STATE_PENDING_WATCHED => without_body(StoredState::Pending { watched: true })?,
        STATE_COMPLETED_NO_BODY => without_body(StoredState::Completed(StoredResult::NotStored))?,
        STATE_COMPLETED_PANICKED => without_body(StoredState::Completed(StoredResult::Panicked))?,
        STATE_COMPLETED => StoredState::Completed(StoredResult::Value(Body::new(body))),
        other => return Err(DecodeError::UnknownState(other)),
    };
    Ok(Stored {
        owner,
        fingerprint,
        state,
        fence: None,
    })
}

/// The first `N` bytes of `bytes` as an array, and the rest. Only called on slices of the
/// fixed header, whose length the caller has checked.
fn split<const N: usize>(bytes: &[u8]) -> ([u8; N], &[u8]) {
    let mut head = [0; N];
    let n = N.min(bytes.len());
    head[..n].copy_from_slice(&bytes[..n]);
    (head, &bytes[n..])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner() -> OwnerToken {
        OwnerToken::from_u128(7)
    }

    fn print() -> Fingerprint {
        Fingerprint::of_bytes(b"charge")
    }

    fn completed(result: StoredResult) -> Stored {
        Stored {
            owner: owner(),
            fingerprint: print(),
            state: StoredState::Completed(result),
            fence: None,
        }
    }

    #[test]
    fn a_fenced_reservation_is_version_3_with_its_fence_after_the_header() {
        let fence = Fence::new(1_764_000_000_123_456).unwrap();
        let bytes = encode_fenced(owner(), print(), fence);
        assert_eq!(bytes.len(), FENCED_LEN);
        assert_eq!(&bytes[..4], b"id\x03\x01");
        assert_eq!(&bytes[..3], b"id\x03");
        assert_eq!(&bytes[4..52], &encode_pending(owner(), print())[4..]);
        assert_eq!(&bytes[52..], &fence.get().to_be_bytes());
        let stored = decode(&bytes).unwrap();
        assert_eq!(stored.fence, Some(fence));
        let record = stored.until(Timestamp::from_millis(9));
        assert_eq!(encode(&record), bytes);
        let mut marked = bytes.clone();
        marked[3] = STATE_PENDING_WATCHED;
        assert_eq!(
            decode(&marked).map(|s| (s.state, s.fence)),
            Ok((StoredState::Pending { watched: true }, Some(fence)))
        );
        // Anything else under version 3 is not a record of this adapter's.
        for (at, byte) in [(3, STATE_COMPLETED), (3, STATE_COMPLETED_NO_BODY)] {
            let mut other = bytes.clone();
            other[at] = byte;
            assert!(matches!(decode(&other), Err(DecodeError::BadFenced { .. })));
        }
        assert!(matches!(
            decode(&bytes[..56]),
            Err(DecodeError::BadFenced { len: 56, .. })
        ));
        let mut zero = bytes.clone();
        zero[52..].fill(0);
        assert!(matches!(decode(&zero), Err(DecodeError::BadFenced { .. })));
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode(&longer).is_err());
    }

    #[test]
    fn header_layout_is_fixed() {
        let bytes = encode_pending(owner(), print());
        assert_eq!(bytes.len(), HEADER_LEN);
        assert_eq!(&bytes[..4], b"id\x02\x01");
        assert_eq!(bytes[19], 7);
        assert_eq!(&bytes[20..], &print().to_bytes());
    }

    #[test]
    fn the_deadline_is_not_in_the_value() {
        let at = |ms| Record::Pending {
            owner: owner(),
            fingerprint: print(),
            lease_until: Timestamp::from_millis(ms),
            fence: None,
        };
        assert_eq!(encode(&at(1)), encode(&at(1_700_000_000_123)));
        let stored = decode(&encode(&at(5))).unwrap();
        assert_eq!(stored.until(Timestamp::from_millis(9)), at(9));
    }

    #[test]
    fn a_pending_record_marked_as_waited_on_decodes_as_pending() {
        let mut bytes = encode_pending(owner(), print());
        assert_eq!(
            decode(&bytes).map(|s| s.state),
            Ok(StoredState::Pending { watched: false })
        );
        bytes[3] = STATE_PENDING_WATCHED;
        let marked = decode(&bytes).unwrap();
        assert_eq!(marked.state, StoredState::Pending { watched: true });
        assert_eq!(
            marked.live(),
            LiveRecord::Pending {
                owner: owner(),
                fingerprint: print(),
                fence: None,
            }
        );
    }

    #[test]
    fn an_empty_body_is_not_a_missing_body() {
        let with_empty = completed(StoredResult::Value(Body::new(Vec::new())));
        let bytes = encode_completed(owner(), print(), &StoredResult::Value(Body::default()));
        assert_eq!(bytes.len(), HEADER_LEN);
        assert_eq!(bytes[3], STATE_COMPLETED);
        assert_eq!(decode(&bytes), Ok(with_empty));
        let bytes = encode_completed(owner(), print(), &StoredResult::NotStored);
        assert_eq!(bytes[3], STATE_COMPLETED_NO_BODY);
        assert_eq!(decode(&bytes), Ok(completed(StoredResult::NotStored)));
    }

    #[test]
    fn a_panicked_completion_is_state_6_without_a_body() {
        let bytes = encode_completed(owner(), print(), &StoredResult::Panicked);
        assert_eq!(bytes.len(), HEADER_LEN);
        assert_eq!(&bytes[..4], b"id\x02\x06");
        assert_eq!(decode(&bytes), Ok(completed(StoredResult::Panicked)));
        // It is neither of the other completed states: one byte apart, three answers.
        let mut as_no_body = bytes.clone();
        as_no_body[3] = STATE_COMPLETED_NO_BODY;
        assert_eq!(decode(&as_no_body), Ok(completed(StoredResult::NotStored)));
        // State 6 carries no body: bytes after its header are not read as one.
        let mut long = bytes;
        long.extend_from_slice(b"{}");
        assert_eq!(
            decode(&long),
            Err(DecodeError::TrailingBytes {
                len: HEADER_LEN + 2
            })
        );
    }

    #[test]
    fn each_defect_is_named() {
        let good = encode_pending(owner(), print());
        assert_eq!(decode(&good[..10]), Err(DecodeError::TooShort { len: 10 }));
        let mut bad = good.clone();
        bad[0] = b'X';
        assert_eq!(decode(&bad), Err(DecodeError::BadMagic));
        let mut bad = good.clone();
        bad[2] = 4;
        assert_eq!(decode(&bad), Err(DecodeError::UnknownVersion(4)));
        // Version 3 without its fence.
        bad[2] = 3;
        assert_eq!(
            decode(&bad),
            Err(DecodeError::BadFenced { len: 52, state: 1 })
        );
        let mut bad = good.clone();
        bad[3] = 9;
        assert_eq!(decode(&bad), Err(DecodeError::UnknownState(9)));
        // State 5 was layout 1's bare reservation; version 2 has no such state.
        bad[3] = 5;
        assert_eq!(decode(&bad), Err(DecodeError::UnknownState(5)));
        let mut bad = good;
        bad.push(0);
        assert_eq!(decode(&bad), Err(DecodeError::TrailingBytes { len: 53 }));
    }

    #[test]
    fn a_layout_1_record_is_not_read() {
        // Layout 1: "id", version 1, state, owner, fingerprint, an eight-byte deadline.
        let mut v1 = b"id\x01\x03".to_vec();
        v1.extend_from_slice(&owner().to_bytes());
        v1.extend_from_slice(&print().to_bytes());
        v1.extend_from_slice(&1_700_000_000_000_u64.to_be_bytes());
        v1.extend_from_slice(b"{\"ok\":true}");
        assert_eq!(decode(&v1), Err(DecodeError::UnknownVersion(1)));
    }

    mod props {
        use proptest::prelude::*;

        use super::super::*;

        fn stored() -> impl Strategy<Value = Stored> {
            // Every state: pending (marked or not), a value (3), none (2), a panic (6).
            let state = prop_oneof![
                any::<bool>().prop_map(|watched| StoredState::Pending { watched }),
                proptest::collection::vec(any::<u8>(), 0..100).prop_map(|bytes| {
                    StoredState::Completed(StoredResult::Value(Body::new(bytes)))
                }),
                Just(StoredState::Completed(StoredResult::NotStored)),
                Just(StoredState::Completed(StoredResult::Panicked)),
            ];
            let fence = proptest::option::of(1..=i64::MAX as u64);
            (any::<u128>(), any::<[u8; 32]>(), state, fence).prop_map(
                |(owner, fp, state, fence)| {
                    // Only a pending record carries a fence.
                    let pending = matches!(state, StoredState::Pending { .. });
                    Stored {
                        owner: OwnerToken::from_u128(owner),
                        fingerprint: Fingerprint::from_bytes(fp),
                        state,
                        fence: fence.filter(|_| pending).and_then(Fence::new),
                    }
                },
            )
        }

        /// The bytes of `stored`, its waiter mark included.
        fn bytes(stored: &Stored) -> Vec<u8> {
            let mut out = encode(&stored.clone().until(Timestamp::from_millis(1)));
            if stored.state == (StoredState::Pending { watched: true }) {
                out[3] = STATE_PENDING_WATCHED;
            }
            out
        }

        proptest! {
            #[test]
            fn every_value_round_trips(stored in stored()) {
                prop_assert_eq!(decode(&bytes(&stored)), Ok(stored));
            }

            #[test]
            fn any_bytes_decode_or_fail_without_panic(
                raw in proptest::collection::vec(any::<u8>(), 0..120),
            ) {
                if let Ok(stored) = decode(&raw) {
                    // Only a value's own encoding decodes.
                    prop_assert_eq!(bytes(&stored), raw);
                }
            }

            #[test]
            fn one_flipped_header_byte_never_decodes_to_the_same_value(
                stored in stored(),
                at in 0..HEADER_LEN,
                flip in 1..=255_u8,
            ) {
                let mut raw = bytes(&stored);
                raw[at] ^= flip;
                prop_assert_ne!(decode(&raw), Ok(stored));
            }
        }
    }
}
