//! What an operator asks of a store: the records it holds, who holds a key and for how
//! long, whether a stuck key may be let go, and whether the store keeps records as idem
//! needs (MODEL.md, "The operator's tools").
//!
//! Every store crate implements [`AdminStore`] with its own layout and codec, the ones its
//! [`Store`] reads and writes, so a tool built on this trait (the `idem` command) never
//! reads a record any other way than the library does. Everything here is for a person or a
//! script looking at a store, not for the attempt: nothing in [`Coordinator`] calls it.
//!
//! Two rules keep the operator's writes safe:
//!
//! - **Releasing a key is the record machine's `Release`**, sent with the owner token read
//!   from the record ([`Command::Release`]): the store
//!   refuses it if the holder completed or released meanwhile, and a waiter is woken as for
//!   any release. Whether to send it while the lease lives is the operator's choice; a
//!   release under a live lease lets a retry run the action while the holder may still be
//!   running (a second effect, which MODEL.md names as the operator's).
//! - **Forgetting a record** ([`AdminStore::forget`]) deletes it only if it is still the
//!   record of the owner the operator read *and* it is completed or its lease has run out,
//!   both judged by the store at the delete: a record written after the read, or a lease
//!   that lives, is never deleted by it.
//!
//! [`Coordinator`]: crate::Coordinator

use std::fmt;
use std::future::Future;
use std::time::Duration;

use idem_core::record::{Command, Record, Reply, StoredResult};
use idem_core::{Key, Operation, OwnerToken, Timestamp};
use thiserror::Error;

use crate::store::{BoxError, Store, StoreError};

/// A record read at one instant of the store's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inspection {
    /// The store's clock when it read the record.
    pub now: Timestamp,
    /// The live record, or `None` for an absent or expired key.
    pub record: Option<Record>,
}

impl Inspection {
    /// What the record is, at [`now`](Self::now).
    pub fn state(&self) -> RecordState {
        match &self.record {
            None => RecordState::Absent,
            Some(record) => RecordState::of(record, self.now),
        }
    }

    /// How long the lease (of a pending record) or the retention (of a completed one) has
    /// left at [`now`](Self::now).
    pub fn time_left(&self) -> Option<Duration> {
        self.record
            .as_ref()
            .map(|record| record.expires_at().saturating_duration_since(self.now))
    }
}

/// The state of a record as an operator sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RecordState {
    /// Held by a running attempt whose lease lives.
    Pending,
    /// Held by an attempt whose lease ran out, not yet taken over or swept: it reads as
    /// absent (`I9`); a store that drops records at their deadline (Redis) never shows it.
    Expired,
    /// Completed with a result (or with its result not stored).
    Completed,
    /// Completed as "outcome unknown": the action panicked (rule 11).
    Panicked,
    /// Nothing under the key.
    Absent,
}

impl RecordState {
    /// The state of `record` at the store's `now`.
    pub fn of(record: &Record, now: Timestamp) -> Self {
        match record {
            _ if record.is_expired(now) => match record {
                Record::Pending { .. } => RecordState::Expired,
                Record::Completed { .. } => RecordState::Absent,
            },
            Record::Pending { .. } => RecordState::Pending,
            Record::Completed {
                result: StoredResult::Panicked,
                ..
            } => RecordState::Panicked,
            Record::Completed { .. } => RecordState::Completed,
        }
    }

    /// Its name in the tool's output and JSON: `pending`, `expired`, `completed`,
    /// `panicked`, `absent`.
    pub fn name(self) -> &'static str {
        match self {
            RecordState::Pending => "pending",
            RecordState::Expired => "expired",
            RecordState::Completed => "completed",
            RecordState::Panicked => "panicked",
            RecordState::Absent => "absent",
        }
    }
}

