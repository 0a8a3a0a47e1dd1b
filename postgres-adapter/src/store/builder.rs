//! [`PostgresStoreBuilder`]: the records table, the timeouts and the pool a
//! [`PostgresStore`] runs on.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use super::{Counters, DEFAULT_COMMAND_TIMEOUT, Inner, PostgresStore};
use crate::error::PostgresError;
use crate::sql::Statements;
use crate::table::TableName;

/// Settings for [`PostgresStore`]; see [`PostgresStore::builder`].
#[derive(Debug, Clone)]
pub struct PostgresStoreBuilder {
    table: TableName,
    command_timeout: Duration,
    statement_timeout: Option<Duration>,
    max_connections: u32,
    transaction_connections: u32,
    transaction_pool: Option<PgPool>,
    connect_timeout: Duration,
    read_first: bool,
}

impl Default for PostgresStoreBuilder {
    fn default() -> Self {
        Self {
            table: TableName::default(),
            command_timeout: DEFAULT_COMMAND_TIMEOUT,
            statement_timeout: None,
            max_connections: 16,
            transaction_connections: 16,
            transaction_pool: None,
            connect_timeout: Duration::from_secs(1),
            read_first: true,
        }
    }
}

impl PostgresStoreBuilder {
    /// The records table (default `idem_records`); see [`TableName`].
    #[must_use]
    pub fn table(mut self, table: TableName) -> Self {
        self.table = table;
        self
    }

    /// How long one command may take, waiting for a connection included (default
    /// [`DEFAULT_COMMAND_TIMEOUT`](idem::store::DEFAULT_COMMAND_TIMEOUT), 1 s, the same for
    /// every store). A command that takes longer fails with
    /// [`StoreError::Unavailable`](idem::StoreError::Unavailable), and the statement may
    /// still have run on the server. Its connection is closed then, and also when the
    /// caller drops the command first. A command sent with
    /// [`Store::apply_bounded`](idem::Store::apply_bounded), as the driver sends every
    /// command under the attempt's reply deadline, has no such timer: its caller drops it.
    /// Zero is raised to one millisecond.
    #[must_use]
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// The command timeout derived from the options of the coordinator this store serves
    /// ([`idem::store::command_timeout`]: twice its reply timeout), so that the two never
    /// disagree.
    #[must_use]
    pub fn options(self, options: &idem::Options) -> Self {
        self.command_timeout(idem::store::command_timeout(options))
    }

    /// The server-side `statement_timeout` of the connections this builder opens
    /// ([`connect`](Self::connect), [`connect_lazy`](Self::connect_lazy); default: the
    /// command timeout). The server cancels a statement that runs longer (a takeover
    /// waiting for a row lock, a stalled disk), so that it does not go on after the caller
    /// gave it up. A pool given to [`build`](Self::build) keeps its own settings.
    #[must_use]
    pub fn statement_timeout(mut self, timeout: Duration) -> Self {
        self.statement_timeout = Some(timeout.max(Duration::from_millis(1)));
        self
    }

    /// The most connections the pool of the store's own statements holds (default 16),
    /// when this builder opens it: reserves, renewals, completes outside a transaction,
    /// releases, reads and the sweep, each holding a connection for one statement.
    #[must_use]
    pub fn max_connections(mut self, connections: u32) -> Self {
        self.max_connections = connections.max(1);
        self
    }

    /// The most connections the pool of actions' transactions holds (default 16), when this
    /// builder opens it ([`connect`](Self::connect), [`connect_lazy`](Self::connect_lazy)).
    ///
    /// A transactional action ([`in_transaction`](crate::in_transaction), the HTTP layer's
    /// transaction) holds one connection for its whole run. On a pool of its own it can
    /// never take the connections the store's own statements need: the renewals that keep
    /// its lease, and every other call's reserve. **Sizing:** this pool bounds how many
    /// transactional actions run at once (one more waits for a connection, up to the
    /// connect timeout, and fails as its action's error, before anything ran); the
    /// statements' pool needs a connection per statement in flight, a few per busy process;
    /// the two together must fit the server's `max_connections` across every process. Its
    /// connections carry no `statement_timeout` of the store's: the action's own SQL keeps
    /// the server's setting.
    #[must_use]
    pub fn transaction_connections(mut self, connections: u32) -> Self {
        self.transaction_connections = connections.max(1);
        self
    }

