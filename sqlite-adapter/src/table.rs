//! The name of the records table, checked once and quoted: it is written into every
//! statement, so it is never taken from a request and never passed through unquoted.

use std::fmt;

use thiserror::Error;

/// The table name used when none is given: `idem_records`.
pub const DEFAULT_TABLE: &str = "idem_records";

/// The longest table name: the index is named `{table}_expiry` and the fence counter
/// `{table}_fence`, and names stay short enough to read in a shell.
pub const MAX_TABLE_NAME_LEN: usize = 56;

/// A table name that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid table name {name:?}: {reason}")]
pub struct TableNameError {
    name: String,
    reason: &'static str,
}

/// The records table's name: 1 to 56 characters of `[A-Za-z0-9_]`, not starting with a
/// digit, and not starting with `sqlite_` (SQLite keeps those names for itself). It is
/// quoted in every statement.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct TableName(String);

impl TableName {
    /// Checks `name`.
    pub fn new(name: &str) -> Result<Self, TableNameError> {
        let refuse = |reason| TableNameError {
            name: name.to_owned(),
            reason,
        };
        if name.is_empty() {
            return Err(refuse("empty"));
        }
        if name.len() > MAX_TABLE_NAME_LEN {
            return Err(refuse("longer than 56 characters"));
        }
        if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(refuse("only A-Z, a-z, 0-9 and _ are allowed"));
        }
        if name.as_bytes().first().is_some_and(u8::is_ascii_digit) {
            return Err(refuse("starts with a digit"));
        }
        if name.to_ascii_lowercase().starts_with("sqlite_") {
            return Err(refuse("names starting with sqlite_ are SQLite's own"));
        }
        Ok(Self(name.to_owned()))
    }

    /// The name as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The name as it appears in statements: `"table"`.
    pub fn quoted(&self) -> String {
        format!("\"{}\"", self.0)
    }

    /// The expiry index's name, quoted.
    pub(crate) fn quoted_index(&self) -> String {
        format!("\"{}_expiry\"", self.0)
    }

    /// The fence counter's table name, quoted.
    pub(crate) fn quoted_fences(&self) -> String {
        format!("\"{}_fence\"", self.0)
    }
}

impl Default for TableName {
    fn default() -> Self {
        Self(DEFAULT_TABLE.to_owned())
    }
}

impl fmt::Display for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TableName({})", self.0)
    }
}

impl std::str::FromStr for TableName {
    type Err = TableNameError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert!(TableName::new("idem_records").is_ok());
        assert!(TableName::new("_x1").is_ok());
        for bad in [
            "",
            "1abc",
            "a-b",
            "a\"b",
            "sqlite_master",
            "a.b",
            &"a".repeat(57),
        ] {
            assert!(TableName::new(bad).is_err(), "{bad:?}");
        }
        assert_eq!(TableName::default().quoted(), "\"idem_records\"");
    }
}