impl fmt::Display for RecordState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which records [`AdminStore::list`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ListFilter {
    /// Pending records: leases that live, and those that ran out and were not taken over.
    #[default]
    InFlight,
    /// Every record the store holds.
    All,
}

/// One page request of [`AdminStore::list`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListQuery {
    /// Only records of this operation (with or without a tenant scope: a scoped operation
    /// matches its base name), or every operation.
    pub operation: Option<Operation>,
    /// Which records.
    pub filter: ListFilter,
    /// Where the page starts: `None` for the first, then the previous page's
    /// [`next`](ListPage::next).
    pub after: Option<Cursor>,
    /// About this many records in the page: a store may return fewer and still have more,
    /// and one that lists in batches (Redis `SCAN`) ends the page with the batch that
    /// reaches the limit, so it may return a few more.
    pub limit: u32,
}

impl ListQuery {
    /// The first page of in-flight records of every operation, 100 at most.
    pub fn in_flight() -> Self {
        Self {
            operation: None,
            filter: ListFilter::InFlight,
            after: None,
            limit: 100,
        }
    }

    /// Whether a record of `operation` in state `state` belongs in this listing.
    pub fn matches(&self, operation: &Operation, state: RecordState) -> bool {
        let operation_matches = self.operation.as_ref().is_none_or(|wanted| {
            wanted == operation || wanted.as_str() == operation.tenant_scope().0
        });
        let state_matches = match self.filter {
            ListFilter::InFlight => matches!(state, RecordState::Pending | RecordState::Expired),
            ListFilter::All => state != RecordState::Absent,
        };
        operation_matches && state_matches
    }
}

/// Where a listing goes on: opaque, made by the store that returned it and read only by it
/// (a Redis SCAN cursor per node, the last SQL key seen).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Cursor(pub String);

impl Cursor {
    /// The cursor after `(operation, key)` in a listing ordered by those two names (keyset
    /// pages, as the SQL stores list): both names in full, the operation's length first, so
    /// any two strings (a row idem did not write included) make a cursor that reads back.
    pub fn after(operation: &str, key: &str) -> Self {
        Cursor(format!("{}:{operation}{key}", operation.len()))
    }

    /// The `(operation, key)` a cursor made by [`after`](Self::after) names; a cursor made
    /// otherwise is [`AdminError::Corrupt`].
    pub fn position(&self) -> Result<(String, String), AdminError> {
        let refused = || AdminError::Corrupt(format!("{:?} is not a cursor of this store", self.0));
        let (len, rest) = self.0.split_once(':').ok_or_else(refused)?;
        let len: usize = len.parse().map_err(|_| refused())?;
        if !rest.is_char_boundary(len) {
            return Err(refused());
        }
        let (operation, key) = rest.split_at(len);
        Ok((operation.to_owned(), key.to_owned()))
    }
}

/// What a keyset listing read at one position: a record, or a value the store did not
/// write (named, and left for a person to look at).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scanned {
    /// A record the store wrote.
    Record(Listed),
    /// A row or value under `(operation, key)` that is not a record of this store.
    Corrupt {
        /// The operation column or name as stored.
        operation: String,
        /// The key as stored.
        key: String,
        /// How the backend names the row (table and names), for the operator.
        name: String,
    },
}

impl Scanned {
    /// What a listing read under `(operation, key)`: the record `decoded` (a [`Listed`]), or,
    /// when decoding it found a value the store did not write ([`AdminError::Corrupt`],
    /// whose message names it), that value; any other error ends the listing.
    pub fn from_decoded(
        operation: String,
        key: String,
        decoded: Result<Listed, AdminError>,
    ) -> Result<Self, AdminError> {
        match decoded {
            Ok(listed) => Ok(Scanned::Record(listed)),
            Err(AdminError::Corrupt(name)) => Ok(Scanned::Corrupt {
                operation,
                key,
                name,
            }),
            Err(other) => Err(other),
        }
    }

    fn position(&self) -> (&str, &str) {
        match self {
            Scanned::Record(listed) => (listed.operation.as_str(), listed.key.as_str()),
            Scanned::Corrupt { operation, key, .. } => (operation, key),
        }
    }
}

/// One record in a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// The operation it is held under (tenant scope included).
    pub operation: Operation,
    /// Its key.
    pub key: Key,
    /// The record as the store holds it (an expired pending record included).
    pub record: Record,
}

