//! Records of every shape, for the stores' codec tests: any owner, fingerprint and deadline
//! (up to 2^62 ms), pending with or without a fence, or completed with a value (up to 40
//! bytes), without one, or as "outcome unknown"; and the byte columns rows hold.

use idem_core::record::{Body, Record, StoredResult};
use idem_core::{Fence, Fingerprint, OwnerToken, Timestamp};
use proptest::prelude::*;

/// Any record a store may be asked to keep.
pub fn any_record() -> impl Strategy<Value = Record> {
    (
        any::<[u8; 16]>(),
        any::<[u8; 32]>(),
        0u64..(1 << 62),
        0u8..4,
        proptest::option::of(1u64..=i64::MAX.unsigned_abs()),
        proptest::collection::vec(any::<u8>(), 0..40),
    )
        .prop_map(|(owner, fingerprint, deadline, kind, fence, body)| {
            let (owner, fingerprint) = (
                OwnerToken::from_bytes(owner),
                Fingerprint::from_bytes(fingerprint),
            );
            let deadline = Timestamp::from_millis(deadline);
            let completed = |result| Record::Completed {
                owner,
                fingerprint,
                result,
                expires_at: deadline,
            };
            match kind {
                0 => Record::Pending {
                    owner,
                    fingerprint,
                    lease_until: deadline,
                    fence: fence.and_then(Fence::new),
                },
                1 => completed(StoredResult::Value(Body::new(body))),
                2 => completed(StoredResult::NotStored),
                _ => completed(StoredResult::Panicked),
            }
        })
}

/// A column of bytes: exactly `len` long (what a record's column holds), or any length up to
/// 40 (what a row idem did not write may hold).
pub fn blob(len: usize) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), len..=len),
        proptest::collection::vec(any::<u8>(), 0..40),
    ]
}

/// A nullable column of bytes: NULL, or a [`blob`].
pub fn nullable_blob(len: usize) -> impl Strategy<Value = Option<Vec<u8>>> {
    proptest::option::of(blob(len))
}
