//! The record row, read and written: what the `find` statement returns turned into the
//! record machine's [`Record`], and a record turned into the columns `put` writes.
//!
//! A row the adapter did not write (a column of another SQLite type, an unknown state,
//! wrong byte lengths, a body where none belongs, a negative deadline or fence) is reported
//! with what is wrong with it, and never decoded into something it is not.

use idem_core::record::{Body, Record, StoredResult};
use idem_core::{Fence, Fingerprint, OwnerToken, Timestamp};
use sqlx::Row;
use sqlx::sqlite::SqliteRow;

/// `state` of a pending record.
pub(crate) const PENDING: i64 = 1;
/// `state` of a record completed with its value.
pub(crate) const COMPLETED_VALUE: i64 = 2;
/// `state` of a record completed without its value ([`StoredResult::NotStored`]).
pub(crate) const COMPLETED_NOT_STORED: i64 = 3;
/// `state` of a record whose action panicked ([`StoredResult::Panicked`]).
pub(crate) const COMPLETED_PANICKED: i64 = 4;

/// Whether the row `r` is one this adapter wrote, in SQL (the sweeper deletes only such
/// rows): the same rules as the check of every row a command reads, and names stored as
/// `BLOB`s (a name of another type is never found by a command, so never touched).
pub const VALID: &str = "(typeof(r.operation) = 'blob' AND typeof(r.key) = 'blob' \
     AND typeof(r.state) = 'integer' AND r.state BETWEEN 1 AND 4 \
     AND typeof(r.owner) = 'blob' AND length(r.owner) = 16 \
     AND typeof(r.fingerprint) = 'blob' AND length(r.fingerprint) = 32 \
     AND typeof(r.expires_at) = 'integer' AND r.expires_at >= 0 \
     AND (typeof(r.body) = 'blob') = (r.state = 2) \
     AND (r.body IS NULL) = (r.state <> 2) \
     AND (r.fence IS NULL OR (typeof(r.fence) = 'integer' AND r.fence > 0 AND r.state = 1)))";

/// What `find` read: the record of the key (or that there is none, or what is wrong with
/// the row), and the last fence granted.
#[derive(Debug)]
pub(crate) struct Found {
    pub(crate) record: Result<Option<Record>, String>,
    pub(crate) last_fence: Result<Option<Fence>, String>,
}

impl Found {
    pub(crate) fn from_row(row: &SqliteRow) -> Result<Self, sqlx::Error> {
        let found: bool = row.try_get("found")?;
        let record = if found { decode(row)? } else { Ok(None) };
        let last_fence = match row.try_get::<Option<i64>, _>("last_fence") {
            Ok(last) => last
                .map(|value| {
                    u64::try_from(value)
                        .ok()
                        .and_then(Fence::new)
                        .ok_or_else(|| format!("the fence counter holds {value}"))
                })
                .transpose(),
            Err(_) => Err("the fence counter holds a value that is not an integer".to_owned()),
        };
        Ok(Self { record, last_fence })
    }
}

/// The record in a found row (`find`'s, or a row of the operator's listing), or what makes
/// it not one this adapter wrote. The outer error is a failure to read the row at all.
pub(crate) fn decode(row: &SqliteRow) -> Result<Result<Option<Record>, String>, sqlx::Error> {
    let ty = |column: &str| -> Result<String, sqlx::Error> { row.try_get(column) };
    let expect = [
        ("state", "integer"),
        ("owner", "blob"),
        ("fingerprint", "blob"),
        ("expires_at", "integer"),
    ];
    for (column, wanted) in expect {
        let found = ty(&format!("{column}_type"))?;
        if found != wanted {
            return Ok(Err(format!("{column} is {found}, not {wanted}")));
        }
    }
    let body_type = ty("body_type")?;
    if body_type != "blob" && body_type != "null" {
        return Ok(Err(format!("body is {body_type}, not blob")));
    }
    let fence_type = ty("fence_type")?;
    if fence_type != "integer" && fence_type != "null" {
        return Ok(Err(format!("fence is {fence_type}, not integer")));
    }
    let state: i64 = row.try_get("state")?;
    let owner: Vec<u8> = row.try_get("owner")?;
    let fingerprint: Vec<u8> = row.try_get("fingerprint")?;
    let body: Option<Vec<u8>> = row.try_get("body")?;
    let expires_at: i64 = row.try_get("expires_at")?;
    let fence: Option<i64> = row.try_get("fence")?;
    Ok(record(state, &owner, &fingerprint, body, expires_at, fence).map(Some))
}

