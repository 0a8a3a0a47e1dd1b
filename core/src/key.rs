//! The names a record is stored under: the caller's idempotency [`Key`] and the
//! [`Operation`] that scopes it.
//!
//! Both are validated once, at construction, and never rewritten afterwards: a key that
//! arrives with a trailing space is refused, not trimmed, so the key a record is written
//! under is always byte for byte the key the client sent (MODEL.md, `I12`).

use std::fmt;
use std::sync::Arc;

use thiserror::Error;

/// The longest key accepted, in bytes (equal to characters: keys are ASCII).
pub const MAX_KEY_LEN: usize = 255;

/// The longest operation name accepted, in bytes.
pub const MAX_OPERATION_LEN: usize = 100;

/// An idempotency key: 1..=255 visible ASCII characters (`0x21..=0x7E`).
///
/// The key identifies a request; the [`Fingerprint`](crate::Fingerprint) describes it.
/// Visible ASCII keeps keys safe to log, to put in an HTTP header and to use as (part of) a
/// Redis key without escaping.
///
/// Shared, not copied: a call hands its key to the attempt, the claim, the store's commands
/// and the logs, and a clone is a reference count, not an allocation.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key(Arc<str>);

/// Why a [`Key`] was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The key is the empty string.
    #[error("idempotency key is empty")]
    Empty,
    /// The key is longer than [`MAX_KEY_LEN`] bytes.
    #[error("idempotency key is {len} bytes long; the limit is {max}", max = MAX_KEY_LEN)]
    TooLong {
        /// The length of the refused key, in bytes.
        len: usize,
    },
    /// The key holds a character outside visible ASCII (`0x21..=0x7E`): a space, a control
    /// character, or a non-ASCII character.
    #[error(
        "idempotency key has {found:?} at byte {position}; only visible ASCII (0x21..=0x7E) is allowed, and keys are never trimmed"
    )]
    InvalidCharacter {
        /// The offending character.
        found: char,
        /// Its byte offset in the key.
        position: usize,
    },
}

impl Key {
    /// Validates `key` and wraps it.
    pub fn new(key: impl AsRef<str>) -> Result<Self, KeyError> {
        let key = key.as_ref();
        if key.is_empty() {
            return Err(KeyError::Empty);
        }
        // Every byte before the first refused one is visible ASCII, so that byte starts a
        // character, which the error names.
        if let Some(position) = key.bytes().position(|b| !matches!(b, 0x21..=0x7e)) {
            let found = key[position..].chars().next().unwrap_or_default();
            return Err(KeyError::InvalidCharacter { found, position });
        }
        if key.len() > MAX_KEY_LEN {
            return Err(KeyError::TooLong { len: key.len() });
        }
        Ok(Self(key.into()))
    }

    /// The key as the client sent it.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The scope of a key, such as `payment.charge`: 1..=100 ASCII letters, digits, `.`, `_`
/// and `-`, or such a name scoped to a tenant ([`Operation::for_tenant`]), which adds a `~`
/// that no other name holds.
///
/// A key is unique per operation: `payment.charge` and `order.cancel` keep separate records
/// for one key. Tenants are isolated by scoping the operation to each
/// ([`Operation::for_tenant`]), so that two users' keys can never meet while every key stays
/// byte for byte what its client sent (`I12`). Shared like a [`Key`]: a clone is a reference
/// count.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Operation(Arc<str>);

/// Why an [`Operation`] was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum OperationError {
    /// The operation name is empty.
    #[error("operation name is empty")]
    Empty,
    /// The operation name is longer than [`MAX_OPERATION_LEN`] bytes.
    #[error("operation name is {len} bytes long; the limit is {max}", max = MAX_OPERATION_LEN)]
    TooLong {
        /// The length of the refused name, in bytes.
        len: usize,
    },
    /// The operation name holds a character other than an ASCII letter, digit, `.`, `_` or `-`.
    #[error(
        "operation name has {found:?} at byte {position}; only ASCII letters, digits, '.', '_' and '-' are allowed"
    )]
    InvalidCharacter {
        /// The offending character.
        found: char,
        /// Its byte offset in the name.
        position: usize,
    },
}

