//! Where a record lives: the Redis key for an (operation, key) pair, layout 2.
//!
//! The Redis key is `{prefix}{}{operation}:{key}`, byte for byte, with the default prefix
//! `idem:`; `payment.charge` and key `o-1` give `idem:{}payment.charge:o-1`.
//!
//! - **No client chooses a hash slot.** On a Cluster a key that contains `{…}` is placed by
//!   the text between its *first* `{` and the next `}`, unless that text is empty, in which
//!   case the whole key is hashed. The empty hash tag `{}` right after the prefix is the
//!   first `{` of every record key, so the whole key is hashed, and a client key such as
//!   `{x}1`, `{x}2`, … spreads over the slots like any other instead of landing on the slot
//!   the client chose.
//! - **No two (prefix, operation, key) share a Redis key.** A prefix may not contain a
//!   brace ([`PrefixError::Brace`]), so the first `{` of a record key sits exactly after its
//!   prefix: two record keys that are equal have prefixes of the same length, hence the same
//!   prefix. An [`Operation`] never contains `:` (it is letters, digits, `.`, `_` and `-`),
//!   so the first `:` after the `{}` ends the operation, and the rest is the key exactly as
//!   the client sent it (`I12`: never trimmed or rewritten). Two services that share a Redis
//!   keep apart by choosing different prefixes, and no choice of prefixes, operations and
//!   keys can make one service's record another's (`idem:` and `idem:x:` included).
//!
//! At the limits (operation 100 bytes, key 255 bytes) the Redis key is the prefix plus 358
//! bytes.
//!
//! Layout 1 (before this one) named records `{prefix}{operation}:{key}` and kept each
//! record's deadline in its value; its records live under other Redis keys and are never read
//! by this layout (MODEL.md, "Redis", *Layout 2*).

use idem_core::{Key, Operation};
use thiserror::Error;

/// The prefix used when none is configured.
pub const DEFAULT_PREFIX: &str = "idem:";

/// The empty hash tag after the prefix: the whole Redis key is hashed to find its slot.
const WHOLE_KEY_HASHED: &str = "{}";

/// A prefix this layout refuses.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum PrefixError {
    /// The prefix contains `{` or `}`: it would choose the records' hash slot on a Cluster,
    /// and let one service's records alias another's.
    #[error("the key prefix {prefix:?} contains a brace; prefixes may not hold '{{' or '}}'")]
    Brace {
        /// The prefix as given.
        prefix: String,
    },
}

/// How records are named in Redis; see the [module docs](self).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyLayout {
    prefix: String,
}

impl KeyLayout {
    /// A layout with `prefix` before every record key, or why `prefix` is refused.
    pub fn new(prefix: impl Into<String>) -> Result<Self, PrefixError> {
        let prefix = prefix.into();
        if prefix.contains(['{', '}']) {
            return Err(PrefixError::Brace { prefix });
        }
        Ok(Self { prefix })
    }

    /// The prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The Redis key of the record of `key` under `operation`.
    pub fn record_key(&self, operation: &Operation, key: &Key) -> String {
        let mut out = String::with_capacity(
            self.prefix.len()
                + WHOLE_KEY_HASHED.len()
                + operation.as_str().len()
                + 1
                + key.as_str().len(),
        );
        out.push_str(&self.prefix);
        out.push_str(WHOLE_KEY_HASHED);
        out.push_str(operation.as_str());
        out.push(':');
        out.push_str(key.as_str());
        out
    }

    /// The operation and key a Redis key names under this layout, or `None` if it is not
    /// one of this layout's record keys (another prefix, layout 1, a key the store never
    /// wrote). The inverse of [`record_key`](Self::record_key): the operation ends at the
    /// first `:` after the `{}`, since no operation holds one.
    pub fn parse(&self, redis_key: &str) -> Option<(Operation, Key)> {
        let rest = redis_key
            .strip_prefix(self.prefix.as_str())?
            .strip_prefix(WHOLE_KEY_HASHED)?;
        let (operation, key) = rest.split_once(':')?;
        Some((Operation::from_stored(operation).ok()?, Key::new(key).ok()?))
    }

    /// A `SCAN … MATCH` pattern for this layout's record keys, of every operation or of
    /// those whose name starts with `operation` (to be matched exactly by
    /// [`parse`](Self::parse) after): the prefix and operation with Redis's glob characters
    /// escaped.
    pub fn scan_pattern(&self, operation: Option<&Operation>) -> String {
        let mut pattern = String::new();
        let escape = |pattern: &mut String, text: &str| {
            for c in text.chars() {
                if matches!(c, '*' | '?' | '[' | ']' | '\\') {
                    pattern.push('\\');
                }
                pattern.push(c);
            }
        };
        escape(&mut pattern, &self.prefix);
        pattern.push_str(WHOLE_KEY_HASHED);
        if let Some(operation) = operation {
            escape(&mut pattern, operation.as_str());
        }
        pattern.push('*');
        pattern
    }
}

