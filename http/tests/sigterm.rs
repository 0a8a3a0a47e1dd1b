//! A rolling deploy under load: two processes of the payments example on one real Redis,
//! sharing one card statement (the ledger file); clients retry each key until it is charged;
//! one process is sent SIGTERM mid-load and started again. Running charges finish within the
//! grace period or are cut, and every extra charge on the statement is one the stopped
//! process reported cutting (MODEL.md, `I7`: a cut action's key is left to its lease, and the
//! retry after it runs again): no extra charge is unreported.
//!
//! The processes are this test binary itself, started again with the example's arguments in
//! `IDEM_PAYMENTS_ARGS`: it then serves the example's own code (included below) instead of
//! testing. Hence `harness = false`: `main` is either the server or the test, and the test
//! prints the plain closing line `1 passed, 0 failed` (or `0 passed, 1 failed`).

#[allow(dead_code, unused_imports)]
#[path = "../examples/payments.rs"]
mod payments;
mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Parser;
use support::RedisServer;
use support::process::{ExampleProcess, child_args, free_port, run_test, serve};

const CHILD: &str = "IDEM_PAYMENTS_ARGS";
const KEYS: usize = 60;

fn main() {
    if let Some(args) = child_args(CHILD, "payments") {
        serve(payments::run(payments::Args::parse_from(args)));
    } else {
        run_test(
            "sigterm",
            a_sigterm_mid_load_leaves_no_extra_charge_unreported(),
        );
    }
}

/// One process of the payments example.
struct Server {
    process: ExampleProcess,
}

impl Server {
    fn start(port: u16, redis: &str, ledger: &Path) -> Self {
        let ledger = ledger.display().to_string();
        let process = ExampleProcess::start(
            CHILD,
            &[
                "--addr",
                &format!("127.0.0.1:{port}"),
                "--redis",
                redis,
                "--ledger",
                &ledger,
                "--action-ms",
                "400",
                "--lease-ms",
                "1500",
                "--shutdown-grace-ms",
                "150",
            ],
            "payments on",
        );
        Self { process }
    }

    /// Sends SIGTERM and reads the stop's report: (finished, cut).
    fn terminate(mut self) -> (usize, usize) {
        self.process.signal("-TERM");
        let report = self.process.line(Duration::from_secs(20));
        let status = self.process.wait();
        assert!(status.success(), "{status}");
        let field = |name: &str| -> usize {
            report
                .split_whitespace()
                .find_map(|word| word.strip_prefix(name))
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("no {name} in {report:?}"))
        };
        assert!(report.starts_with("shutdown "), "{report}");
        (field("finished="), field("cut="))
    }
}

/// Sends `key`'s charge until it is answered 201, trying the two servers in turn (one may be
/// stopping or down); at most 60 s.
async fn charge_until_done(client: reqwest::Client, ports: [u16; 2], key: String, first: usize) {
    let start = Instant::now();
    let mut tries = 0;
    loop {
        let port = ports[(first + tries) % 2];
        tries += 1;
        let sent = client
            .post(format!("http://127.0.0.1:{port}/charges"))
            .header("idempotency-key", format!("\"{key}\""))
            .header("content-type", "application/json")
            .body(r#"{"amount": 100, "currency": "eur"}"#)
            .send()
            .await;
        if let Ok(response) = sent
            && response.status() == 201
        {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{key} never charged after {tries} tries"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Each key's charges on the statement.
fn statement(ledger: &Path) -> BTreeMap<String, usize> {
    let text = std::fs::read_to_string(ledger).unwrap_or_default();
    let mut charges = BTreeMap::new();
    for line in text.lines() {
        let key = line.split(' ').next().unwrap_or_default().to_owned();
        *charges.entry(key).or_insert(0) += 1;
    }
    charges
}

async fn a_sigterm_mid_load_leaves_no_extra_charge_unreported() {
    let redis = RedisServer::start();
    let ledger: PathBuf = std::env::temp_dir().join(format!(
        "idem-sigterm-{}-{}.ledger",
        std::process::id(),
        redis.port
    ));
    let _ = std::fs::remove_file(&ledger);
    let ports = [free_port(), free_port()];
    let stopped = Server::start(ports[0], &redis.url(), &ledger);
    let _other = Server::start(ports[1], &redis.url(), &ledger);

    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(15))
        .build()
        .unwrap();
    let clients: Vec<_> = (0..KEYS)
        .map(|i| {
            let client = client.clone();
            tokio::spawn(async move {
                // Arrivals spread over 600 ms, half to each process first.
                tokio::time::sleep(Duration::from_millis(10 * i as u64)).await;
                charge_until_done(client, ports, format!("order-{i}"), i).await;
            })
        })
        .collect();

    tokio::time::sleep(Duration::from_millis(300)).await;
    let (finished, cut) = tokio::task::spawn_blocking(move || stopped.terminate())
        .await
        .unwrap();
    // Started again on its port, as a deploy does.
    let _restarted = Server::start(ports[0], &redis.url(), &ledger);

    for client in clients {
        client.await.expect("a client");
    }
    // A cut charge's retry waits out the cut key's lease; let every handler end.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let charges = statement(&ledger);
    let _ = std::fs::remove_file(&ledger);
    assert_eq!(charges.len(), KEYS, "every key charged: {charges:?}");
    let extra: usize = charges.values().map(|n| n - 1).sum();
    println!(
        "sigterm: {KEYS} keys, {} charges, the stopped process finished {finished} and cut \
         {cut}; extra charges {extra}",
        charges.values().sum::<usize>()
    );
    assert!(
        cut > 0,
        "the stop cut nothing: the run did not reach the case"
    );
    assert!(
        extra <= cut,
        "{extra} extra charges, {cut} reported: {} unreported",
        extra - cut
    );
}
