//! A real `redis-server` on a free loopback port, without persistence, killed by its pid
//! when the handle drops.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One `redis-server` process started by a test.
#[derive(Debug)]
pub struct RedisServer {
    pub port: u16,
    child: Option<Child>,
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("local address").port()
}

/// Sends one inline command and returns the raw reply.
pub fn raw_command(port: u16, command: &str) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_millis(500)))?;
    stream.write_all(format!("{command}\r\n").as_bytes())?;
    let mut reply = vec![0; 4096];
    let n = stream.read(&mut reply)?;
    Ok(String::from_utf8_lossy(&reply[..n]).into_owned())
}

impl RedisServer {
    /// Starts a server on a free port (`--save '' --appendonly no`) and waits until it
    /// answers PING; another port is tried if the chosen one was taken meanwhile.
    pub fn start() -> Self {
        let mut failures = Vec::new();
        for _ in 0..5 {
            let port = free_port();
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|error| {
                    panic!(
                        "cannot start redis-server ({error}): these tests need redis-server \
                         on PATH (apt-get install redis-server)"
                    )
                });
            let mut server = Self {
                port,
                child: Some(child),
            };
            match server.wait_ready() {
                Ok(()) => return server,
                Err(failure) => failures.push(failure),
            }
        }
        panic!("redis-server would not start: {failures:?}");
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let start = Instant::now();
        loop {
            if raw_command(self.port, "PING").is_ok_and(|reply| reply.starts_with("+PONG")) {
                return Ok(());
            }
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                self.child = None;
                return Err(format!(
                    "redis-server on port {} exited: {status}",
                    self.port
                ));
            }
            if start.elapsed() > Duration::from_secs(10) {
                return Err(format!("redis-server on port {} did not answer", self.port));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Kills the server (its records are lost) and waits for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}