/// The record these columns hold, or what makes them not one this adapter wrote.
fn record(
    state: i64,
    owner: &[u8],
    fingerprint: &[u8],
    body: Option<Vec<u8>>,
    expires_at: i64,
    fence: Option<i64>,
) -> Result<Record, String> {
    let owner: [u8; 16] = owner
        .try_into()
        .map_err(|_| format!("an owner of {} bytes, not 16", owner.len()))?;
    let fingerprint: [u8; 32] = fingerprint
        .try_into()
        .map_err(|_| format!("a fingerprint of {} bytes, not 32", fingerprint.len()))?;
    let expires_at = u64::try_from(expires_at)
        .map(Timestamp::from_millis)
        .map_err(|_| format!("a deadline of {expires_at} ms, before 1970"))?;
    let fence = fence
        .map(|value| {
            u64::try_from(value)
                .ok()
                .and_then(Fence::new)
                .ok_or_else(|| format!("a fence of {value}"))
        })
        .transpose()?;
    let (owner, fingerprint) = (
        OwnerToken::from_bytes(owner),
        Fingerprint::from_bytes(fingerprint),
    );
    if state != PENDING && fence.is_some() {
        return Err(format!("state {state} with a fence"));
    }
    let without_body = |result: StoredResult| match &body {
        None => Ok(result),
        Some(_) => Err(format!("state {state} with a body")),
    };
    let result = match state {
        PENDING => {
            return match body {
                None => Ok(Record::Pending {
                    owner,
                    fingerprint,
                    lease_until: expires_at,
                    fence,
                }),
                Some(_) => Err("a pending record with a body".to_owned()),
            };
        }
        COMPLETED_VALUE => match body {
            Some(body) => StoredResult::Value(Body::new(body)),
            None => return Err("a completed value without a body".to_owned()),
        },
        COMPLETED_NOT_STORED => without_body(StoredResult::NotStored)?,
        COMPLETED_PANICKED => without_body(StoredResult::Panicked)?,
        unknown => return Err(format!("unknown state {unknown}")),
    };
    Ok(Record::Completed {
        owner,
        fingerprint,
        result,
        expires_at,
    })
}

/// The columns `put` writes for `record`, after the key: state, owner, fingerprint, body,
/// expires_at, fence. `None` if the deadline does not fit the column.
#[derive(Debug)]
pub(crate) struct Columns {
    pub(crate) state: i64,
    pub(crate) owner: Vec<u8>,
    pub(crate) fingerprint: Vec<u8>,
    pub(crate) body: Option<Vec<u8>>,
    pub(crate) expires_at: i64,
    pub(crate) fence: Option<i64>,
}

impl Columns {
    /// The columns of `record`, or the deadline that does not fit an `i64`.
    pub(crate) fn of(record: &Record) -> Result<Self, u64> {
        let deadline = record.expires_at().as_millis();
        let expires_at = i64::try_from(deadline).map_err(|_| deadline)?;
        Ok(match record {
            Record::Pending {
                owner,
                fingerprint,
                fence,
                ..
            } => Self {
                state: PENDING,
                owner: owner.to_bytes().to_vec(),
                fingerprint: fingerprint.to_bytes().to_vec(),
                body: None,
                expires_at,
                // A fence is at most i64::MAX by its type.
                fence: fence.and_then(|fence| i64::try_from(fence.get()).ok()),
            },
            Record::Completed {
                owner,
                fingerprint,
                result,
                ..
            } => {
                let (state, body) = match result {
                    StoredResult::Value(body) => (COMPLETED_VALUE, Some(body.as_bytes().to_vec())),
                    StoredResult::NotStored => (COMPLETED_NOT_STORED, None),
                    StoredResult::Panicked => (COMPLETED_PANICKED, None),
                };
                Self {
                    state,
                    owner: owner.to_bytes().to_vec(),
                    fingerprint: fingerprint.to_bytes().to_vec(),
                    body,
                    expires_at,
                    fence: None,
                }
            }
        })
    }
}

/// The row codec on any column values: decoding never panics, a row it reads is exactly the
/// row `put` writes for that record ([`Columns::of`]), and every record reads back as itself.
#[cfg(test)]
mod codec {
    use idem_core::record::Record;
    use idem_tests::records::{any_record, blob};
    use proptest::prelude::*;

    use super::{Columns, record};

    fn read(columns: &Columns) -> Result<Record, String> {
        record(
            columns.state,
            &columns.owner,
            &columns.fingerprint,
            columns.body.clone(),
            columns.expires_at,
            columns.fence,
        )
    }

    /// The columns, by reference: state, owner, fingerprint, body, expires_at, fence.
    type Fields<'a> = (i64, &'a [u8], &'a [u8], Option<&'a [u8]>, i64, Option<i64>);

    fn fields(c: &Columns) -> Fields<'_> {
        (
            c.state,
            &c.owner,
            &c.fingerprint,
            c.body.as_deref(),
            c.expires_at,
            c.fence,
        )
    }

    fn any_columns() -> impl Strategy<Value = Columns> {
        (
            prop_oneof![(-1i64..6), any::<i64>()],
            blob(16),
            blob(32),
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40)),
            prop_oneof![any::<i64>(), (0i64..1 << 50)],
            prop_oneof![
                Just(None),
                any::<i64>().prop_map(Some),
                (-2i64..4).prop_map(Some)
            ],
        )
            .prop_map(
                |(state, owner, fingerprint, body, expires_at, fence)| Columns {
                    state,
                    owner,
                    fingerprint,
                    body,
                    expires_at,
                    fence,
                },
            )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4_096))]

        #[test]
        fn a_row_read_as_a_record_is_that_records_row(row in any_columns()) {
            if let Ok(record) = read(&row) {
                let written = Columns::of(&record).map_err(|deadline| format!("{deadline}"));
                prop_assert!(written.is_ok());
                if let Ok(written) = written {
                    prop_assert_eq!(fields(&written), fields(&row), "read as {:?}", record);
                }
            }
        }

        #[test]
        fn every_record_reads_back_as_itself(record in any_record()) {
            let columns = Columns::of(&record).map_err(|deadline| format!("{deadline}"));
            prop_assert!(columns.is_ok());
            if let Ok(columns) = columns {
                prop_assert_eq!(read(&columns), Ok(record));
            }
        }
    }
}
