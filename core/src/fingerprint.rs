//! What makes a request *this* request: the [`Fingerprint`] (MODEL.md, `I4`).
//!
//! A key identifies a request; it does not describe it. A client that builds its key from
//! an order id and later sends a different action for the same order reuses the key by
//! accident. The record therefore keeps a fingerprint beside the result, and a request whose
//! fingerprint differs is refused as key reuse instead of being answered with another
//! request's result.
//!
//! # Canonical form
//!
//! The fingerprint is the SHA-256 of the canonical JSON of a single object whose members
//! are the fields the caller named:
//!
//! - object members (the fields themselves, and every nested map) are sorted by the bytes
//!   of their names, so the order in which fields are added does not matter;
//! - no whitespace anywhere;
//! - strings are escaped as `serde_json` escapes them (`"`, `\`, control characters;
//!   everything else is written as UTF-8);
//! - numbers are written as `serde_json` writes them: integers in decimal, floats in their
//!   shortest round-trip form. So `1` and `1.0` are **different** fields, as are `1` and
//!   `"1"`. Pick one type per field and keep it;
//! - non-finite floats (`NaN`, infinities) become `null`, as `serde_json` makes them, so a
//!   `NaN` amount fingerprints like a missing one. Validate such values before fingerprinting.
//!
//! The canonical form does not depend on the platform, on the Rust version, or on which
//! `serde_json` features some other crate in the build enables: members are sorted here,
//! not by the map type.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use thiserror::Error;

/// The SHA-256 of the canonical JSON of the fields that make a request this request.
///
/// Built with [`Fingerprint::builder`]. `Display` and `FromStr` use 64 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Fingerprint([u8; 32]);

impl Fingerprint {
    /// Starts a fingerprint; name the request's fields with
    /// [`field`](FingerprintBuilder::field).
    ///
    /// ```
    /// use idem_core::Fingerprint;
    ///
    /// let a = Fingerprint::builder().field("order_id", "o-1").field("amount", 100).finish()?;
    /// let b = Fingerprint::builder().field("amount", 100).field("order_id", "o-1").finish()?;
    /// assert_eq!(a, b);
    /// # Ok::<(), idem_core::FingerprintError>(())
    /// ```
    pub fn builder() -> FingerprintBuilder {
        FingerprintBuilder::default()
    }

    /// The fingerprint of an already canonical byte string; mostly useful for tests and for
    /// decoding stored records. Prefer [`Fingerprint::builder`].
    pub fn of_bytes(bytes: &[u8]) -> Self {
        Self(Sha256::digest(bytes).into())
    }

    /// The digest's 32 bytes.
    pub const fn to_bytes(self) -> [u8; 32] {
        self.0
    }

    /// The fingerprint whose digest is `bytes` (as read back from a store).
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for byte in self.0 {
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({self})")
    }
}

/// A string that is not 64 lowercase hex digits was given as a [`Fingerprint`].
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("fingerprint must be 64 lowercase hex digits")]
pub struct ParseFingerprintError;

impl FromStr for Fingerprint {
    type Err = ParseFingerprintError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let hex = s.as_bytes();
        if hex.len() != 64 {
            return Err(ParseFingerprintError);
        }
        let mut out = [0u8; 32];
        for (byte, pair) in out.iter_mut().zip(hex.chunks_exact(2)) {
            *byte = (nibble(pair[0])? << 4) | nibble(pair[1])?;
        }
        Ok(Self(out))
    }
}

fn nibble(c: u8) -> Result<u8, ParseFingerprintError> {
    match c {
        b'0'..=b'9' => Ok(c - b'0'),
        b'a'..=b'f' => Ok(c - b'a' + 10),
        _ => Err(ParseFingerprintError),
    }
}

impl Serialize for Fingerprint {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Fingerprint {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Why a fingerprint could not be built.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum FingerprintError {
    /// A field's value could not be turned into JSON (for example a map whose keys are not
    /// strings, or a `Serialize` impl that failed).
    #[error("fingerprint field {field:?} cannot be serialized as JSON: {source}")]
    Serialize {
        /// The field's name.
        field: String,
        /// What `serde_json` said.
        #[source]
        source: serde_json::Error,
    },
    /// The same field name was given twice; the fingerprint would silently keep one of them.
    #[error("fingerprint field {field:?} was given twice")]
    DuplicateField {
        /// The repeated name.
        field: String,
    },
}

/// Collects the named fields of a request; see [`Fingerprint::builder`].
///
/// Errors are kept until [`finish`](Self::finish), so the builder reads as one expression.
#[derive(Debug, Default)]
pub struct FingerprintBuilder {
    fields: BTreeMap<String, Value>,
    error: Option<FingerprintError>,
}

impl FingerprintBuilder {
    /// Adds the field `name` with `value`. The order of calls does not matter.
    #[must_use]
    pub fn field(mut self, name: impl Into<String>, value: impl Serialize) -> Self {
        if self.error.is_some() {
            return self;
        }
        let name = name.into();
        match serde_json::to_value(value) {
            Err(source) => {
                self.error = Some(FingerprintError::Serialize {
                    field: name,
                    source,
                })
            }
            Ok(value) => {
                use std::collections::btree_map::Entry;
                match self.fields.entry(name) {
                    Entry::Occupied(taken) => {
                        self.error = Some(FingerprintError::DuplicateField {
                            field: taken.key().clone(),
                        });
                    }
                    Entry::Vacant(free) => {
                        free.insert(value);
                    }
                }
            }
        }
        self
    }

    /// The canonical JSON text that [`finish`](Self::finish) hashes.
    pub fn canonical_json(&self) -> Result<String, &FingerprintError> {
        if let Some(error) = &self.error {
            return Err(error);
        }
        let mut out = Vec::new();
        write_object(&mut out, self.fields.iter());
        // The writer emits only UTF-8: copied `str`s and ASCII punctuation.
        Ok(String::from_utf8(out).unwrap_or_default())
    }

    /// Hashes the canonical JSON of the fields.
    pub fn finish(self) -> Result<Fingerprint, FingerprintError> {
        if let Some(error) = self.error {
            return Err(error);
        }
        let mut out = Vec::new();
        write_object(&mut out, self.fields.iter());
        Ok(Fingerprint::of_bytes(&out))
    }
}

fn write_object<'a>(out: &mut Vec<u8>, members: impl Iterator<Item = (&'a String, &'a Value)>) {
    // Sorted here, whatever order the map iterates in (serde_json's `preserve_order` feature
    // makes `Map` keep insertion order, and another crate in the build may turn it on).
    let mut members: Vec<_> = members.collect();
    members.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    out.push(b'{');
    for (i, (name, value)) in members.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_string(out, name);
        out.push(b':');
        write_value(out, value);
    }
    out.push(b'}');
}

fn write_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => out.extend_from_slice(n.to_string().as_bytes()),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(out, item);
            }
            out.push(b']');
        }
        Value::Object(map) => write_object(out, map.iter()),
    }
}

fn write_string(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    for c in s.chars() {
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\r' => out.extend_from_slice(b"\\r"),
            '\t' => out.extend_from_slice(b"\\t"),
            '\u{8}' => out.extend_from_slice(b"\\b"),
            '\u{c}' => out.extend_from_slice(b"\\f"),
            c if (c as u32) < 0x20 => {
                out.extend_from_slice(format!("\\u{:04x}", c as u32).as_bytes());
            }
            c => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    out.push(b'"');
}
