//! Where a record lives: the Redis key for an (operation, key) pair.
//!
//! The Redis key is `{prefix}{operation}:{key}`, byte for byte, with the default prefix
//! `idem:`; `payment.charge` and key `o-1` give `idem:payment.charge:o-1`. The mapping is
//! injective for a fixed prefix: an [`Operation`] never contains `:` (it is letters,
//! digits, `.`, `_` and `-`), so the first `:` after the prefix ends the operation, and
//! the rest is the key exactly as the client sent it (`I12`: never trimmed or rewritten).
//! Two services that share a Redis keep apart by choosing different prefixes; a prefix
//! that is a proper prefix of another (`a:` and `a:b`) can collide, so pick prefixes that
//! end in `:`.
//!
//! At the limits (operation 100 bytes, key 255 bytes) the Redis key is the prefix plus 356
//! bytes. On a Cluster the key's hash slot follows the usual rule: a key that contains
//! `{…}` is placed by the text between the braces. Every script touches exactly one key,
//! so any placement is correct; a prefix such as `{idem}:` puts every record on one node.

use idem_core::{Key, Operation};

/// The prefix used when none is configured.
pub const DEFAULT_PREFIX: &str = "idem:";

/// How records are named in Redis; see the [module docs](self).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyLayout {
    prefix: String,
}

impl KeyLayout {
    /// A layout with `prefix` before every record key.
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
        }
    }

    /// The prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The Redis key of the record of `key` under `operation`.
    pub fn record_key(&self, operation: &Operation, key: &Key) -> String {
        let mut out = String::with_capacity(
            self.prefix.len() + operation.as_str().len() + 1 + key.as_str().len(),
        );
        out.push_str(&self.prefix);
        out.push_str(operation.as_str());
        out.push(':');
        out.push_str(key.as_str());
        out
    }
}

impl Default for KeyLayout {
    fn default() -> Self {
        Self::new(DEFAULT_PREFIX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_layout() {
        let op = Operation::new("payment.charge").unwrap();
        let key = Key::new("o-1").unwrap();
        assert_eq!(
            KeyLayout::default().record_key(&op, &key),
            "idem:payment.charge:o-1"
        );
    }

    #[test]
    fn a_colon_in_the_key_cannot_forge_another_operation() {
        // ("a", "b:c") and ("a:b", "c") would collide if operations could hold ':'.
        assert!(Operation::new("a:b").is_err());
        let layout = KeyLayout::new("p:");
        let first = layout.record_key(&Operation::new("a").unwrap(), &Key::new("b:c").unwrap());
        let second = layout.record_key(&Operation::new("a.b").unwrap(), &Key::new("c").unwrap());
        assert_ne!(first, second);
    }

    mod props {
        use proptest::prelude::*;

        use super::super::*;

        proptest! {
            /// Injective: the Redis key splits back into the one (operation, key) it came
            /// from, at the first ':' after the prefix.
            #[test]
            fn the_redis_key_names_one_pair(
                prefix in "[ -~]{0,8}",
                operation in "[A-Za-z0-9._-]{1,20}",
                key in "[!-~]{1,40}",
            ) {
                let layout = KeyLayout::new(prefix.clone());
                let o = Operation::new(&operation).unwrap();
                let k = Key::new(&key).unwrap();
                let redis_key = layout.record_key(&o, &k);
                let rest = redis_key.strip_prefix(prefix.as_str()).unwrap();
                let (op_part, key_part) = rest.split_once(':').unwrap();
                prop_assert_eq!(op_part, operation.as_str());
                prop_assert_eq!(key_part, key.as_str());
            }
        }
    }
}
