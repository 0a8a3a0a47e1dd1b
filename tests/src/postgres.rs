//! A PostgreSQL to test on, for every crate whose tests need one (idem-postgres's, and
//! idem-http's with the layer's transaction on PostgreSQL): a database of its own for each
//! test on the server the tests are given (`DATABASE_URL`, else the local server as the
//! postgres role), created with a unique name and dropped when the handle drops, also when
//! the test fails; and a private server (`initdb`, `pg_ctl`) on a free port and a scratch
//! directory, for the tests that stop, restart or reconfigure a server.
//!
//! If no server answers, the tests fail saying so: CI starts one, and a silent skip would
//! hide a suite that never ran.

use std::path::PathBuf;
use std::process::Command;
use std::str::FromStr;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{AssertSqlSafe, ConnectOptions, Connection, PgConnection, PgPool};

/// The server the tests use when `DATABASE_URL` is not set.
pub const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// The URL of a database on the server the tests are given, to create others from.
pub fn admin_url() -> String {
    std::env::var("DATABASE_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned())
}

pub(crate) use crate::net::unique_name;

/// A database of one test's own, dropped (with every connection to it) when this drops.
#[derive(Debug)]
pub struct TestDb {
    pub name: String,
    admin: PgConnectOptions,
    options: PgConnectOptions,
}

impl TestDb {
    /// Creates a database with a unique name on the server at [`admin_url`].
    pub async fn create() -> Self {
        Self::create_on(&admin_url()).await
    }

    /// Creates a database with a unique name on the server at `admin`.
    pub async fn create_on(admin: &str) -> Self {
        let admin = PgConnectOptions::from_str(admin).expect("a valid DATABASE_URL");
        let name = unique_name("idem_test");
        let mut conn = admin.connect().await.unwrap_or_else(|e| {
            panic!(
                "no PostgreSQL server answers at {} ({e}); start one or set DATABASE_URL",
                admin_url()
            )
        });
        sqlx::raw_sql(AssertSqlSafe(format!("CREATE DATABASE \"{name}\"")))
            .execute(&mut conn)
            .await
            .expect("create the test database");
        let _ = conn.close().await;
        let options = admin.clone().database(&name);
        Self {
            name,
            admin,
            options,
        }
    }

    /// Options for connections to this database.
    pub fn options(&self) -> PgConnectOptions {
        self.options.clone()
    }

    /// The URL of this database.
    pub fn url(&self) -> String {
        self.options.to_url_lossy().to_string()
    }

    /// A pool of up to `size` connections to this database.
    pub async fn pool(&self, size: u32) -> PgPool {
        PgPoolOptions::new()
            .max_connections(size)
            .connect_with(self.options())
            .await
            .expect("connect to the test database")
    }

    /// One connection to this database.
    pub async fn conn(&self) -> PgConnection {
        self.options().connect().await.expect("connect")
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let admin = self.admin.clone();
        let name = self.name.clone();
        // Drop may run inside a runtime (or while a test unwinds): drop the database from a
        // thread and runtime of its own.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            runtime.block_on(async {
                let mut conn = admin.connect().await.map_err(|e| e.to_string())?;
                sqlx::raw_sql(AssertSqlSafe(format!(
                    "DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"
                )))
                .execute(&mut conn)
                .await
                .map_err(|e| e.to_string())?;
                let _ = conn.close().await;
                Ok::<_, String>(())
            })
        })
        .join();
        if let Ok(Err(error)) = dropped {
            eprintln!("could not drop test database {}: {error}", self.name);
        }
    }
}

pub use crate::net::free_port;

/// Where the PostgreSQL server programs are: `PG_BIN`, else the newest
/// `/usr/lib/postgresql/*/bin`.
fn pg_bin() -> PathBuf {
    if let Ok(dir) = std::env::var("PG_BIN") {
        return PathBuf::from(dir);
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("pg_ctl").exists().then_some((version, bin))
        })
        .collect();
    found.sort();
    found
        .pop()
        .map(|(_, bin)| bin)
        .expect("initdb and pg_ctl: install PostgreSQL or set PG_BIN")
}

/// A PostgreSQL server of one test's own, in a scratch directory on a free port, stopped
/// (immediately) and removed when this drops. As root, the server runs as the `postgres`
/// user, since PostgreSQL refuses to run as root.
#[derive(Debug)]
pub struct PrivateServer {
    pub port: u16,
    dir: PathBuf,
    bin: PathBuf,
}

impl PrivateServer {
    /// Initialises a cluster (trust authentication, superuser `postgres`) and starts it
    /// with `settings` (`name=value`, passed as `-c`).
    pub fn start(settings: &[&str]) -> Self {
        let bin = pg_bin();
        let dir = std::env::temp_dir().join(unique_name("idem-pg"));
        std::fs::create_dir_all(&dir).expect("scratch directory");
        let server = Self {
            port: free_port(),
            dir,
            bin,
        };
        server.own_dir();
        let data = server.data();
        server.run(
            "initdb",
            &[
                "-D",
                &data,
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
            ],
        );
        let mut conf = format!(
            "port = {}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\nfsync = off\n",
            server.port,
            server.dir.display()
        );
        for setting in settings {
            conf.push_str(setting);
            conf.push('\n');
        }
        std::fs::write(format!("{data}/postgresql.auto.conf"), conf).expect("write settings");
        server.start_again();
        server
    }

    fn data(&self) -> String {
        self.dir.join("data").display().to_string()
    }

    fn as_root() -> bool {
        Command::new("id")
            .arg("-u")
            .output()
            .map(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
            .unwrap_or(false)
    }

    fn own_dir(&self) {
        if Self::as_root() {
            let status = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&self.dir)
                .status()
                .expect("chown");
            assert!(status.success(), "chown the scratch directory to postgres");
        }
    }

    fn run(&self, program: &str, args: &[&str]) {
        let path = self.bin.join(program);
        let mut command = if Self::as_root() {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(&path);
            command
        } else {
            Command::new(&path)
        };
        let out = command
            .args(args)
            .current_dir(&self.dir)
            .output()
            .unwrap_or_else(|e| panic!("run {program}: {e}"));
        assert!(
            out.status.success(),
            "{program} {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Starts the server and waits until it accepts connections.
    pub fn start_again(&self) {
        let data = self.data();
        let log = self.dir.join("log").display().to_string();
        self.run(
            "pg_ctl",
            &["-D", &data, "-l", &log, "-w", "-t", "30", "start"],
        );
    }

    /// Stops the server at once (`immediate`: no shutdown checkpoint, as after a crash).
    pub fn stop(&self) {
        let data = self.data();
        self.run("pg_ctl", &["-D", &data, "-m", "immediate", "-w", "stop"]);
    }

    /// The URL of database `db` on this server.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        let data = self.data();
        let path = self.bin.join("pg_ctl");
        let mut command = if Self::as_root() {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(&path);
            command
        } else {
            Command::new(&path)
        };
        let _ = command
            .args(["-D", &data, "-m", "immediate", "-w", "stop"])
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