impl Operation {
    /// Validates `name` and wraps it.
    pub fn new(name: impl AsRef<str>) -> Result<Self, OperationError> {
        let name = name.as_ref();
        if name.is_empty() {
            return Err(OperationError::Empty);
        }
        // As for a key: the first refused byte starts the character the error names.
        if let Some(position) = name
            .bytes()
            .position(|b| !(b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')))
        {
            let found = name[position..].chars().next().unwrap_or_default();
            return Err(OperationError::InvalidCharacter { found, position });
        }
        if name.len() > MAX_OPERATION_LEN {
            return Err(OperationError::TooLong { len: name.len() });
        }
        Ok(Self(name.into()))
    }

    /// The operation's name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// This operation scoped to one tenant (a user, an account, an API client): the name
    /// followed by [`TENANT_SCOPE`] (`~t-`) and 32 hex digits of a SHA-256 of the tenant's
    /// bytes (128 bits), so that the same key sent by two tenants names two records,
    /// whatever bytes identify the tenant. The key itself is never rewritten (`I12`).
    ///
    /// `~` is a character [`Operation::new`] refuses, so no name given to `new` (by a
    /// service, or made from a request's route) ever equals a scoped one: an unscoped
    /// operation cannot reach a tenant's records by spelling its scope. A scoped operation
    /// therefore exists only as a value made here; its name cannot be given to `new` again.
    /// Refused with [`OperationError::TooLong`] when the name is over 65 bytes, as the
    /// scoped name would be over [`MAX_OPERATION_LEN`].
    pub fn for_tenant(&self, tenant: impl AsRef<[u8]>) -> Result<Self, OperationError> {
        use sha2::{Digest, Sha256};
        let len = self.0.len() + TENANT_SCOPE.len() + 32;
        if len > MAX_OPERATION_LEN {
            return Err(OperationError::TooLong { len });
        }
        let mut hasher = Sha256::new();
        hasher.update(b"idem tenant\0");
        hasher.update(tenant.as_ref());
        let digest = hasher.finalize();
        let mut name = String::with_capacity(len);
        name.push_str(&self.0);
        name.push_str(TENANT_SCOPE);
        for byte in &digest[..16] {
            crate::downstream::push_hex(&mut name, *byte);
        }
        Ok(Self(name.into()))
    }
}

impl Operation {
    /// The operation a store holds a record under, from the name the store keeps: a name
    /// [`Operation::new`] accepts, or one [`Operation::for_tenant`] made (the name, then
    /// [`TENANT_SCOPE`], then 32 lowercase hex digits). For tools that read records back
    /// from a store (the operator's `idem list`); a service names its operations with
    /// `new` and `for_tenant`, never this. Refused as `new` refuses, the scope included.
    pub fn from_stored(name: impl AsRef<str>) -> Result<Self, OperationError> {
        let name = name.as_ref();
        let Some(at) = name.find(TENANT_SCOPE) else {
            return Self::new(name);
        };
        let (base, scope) = (&name[..at], &name[at + TENANT_SCOPE.len()..]);
        Self::new(base)?;
        if name.len() > MAX_OPERATION_LEN {
            return Err(OperationError::TooLong { len: name.len() });
        }
        if let Some((offset, found)) = scope
            .char_indices()
            .find(|(_, c)| !matches!(c, '0'..='9' | 'a'..='f'))
        {
            return Err(OperationError::InvalidCharacter {
                found,
                position: at + TENANT_SCOPE.len() + offset,
            });
        }
        if scope.len() != 32 {
            return Err(OperationError::InvalidCharacter {
                found: '~',
                position: at,
            });
        }
        Ok(Self(name.into()))
    }

    /// The name without its tenant scope, and the scope's 32 hex digits if it has one.
    pub fn tenant_scope(&self) -> (&str, Option<&str>) {
        match self.0.find(TENANT_SCOPE) {
            Some(at) => (&self.0[..at], Some(&self.0[at + TENANT_SCOPE.len()..])),
            None => (&self.0, None),
        }
    }
}

/// What [`Operation::for_tenant`] puts between an operation's name and its tenant's hash.
/// Its `~` is outside the alphabet of [`Operation::new`], so only a scoped operation holds
/// it.
pub const TENANT_SCOPE: &str = "~t-";

macro_rules! string_like {
    ($ty:ident, $err:ident) => {
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($ty), &*self.0)
            }
        }

        impl AsRef<str> for $ty {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl std::str::FromStr for $ty {
            type Err = $err;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::new(s)
            }
        }

        impl TryFrom<&str> for $ty {
            type Error = $err;

            fn try_from(s: &str) -> Result<Self, Self::Error> {
                Self::new(s)
            }
        }

        impl TryFrom<String> for $ty {
            type Error = $err;

            fn try_from(s: String) -> Result<Self, Self::Error> {
                Self::new(s)
            }
        }
    };
}

string_like!(Key, KeyError);
string_like!(Operation, OperationError);