    /// The pool actions' transactions are begun on, given by the service (default: one
    /// this builder opens, or with [`build`](Self::build) the statements' pool itself). Give
    /// one whenever the store is built on a pool of the service's: a transaction on the
    /// statements' pool holds a connection the lease's renewals may need.
    #[must_use]
    pub fn transaction_pool(mut self, pool: PgPool) -> Self {
        self.transaction_pool = Some(pool);
        self
    }

    /// How long opening a connection may take (default 1 s).
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// Whether a reserve first reads the key with a plain primary-key `SELECT` (default
    /// on). A live record (a replay, key reuse, an identical request in flight) is then
    /// answered by that one read, as cheap as a bare `SELECT`; only a free or expired key
    /// goes on to the reserve statement, one more statement on a fresh call. Off, every
    /// reserve is the one reserve statement, which answers a live record as well but costs
    /// the server more (it carries the `INSERT` it did not need). Either way the replies are
    /// the record machine's.
    #[must_use]
    pub fn read_first(mut self, on: bool) -> Self {
        self.read_first = on;
        self
    }

    /// A store on `pool`, whose connections keep their own settings. The table must exist
    /// ([`PostgresStore::migrate`]). Actions' transactions are begun on the
    /// [`transaction_pool`](Self::transaction_pool) if one was given, else on `pool` too:
    /// then size `pool` for both (see [`transaction_connections`](Self::transaction_connections)).
    pub fn build(self, pool: PgPool) -> PostgresStore {
        let transactions = self
            .transaction_pool
            .clone()
            .unwrap_or_else(|| pool.clone());
        self.build_on(pool, transactions)
    }

    fn build_on(self, pool: PgPool, transactions: PgPool) -> PostgresStore {
        PostgresStore {
            inner: Arc::new(Inner {
                sql: Statements::new(&self.table),
                table: self.table,
                pool,
                transactions,
                command_timeout: self.command_timeout,
                read_first: self.read_first,
                counters: Counters::default(),
            }),
        }
    }

    /// Connects to the database at `url` (`postgres://user@host:port/db`), opening one
    /// connection now, so that a wrong URL or an unreachable server shows at start-up.
    pub async fn connect(self, url: &str) -> Result<PostgresStore, PostgresError> {
        let (options, pool, transactions) = self.pool_options(url)?;
        let pool = pool
            .connect_with(options.clone())
            .await
            .map_err(PostgresError::Database)?;
        let transactions = match self.transaction_pool.clone() {
            Some(given) => given,
            None => transactions.connect_lazy_with(without_statement_timeout(options)),
        };
        Ok(self.build_on(pool, transactions))
    }

    /// As [`connect`](Self::connect), but connects on the first command, so that a service
    /// can start while the database is down: its calls then fail open or closed as
    /// configured, and succeed once the server is up. Only a malformed URL is refused.
    /// Must be called inside a tokio runtime.
    pub fn connect_lazy(self, url: &str) -> Result<PostgresStore, PostgresError> {
        let (options, pool, transactions) = self.pool_options(url)?;
        let transactions = match self.transaction_pool.clone() {
            Some(given) => given,
            None => transactions.connect_lazy_with(without_statement_timeout(options.clone())),
        };
        let pool = pool.connect_lazy_with(options);
        Ok(self.build_on(pool, transactions))
    }

    /// The statements' connection options, and the two pools' settings.
    fn pool_options(
        &self,
        url: &str,
    ) -> Result<(PgConnectOptions, PgPoolOptions, PgPoolOptions), PostgresError> {
        let timeout = self.statement_timeout.unwrap_or(self.command_timeout);
        let options = PgConnectOptions::from_str(url)
            .map_err(PostgresError::Config)?
            .options([("statement_timeout", timeout.as_millis().to_string())]);
        let pool = PgPoolOptions::new()
            .max_connections(self.max_connections)
            .acquire_timeout(self.connect_timeout);
        let transactions = PgPoolOptions::new()
            .max_connections(self.transaction_connections)
            .acquire_timeout(self.connect_timeout);
        Ok((options, pool, transactions))
    }
}

/// The connection options for actions' transactions: the statements' own, but for the
/// store's `statement_timeout`, which is for the store's statements and not the action's.
fn without_statement_timeout(options: PgConnectOptions) -> PgConnectOptions {
    options.options([("statement_timeout", "0")])
}
