//! The Redis record codec on any bytes: decoding never panics; a value it decodes encodes
//! back to the same bytes (but for the waiter's mark, which encoding never writes); and a
//! record built from the bytes encodes to a value that decodes to the same record
//! (decode(encode(x)) = x).

#![no_main]

use idem_core::{Body, Fence, Fingerprint, OwnerToken, Record, StoredResult, Timestamp};
use idem_redis::codec::{self, Stored, StoredState};
use libfuzzer_sys::fuzz_target;

/// A record drawn from `bytes`: an owner, a fingerprint, a kind, then a fence or a body.
fn record(bytes: &[u8]) -> Option<Record> {
    let (owner, rest) = bytes.split_first_chunk::<16>()?;
    let (fingerprint, rest) = rest.split_first_chunk::<32>()?;
    let (kind, rest) = rest.split_first()?;
    let owner = OwnerToken::from_bytes(*owner);
    let fingerprint = Fingerprint::from_bytes(*fingerprint);
    // The deadline is the key's expiry, never part of the value.
    let deadline = Timestamp::from_millis(codec::MAX_DEADLINE_MS);
    let fence = || {
        rest.first_chunk::<8>()
            .and_then(|bytes| Fence::new(u64::from_be_bytes(*bytes)))
    };
    let completed = |result| Record::Completed {
        owner,
        fingerprint,
        result,
        expires_at: deadline,
    };
    Some(match kind % 5 {
        0 => Record::Pending {
            owner,
            fingerprint,
            lease_until: deadline,
            fence: None,
        },
        1 => Record::Pending {
            owner,
            fingerprint,
            lease_until: deadline,
            fence: Some(fence()?),
        },
        2 => completed(StoredResult::Value(Body::new(rest))),
        3 => completed(StoredResult::NotStored),
        _ => completed(StoredResult::Panicked),
    })
}

fuzz_target!(|bytes: &[u8]| {
    let deadline = Timestamp::from_millis(codec::MAX_DEADLINE_MS);
    if let Ok(stored) = codec::decode(bytes) {
        let watched = matches!(stored.state, StoredState::Pending { watched: true });
        let encoded = codec::encode(&stored.clone().until(deadline));
        if watched {
            // Encoding writes the unmarked state (1); everything else is the same.
            assert_eq!(encoded.len(), bytes.len());
            assert_eq!(encoded[3], 1);
            assert_eq!(bytes[3], 4);
            assert_eq!(encoded[..3], bytes[..3]);
            assert_eq!(encoded[4..], bytes[4..]);
        } else {
            assert_eq!(encoded, bytes);
        }
        let again: Stored = codec::decode(&encoded).expect("an encoded record decodes");
        assert_eq!(again.until(deadline), stored.until(deadline));
    }
    if let Some(record) = record(bytes) {
        let decoded = codec::decode(&codec::encode(&record)).expect("an encoded record decodes");
        assert_eq!(decoded.until(deadline), record);
    }
});