impl Default for KeyLayout {
    fn default() -> Self {
        Self {
            prefix: DEFAULT_PREFIX.to_owned(),
        }
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
            "idem:{}payment.charge:o-1"
        );
        assert_eq!(
            KeyLayout::default(),
            KeyLayout::new(DEFAULT_PREFIX).unwrap()
        );
    }

    #[test]
    fn record_keys_parse_back_into_their_operation_and_key() {
        let layout = KeyLayout::new("svc*[1]:").unwrap();
        let scoped = Operation::new("payment.charge")
            .unwrap()
            .for_tenant("acct-1")
            .unwrap();
        for (operation, key) in [
            (
                Operation::new("a").unwrap(),
                Key::new("k:with:colons").unwrap(),
            ),
            (scoped, Key::new("{x}1").unwrap()),
        ] {
            let redis_key = layout.record_key(&operation, &key);
            assert_eq!(layout.parse(&redis_key), Some((operation, key)));
        }
        assert_eq!(layout.parse("svc*[1]:payment.charge:k"), None, "layout 1");
        assert_eq!(
            layout.parse("idem:{}payment.charge:k"),
            None,
            "another prefix"
        );
        assert_eq!(
            layout.parse("svc*[1]:{}pay ment:k"),
            None,
            "not an operation"
        );
        assert_eq!(layout.scan_pattern(None), "svc\\*\\[1\\]:{}*");
        let charge = Operation::new("charge").unwrap();
        assert_eq!(
            KeyLayout::default().scan_pattern(Some(&charge)),
            "idem:{}charge*"
        );
    }

    #[test]
    fn a_prefix_with_a_brace_is_refused() {
        for prefix in ["{idem}:", "idem{", "idem}:", "{}"] {
            assert_eq!(
                KeyLayout::new(prefix),
                Err(PrefixError::Brace {
                    prefix: prefix.to_owned()
                })
            );
        }
        assert!(KeyLayout::new("").is_ok());
        assert!(KeyLayout::new("billing:").is_ok());
    }

    #[test]
    fn a_prefix_that_starts_another_cannot_alias_its_records() {
        // Layout 1 mapped ("idem:", "x:a", …) and ("idem:x:", "a", …) … onto one key when
        // an operation and key lined up; the `{}` after the prefix keeps them apart.
        let short = KeyLayout::new("idem:").unwrap();
        let long = KeyLayout::new("idem:x.").unwrap();
        let first = short.record_key(&Operation::new("x.a").unwrap(), &Key::new("k").unwrap());
        let second = long.record_key(&Operation::new("a").unwrap(), &Key::new("k").unwrap());
        assert_ne!(first, second);
    }

    #[test]
    fn a_colon_in_the_key_cannot_forge_another_operation() {
        // ("a", "b:c") and ("a:b", "c") would collide if operations could hold ':'.
        assert!(Operation::new("a:b").is_err());
        let layout = KeyLayout::new("p:").unwrap();
        let first = layout.record_key(&Operation::new("a").unwrap(), &Key::new("b:c").unwrap());
        let second = layout.record_key(&Operation::new("a.b").unwrap(), &Key::new("c").unwrap());
        assert_ne!(first, second);
    }

    mod props {
        use proptest::prelude::*;

        use super::super::*;

        /// The text Redis Cluster hashes to place `key`: between the first `{` and the next
        /// `}` if that is not empty, else the whole key.
        fn hashed_part(key: &str) -> &str {
            if let Some(open) = key.find('{')
                && let Some(len) = key[open + 1..].find('}')
                && len > 0
            {
                return &key[open + 1..open + 1 + len];
            }
            key
        }

        proptest! {
            /// Injective across prefixes: the Redis key splits back into the one (prefix,
            /// operation, key) it came from, at its first '{' and the first ':' after it.
            #[test]
            fn the_redis_key_names_one_triple(
                prefix in "[ -z|~]{0,8}",
                operation in "[A-Za-z0-9._-]{1,20}",
                key in "[!-~]{1,40}",
            ) {
                let layout = KeyLayout::new(prefix.clone()).unwrap();
                let o = Operation::new(&operation).unwrap();
                let k = Key::new(&key).unwrap();
                let redis_key = layout.record_key(&o, &k);
                let brace = redis_key.find('{').unwrap();
                prop_assert_eq!(&redis_key[..brace], prefix.as_str());
                let rest = redis_key[brace..].strip_prefix("{}").unwrap();
                let (op_part, key_part) = rest.split_once(':').unwrap();
                prop_assert_eq!(op_part, operation.as_str());
                prop_assert_eq!(key_part, key.as_str());
                // Whatever braces the client's key holds, the whole Redis key is hashed.
                prop_assert_eq!(hashed_part(&redis_key), redis_key.as_str());
            }
        }
    }
}
