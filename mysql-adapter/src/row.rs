//! The record columns as read, turned into the record machine's [`Record`]; and a result
//! turned into the columns it is stored as. A row the adapter did not write is reported as
//! such, with what is wrong with it.

use idem_core::record::{Body, Record, StoredResult};
use idem_core::{Fence, Fingerprint, OwnerToken, Timestamp};
use sqlx::Row;
use sqlx::mysql::MySqlRow;

/// `state` of a pending record.
pub(crate) const PENDING: i16 = 1;
/// `state` of a record completed with its value.
pub(crate) const COMPLETED_VALUE: i16 = 2;
/// `state` of a record completed without its value ([`StoredResult::NotStored`]).
pub(crate) const COMPLETED_NOT_STORED: i16 = 3;
/// `state` of a record whose action panicked ([`StoredResult::Panicked`]).
pub(crate) const COMPLETED_PANICKED: i16 = 4;

/// The `state` and `body` columns of a completed record holding `result`.
pub(crate) fn result_columns(result: &StoredResult) -> (i16, Option<&[u8]>) {
    match result {
        StoredResult::Value(body) => (COMPLETED_VALUE, Some(body.as_bytes())),
        StoredResult::NotStored => (COMPLETED_NOT_STORED, None),
        StoredResult::Panicked => (COMPLETED_PANICKED, None),
    }
}

/// A read of one key: the server instant it judged by, the record found (if any), and
/// whether a transaction was open on the connection.
#[derive(Debug)]
pub(crate) struct Found {
    pub(crate) now: Timestamp,
    pub(crate) record: Option<Record>,
    pub(crate) in_transaction: bool,
    /// The session's isolation level (`@@tx_isolation`), read by the locked reads.
    pub(crate) isolation: String,
}

/// Why a read could not be used.
#[derive(Debug)]
pub(crate) enum Unreadable {
    /// The row is not one this adapter wrote.
    Corrupt(String),
    /// The statement's own answer was not what it selects (a column missing or mistyped).
    Unexpected(sqlx::Error),
}

impl Found {
    /// Reads the answer of a peek or a locked read.
    pub(crate) fn from_row(row: &MySqlRow) -> Result<Self, Unreadable> {
        let get = |error| Unreadable::Unexpected(error);
        let now: i64 = row.try_get("now").map_err(get)?;
        let now = Timestamp::from_millis(u64::try_from(now).unwrap_or(0));
        let in_transaction: i64 = row.try_get("in_tx").map_err(get)?;
        let isolation: String = row.try_get("iso").map_err(get)?;
        Ok(Self {
            now,
            record: record_in(row)?,
            in_transaction: in_transaction != 0,
            isolation,
        })
    }
}

/// The record in a row's record columns (`state`, `owner`, `fingerprint`, `body`,
/// `expires_at`, `fence`; `state` NULL for none): a command's read, or a row of the
/// operator's listing.
pub(crate) fn record_in(row: &MySqlRow) -> Result<Option<Record>, Unreadable> {
    let get = |error| Unreadable::Unexpected(error);
    let state: Option<i16> = row.try_get("state").map_err(get)?;
    let Some(state) = state else {
        return Ok(None);
    };
    record(
        state,
        row.try_get("owner").map_err(get)?,
        row.try_get("fingerprint").map_err(get)?,
        row.try_get("body").map_err(get)?,
        row.try_get("expires_at").map_err(get)?,
        row.try_get("fence").map_err(get)?,
    )
    .map(Some)
}

