//! Deliberately broken stores, for showing that a checker catches the bug it exists for.

use idem::{Store, StoreError};
use idem_core::record::{Command, Reply, Reservation};
use idem_core::{Key, Operation, Timestamp};
use idem_redis::RedisStore;

/// A result cache in front of Redis instead of a reservation: look the key up, run if
/// absent, store the result. Its reserve reads and, finding nothing, answers `Reserved`
/// without writing anything, so concurrent callers all run the action.
#[derive(Debug)]
pub struct ResultCache(pub RedisStore);

impl Store for ResultCache {
    async fn apply(
        &self,
        operation: &Operation,
        key: &Key,
        command: Command,
    ) -> Result<Reply, StoreError> {
        if let Command::Reserve { owner, .. } = &command
            && self.0.apply(operation, key, Command::Read).await? == Reply::Read(None)
        {
            return Ok(Reply::Reserved(Reservation {
                owner: *owner,
                lease_until: Some(Timestamp::from_millis(u64::MAX)),
            }));
        }
        self.0.apply(operation, key, command).await
    }
}

/// The old handling of a corrupt record: as if the store could not be reached. A value that
/// is not a record then counts as unavailability, which the attempt retries and, under the
/// default fail-open policy, answers by running the action unprotected.
#[derive(Debug)]
pub struct CorruptAsUnavailable(pub RedisStore);

impl Store for CorruptAsUnavailable {
    async fn apply(
        &self,
        operation: &Operation,
        key: &Key,
        command: Command,
    ) -> Result<Reply, StoreError> {
        let kind = command.kind();
        match self.0.apply(operation, key, command).await {
            Err(StoreError::Corrupt { detail, .. }) => Err(StoreError::Unavailable {
                command: kind,
                source: detail.into(),
            }),
            other => other,
        }
    }
}
