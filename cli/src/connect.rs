//! Connecting to the store the command line names, with the settings an operator's tool
//! needs: nothing created, nothing refused that the tool is there to diagnose.

use std::time::Duration;

use idem_mysql::MySqlStore;
use idem_postgres::PostgresStore;
use idem_redis::{EvictionCheck, RedisStore};
use idem_sqlite::SqliteStore;

use crate::args::StoreArgs;
use crate::error::CliError;

/// How long one command of the tool may take at the store.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);

/// A store the tool is connected to.
#[derive(Debug)]
pub enum Connected {
    /// Redis, standalone or Cluster.
    Redis(RedisStore),
    /// PostgreSQL.
    Postgres(PostgresStore),
    /// MariaDB.
    MariaDb(MySqlStore),
    /// SQLite.
    Sqlite(SqliteStore),
}

/// Runs `$body` with `$store` bound to the connected store, whichever it is: the
/// subcommands are generic over [`idem::admin::AdminStore`].
macro_rules! with_store {
    ($connected:expr, $store:ident => $body:expr) => {
        match $connected {
            $crate::connect::Connected::Redis($store) => $body,
            $crate::connect::Connected::Postgres($store) => $body,
            $crate::connect::Connected::MariaDb($store) => $body,
            $crate::connect::Connected::Sqlite($store) => $body,
        }
    };
}
pub(crate) use with_store;

/// Connects to the one store `args` names.
pub async fn connect(args: &StoreArgs) -> Result<Connected, CliError> {
    let layout = &args.layout;
    let connect_error = |what: &str, error: &dyn std::fmt::Display| {
        CliError::Connect(format!("could not connect to {what}: {error}"))
    };
    if let Some(url) = &args.redis {
        let store = redis_builder(layout.prefix.as_deref())?
            .connect(url)
            .await
            .map_err(|e| connect_error(url, &e))?;
        return Ok(Connected::Redis(store));
    }
    if !args.redis_cluster.is_empty() {
        let store = redis_builder(layout.prefix.as_deref())?
            .connect_cluster(args.redis_cluster.iter().map(String::as_str))
            .await
            .map_err(|e| connect_error("the Redis Cluster", &e))?;
        return Ok(Connected::Redis(store));
    }
    if let Some(url) = &args.postgres {
        let mut builder = PostgresStore::builder()
            .command_timeout(COMMAND_TIMEOUT)
            .max_connections(2);
        if let Some(table) = &layout.table {
            builder = builder.table(
                idem_postgres::TableName::new(table).map_err(|e| CliError::Input(e.to_string()))?,
            );
        }
        let store = builder
            .connect(url)
            .await
            .map_err(|e| connect_error("PostgreSQL", &e))?;
        return Ok(Connected::Postgres(store));
    }
    if let Some(url) = &args.mariadb {
        let mut builder = MySqlStore::builder()
            .command_timeout(COMMAND_TIMEOUT)
            .max_connections(2);
        if let Some(table) = &layout.table {
            builder = builder.table(
                idem_mysql::TableName::new(table).map_err(|e| CliError::Input(e.to_string()))?,
            );
        }
        let store = builder
            .connect(url)
            .await
            .map_err(|e| connect_error("MariaDB", &e))?;
        return Ok(Connected::MariaDb(store));
    }
    if let Some(path) = &args.sqlite {
        // Opening creates a missing file; an operator's typo must not make an empty store.
        if !path.is_file() {
            return Err(CliError::Input(format!(
                "no SQLite database at {}",
                path.display()
            )));
        }
        let mut builder = SqliteStore::builder()
            .command_timeout(COMMAND_TIMEOUT)
            .group_commit(false);
        if let Some(table) = &layout.table {
            builder = builder.table(
                idem_sqlite::TableName::new(table).map_err(|e| CliError::Input(e.to_string()))?,
            );
        }
        let store = builder
            .open(path)
            .await
            .map_err(|e| connect_error(&path.display().to_string(), &e))?;
        return Ok(Connected::Sqlite(store));
    }
    Err(CliError::Input(
        "name a store: --redis URL, --redis-cluster URL, --postgres URL, --mariadb URL or \
         --sqlite PATH (or IDEM_REDIS, ... in the environment)"
            .to_owned(),
    ))
}

/// A Redis store that connects whatever the eviction policy (`health` is there to say it).
/// Notices stay on, so a release from here wakes the services' waiters as theirs would.
fn redis_builder(prefix: Option<&str>) -> Result<idem_redis::RedisStoreBuilder, CliError> {
    let mut builder = RedisStore::builder()
        .eviction_check(EvictionCheck::Skip)
        .command_timeout(COMMAND_TIMEOUT);
    if let Some(prefix) = prefix {
        idem_redis::KeyLayout::new(prefix).map_err(|e| CliError::Input(e.to_string()))?;
        builder = builder.prefix(prefix);
    }
    Ok(builder)
}