/// The record a row holds, or what is wrong with it.
fn record(
    state: i16,
    owner: Option<Vec<u8>>,
    fingerprint: Option<Vec<u8>>,
    body: Option<Vec<u8>>,
    expires_at: Option<i64>,
    fence: Option<i64>,
) -> Result<Record, Unreadable> {
    let corrupt = |detail: String| Unreadable::Corrupt(detail);
    let owner = owner.unwrap_or_default();
    let owner: [u8; 16] = owner
        .as_slice()
        .try_into()
        .map_err(|_| corrupt(format!("owner is {} bytes, not 16", owner.len())))?;
    let fingerprint = fingerprint.unwrap_or_default();
    let fingerprint: [u8; 32] = fingerprint.as_slice().try_into().map_err(|_| {
        corrupt(format!(
            "fingerprint is {} bytes, not 32",
            fingerprint.len()
        ))
    })?;
    let expires_at = expires_at
        .and_then(|ms| u64::try_from(ms).ok())
        .ok_or_else(|| corrupt(format!("expires_at {expires_at:?} is not a deadline")))?;
    let expires_at = Timestamp::from_millis(expires_at);
    let fence = match fence {
        None => None,
        Some(value) => Some(
            u64::try_from(value)
                .ok()
                .and_then(Fence::new)
                .ok_or_else(|| corrupt(format!("fence {value} is not a fence")))?,
        ),
    };
    let owner = OwnerToken::from_bytes(owner);
    let fingerprint = Fingerprint::from_bytes(fingerprint);
    let result = match (state, body) {
        (PENDING, None) => {
            return Ok(Record::Pending {
                owner,
                fingerprint,
                lease_until: expires_at,
                fence,
            });
        }
        (COMPLETED_VALUE, Some(body)) => StoredResult::Value(Body::new(body)),
        (COMPLETED_NOT_STORED, None) => StoredResult::NotStored,
        (COMPLETED_PANICKED, None) => StoredResult::Panicked,
        (PENDING | COMPLETED_NOT_STORED | COMPLETED_PANICKED, Some(_)) => {
            return Err(corrupt(format!("state {state} holds a body")));
        }
        (COMPLETED_VALUE, None) => return Err(corrupt("state 2 holds no body".to_owned())),
        (other, _) => return Err(corrupt(format!("unknown state {other}"))),
    };
    Ok(Record::Completed {
        owner,
        fingerprint,
        result,
        expires_at,
    })
}

/// The row codec on any column values: decoding never panics, a row it reads holds nothing it
/// drops (the record's own columns are the row's), and every record reads back as itself.
#[cfg(test)]
mod codec {
    use idem_core::Fence;
    use idem_core::record::Record;
    use idem_tests::records::{any_record, nullable_blob};
    use proptest::prelude::*;

    use super::{PENDING, record, result_columns};

    /// A row's record columns: state, owner, fingerprint, body, expires_at, fence.
    type Columns = (
        i16,
        Option<Vec<u8>>,
        Option<Vec<u8>>,
        Option<Vec<u8>>,
        Option<i64>,
        Option<i64>,
    );

    /// The columns the statements write for `record` (`result_columns` for a completed
    /// one's state and body).
    fn columns(record: &Record) -> Columns {
        let (state, body, fence) = match record {
            Record::Pending { fence, .. } => (PENDING, None, fence.map(Fence::get)),
            Record::Completed { result, .. } => {
                let (state, body) = result_columns(result);
                (state, body.map(<[u8]>::to_vec), None)
            }
        };
        (
            state,
            Some(record.owner().to_bytes().to_vec()),
            Some(record.fingerprint().to_bytes().to_vec()),
            body,
            i64::try_from(record.expires_at().as_millis()).ok(),
            fence.and_then(|fence| i64::try_from(fence).ok()),
        )
    }

    fn read(columns: &Columns) -> Result<Record, String> {
        let (state, owner, fingerprint, body, expires_at, fence) = columns.clone();
        record(state, owner, fingerprint, body, expires_at, fence).map_err(|e| format!("{e:?}"))
    }

    /// The record's own columns: a completed row keeps the fence of the grant that wrote it
    /// (`sql.rs`), which is no part of the completed record.
    fn own(columns: &Columns) -> Columns {
        let mut own = columns.clone();
        if own.0 != PENDING {
            own.5 = None;
        }
        own
    }

    fn any_columns() -> impl Strategy<Value = Columns> {
        (
            prop_oneof![(-1i16..6), any::<i16>()],
            nullable_blob(16),
            nullable_blob(32),
            nullable_blob(0),
            prop_oneof![
                Just(None),
                any::<i64>().prop_map(Some),
                (0i64..1 << 50).prop_map(Some)
            ],
            prop_oneof![
                Just(None),
                any::<i64>().prop_map(Some),
                (-2i64..4).prop_map(Some)
            ],
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4_096))]

        #[test]
        fn a_row_read_as_a_record_is_that_records_row(row in any_columns()) {
            if let Ok(record) = read(&row) {
                prop_assert_eq!(columns(&record), own(&row), "read as {:?}", record);
            }
        }

        #[test]
        fn every_record_reads_back_as_itself(record in any_record()) {
            prop_assert_eq!(read(&columns(&record)), Ok(record));
        }
    }
}