/// A page of [`AdminStore::list`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListPage {
    /// The store's clock when the page was read (for every record's time left).
    pub now: Timestamp,
    /// The records, in the store's order.
    pub records: Vec<Listed>,
    /// The cursor of the next page, or `None` when this was the last.
    pub next: Option<Cursor>,
    /// Keys in the page's range that hold a value this store did not write (as the backend
    /// names them), left for a person to look at.
    pub corrupt: Vec<String>,
}

impl ListPage {
    /// The page made of what a keyset listing scanned in order, read with `limit + 1` so
    /// that one more tells whether there are more: the first `limit`, a cursor after the last
    /// of them when there were more, and the records [`ListQuery::matches`] keeps (applied
    /// after the cursor is taken, so a record left out never makes a page skip another).
    pub fn from_scanned(query: &ListQuery, now: Timestamp, mut scanned: Vec<Scanned>) -> Self {
        let limit = usize::try_from(query.limit.max(1)).unwrap_or(usize::MAX);
        let more = scanned.len() > limit;
        scanned.truncate(limit);
        let next = match scanned.last() {
            Some(last) if more => {
                let (operation, key) = last.position();
                Some(Cursor::after(operation, key))
            }
            _ => None,
        };
        let mut page = ListPage {
            now,
            records: Vec::new(),
            next,
            corrupt: Vec::new(),
        };
        for scanned in scanned {
            match scanned {
                Scanned::Record(listed) => {
                    if query.matches(&listed.operation, RecordState::of(&listed.record, now)) {
                        page.records.push(listed);
                    }
                }
                Scanned::Corrupt { name, .. } => page.corrupt.push(name),
            }
        }
        page
    }
}

/// Counts of one operation's records, by state.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OperationStats {
    /// The operation name as stored (tenant scope included).
    pub operation: String,
    /// Pending with a live lease.
    pub pending: u64,
    /// Pending with a lease that ran out, not yet taken over or swept.
    pub expired: u64,
    /// Completed with a stored result or without one.
    pub completed: u64,
    /// Completed as "outcome unknown".
    pub panicked: u64,
    /// Stored result bytes, summed over completed records.
    pub body_bytes: u64,
    /// The largest stored result, in bytes.
    pub largest_body: u64,
}

impl OperationStats {
    /// Adds `record`, read at the store's `now`.
    pub fn add(&mut self, record: &Record, now: Timestamp) {
        match RecordState::of(record, now) {
            RecordState::Pending => self.pending += 1,
            RecordState::Expired => self.expired += 1,
            RecordState::Completed => self.completed += 1,
            RecordState::Panicked => self.panicked += 1,
            RecordState::Absent => return,
        }
        if let Record::Completed { result, .. } = record {
            let len = result.value().map_or(0, |body| body.len() as u64);
            self.body_bytes += len;
            self.largest_body = self.largest_body.max(len);
        }
    }

    /// Every record counted.
    pub fn total(&self) -> u64 {
        self.pending + self.expired + self.completed + self.panicked
    }
}

/// Counts of a store's records by operation and state.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StoreStats {
    /// One entry per operation, sorted by name.
    pub operations: Vec<OperationStats>,
    /// Keys holding a value this store did not write, where the store reads every record to
    /// count (Redis); the SQL stores count in SQL by state and leave such rows out (`list
    /// --all` names them).
    pub corrupt: u64,
}

impl StoreStats {
    /// Adds `record` of `operation`, read at the store's `now`.
    pub fn add(&mut self, operation: &str, record: &Record, now: Timestamp) {
        let at = match self
            .operations
            .binary_search_by(|entry| entry.operation.as_str().cmp(operation))
        {
            Ok(at) => at,
            Err(at) => {
                let entry = OperationStats {
                    operation: operation.to_owned(),
                    ..OperationStats::default()
                };
                self.operations.insert(at, entry);
                at
            }
        };
        self.operations[at].add(record, now);
    }
}

/// How a health check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Status {
    /// As idem needs it.
    Ok,
    /// Works, but an operator should look (a clock far off, a pool at its limit).
    Warn,
    /// The store can lose records or refuse idem's commands as it is.
    Fail,
}

impl Status {
    /// `ok`, `warn` or `fail`.
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "fail",
        }
    }
}

