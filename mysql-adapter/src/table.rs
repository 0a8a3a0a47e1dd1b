//! The name of the records table, checked once and quoted: it is written into every
//! statement, so it is never taken from a request and never passed through unquoted.

use std::fmt;

use thiserror::Error;

/// The table name used when none is given: `idem_records`, in the connection's database.
pub const DEFAULT_TABLE: &str = "idem_records";

/// The longest table name part: the fence sequence is named `{table}_fence` and the expiry
/// index `{table}_expiry`, and MySQL/MariaDB names are at most 64 characters.
pub const MAX_TABLE_NAME_LEN: usize = 57;

/// The longest database name, the server's limit for a name.
pub const MAX_DATABASE_NAME_LEN: usize = 64;

/// A table name that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid table name {name:?}: {reason}")]
pub struct TableNameError {
    name: String,
    reason: &'static str,
}

/// Where the records live: `table` or `database.table`.
///
/// Each part is 1 to 57 (table) or 64 (database) characters of `[A-Za-z0-9_]`, not starting
/// with a digit. Parts are quoted with backticks in every statement. Whether names are
/// case-sensitive is the server's `lower_case_table_names`. The database must exist;
/// [`MySqlStore::migrate`](crate::MySqlStore::migrate) creates the table and its fence
/// sequence and nothing else.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct TableName {
    database: Option<String>,
    table: String,
}

impl TableName {
    /// Checks `name` (`table` or `database.table`).
    pub fn new(name: &str) -> Result<Self, TableNameError> {
        let refuse = |reason| TableNameError {
            name: name.to_owned(),
            reason,
        };
        let (database, table) = match name.split_once('.') {
            Some((database, table)) => (Some(database), table),
            None => (None, name),
        };
        if let Some(database) = database {
            check_part(database, MAX_DATABASE_NAME_LEN).map_err(refuse)?;
        }
        check_part(table, MAX_TABLE_NAME_LEN).map_err(refuse)?;
        Ok(Self {
            database: database.map(str::to_owned),
            table: table.to_owned(),
        })
    }

    /// The database, if the name gives one.
    pub fn database(&self) -> Option<&str> {
        self.database.as_deref()
    }

    /// The table's own name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The name as it appears in statements: `` `table` `` or `` `database`.`table` ``.
    pub fn quoted(&self) -> String {
        self.qualified(&self.table)
    }

    /// The name of the sequence the table's fences are drawn from (MODEL.md `F1`), quoted,
    /// in the table's database: `` `table_fence` ``.
    pub fn quoted_fence_sequence(&self) -> String {
        self.qualified(&format!("{}_fence", self.table))
    }

    /// The expiry index's name, quoted (an index belongs to its table).
    pub(crate) fn quoted_index(&self) -> String {
        format!("`{}_expiry`", self.table)
    }

    fn qualified(&self, name: &str) -> String {
        match &self.database {
            Some(database) => format!("`{database}`.`{name}`"),
            None => format!("`{name}`"),
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
            database: None,
            table: DEFAULT_TABLE.to_owned(),
        }
    }
}

impl fmt::Display for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.database {
            Some(database) => write!(f, "{database}.{}", self.table),
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
        assert_eq!(TableName::default().quoted(), "`idem_records`");
        let qualified = TableName::new("billing.Idem_1").unwrap();
        assert_eq!(qualified.quoted(), "`billing`.`Idem_1`");
        assert_eq!(
            qualified.quoted_fence_sequence(),
            "`billing`.`Idem_1_fence`"
        );
        assert_eq!(qualified.to_string(), "billing.Idem_1");
        for bad in [
            "",
            ".t",
            "s.",
            "a.b.c",
            "1t",
            "t;drop",
            "t`",
            "t x",
            "é",
            &"t".repeat(MAX_TABLE_NAME_LEN + 1),
        ] {
            assert!(TableName::new(bad).is_err(), "{bad:?} must be refused");
        }
        assert!(TableName::new(&"t".repeat(MAX_TABLE_NAME_LEN)).is_ok());
        assert!(TableName::new(&format!("{}.t", "s".repeat(MAX_DATABASE_NAME_LEN))).is_ok());
    }
}
