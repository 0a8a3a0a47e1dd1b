//! What the attempt-machine tests share: instants and a fresh attempt on one key.

#![allow(dead_code)]

use idem_core::{Attempt, Fingerprint, Key, Operation, Options, OwnerToken, Timestamp};

/// The instant `ms` milliseconds after the epoch.
pub fn at(ms: u64) -> Timestamp {
    Timestamp::from_millis(ms)
}

/// An attempt on `payment.charge` / `order-1` for one fixed request, holding token `owner`
/// (which also seeds its jitter), created at `now`.
pub fn attempt(owner: u128, options: Options, now: u64) -> Attempt {
    Attempt::new(
        Operation::new("payment.charge").unwrap(),
        Key::new("order-1").unwrap(),
        Fingerprint::of_bytes(b"amount=100"),
        OwnerToken::from_u128(owner),
        owner as u64,
        options,
        at(now),
    )
}
