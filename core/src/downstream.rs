//! The key a call passes on to the provider it calls: the [`DownstreamKey`] (MODEL.md, `D1`).
//!
//! idem runs an action once per key while its record holds, but some extra effects it can
//! only report, never prevent (MODEL.md `I7`): a holder paused past its lease while another
//! caller took over, a holder killed after its effect and before its record, a call run
//! unprotected under `FailOpen` while the store was down, a call made again after its record
//! expired. A provider that deduplicates by its own idempotency key (a payment API, a
//! message broker, another idem service) closes those cases if every attempt of one logical
//! call sends it the same key. The downstream key is that key: a pure function of the call's
//! operation (with its tenant scope) and key, so every attempt, on every process, under every
//! store outcome, derives the same one without asking the store.

use std::fmt;

use sha2::{Digest, Sha256};

use crate::key::{Key, Operation};

/// What the derivation hashes first, so that a downstream key can never equal a hash of the
/// same bytes made for another purpose (the tenant scope, a fingerprint).
const DOMAIN: &[u8] = b"idem downstream key v1\0";

/// What [`DownstreamKey`]'s `Display` puts before the digest's hex: names the derivation's
/// version, so that a provider's logs show which keys came from idem.
pub const DOWNSTREAM_KEY_PREFIX: &str = "idem1_";

/// The idempotency key one logical call sends to the provider it calls (MODEL.md `D1`).
///
/// Derived from the call's [`Operation`] (tenant scope included) and [`Key`] by SHA-256, with
/// no store round trip, so that it is the same on every attempt of that call: the first, the
/// retry that takes over after a lost lease, a run under `FailOpen` while the store is down,
/// a run after the record expired. Two operations, or two tenants of one operation, give two
/// different keys for the same client key. The digest reveals neither the operation nor the
/// tenant nor the client's key.
///
/// Two renderings, both visible ASCII, for the provider's header or field:
///
/// - `Display`: [`DOWNSTREAM_KEY_PREFIX`] and the 256-bit digest in lowercase hex, 70
///   characters (payment APIs accept up to 255);
/// - [`to_uuid_string`](Self::to_uuid_string): the digest's first 122 bits as an RFC 9562
///   version 8 UUID, 36 characters, for providers that take only a UUID or at most 45
///   characters.
///
/// ```
/// use idem_core::{DownstreamKey, Key, Operation};
///
/// let op = Operation::new("charge")?;
/// let key = Key::new("order-17")?;
/// let a = DownstreamKey::derive(&op, &key);
/// assert_eq!(a, DownstreamKey::derive(&op, &key));
/// assert_eq!(a.to_string().len(), 70);
///
/// let tenant = op.for_tenant("acme")?;
/// assert_ne!(a, DownstreamKey::derive(&tenant, &key));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DownstreamKey([u8; 32]);

impl DownstreamKey {
    /// The downstream key of `key` under `operation`.
    ///
    /// Each part is hashed behind its length (eight bytes, big-endian), so that no two
    /// (operation, key) pairs hash the same bytes however their characters are split.
    pub fn derive(operation: &Operation, key: &Key) -> Self {
        let mut hasher = Sha256::new();
        hasher.update(DOMAIN);
        for part in [operation.as_str(), key.as_str()] {
            hasher.update((part.len() as u64).to_be_bytes());
            hasher.update(part.as_bytes());
        }
        Self(hasher.finalize().into())
    }

    /// The digest's 32 bytes.
    pub const fn to_bytes(self) -> [u8; 32] {
        self.0
    }

    /// The key as an RFC 9562 version 8 UUID (`xxxxxxxx-xxxx-8xxx-yxxx-xxxxxxxxxxxx`, `y` one
    /// of `8 9 a b`): the digest's first 128 bits with the version and variant bits set, so
    /// 122 bits of the digest. For providers that accept only a UUID, or keys of at most 45
    /// characters; prefer `Display` where the provider takes 70.
    pub fn to_uuid_string(self) -> String {
        let mut bytes = [0u8; 16];
        bytes.copy_from_slice(&self.0[..16]);
        bytes[6] = (bytes[6] & 0x0f) | 0x80;
        bytes[8] = (bytes[8] & 0x3f) | 0x80;
        let mut out = String::with_capacity(36);
        for (i, byte) in bytes.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                out.push('-');
            }
            push_hex(&mut out, *byte);
        }
        out
    }
}

