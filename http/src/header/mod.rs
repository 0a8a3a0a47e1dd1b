//! The `Idempotency-Key` request header, read as the IETF draft defines it.
//!
//! The draft (`draft-ietf-httpapi-idempotency-key-header`) makes the header an Item
//! Structured Field whose value is a String (RFC 9651, which obsoletes RFC 8941), so on the
//! wire the key is quoted:
//!
//! ```text
//! Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"
//! ```
//!
//! [`parse_key`] implements the String grammar itself: an opening `"`, then printable ASCII
//! (`0x20..=0x7E`) in which `\` may only escape `"` or `\`, then the closing `"`. After the
//! closing quote only parameters (`;name` or `;name=value`, RFC 9651 section 3.1.2) may
//! follow. **Parameters are parsed and ignored**: the draft defines none, and RFC 9651 has
//! field definitions ignore parameters they do not understand, so a client (or a proxy) that
//! adds one still gets its key; a parameter that breaks the grammar makes the whole header
//! malformed. The unescaped string must then be a valid idem [`Key`] (1..=255 visible ASCII
//! characters; it is never trimmed), else the header is refused.
//!
//! Two header lines are refused: a recipient combines them into `"a", "b"`, which is not an
//! Item.
//!
//! # Bare tokens
//!
//! Most clients send the key unquoted, as Stripe's API and its SDKs take it
//! (`Idempotency-Key: 8e03978e-...`). That is not a Structured Field String, but under the
//! default, [`BareToken::Accept`], an unquoted value is taken verbatim as the key, so that
//! `abc` and `"abc"` name the same record; the verbatim value must still be a valid key
//! (visible ASCII, no space, 1..=255 characters), else it is refused as one
//! ([`KeyInvalid`](crate::ProblemType::KeyInvalid)). A value that starts with `"` is always
//! read as a String, and must be one.
//!
//! [`BareToken::Refuse`] is the draft's wire format, strictly: an unquoted value is refused
//! with 400 (problem type [`KeyMalformed`](crate::ProblemType::KeyMalformed), whose detail
//! says to quote the key). The default accepts because a refusal breaks the clients that
//! exist, while accepting costs a strict client nothing: a quoted key is read the same
//! either way, and a bare token names the record its quoted form names.
//!
//! The grammar of a Structured Field (the String, its parameters, and every bare item a
//! parameter may carry) is read by the cursor in `grammar`.

mod grammar;
#[cfg(test)]
mod tests;

use std::fmt;

use http::HeaderMap;
use http::header::HeaderName;
use idem::{Key, KeyError};
use thiserror::Error;

use grammar::Input;

/// `Idempotency-Key`, the request header that carries the key.
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// How an unquoted (bare token) `Idempotency-Key` is treated; see the
/// [module docs](self#bare-tokens).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum BareToken {
    /// Refuse it with 400: the draft's wire format is a quoted String, strictly.
    Refuse,
    /// Take the whole value, verbatim, as the key (the default): `abc` and `"abc"` are the
    /// same key.
    #[default]
    Accept,
}

/// Why an `Idempotency-Key` header was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum KeyHeaderError {
    /// The request has no `Idempotency-Key` and the route requires one.
    #[error("the request has no Idempotency-Key header")]
    Missing,
    /// The header is not a Structured Field String (with optional parameters).
    #[error("the Idempotency-Key header is not a quoted string: {reason} at byte {position}")]
    Malformed {
        /// What is wrong.
        reason: Malformed,
        /// The byte offset in the header value where it was found.
        position: usize,
    },
    /// The header is a string, but not a valid idempotency key.
    #[error("the Idempotency-Key is not a valid key: {0}")]
    InvalidKey(#[from] KeyError),
}

/// What makes an `Idempotency-Key` header malformed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Malformed {
    /// The value does not start with `"` and bare tokens are refused.
    Unquoted,
    /// The request carries the header more than once.
    Repeated,
    /// A byte outside printable ASCII (`0x20..=0x7E`) inside the string.
    Character,
    /// A `\` followed by anything but `"` or `\`.
    Escape,
    /// No closing `"`.
    Unterminated,
    /// Something after the string that is not a parameter.
    TrailingCharacters,
    /// A parameter that breaks the grammar.
    Parameter,
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Malformed::Unquoted => {
                "the key is not quoted (send it as a string: Idempotency-Key: \"your-key\")"
            }
            Malformed::Repeated => "the header is sent more than once",
            Malformed::Character => "a character outside printable ASCII",
            Malformed::Escape => "a backslash that does not escape '\"' or '\\'",
            Malformed::Unterminated => "no closing quote",
            Malformed::TrailingCharacters => "characters after the closing quote",
            Malformed::Parameter => "a malformed parameter",
        })
    }
}

/// Reads the `Idempotency-Key` of a request: `Ok(None)` when there is none, the key when
/// the header is a valid String holding a valid key (see the [module docs](self)), and the
/// reason otherwise.
pub fn key_from_headers(
    headers: &HeaderMap,
    bare: BareToken,
) -> Result<Option<Key>, KeyHeaderError> {
    let mut values = headers.get_all(IDEMPOTENCY_KEY).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(KeyHeaderError::Malformed {
            reason: Malformed::Repeated,
            position: 0,
        });
    }
    parse_key(value.as_bytes(), bare).map(Some)
}

/// Parses one `Idempotency-Key` field value into a key; see the [module docs](self).
///
/// ```
/// use idem_http::header::{parse_key, BareToken, KeyHeaderError, Malformed};
///
/// let key = parse_key(br#""a\"b"; version=2"#, BareToken::Refuse).unwrap();
/// assert_eq!(key.as_str(), r#"a"b"#);
/// assert!(matches!(
///     parse_key(b"abc", BareToken::Refuse),
///     Err(KeyHeaderError::Malformed { reason: Malformed::Unquoted, .. })
/// ));
/// assert_eq!(parse_key(b"abc", BareToken::Accept).unwrap().as_str(), "abc");
/// ```
pub fn parse_key(value: &[u8], bare: BareToken) -> Result<Key, KeyHeaderError> {
    let mut input = Input::new(value);
    input.skip_spaces();
    if input.peek() != Some(b'"') {
        return match bare {
            BareToken::Refuse => Err(input.fail(Malformed::Unquoted)),
            BareToken::Accept => {
                // Verbatim: `Key::new` refuses spaces and anything outside visible ASCII.
                let text =
                    std::str::from_utf8(value).map_err(|error| KeyHeaderError::Malformed {
                        reason: Malformed::Character,
                        position: error.valid_up_to(),
                    })?;
                Ok(Key::new(text)?)
            }
        };
    }
    let string = input.string()?;
    input.parameters()?;
    input.skip_spaces();
    if !input.at_end() {
        return Err(input.fail(Malformed::TrailingCharacters));
    }
    Ok(Key::new(string)?)
}