/// One thing [`AdminStore::health`] looked at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheck {
    /// What was checked: `eviction`, `layout`, `scripts`, `clock`, `pool`, …
    pub name: String,
    /// How it came out.
    pub status: Status,
    /// What was found, and for anything but `ok`, why it matters and what to do.
    pub detail: String,
}

impl HealthCheck {
    /// A check named `name`.
    pub fn new(name: impl Into<String>, status: Status, detail: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            status,
            detail: detail.into(),
        }
    }
}

/// What [`AdminStore::health`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    /// The checks, in the order the store made them.
    pub checks: Vec<HealthCheck>,
}

impl Health {
    /// The worst status of any check (`Ok` when there are none).
    pub fn status(&self) -> Status {
        self.checks
            .iter()
            .map(|check| check.status)
            .max()
            .unwrap_or(Status::Ok)
    }
}

/// The clock check every store makes: the store's clock against this machine's, read
/// around it (`before` and `after` on this machine, `store` in between).
///
/// Leases and retention are judged by the store's clock (rule 10), so an offset does not
/// break idem; it does make the tool's view of "time left" and the services' logs disagree
/// with the store. Warned from 1 s off.
pub fn clock_check(before: Timestamp, store: Timestamp, after: Timestamp) -> HealthCheck {
    let round_trip = after.saturating_duration_since(before);
    let local = before.saturating_add(round_trip / 2);
    let (ahead, offset) = if store >= local {
        (true, store.saturating_duration_since(local))
    } else {
        (false, local.saturating_duration_since(store))
    };
    let status = if offset >= Duration::from_secs(1) {
        Status::Warn
    } else {
        Status::Ok
    };
    let detail = format!(
        "the store's clock is {} ms {} this machine's (read in {} ms){}",
        offset.as_millis(),
        if ahead { "ahead of" } else { "behind" },
        round_trip.as_millis(),
        if status == Status::Warn {
            "; leases are judged by the store's clock, so records are safe, but this \
             machine's \"time left\" and the services' logs disagree with the store"
        } else {
            ""
        }
    );
    HealthCheck::new("clock", status, detail)
}

/// What a store's connection pool holds, for [`pool_check`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolState {
    /// Connections open.
    pub open: u32,
    /// Of those, idle.
    pub idle: u32,
    /// The most the pool opens.
    pub max: u32,
    /// The pool was closed: every command fails.
    pub closed: bool,
}

/// The check of one connection pool named `name`: `fail` when closed, `warn` when every
/// connection is open and in use (a command then waits for one, and a lease's renewal with
/// it), `ok` otherwise.
pub fn pool_check(name: &str, pool: PoolState) -> HealthCheck {
    let PoolState {
        open,
        idle,
        max,
        closed,
    } = pool;
    if closed {
        HealthCheck::new(
            name,
            Status::Fail,
            "the pool is closed: restart the service",
        )
    } else if open >= max && idle == 0 {
        HealthCheck::new(
            name,
            Status::Warn,
            format!("all {max} connections in use: commands wait for one; raise the limit"),
        )
    } else {
        HealthCheck::new(
            name,
            Status::Ok,
            format!("{open} of {max} connections open, {idle} idle"),
        )
    }
}

/// A store's clock read as milliseconds since the Unix epoch, as a [`Timestamp`]; a reading
/// before 1970 is the store's fault, said as such.
pub fn store_clock(millis: i64) -> Result<Timestamp, AdminError> {
    u64::try_from(millis)
        .map(Timestamp::from_millis)
        .map_err(|_| {
            AdminError::Unavailable(
                format!("the store's clock reads {millis} ms, before 1970").into(),
            )
        })
}

/// Why an operator's command could not be answered.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum AdminError {
    /// The store failed or did not answer; a write's effect is unknown.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The store could not be reached or answered with an error.
    #[error("store unavailable: {0}")]
    Unavailable(#[source] BoxError),
    /// A stored record (or a cursor given back) is not one this store wrote.
    #[error("{0}")]
    Corrupt(String),
    /// This store does not do that (a Redis store drops expired records itself: no sweep).
    #[error("{0}")]
    Unsupported(String),
}

