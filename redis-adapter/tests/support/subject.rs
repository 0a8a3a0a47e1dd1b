//! The Redis store as the conformance kit's subject (`idem_conformance::Subject`), standalone
//! or on a Cluster: used by the kit's run on every store (`idem-tests`, test `conformance`).

use idem::{BoxError, StoreError};
use idem_conformance::Subject;
use idem_core::record::CommandKind;
use idem_core::{Key, Operation, Timestamp};
use idem_redis::RedisStore;
use redis::aio::ConnectionLike;

fn unavailable(command: CommandKind) -> impl FnOnce(redis::RedisError) -> StoreError {
    move |error| StoreError::Unavailable {
        command,
        source: Box::new(error),
    }
}

/// A Redis store, standalone or on a Cluster, with a plain connection for the server's clock
/// (`TIME`) and for planting values. Commands go through `Store::apply`, fast paths and all,
/// and are placed between two reads of the clock.
pub struct OnRedis<C> {
    pub store: RedisStore,
    pub conn: C,
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> Subject for OnRedis<C> {
    type Store = RedisStore;

    fn store(&self) -> &RedisStore {
        &self.store
    }

    async fn now(&self) -> Result<Timestamp, StoreError> {
        let (secs, micros): (u64, u64) = redis::cmd("TIME")
            .query_async(&mut self.conn.clone())
            .await
            .map_err(unavailable(CommandKind::Read))?;
        Ok(Timestamp::from_millis(secs * 1000 + micros / 1000))
    }

    /// Notices are on by default (`RedisStoreBuilder::watch`).
    fn notifies(&self) -> bool {
        true
    }

    async fn plant_corrupt(&self, operation: &Operation, key: &Key) -> Result<bool, BoxError> {
        redis::cmd("SET")
            .arg(self.store.layout().record_key(operation, key))
            .arg("not a record of idem")
            .query_async::<()>(&mut self.conn.clone())
            .await?;
        Ok(true)
    }
}
