//! What a statement answers, turned into the record machine's reply.
//!
//! Every statement returns one row: `reply` (the transition it made, decided in SQL),
//! `now` (the server instant it judged by, in milliseconds since the Unix epoch),
//! `expires_at` (the lease or retention end that goes with the reply), `fence` (the
//! fence that goes with a grant or renewal, or the found record's) and the record it
//! found (`state`, `owner`, `fingerprint`, `body`, and `expires_at` again), which a replay,
//! key reuse or read answers with. A row the adapter did not write is reported as such,
//! with what is wrong with it.

use idem_core::record::{Body, Completion, Record, Refusal, Reply, Reservation, StoredResult};
use idem_core::{Fence, Fingerprint, OwnerToken, Timestamp};
use sqlx::Row;
use sqlx::postgres::PgRow;

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

/// One statement's answer, as read from its row.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) reply: String,
    pub(crate) now: Timestamp,
    pub(crate) expires_at: Option<i64>,
    pub(crate) found: Found,
}

/// The record columns of the row the statement found (all NULL for none).
#[derive(Debug, Default)]
pub(crate) struct Found {
    pub(crate) state: Option<i16>,
    pub(crate) owner: Option<Vec<u8>>,
    pub(crate) fingerprint: Option<Vec<u8>>,
    pub(crate) body: Option<Vec<u8>>,
    pub(crate) expires_at: Option<i64>,
    /// The fence that goes with the reply: the grant's, the renewed or found record's.
    pub(crate) fence: Option<i64>,
}

/// Why an answer could not be turned into a reply.
#[derive(Debug)]
pub(crate) enum Refused {
    /// The read-only first step of a reserve found the key free: run the reserve
    /// statement.
    Free,
    /// The row is not a record this adapter wrote: what is wrong with it.
    Corrupt(String),
    /// The row changed between the statement's snapshot and its write; nothing was
    /// written: run the statement again.
    Raced,
    /// The statement answered something it never answers.
    Unexpected(String),
}

impl Answer {
    /// Reads a statement's row. `found_expires_at` is the found record's own deadline when
    /// the statement returns one distinct from the reply's.
    pub(crate) fn from_row(row: &PgRow) -> Result<Self, sqlx::Error> {
        let now: i64 = row.try_get("now")?;
        let now = u64::try_from(now).map_err(|_| {
            sqlx::Error::Protocol(format!("the server's clock reads {now} ms, before 1970"))
        })?;
        let found = Found::from_row(row)?;
        Ok(Self {
            reply: row.try_get("reply")?,
            now: Timestamp::from_millis(now),
            expires_at: found.expires_at,
            found,
        })
    }

    fn deadline(&self) -> Result<Timestamp, Refused> {
        self.expires_at
            .and_then(|ms| u64::try_from(ms).ok())
            .map(Timestamp::from_millis)
            .ok_or_else(|| Refused::Unexpected(format!("{} without a deadline", self.reply)))
    }

    /// The fence that goes with a grant or renewal: `None` for a row written before fences
    /// were (its column NULL).
    fn fence(&self) -> Result<Option<Fence>, Refused> {
        self.found.fence().map_err(Refused::Corrupt)
    }

    fn record(&self) -> Result<Record, Refused> {
        self.found.record().map_err(Refused::Corrupt)
    }

    fn common(&self) -> Result<Reply, Refused> {
        match self.reply.as_str() {
            "corrupt" => {
                Err(Refused::Corrupt(self.found.record().err().unwrap_or_else(
                    || "the row is not one this adapter wrote".to_owned(),
                )))
            }
            "raced" => Err(Refused::Raced),
            "free" => Err(Refused::Free),
            other => Err(Refused::Unexpected(format!("unknown reply {other:?}"))),
        }
    }

    /// The reply to a reserve by `owner`.
    pub(crate) fn reserve(&self, owner: OwnerToken) -> Result<Reply, Refused> {
        Ok(match self.reply.as_str() {
            "reserved" => Reply::Reserved(Reservation {
                owner,
                lease_until: Some(self.deadline()?),
                fence: self.fence()?,
            }),
            "in_flight" => Reply::InFlight {
                lease_until: Some(self.deadline()?),
            },
            "replay" => match self.record()? {
                // How long the record has left at the statement's own clock reading.
                Record::Completed {
                    result, expires_at, ..
                } => Reply::Replay {
                    result,
                    remaining: Some(expires_at.saturating_duration_since(self.now)),
                },
                Record::Pending { .. } => {
                    return Err(Refused::Unexpected("a replay of a pending record".into()));
                }
            },
            "key_reuse" => Reply::KeyReuse {
                stored: self.record()?.fingerprint(),
            },
            _ => return self.common(),
        })
    }

    /// The reply to a complete.
    pub(crate) fn complete(&self) -> Result<Reply, Refused> {
        Ok(match self.reply.as_str() {
            "in_time" => Reply::Completed(Completion::InTime),
            "after_expiry" => Reply::Completed(Completion::AfterLeaseExpiry),
            "repeated" => Reply::Completed(Completion::Repeated),
            "not_owner" => Reply::Refused(Refusal::NotOwner),
            _ => return self.common(),
        })
    }

    /// The reply to a renew by `owner`.
    pub(crate) fn renew(&self, owner: OwnerToken) -> Result<Reply, Refused> {
        Ok(match self.reply.as_str() {
            "renewed" => Reply::Renewed(Reservation {
                owner,
                lease_until: Some(self.deadline()?),
                fence: self.fence()?,
            }),
            _ => return self.refusal(),
        })
    }

    /// The reply to a release.
    pub(crate) fn release(&self) -> Result<Reply, Refused> {
        Ok(match self.reply.as_str() {
            "released" => Reply::Released,
            _ => return self.refusal(),
        })
    }