/// What a record machine's release answered for an operator ([`AdminStore::release`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Released {
    /// The key is free: the record of `owner` is gone.
    Released,
    /// The record changed since it was read (the holder completed, released, or lost the
    /// key to a takeover): nothing was done.
    Changed,
}

/// A store an operator can look into and tidy up; see the [module docs](self).
pub trait AdminStore: Store {
    /// What the store is, for the tool's output: `redis`, `redis cluster`, `postgresql`, …
    fn kind(&self) -> String;

    /// The record under `key` of `operation`, read at the store's clock.
    fn inspect<'a>(
        &'a self,
        operation: &'a Operation,
        key: &'a Key,
    ) -> impl Future<Output = Result<Inspection, AdminError>> + Send + 'a;

    /// A page of the records `query` asks for.
    fn list<'a>(
        &'a self,
        query: &'a ListQuery,
    ) -> impl Future<Output = Result<ListPage, AdminError>> + Send + 'a;

    /// Deletes the record under `key` if it still holds `owner`'s record and that record
    /// is completed or its lease has run out at the store's clock, in one atomic step;
    /// `Ok(false)` if the key holds anything else (or nothing, or a live lease).
    fn forget<'a>(
        &'a self,
        operation: &'a Operation,
        key: &'a Key,
        owner: OwnerToken,
    ) -> impl Future<Output = Result<bool, AdminError>> + Send + 'a;

    /// Counts of every record by operation and state, and their sizes.
    fn stats(&self) -> impl Future<Output = Result<StoreStats, AdminError>> + Send + '_;

    /// Whether the store keeps records as idem needs: eviction, layout, scripts, clock,
    /// connections.
    fn health(&self) -> impl Future<Output = Result<Health, AdminError>> + Send + '_;

    /// Deletes up to `batch` expired records and says how many; `Unsupported` on a store
    /// that drops records at their deadline itself.
    fn sweep(&self, batch: u32) -> impl Future<Output = Result<u64, AdminError>> + Send + '_;

    /// Sends the record machine's release for the pending record of `owner` under `key`
    /// (see the [module docs](self) for what a release under a live lease means).
    fn release<'a>(
        &'a self,
        operation: &'a Operation,
        key: &'a Key,
        owner: OwnerToken,
    ) -> impl Future<Output = Result<Released, AdminError>> + Send + 'a {
        async move {
            match self
                .apply(operation, key, Command::Release { owner })
                .await?
            {
                Reply::Released => Ok(Released::Released),
                _ => Ok(Released::Changed),
            }
        }
    }
}

