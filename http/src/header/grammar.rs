//! The cursor that reads a Structured Field value as RFC 9651 section 4.2 parses it: an
//! sf-string, then parameters whose values are any bare item (parsed, and ignored).

use super::{KeyHeaderError, Malformed};

/// A cursor over a field value, following RFC 9651 section 4.2.
pub(super) struct Input<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Input<'a> {
    pub(super) fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, at: 0 }
    }

    pub(super) fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let byte = self.peek()?;
        self.at += 1;
        Some(byte)
    }

    pub(super) fn at_end(&self) -> bool {
        self.at >= self.bytes.len()
    }

    pub(super) fn skip_spaces(&mut self) {
        while self.peek() == Some(b' ') {
            self.at += 1;
        }
    }

    pub(super) fn fail(&self, reason: Malformed) -> KeyHeaderError {
        KeyHeaderError::Malformed {
            reason,
            position: self.at,
        }
    }

    /// An sf-string, unescaped; the cursor is on its opening quote.
    pub(super) fn string(&mut self) -> Result<String, KeyHeaderError> {
        self.at += 1;
        // Sized once: the string is at most what is left of the header.
        let mut out = String::with_capacity(self.bytes.len().saturating_sub(self.at));
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
    pub(super) fn parameters(&mut self) -> Result<(), KeyHeaderError> {
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
