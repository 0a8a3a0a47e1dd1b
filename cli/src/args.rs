//! The command line: which store, which subcommand.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Look into idem's stores: stuck keys, health, counts, sweeps.
///
/// Every subcommand reads records through the same layout and codec as the library, judges
/// leases and retention by the store's own clock, and prints JSON with --json.
#[derive(Debug, Parser)]
#[command(name = "idem", version, about, long_about = None, max_term_width = 80)]
#[command(group(
    clap::ArgGroup::new("store")
        .args(["redis", "redis_cluster", "postgres", "mariadb", "sqlite"])
        .multiple(false)
))]
pub struct Cli {
    /// The store to look into.
    #[command(flatten)]
    pub store: StoreArgs,
    /// Print JSON (one document) instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// One store (naming two is refused).
#[derive(Debug, Args)]
pub struct StoreArgs {
    /// A standalone Redis: redis://host:port[/db].
    #[arg(long, env = "IDEM_REDIS", value_name = "URL")]
    pub redis: Option<String>,
    /// A Redis Cluster: one or more nodes' URLs (comma-separated or repeated).
    #[arg(
        long,
        env = "IDEM_REDIS_CLUSTER",
        value_name = "URL",
        value_delimiter = ','
    )]
    pub redis_cluster: Vec<String>,
    /// PostgreSQL: postgres://user@host:port/db.
    #[arg(long, env = "IDEM_POSTGRES", value_name = "URL")]
    pub postgres: Option<String>,
    /// MariaDB: mysql://user@host:port/db.
    #[arg(long, alias = "mysql", env = "IDEM_MARIADB", value_name = "URL")]
    pub mariadb: Option<String>,
    /// SQLite: the database file (never created here).
    #[arg(long, env = "IDEM_SQLITE", value_name = "PATH")]
    pub sqlite: Option<PathBuf>,
    /// Settings of the store, as the services set them.
    #[command(flatten)]
    pub layout: LayoutArgs,
}

/// Where the services keep their records, if not where idem puts them by default.
#[derive(Debug, Args)]
pub struct LayoutArgs {
    /// The Redis key prefix the services use.
    #[arg(long, env = "IDEM_PREFIX", value_name = "PREFIX", global = true)]
    pub prefix: Option<String>,
    /// The SQL table the services use.
    #[arg(long, env = "IDEM_TABLE", value_name = "TABLE", global = true)]
    pub table: Option<String>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// What the store holds for one key: state, owner, time left, result size.
    Inspect {
        #[command(flatten)]
        target: Target,
        /// Print the stored result too (as text, or hex if it is not UTF-8).
        #[arg(long)]
        show_body: bool,
    },
    /// Keys in flight (and, with --all, every record), one page at a time.
    List {
        /// Only this operation (and its tenant-scoped records).
        #[arg(long, value_name = "OPERATION")]
        operation: Option<String>,
        /// Every record, completed ones too.
        #[arg(long)]
        all: bool,
        /// About this many records on the page (a Redis page ends with a SCAN batch).
        #[arg(long, default_value_t = 50, value_name = "N")]
        limit: u32,
        /// Go on from the cursor a previous page printed.
        #[arg(long, value_name = "CURSOR")]
        after: Option<String>,
    },
    /// Free a key whose holder is gone, so the next request runs the action.
    Release {
        #[command(flatten)]
        target: Target,
        /// Release even though the lease lives (asks first: a second effect may follow).
        #[arg(long)]
        force: bool,
        /// Do not ask (for scripts); only with --force or --completed.
        #[arg(long)]
        yes: bool,
        /// Delete a completed record: the next request runs the action again.
        #[arg(long)]
        completed: bool,
    },
    /// Delete expired records (SQL stores; Redis expires its keys itself).
    Sweep {
        /// Records deleted per statement.
        #[arg(long, default_value_t = 1000, value_name = "N")]
        batch: u32,
    },
    /// Whether the store keeps records as idem needs.
    Health,
    /// Counts of records by operation and state, and their sizes.
    Stats,
    /// Print a shell completion script.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// One record: an operation, a key, and the tenant that scopes it, if any.
#[derive(Debug, Args)]
pub struct Target {
    /// The operation (as the service names it: route template or name).
    pub operation: String,
    /// The idempotency key, exactly as the client sent it.
    pub key: String,
    /// The tenant the service scopes keys by, if it does.
    #[arg(long, value_name = "TENANT")]
    pub tenant: Option<String>,
}