/// This machine's clock as a [`Timestamp`] on the Unix epoch, for [`clock_check`].
pub fn system_now() -> Timestamp {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Timestamp::from_millis(u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use idem_core::{Body, Fence, Fingerprint};

    use super::*;

    fn pending(until: u64) -> Record {
        Record::Pending {
            owner: OwnerToken::from_u128(1),
            fingerprint: Fingerprint::of_bytes(b"f"),
            lease_until: Timestamp::from_millis(until),
            fence: Fence::new(3),
        }
    }

    fn completed(result: StoredResult) -> Record {
        Record::Completed {
            owner: OwnerToken::from_u128(1),
            fingerprint: Fingerprint::of_bytes(b"f"),
            result,
            expires_at: Timestamp::from_millis(1_000),
        }
    }

    #[test]
    fn states_are_judged_at_the_stores_instant() {
        let at = Timestamp::from_millis;
        assert_eq!(RecordState::of(&pending(100), at(99)), RecordState::Pending);
        assert_eq!(
            RecordState::of(&pending(100), at(100)),
            RecordState::Expired
        );
        let value = completed(StoredResult::Value(Body::new(b"x")));
        assert_eq!(RecordState::of(&value, at(999)), RecordState::Completed);
        assert_eq!(RecordState::of(&value, at(1_000)), RecordState::Absent);
        let panicked = completed(StoredResult::Panicked);
        assert_eq!(RecordState::of(&panicked, at(0)), RecordState::Panicked);
        let inspection = Inspection {
            now: at(40),
            record: Some(pending(100)),
        };
        assert_eq!(inspection.time_left(), Some(Duration::from_millis(60)));
    }

    #[test]
    fn a_listing_matches_an_operation_its_tenants_and_the_states_asked_for() {
        let charge = Operation::new("charge").unwrap();
        let scoped = charge.for_tenant("t").unwrap();
        let other = Operation::new("charge.x").unwrap();
        let query = ListQuery {
            operation: Some(charge.clone()),
            ..ListQuery::in_flight()
        };
        assert!(query.matches(&charge, RecordState::Pending));
        assert!(query.matches(&scoped, RecordState::Expired));
        assert!(!query.matches(&other, RecordState::Pending));
        assert!(!query.matches(&charge, RecordState::Completed));
        let all = ListQuery {
            filter: ListFilter::All,
            ..query
        };
        assert!(all.matches(&charge, RecordState::Panicked));
        assert!(!all.matches(&charge, RecordState::Absent));
    }

    #[test]
    fn keyset_cursors_read_back_any_names_and_pages_go_past_foreign_rows() {
        for (operation, key) in [("charge", "k 1"), ("a:b", ""), ("", "x"), ("é", "ü:")] {
            let cursor = Cursor::after(operation, key);
            assert_eq!(
                cursor.position().unwrap(),
                (operation.to_owned(), key.to_owned())
            );
        }
        for bad in ["", "x", "9:ab", "1:\u{e9}"] {
            assert!(Cursor(bad.to_owned()).position().is_err(), "{bad:?}");
        }
        let charge = Operation::new("charge").unwrap();
        let record = |key: &str| {
            Scanned::Record(Listed {
                operation: charge.clone(),
                key: Key::new(key).unwrap(),
                record: pending(100),
            })
        };
        let foreign = |key: &str| Scanned::Corrupt {
            operation: "charge".to_owned(),
            key: key.to_owned(),
            name: format!("row {key}"),
        };
        let query = ListQuery {
            limit: 2,
            ..ListQuery::in_flight()
        };
        let now = Timestamp::from_millis(10);
        // A page of foreign rows alone still moves on, after the last of them.
        let page =
            ListPage::from_scanned(&query, now, vec![foreign("a"), foreign("b"), record("c")]);
        assert!(page.records.is_empty());
        assert_eq!(page.corrupt, ["row a", "row b"]);
        assert_eq!(page.next, Some(Cursor::after("charge", "b")));
        let last = ListPage::from_scanned(&query, now, vec![record("c")]);
        assert_eq!((last.records.len(), last.next), (1, None));
    }

    #[test]
    fn stats_count_by_operation_and_size_and_clocks_warn_from_a_second() {
        let mut stats = StoreStats::default();
        let now = Timestamp::from_millis(50);
        stats.add("b", &pending(100), now);
        stats.add(
            "a",
            &completed(StoredResult::Value(Body::new(vec![0; 7]))),
            now,
        );
        stats.add(
            "a",
            &completed(StoredResult::Value(Body::new(vec![0; 3]))),
            now,
        );
        stats.add("a", &pending(10), now);
        let names: Vec<&str> = stats
            .operations
            .iter()
            .map(|op| op.operation.as_str())
            .collect();
        assert_eq!(names, ["a", "b"]);
        let a = &stats.operations[0];
        assert_eq!(
            (a.completed, a.expired, a.body_bytes, a.largest_body),
            (2, 1, 10, 7)
        );
        assert_eq!(a.total(), 3);

        let at = Timestamp::from_millis;
        assert_eq!(
            clock_check(at(10_000), at(10_500), at(10_020)).status,
            Status::Ok
        );
        let ahead = clock_check(at(10_000), at(11_100), at(10_020));
        assert_eq!(ahead.status, Status::Warn);
        assert!(ahead.detail.contains("1090 ms ahead"), "{}", ahead.detail);
        let behind = clock_check(at(10_000), at(8_000), at(10_000));
        assert!(
            behind.detail.contains("2000 ms behind"),
            "{}",
            behind.detail
        );
        let health = Health {
            checks: vec![ahead, HealthCheck::new("eviction", Status::Fail, "x")],
        };
        assert_eq!(health.status(), Status::Fail);
    }
}
