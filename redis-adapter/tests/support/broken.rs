//! The deliberately broken stores of `idem_check`'s catalogue, played in front of the real
//! Redis store, for showing that a checker catches the bug it exists for: through the
//! driver ([`InFront`], an `idem::Store`) and in the differential ([`TimedInFront`], a
//! subject of the conformance kit).

use idem::{Store, StoreError};
use idem_check::{InFront as Play, Variant};
use idem_conformance::{Subject, Timing};
use idem_core::record::{Command, Record, Reply};
use idem_core::{Key, Operation, Timestamp};
use idem_redis::RedisStore;

use super::differential::scripts_now;

/// The key's live record, as the read script returns it, when `variant` needs it for
/// `command`.
async fn live_record(
    variant: Variant,
    store: &RedisStore,
    operation: &Operation,
    key: &Key,
    command: &Command,
) -> Result<Option<Record>, StoreError> {
    if !variant.reads_in_front(command) {
        return Ok(None);
    }
    match Store::apply(store, operation, key, Command::Read).await? {
        Reply::Read(record) => Ok(record),
        _ => Ok(None),
    }
}

/// A catalogue variant in front of a Redis store, seen by the driver.
#[derive(Debug)]
pub struct InFront {
    pub variant: Variant,
    pub store: RedisStore,
}

impl Store for InFront {
    async fn apply(
        &self,
        operation: &Operation,
        key: &Key,
        command: Command,
    ) -> Result<Reply, StoreError> {
        let live = live_record(self.variant, &self.store, operation, key, &command).await?;
        match self.variant.in_front(live.as_ref(), command) {
            Some(Play::Forward(command)) => self.store.apply(operation, key, command).await,
            Some(Play::Answer(reply)) => Ok(reply),
            Some(Play::ForwardThenAnswer(command, reply)) => {
                self.store.apply(operation, key, command).await?;
                Ok(reply)
            }
            None => panic!(
                "{} cannot be played in front of a store",
                self.variant.name()
            ),
        }
    }
}

/// A catalogue variant in front of a Redis store, seen by the differential checker: what it
/// forwards is timed by the server, what it answers itself at the instant of its read.
#[derive(Debug)]
pub struct TimedInFront {
    pub variant: Variant,
    pub store: RedisStore,
}

impl Subject for TimedInFront {
    type Store = RedisStore;

    fn store(&self) -> &RedisStore {
        &self.store
    }

    async fn now(&self) -> Result<Timestamp, StoreError> {
        scripts_now(&self.store).await
    }

    async fn apply_timed(
        &self,
        operation: &Operation,
        key: &Key,
        command: Command,
    ) -> Result<(Reply, Timing), StoreError> {
        let live = if self.variant.reads_in_front(&command) {
            match self.store.apply_timed(operation, key, Command::Read).await {
                Ok((Reply::Read(record), _)) => record,
                _ => None,
            }
        } else {
            None
        };
        match self.variant.in_front(live.as_ref(), command) {
            Some(Play::Forward(command)) => {
                let (reply, now) = self.store.apply_timed(operation, key, command).await?;
                Ok((reply, Timing::At(now)))
            }
            Some(Play::ForwardThenAnswer(command, reply)) => {
                let (_, now) = self.store.apply_timed(operation, key, command).await?;
                Ok((reply, Timing::At(now)))
            }
            Some(Play::Answer(_)) | None => panic!(
                "{} is not played in the differential: it answers without the store",
                self.variant.name()
            ),
        }
    }
}

/// The catalogue's driver variant `corrupt-fails-open` ([`Variant::CorruptFailsOpen`]),
/// played at the store's boundary in front of the real driver: a value that is not a record
/// is reported as unavailability, which the attempt retries and, under the default
/// fail-open policy, answers by running the action unprotected.
#[derive(Debug)]
pub struct CorruptFailsOpen(pub RedisStore);

impl Store for CorruptFailsOpen {
    async fn apply(
        &self,
        operation: &Operation,
        key: &Key,
        command: Command,
    ) -> Result<Reply, StoreError> {
        let kind = command.kind();
        match self.0.apply(operation, key, command).await {
            Err(StoreError::Corrupt { detail, .. })
                if Variant::CorruptFailsOpen.feeds_corrupt_as_store_error() =>
            {
                Err(StoreError::Unavailable {
                    command: kind,
                    source: detail.into(),
                })
            }
            other => other,
        }
    }
}