    fn refusal(&self) -> Result<Reply, Refused> {
        Ok(Reply::Refused(match self.reply.as_str() {
            "lease_lost" => Refusal::LeaseLost,
            "not_owner" => Refusal::NotOwner,
            "already_completed" => Refusal::AlreadyCompleted,
            _ => return self.common(),
        }))
    }

    /// The reply to a read.
    pub(crate) fn read(&self) -> Result<Reply, Refused> {
        Ok(match self.reply.as_str() {
            "absent" => Reply::Read(None),
            "read" => Reply::Read(Some(self.record()?)),
            _ => return self.common(),
        })
    }
}

impl Found {
    /// Reads the record columns of a row (`state`, `owner`, `fingerprint`, `body`,
    /// `expires_at`, `fence`; all NULL for none): a statement's answer, or a row of the
    /// operator's listing, decoded by [`Found::record`] either way.
    pub(crate) fn from_row(row: &PgRow) -> Result<Self, sqlx::Error> {
        Ok(Self {
            state: row.try_get("state")?,
            owner: row.try_get("owner")?,
            fingerprint: row.try_get("fingerprint")?,
            body: row.try_get("body")?,
            expires_at: row.try_get("expires_at")?,
            fence: row.try_get("fence")?,
        })
    }

    /// The `fence` column: `None` when NULL, refused when it is no fence (zero or
    /// negative, which no sequence of this adapter hands out).
    fn fence(&self) -> Result<Option<Fence>, String> {
        self.fence
            .map(|value| Fence::try_from(value).map_err(|_| format!("a fence of {value}")))
            .transpose()
    }

    /// The record these columns hold, or what makes them not one this adapter wrote. The
    /// same rules as the statements' `{valid}` test.
    pub(crate) fn record(&self) -> Result<Record, String> {
        let state = self.state.ok_or("no row")?;
        let owner = self.owner.as_deref().ok_or("no owner")?;
        let owner: [u8; 16] = owner
            .try_into()
            .map_err(|_| format!("an owner of {} bytes, not 16", owner.len()))?;
        let fingerprint = self.fingerprint.as_deref().ok_or("no fingerprint")?;
        let fingerprint: [u8; 32] = fingerprint
            .try_into()
            .map_err(|_| format!("a fingerprint of {} bytes, not 32", fingerprint.len()))?;
        let expires_at = self.expires_at.ok_or("no deadline")?;
        let expires_at = u64::try_from(expires_at)
            .map(Timestamp::from_millis)
            .map_err(|_| format!("a deadline of {expires_at} ms, before 1970"))?;
        let (owner, fingerprint) = (
            OwnerToken::from_bytes(owner),
            Fingerprint::from_bytes(fingerprint),
        );
        let without_body = |result: StoredResult| match self.body {
            None => Ok(result),
            Some(_) => Err(format!("state {state} with a body")),
        };
        let result = match state {
            PENDING => {
                return match self.body {
                    None => Ok(Record::Pending {
                        owner,
                        fingerprint,
                        lease_until: expires_at,
                        fence: self.fence()?,
                    }),
                    Some(_) => Err("a pending record with a body".to_owned()),
                };
            }
            COMPLETED_VALUE => match &self.body {
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
}

/// The row codec on any column values: decoding never panics, a row it reads holds nothing it
/// drops (the record's own columns are the row's), and every record reads back as itself.
#[cfg(test)]
mod codec {
    use idem_core::Fence;
    use idem_core::record::Record;
    use idem_tests::records::{any_record, nullable_blob};
    use proptest::prelude::*;

    use super::{Found, PENDING, result_columns};

    /// The columns the statements write for `record` (`result_columns` for a completed
    /// one's state and body).
    fn columns(record: &Record) -> Found {
        let (state, body, fence) = match record {
            Record::Pending { fence, .. } => (PENDING, None, fence.map(Fence::get)),
            Record::Completed { result, .. } => {
                let (state, body) = result_columns(result);
                (state, body.map(<[u8]>::to_vec), None)
            }
        };
        Found {
            state: Some(state),
            owner: Some(record.owner().to_bytes().to_vec()),
            fingerprint: Some(record.fingerprint().to_bytes().to_vec()),
            body,
            expires_at: i64::try_from(record.expires_at().as_millis()).ok(),
            fence: fence.and_then(|fence| i64::try_from(fence).ok()),
        }
    }

    /// Whether two rows hold the same record. A completed row keeps the fence of the grant
    /// that wrote it (`migrate.sql`), which is no part of the completed record.
    fn same(a: &Found, b: &Found) -> bool {
        let fence = |found: &Found| found.fence.filter(|_| found.state == Some(PENDING));
        (
            a.state,
            &a.owner,
            &a.fingerprint,
            &a.body,
            a.expires_at,
            fence(a),
        ) == (
            b.state,
            &b.owner,
            &b.fingerprint,
            &b.body,
            b.expires_at,
            fence(b),
        )
    }

    fn found() -> impl Strategy<Value = Found> {
        (
            prop_oneof![
                Just(None),
                (-1i16..6).prop_map(Some),
                any::<i16>().prop_map(Some)
            ],
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
            .prop_map(
                |(state, owner, fingerprint, body, expires_at, fence)| Found {
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
        fn a_row_read_as_a_record_is_that_records_row(found in found()) {
            if let Ok(record) = found.record() {
                let written = columns(&record);
                prop_assert!(same(&written, &found), "{found:?} read as {record:?}, written back as {written:?}");
            }
        }

        #[test]
        fn every_record_reads_back_as_itself(record in any_record()) {
            prop_assert_eq!(columns(&record).record(), Ok(record));
        }
    }
}
