//! The name of the records table, checked once and quoted: it is written into every
//! statement, so it is never taken from a request and never passed through unquoted.

use std::fmt;

use thiserror::Error;

/// The table name used when none is given: `idem_records`, in the first schema of the
/// connection's `search_path` (usually `public`).
pub const DEFAULT_TABLE: &str = "idem_records";

/// The longest table name part: the expiry index is named `{table}_expiry` (and the fence
/// sequence `{table}_fence`), and PostgreSQL names are at most 63 bytes.
pub const MAX_TABLE_NAME_LEN: usize = 56;

/// The longest schema name, PostgreSQL's limit for a name.
pub const MAX_SCHEMA_NAME_LEN: usize = 63;

/// A table name that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid table name {name:?}: {reason}")]
pub struct TableNameError {
    name: String,
    reason: &'static str,
}

/// Where the records live: `table` or `schema.table`.
///
/// Each part is 1 to 56 (table) or 63 (schema) characters of `[A-Za-z0-9_]`, not starting
/// with a digit. Parts are quoted in every statement, so they are case-sensitive:
/// `Billing.records` names the schema `Billing`, not `billing`. The schema must exist;
/// [`PostgresStore::migrate`](crate::PostgresStore::migrate) creates the table and its
/// index and nothing else.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct TableName {
    schema: Option<String>,
    table: String,
}

impl TableName {
    /// Checks `name` (`table` or `schema.table`).
    pub fn new(name: &str) -> Result<Self, TableNameError> {
        let refuse = |reason| TableNameError {
            name: name.to_owned(),
            reason,
        };
        let (schema, table) = match name.split_once('.') {
            Some((schema, table)) => (Some(schema), table),
            None => (None, name),
        };
        if let Some(schema) = schema {
            check_part(schema, MAX_SCHEMA_NAME_LEN).map_err(refuse)?;
        }
        check_part(table, MAX_TABLE_NAME_LEN).map_err(refuse)?;
        Ok(Self {
            schema: schema.map(str::to_owned),
            table: table.to_owned(),
        })
    }

    /// The schema, if the name gives one.
    pub fn schema(&self) -> Option<&str> {
        self.schema.as_deref()
    }

    /// The table's own name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The name as it appears in statements: `"table"` or `"schema"."table"`.
    pub fn quoted(&self) -> String {
        match &self.schema {
            Some(schema) => format!("\"{schema}\".\"{}\"", self.table),
            None => format!("\"{}\"", self.table),
        }
    }

    /// The expiry index's name, quoted (an index lives in its table's schema).
    pub(crate) fn quoted_index(&self) -> String {
        format!("\"{}_expiry\"", self.table)
    }

    /// The name of the sequence the table's fences are drawn from (MODEL.md `F1`), quoted
    /// and in the table's schema: `"table_fence"` or `"schema"."table_fence"`.
    pub fn quoted_fence_sequence(&self) -> String {
        match &self.schema {
            Some(schema) => format!("\"{schema}\".\"{}_fence\"", self.table),
            None => format!("\"{}_fence\"", self.table),
        }
    }
}

fn check_part(part: &str, max: usize) -> Result<(), &'static str> {
    if part.is_empty() {
        return Err("a name part is empty");
    }
    if part.len() > max {
        return Err("a name part is too long");
    }
    if part.starts_with(|c: char| c.is_ascii_digit()) {
        return Err("a name part starts with a digit");
    }
    if !part.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err("a name part holds a character other than A-Z, a-z, 0-9 and _");
    }
    Ok(())
}

impl Default for TableName {
    fn default() -> Self {
        Self {
            schema: None,
            table: DEFAULT_TABLE.to_owned(),
        }
    }
}

impl fmt::Display for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.schema {
            Some(schema) => write!(f, "{schema}.{}", self.table),
            None => f.write_str(&self.table),
        }
    }
}

impl fmt::Debug for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TableName({self})")
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
    fn names_are_checked_and_quoted() {
        assert_eq!(TableName::default().quoted(), "\"idem_records\"");
        let qualified = TableName::new("billing.Idem_1").unwrap();
        assert_eq!(qualified.quoted(), "\"billing\".\"Idem_1\"");
        assert_eq!(qualified.quoted_index(), "\"Idem_1_expiry\"");
        assert_eq!(qualified.to_string(), "billing.Idem_1");
        for bad in [
            "",
            ".t",
            "s.",
            "a.b.c",
            "1t",
            "t;drop",
            "t\"",
            "t x",
            "é",
            &"t".repeat(MAX_TABLE_NAME_LEN + 1),
        ] {
            assert!(TableName::new(bad).is_err(), "{bad:?} must be refused");
        }
        assert!(TableName::new(&"t".repeat(MAX_TABLE_NAME_LEN)).is_ok());
        assert!(TableName::new(&format!("{}.t", "s".repeat(MAX_SCHEMA_NAME_LEN))).is_ok());
    }
}
