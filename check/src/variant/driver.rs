//! The driver variants: the store is the correct one, and the driver changes what it feeds
//! the attempt machine, or sends on its own, at an abnormal end (MODEL.md, rule 11).

use idem_core::{DownstreamKey, Fingerprint, Key, Operation, OwnerToken, Record, Timestamp};

use super::Variant;

impl Variant {
    /// Whether the variant is the driver's (the store is then the correct one).
    pub fn is_driver(self) -> bool {
        matches!(
            self,
            Variant::ReleaseOnAbandon
                | Variant::PanicReleases
                | Variant::CorruptFailsOpen
                | Variant::AbsentCommitRolledBack
                | Variant::DownstreamKeyPerAttempt
                | Variant::AckBeforeRecord
        )
    }

    /// Whether the message consumer acknowledges a delivery when its handler returns a
    /// value, before the complete that records it ([`Variant::AckBeforeRecord`]).
    pub fn acks_before_record(self) -> bool {
        self == Variant::AckBeforeRecord
    }

    /// Whether the driver, when an attached call is dropped while its action runs, releases
    /// the key itself after abandoning the attempt ([`Variant::ReleaseOnAbandon`]).
    pub fn releases_on_abandon(self) -> bool {
        self == Variant::ReleaseOnAbandon
    }

    /// Whether the driver feeds a panic as a failure ([`Variant::PanicReleases`]).
    pub fn feeds_panic_as_failure(self) -> bool {
        self == Variant::PanicReleases
    }

    /// Whether the driver feeds a "corrupt record" answer as a store failure
    /// ([`Variant::CorruptFailsOpen`]).
    pub fn feeds_corrupt_as_store_error(self) -> bool {
        self == Variant::CorruptFailsOpen
    }

    /// What the driver feeds a transactional attempt `owner` whose read of the record after
    /// a lost commit reply was answered `read`: the read itself, except under
    /// [`Variant::AbsentCommitRolledBack`], which feeds a read that finds no record of
    /// `owner`'s as `owner`'s own reservation (`fingerprint`, lasting until `now`), the one
    /// answer after which the attempt concludes its writes rolled back.
    pub fn fed_commit_read(
        self,
        read: Option<Record>,
        owner: OwnerToken,
        fingerprint: Fingerprint,
        now: Timestamp,
    ) -> Option<Record> {
        let ours = read.as_ref().is_some_and(|record| record.owner() == owner);
        if self == Variant::AbsentCommitRolledBack && !ours {
            Some(Record::Pending {
                owner,
                fingerprint,
                lease_until: now,
                fence: None,
            })
        } else {
            read
        }
    }

    /// The downstream key the driver hands the action of attempt `owner` under `operation`,
    /// whose call's own key (MODEL.md `D1`) is `call`: that one, except under
    /// [`Variant::DownstreamKeyPerAttempt`], which derives it from the attempt's owner
    /// token, so that every attempt sends its provider another key.
    pub fn downstream_key(
        self,
        call: DownstreamKey,
        operation: &Operation,
        owner: OwnerToken,
    ) -> DownstreamKey {
        if self == Variant::DownstreamKeyPerAttempt
            && let Ok(per_attempt) = Key::new(owner.to_string())
        {
            return DownstreamKey::derive(operation, &per_attempt);
        }
        call
    }
}