/// Appends `byte` as two lowercase hex digits (also the tenant scope's, `Operation::for_tenant`).
pub(crate) fn push_hex(out: &mut String, byte: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(char::from(HEX[usize::from(byte >> 4)]));
    out.push(char::from(HEX[usize::from(byte & 0xf)]));
}

impl fmt::Display for DownstreamKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = String::with_capacity(DOWNSTREAM_KEY_PREFIX.len() + 64);
        out.push_str(DOWNSTREAM_KEY_PREFIX);
        for byte in self.0 {
            push_hex(&mut out, byte);
        }
        f.write_str(&out)
    }
}

impl fmt::Debug for DownstreamKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DownstreamKey({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn derive(op: &str, key: &str) -> DownstreamKey {
        DownstreamKey::derive(&Operation::new(op).unwrap(), &Key::new(key).unwrap())
    }

    #[test]
    fn the_derivation_is_pinned() {
        // A change to the derivation changes every key a provider has already seen: the
        // retries of calls made before an upgrade would be new payments to it. Pinned so
        // that such a change is a new version (a new prefix), never an accident.
        assert_eq!(
            derive("a", "k").to_string(),
            "idem1_8e72a7b911492ec8c7244d7b56b7d7e1b96b1e11deb5b514ce3a1274ec11a40f"
        );
    }

    #[test]
    fn the_same_call_gets_the_same_key_and_other_calls_other_keys() {
        assert_eq!(derive("charge", "k-1"), derive("charge", "k-1"));
        assert_ne!(derive("charge", "k-1"), derive("charge", "k-2"));
        assert_ne!(derive("charge", "k-1"), derive("refund", "k-1"));
        // The length prefix keeps the split between operation and key in the hash.
        assert_ne!(derive("ab", "c"), derive("a", "bc"));
    }

    #[test]
    fn tenants_get_different_keys_for_the_same_client_key() {
        let op = Operation::new("charge").unwrap();
        let key = Key::new("k-1").unwrap();
        let a = DownstreamKey::derive(&op.for_tenant("acme").unwrap(), &key);
        let b = DownstreamKey::derive(&op.for_tenant("globex").unwrap(), &key);
        assert_ne!(a, b);
        assert_ne!(a, DownstreamKey::derive(&op, &key));
    }

    #[test]
    fn renderings_are_visible_ascii_and_reveal_neither_operation_nor_key() {
        let key = derive("charge-card", "order-4711");
        for text in [key.to_string(), key.to_uuid_string()] {
            assert!(text.len() <= 255);
            assert!(text.bytes().all(|b| b.is_ascii_graphic()), "{text}");
            assert!(!text.contains("charge") && !text.contains("4711"), "{text}");
        }
        let shown = key.to_string();
        assert_eq!(shown.len(), 70);
        assert!(shown.starts_with(DOWNSTREAM_KEY_PREFIX));
        assert!(
            shown[DOWNSTREAM_KEY_PREFIX.len()..]
                .bytes()
                .all(|b| b.is_ascii_hexdigit())
        );
        assert_eq!(format!("{key:?}"), format!("DownstreamKey({shown})"));
    }

    #[test]
    fn the_uuid_form_is_a_version_8_uuid_of_the_digest() {
        let key = derive("a", "k");
        let uuid = key.to_uuid_string();
        assert_eq!(uuid.len(), 36);
        let groups: Vec<&str> = uuid.split('-').collect();
        assert_eq!(
            groups.iter().map(|g| g.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(groups[2].starts_with('8'), "version 8: {uuid}");
        assert!(
            matches!(groups[3].as_bytes()[0], b'8' | b'9' | b'a' | b'b'),
            "RFC 9562 variant: {uuid}"
        );
        // The bits that are not version or variant are the digest's.
        let hex: String = uuid.chars().filter(|c| *c != '-').collect();
        let digest = key.to_string()[DOWNSTREAM_KEY_PREFIX.len()..].to_owned();
        assert_eq!(hex[..12], digest[..12]);
        assert_eq!(hex[13..16], digest[13..16]);
        assert_eq!(hex[17..], digest[17..32]);
        assert_ne!(derive("a", "k2").to_uuid_string(), uuid);
    }

    #[test]
    fn the_bytes_are_the_digest_the_renderings_show() {
        let key = derive("a", "k");
        let mut hex = String::new();
        for byte in key.to_bytes() {
            push_hex(&mut hex, byte);
        }
        assert_eq!(key.to_string(), format!("{DOWNSTREAM_KEY_PREFIX}{hex}"));
    }
}
