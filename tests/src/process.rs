//! Examples served as child processes by a test with `harness = false` (the HTTP layer's,
//! the consumers', and each store's killed-process tests): the test binary
//! starts itself again with an example's arguments in an environment variable, and then
//! serves that example's code (included with `#[path]`) instead of testing. Real processes,
//! so that a test can pause (SIGSTOP), stop (SIGTERM) or kill one.

use std::future::Future;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// What separates the arguments in the environment variable.
const SEPARATOR: char = '\u{1f}';

/// The command line this process was started with to serve an example (`program` first),
/// if `var` holds one.
pub fn child_args(var: &str, program: &str) -> Option<Vec<String>> {
    let args = std::env::var(var).ok()?;
    Some(
        std::iter::once(program.to_owned())
            .chain(args.split(SEPARATOR).map(str::to_owned))
            .collect(),
    )
}

/// Serves an example's `run` to its end; exits 1 on its error.
pub fn serve(server: impl Future<Output = Result<(), Box<dyn std::error::Error>>>) {
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    if let Err(error) = runtime.block_on(server) {
        eprintln!("{error}");
        std::process::exit(1);
    }
}

/// Runs the test `name` on two workers and prints the closing line a test without the
/// harness prints (`name: 1 passed, 0 failed`); exits 1 when it fails.
pub fn run_test(name: &str, test: impl Future<Output = ()>) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| runtime.block_on(test)));
    match outcome {
        Ok(()) => println!("{name}: 1 passed, 0 failed"),
        Err(_) => {
            println!("{name}: 0 passed, 1 failed");
            std::process::exit(1);
        }
    }
}

/// A free port on loopback.
pub use crate::net::free_port;

/// This test binary, started again to serve an example; its stdout read line by line.
/// Killed when dropped.
#[derive(Debug)]
pub struct ExampleProcess {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl ExampleProcess {
    /// Starts this binary with `args` in `var`, and waits for its first line, which must
    /// start with `listening`.
    pub fn start(var: &str, args: &[&str], listening: &str) -> Self {
        let mut child = Command::new(std::env::current_exe().expect("this binary"))
            .env(var, args.join(&SEPARATOR.to_string()))
            .stdout(Stdio::piped())
            .spawn()
            .expect("start a child process");
        let stdout = child.stdout.take().expect("its stdout");
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    return;
                }
            }
        });
        let process = Self { child, lines };
        let first = process.line(Duration::from_secs(20));
        assert!(first.starts_with(listening), "{first}");
        process
    }

    /// Its process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Its next line of output, waited for at most `within`.
    pub fn line(&self, within: Duration) -> String {
        self.lines
            .recv_timeout(within)
            .unwrap_or_else(|error| panic!("no line from process {}: {error}", self.child.id()))
    }

    /// Sends it `signal` (`-STOP`, `-CONT`, `-TERM`).
    pub fn signal(&self, signal: &str) {
        let sent = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(sent.success(), "kill {signal} {}", self.child.id());
    }

    /// Waits for it to end.
    pub fn wait(&mut self) -> ExitStatus {
        self.child.wait().expect("the process ends")
    }
}

impl Drop for ExampleProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
