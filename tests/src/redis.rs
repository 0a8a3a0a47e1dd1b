//! Real `redis-server` processes on free loopback ports, and a three-master Cluster, for every
//! crate whose tests need Redis (the store's, the HTTP layer's, the simulation's rows on
//! Redis, the conformance kit's run); and `raw_command`, one inline command on a raw socket.
//!
//! Every server is started by the test that uses it and killed by its pid when the handle
//! drops. If `redis-server` is not on PATH the tests fail with a message saying so: CI
//! installs it, and a silent skip would hide a suite that never ran.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::net::free_port;

/// A directory of its own for one server (cluster config files).
fn scratch_dir() -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "idem-redis-test-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("create a scratch directory");
    dir
}

/// Sends one inline command and returns the raw reply (enough for PING, INFO, CLUSTER INFO).
pub fn raw_command(port: u16, command: &str) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_millis(500)))?;
    stream.write_all(format!("{command}\r\n").as_bytes())?;
    let mut reply = vec![0; 64 * 1024];
    let n = stream.read(&mut reply)?;
    let _ = stream.shutdown(Shutdown::Both);
    Ok(String::from_utf8_lossy(&reply[..n]).into_owned())
}

/// One `redis-server` process.
#[derive(Debug)]
pub struct RedisServer {
    pub port: u16,
    child: Option<Child>,
    dir: PathBuf,
    extra: Vec<String>,
    cluster: bool,
}

impl RedisServer {
    /// Starts a server without persistence on a free port and waits until it answers PING.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts a server with extra `--name value` arguments.
    pub fn start_with(extra: &[&str]) -> Self {
        Self::start_inner(extra, false)
    }

    /// Starts a cluster-enabled server (its bus on a free port of its own: the default,
    /// port + 10000, does not exist for ports above 55535).
    pub fn start_cluster_node() -> Self {
        Self::start_inner(&[], true)
    }

    fn start_inner(extra: &[&str], cluster: bool) -> Self {
        let mut server = Self {
            port: 0,
            child: None,
            dir: scratch_dir(),
            extra: extra.iter().map(|s| (*s).to_owned()).collect(),
            cluster,
        };
        // A free port can be taken by another test between our check and the server's
        // bind: try again on another.
        let mut failures = Vec::new();
        for _ in 0..5 {
            server.port = free_port();
            match server.spawn() {
                Ok(()) => return server,
                Err(failure) => failures.push(failure),
            }
        }
        panic!("redis-server would not start: {failures:?}");
    }

    fn spawn(&mut self) -> Result<(), String> {
        let mut command = Command::new("redis-server");
        command
            .arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--enable-debug-command", "yes"])
            .arg("--dir")
            .arg(&self.dir)
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if self.cluster {
            command
                .args(["--cluster-enabled", "yes"])
                .args(["--cluster-config-file", "nodes.conf"])
                .args(["--cluster-node-timeout", "2000"])
                .arg("--cluster-port")
                .arg(free_port().to_string());
        }
        let child = match command.spawn() {
            Ok(child) => child,
            Err(error) => panic!(
                "cannot start redis-server ({error}): these tests need redis-server on PATH \
                 (apt-get install redis-server); CI installs it"
            ),
        };
        self.child = Some(child);
        self.wait_ready()
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let start = Instant::now();
        loop {
            if let Ok(reply) = raw_command(self.port, "PING")
                && reply.starts_with("+PONG")
            {
                return Ok(());
            }
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                self.child = None;
                let _ = std::fs::remove_file(self.dir.join("nodes.conf"));
                return Err(format!(
                    "redis-server on port {} exited at start: {status}",
                    self.port
                ));
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "redis-server on port {} did not answer PING within 10 s",
                self.port
            );
            sleep(Duration::from_millis(5));
        }
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kills the server (SIGKILL, by its pid) and waits for it to exit. Records are lost:
    /// there is no persistence.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port, empty.
    pub fn restart(&mut self) {
        self.kill();
        let start = Instant::now();
        // The port is free again once the old process is gone; retry a short while in case
        // the kernel still holds it.
        loop {
            if TcpListener::bind(("127.0.0.1", self.port)).is_ok() {
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(5), "port stays busy");
            sleep(Duration::from_millis(10));
        }
        self.spawn().unwrap();
    }

    /// A plain redis-rs connection, for planting and inspecting values.
    pub async fn conn(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url())
            .expect("url")
            .get_multiplexed_async_connection()
            .await
            .expect("connect to the test server")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A Cluster of three masters, no replicas.
#[derive(Debug)]
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts three cluster-enabled servers, joins them, and waits for `cluster_state:ok`.
    pub fn start() -> Self {
        let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start_cluster_node()).collect();
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let output = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|error| {
                panic!("cannot run redis-cli ({error}): these tests need redis-cli on PATH")
            });
        assert!(
            output.status.success(),
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&output.stdout)
        );
        let start = Instant::now();
        for node in &nodes {
            loop {
                let info = raw_command(node.port, "CLUSTER INFO").unwrap_or_default();
                if info.contains("cluster_state:ok") {
                    break;
                }
                assert!(
                    start.elapsed() < Duration::from_secs(20),
                    "cluster did not reach cluster_state:ok: {info}"
                );
                sleep(Duration::from_millis(20));
            }
        }
        Self { nodes }
    }

    /// The nodes' URLs.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }
}
