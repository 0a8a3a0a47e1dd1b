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
//! Many clients send the key unquoted, as Stripe's API takes it
//! (`Idempotency-Key: 8e03978e-...`). That is not a Structured Field String, and under the
//! default, [`BareToken::Refuse`], it is refused with 400 (problem type
//! [`KeyMalformed`](crate::ProblemType::KeyMalformed), whose detail says to quote the key).
//! [`BareToken::Accept`] takes an unquoted value verbatim as the key, so that
//! `abc` and `"abc"` name the same record; a value that starts with `"` is always read as a
//! String.
//!
//! The default is `Refuse` because it is the draft's wire format, and because it can be
//! loosened later without breaking a client, while a service that accepted bare tokens can
//! never stop doing so. A service that takes over clients written for a bare-token API sets
//! `Accept`.

use std::fmt;

use http::HeaderMap;
use http::header::HeaderName;
use idem::{Key, KeyError};
use thiserror::Error;

/// `Idempotency-Key`, the request header that carries the key.
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// How an unquoted (bare token) `Idempotency-Key` is treated; see the
/// [module docs](self#bare-tokens).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum BareToken {
    /// Refuse it with 400: the draft's wire format is a quoted String.
    #[default]
    Refuse,
    /// Take the whole value, verbatim, as the key.
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

/// A cursor over a field value, following RFC 9651 section 4.2.
struct Input<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Input<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, at: 0 }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let byte = self.peek()?;
        self.at += 1;
        Some(byte)
    }

    fn at_end(&self) -> bool {
        self.at >= self.bytes.len()
    }

    fn skip_spaces(&mut self) {
        while self.peek() == Some(b' ') {
            self.at += 1;
        }
    }

    fn fail(&self, reason: Malformed) -> KeyHeaderError {
        KeyHeaderError::Malformed {
            reason,
            position: self.at,
        }
    }

    /// An sf-string, unescaped; the cursor is on its opening quote.
    fn string(&mut self) -> Result<String, KeyHeaderError> {
        self.at += 1;
        let mut out = String::new();
        loop {
            let Some(byte) = self.next() else {
                return Err(self.fail(Malformed::Unterminated));
            };
            match byte {
                b'\\' => match self.next() {
                    Some(escaped @ (b'"' | b'\\')) => out.push(char::from(escaped)),
                    Some(_) => {
                        self.at -= 1;
                        return Err(self.fail(Malformed::Escape));
                    }
                    None => return Err(self.fail(Malformed::Unterminated)),
                },
                b'"' => return Ok(out),
                0x20..=0x7e => out.push(char::from(byte)),
                _ => {
                    self.at -= 1;
                    return Err(self.fail(Malformed::Character));
                }
            }
        }
    }

    /// `*( ";" *SP key [ "=" bare-item ] )`, parsed and discarded.
    fn parameters(&mut self) -> Result<(), KeyHeaderError> {
        while self.peek() == Some(b';') {
            self.at += 1;
            self.skip_spaces();
            self.parameter_key()?;
            if self.peek() == Some(b'=') {
                self.at += 1;
                self.bare_item()?;
            }
        }
        Ok(())
    }

    fn parameter_key(&mut self) -> Result<(), KeyHeaderError> {
        match self.peek() {
            Some(b'a'..=b'z' | b'*') => self.at += 1,
            _ => return Err(self.fail(Malformed::Parameter)),
        }
        while let Some(b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'.' | b'*') = self.peek() {
            self.at += 1;
        }
        Ok(())
    }

    /// Any bare item of RFC 9651: integer, decimal, string, token, byte sequence, boolean,
    /// date or display string.
    fn bare_item(&mut self) -> Result<(), KeyHeaderError> {
        match self.peek() {
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(b'"') => self.string().map(drop),
            Some(b'A'..=b'Z' | b'a'..=b'z' | b'*') => {
                self.at += 1;
                while self.peek().is_some_and(is_token_char) {
                    self.at += 1;
                }
                Ok(())
            }
            Some(b':') => {
                self.at += 1;
                while let Some(b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'+' | b'/' | b'=') =
                    self.peek()
                {
                    self.at += 1;
                }
                match self.next() {
                    Some(b':') => Ok(()),
                    _ => Err(self.fail(Malformed::Parameter)),
                }
            }
            Some(b'?') => {
                self.at += 1;
                match self.next() {
                    Some(b'0' | b'1') => Ok(()),
                    _ => Err(self.fail(Malformed::Parameter)),
                }
            }
            Some(b'@') => {
                self.at += 1;
                self.number()
            }
            Some(b'%') => {
                self.at += 1;
                self.display_string()
            }
            _ => Err(self.fail(Malformed::Parameter)),
        }
    }

    /// An integer (at most 15 digits) or a decimal (at most 12 digits, a point, 1 to 3
    /// digits).
    fn number(&mut self) -> Result<(), KeyHeaderError> {
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        let mut integer = 0;
        while let Some(b'0'..=b'9') = self.peek() {
            self.at += 1;
            integer += 1;
        }
        if integer == 0 {
            return Err(self.fail(Malformed::Parameter));
        }
        if self.peek() != Some(b'.') {
            return if integer <= 15 {
                Ok(())
            } else {
                Err(self.fail(Malformed::Parameter))
            };
        }
        self.at += 1;
        let mut fraction = 0;
        while let Some(b'0'..=b'9') = self.peek() {
            self.at += 1;
            fraction += 1;
        }
        if integer <= 12 && (1..=3).contains(&fraction) {
            Ok(())
        } else {
            Err(self.fail(Malformed::Parameter))
        }
    }

    /// `%"..."` with `%xx` (lowercase hex) escapes; the cursor is after the `%`.
    fn display_string(&mut self) -> Result<(), KeyHeaderError> {
        if self.next() != Some(b'"') {
            return Err(self.fail(Malformed::Parameter));
        }
        loop {
            match self.next() {
                Some(b'"') => return Ok(()),
                Some(b'%') => {
                    for _ in 0..2 {
                        match self.next() {
                            Some(b'0'..=b'9' | b'a'..=b'f') => {}
                            _ => return Err(self.fail(Malformed::Parameter)),
                        }
                    }
                }
                Some(0x20..=0x7e) => {}
                _ => return Err(self.fail(Malformed::Parameter)),
            }
        }
    }
}

/// `tchar / ":" / "/"` (RFC 9110 token characters, and the two RFC 9651 adds).
fn is_token_char(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~:/".contains(&byte)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strict(value: &[u8]) -> Result<String, KeyHeaderError> {
        parse_key(value, BareToken::Refuse).map(|key| key.as_str().to_owned())
    }

    fn malformed(value: &[u8]) -> Malformed {
        match strict(value) {
            Err(KeyHeaderError::Malformed { reason, .. }) => reason,
            other => panic!("{:?} parsed as {other:?}", String::from_utf8_lossy(value)),
        }
    }

    #[test]
    fn strings_are_unquoted_and_unescaped() {
        assert_eq!(strict(br#""abc""#).unwrap(), "abc");
        assert_eq!(strict(br#""a\"b\\c""#).unwrap(), r#"a"b\c"#);
        assert_eq!(strict(br#"  "abc"  "#).unwrap(), "abc");
        let uuid = br#""8e03978e-40d5-43e8-bc93-6894a57f9324""#;
        assert_eq!(
            strict(uuid).unwrap(),
            "8e03978e-40d5-43e8-bc93-6894a57f9324"
        );
    }

    #[test]
    fn parameters_of_every_kind_are_parsed_and_ignored() {
        for value in [
            r#""k";a"#,
            r#""k";a=1;b=-2.5"#,
            r#""k"; a=?1;b=tok/en:x"#,
            r#""k";a="s \" s";b=:aGk=:"#,
            r#""k";a=@1700000000;b=%"caf%c3%a9";*c=*"#,
        ] {
            assert_eq!(strict(value.as_bytes()).unwrap(), "k", "{value}");
        }
    }

    #[test]
    fn everything_else_is_malformed() {
        assert_eq!(malformed(b"abc"), Malformed::Unquoted);
        assert_eq!(malformed(b""), Malformed::Unquoted);
        assert_eq!(malformed(b"'abc'"), Malformed::Unquoted);
        assert_eq!(malformed(br#""abc"#), Malformed::Unterminated);
        assert_eq!(malformed(br#""abc\"#), Malformed::Unterminated);
        assert_eq!(malformed(br#""a\bc""#), Malformed::Escape);
        assert_eq!(malformed(b"\"a\tb\""), Malformed::Character);
        assert_eq!(malformed(b"\"a\x7fb\""), Malformed::Character);
        assert_eq!(malformed("\"caf\u{e9}\"".as_bytes()), Malformed::Character);
        assert_eq!(malformed(br#""a" "b""#), Malformed::TrailingCharacters);
        assert_eq!(malformed(br#""a", "b""#), Malformed::TrailingCharacters);
        assert_eq!(malformed(br#""a"x"#), Malformed::TrailingCharacters);
        assert_eq!(malformed(b"\"a\"\t"), Malformed::TrailingCharacters);
        for parameter in [
            ";",
            ";A=1",
            ";a=",
            ";a=1.2345",
            ";a=1234567890123.1",
            ";a=1234567890123456",
            ";a=?2",
            ";a=:abc",
            ";a=%\"%C3\"",
            ";a=(1)",
            ";1a",
        ] {
            let value = format!("\"k\"{parameter}");
            assert_eq!(malformed(value.as_bytes()), Malformed::Parameter, "{value}");
        }
    }

    #[test]
    fn a_string_that_is_no_valid_key_is_refused_as_a_key() {
        assert_eq!(
            strict(br#""""#),
            Err(KeyHeaderError::InvalidKey(KeyError::Empty))
        );
        assert!(matches!(
            strict(br#""a b""#),
            Err(KeyHeaderError::InvalidKey(KeyError::InvalidCharacter {
                found: ' ',
                ..
            }))
        ));
        let long = format!("\"{}\"", "k".repeat(256));
        assert_eq!(
            strict(long.as_bytes()),
            Err(KeyHeaderError::InvalidKey(KeyError::TooLong { len: 256 }))
        );
        let longest = format!("\"{}\"", "k".repeat(255));
        assert_eq!(strict(longest.as_bytes()).unwrap().len(), 255);
    }

    #[test]
    fn bare_tokens_are_taken_verbatim_only_when_accepted() {
        let accept = |value: &[u8]| parse_key(value, BareToken::Accept);
        assert_eq!(accept(b"abc").unwrap().as_str(), "abc");
        assert_eq!(accept(br#""abc""#).unwrap().as_str(), "abc");
        assert_eq!(accept(b"a;b=1").unwrap().as_str(), "a;b=1");
        assert!(matches!(
            accept(br#""abc"#),
            Err(KeyHeaderError::Malformed { .. })
        ));
        assert!(matches!(accept(b"a b"), Err(KeyHeaderError::InvalidKey(_))));
        assert!(matches!(
            accept(b""),
            Err(KeyHeaderError::InvalidKey(KeyError::Empty))
        ));
        assert!(matches!(
            accept(b"caf\xc3\xa9"),
            Err(KeyHeaderError::InvalidKey(_))
        ));
        assert!(matches!(
            accept(b"a\xff"),
            Err(KeyHeaderError::Malformed { .. })
        ));
    }

    #[test]
    fn a_repeated_header_is_refused() {
        let mut headers = HeaderMap::new();
        assert_eq!(key_from_headers(&headers, BareToken::Refuse), Ok(None));
        headers.append(IDEMPOTENCY_KEY, "\"a\"".parse().unwrap());
        assert_eq!(
            key_from_headers(&headers, BareToken::Refuse)
                .unwrap()
                .unwrap()
                .as_str(),
            "a"
        );
        headers.append(IDEMPOTENCY_KEY, "\"a\"".parse().unwrap());
        assert!(matches!(
            key_from_headers(&headers, BareToken::Refuse),
            Err(KeyHeaderError::Malformed {
                reason: Malformed::Repeated,
                ..
            })
        ));
    }
}
