//! The downstream key at work (MODEL.md `D1`): two processes of the payments example on one
//! real Redis, charging through the provider example, which deduplicates by its own
//! `Idempotency-Key`. Each client sends its payment to the first process and hangs up; that
//! process is then paused (SIGSTOP) with every charge in flight, past its lease; the clients
//! retry on the second process, which takes each key over and runs the charge again, the
//! extra run idem can only report. Sent under the same downstream key, each is answered the
//! first charge by the provider: one charge per payment. The paused process is resumed and
//! its late completes are refused.
//!
//! The processes are this test binary itself, started again with an example's arguments in
//! `IDEM_PAYMENTS_ARGS` or `IDEM_PROVIDER_ARGS`: it then serves that example's own code
//! (included below) instead of testing. Hence `harness = false`, as in `sigterm.rs`.

#[allow(dead_code, unused_imports)]
#[path = "../examples/payments.rs"]
mod payments;
#[allow(dead_code, unused_imports)]
#[path = "../examples/provider.rs"]
mod provider;
mod support;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use support::RedisServer;

const PAYMENTS: &str = "IDEM_PAYMENTS_ARGS";
const PROVIDER: &str = "IDEM_PROVIDER_ARGS";
const KEYS: usize = 8;

fn main() {
    let served = |var: &str| {
        std::env::var(var)
            .ok()
            .map(|args| args.split('\u{1f}').map(str::to_owned).collect::<Vec<_>>())
    };
    if let Some(args) = served(PAYMENTS) {
        let args = payments::Args::parse_from(std::iter::once("payments".to_owned()).chain(args));
        serve(payments::run(args));
        return;
    }
    if let Some(args) = served(PROVIDER) {
        let args = provider::Args::parse_from(std::iter::once("provider".to_owned()).chain(args));
        serve(provider::run(args));
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        runtime.block_on(a_holder_paused_past_its_lease_charges_once_at_a_keyed_provider())
    }));
    match outcome {
        Ok(()) => println!("provider: 1 passed, 0 failed"),
        Err(_) => {
            println!("provider: 0 passed, 1 failed");
            std::process::exit(1);
        }
    }
}

fn serve(server: impl std::future::Future<Output = Result<(), Box<dyn std::error::Error>>>) {
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    if let Err(error) = runtime.block_on(server) {
        eprintln!("{error}");
        std::process::exit(1);
    }
}

/// One child process serving an example; killed when dropped.
struct Child_ {
    child: Child,
}

impl Child_ {
    /// Starts this binary serving the example named by `var` with `args`, and waits for its
    /// first line, which says it listens.
    fn start(var: &str, args: &[&str], listening: &str) -> Self {
        let mut child = Command::new(std::env::current_exe().expect("this binary"))
            .env(var, args.join("\u{1f}"))
            .stdout(Stdio::piped())
            .spawn()
            .expect("start a child process");
        let stdout = child.stdout.take().expect("its stdout");
        let mut first = String::new();
        BufReader::new(stdout)
            .read_line(&mut first)
            .expect("its first line");
        assert!(first.starts_with(listening), "{first}");
        Self { child }
    }

    fn signal(&self, signal: &str) {
        let sent = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(sent.success());
    }
}

impl Drop for Child_ {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("an ephemeral port");
    listener.local_addr().expect("its address").port()
}

fn payments(port: u16, redis: &str, provider: &str) -> Child_ {
    Child_::start(
        PAYMENTS,
        &[
            "--addr",
            &format!("127.0.0.1:{port}"),
            "--redis",
            redis,
            "--provider-url",
            provider,
            "--lease-ms",
            "1000",
        ],
        "payments on",
    )
}

async fn post(
    client: &reqwest::Client,
    port: u16,
    key: &str,
) -> reqwest::Result<reqwest::Response> {
    client
        .post(format!("http://127.0.0.1:{port}/charges"))
        .header("idempotency-key", key)
        .header("content-type", "application/json")
        .body(r#"{"amount": 100, "currency": "eur"}"#)
        .send()
        .await
}

async fn a_holder_paused_past_its_lease_charges_once_at_a_keyed_provider() {
    let redis = RedisServer::start();
    let provider_port = free_port();
    let _provider = Child_::start(
        PROVIDER,
        &[
            "--addr",
            &format!("127.0.0.1:{provider_port}"),
            "--takes-ms",
            "600",
        ],
        "provider on",
    );
    let provider_url = format!("http://127.0.0.1:{provider_port}");
    let ports = [free_port(), free_port()];
    let holder = payments(ports[0], &redis.url(), &provider_url);
    let _taker = payments(ports[1], &redis.url(), &provider_url);

    // Each client sends its payment to the holder and hangs up before the answer.
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(150))
        .build()
        .unwrap();
    let sent: Vec<_> = (0..KEYS)
        .map(|i| {
            let impatient = impatient.clone();
            tokio::spawn(async move { post(&impatient, ports[0], &format!("order-{i}")).await })
        })
        .collect();
    for answer in sent {
        let answer = answer.await.unwrap();
        assert!(
            answer.is_err(),
            "answered before the provider did: {answer:?}"
        );
    }
    // Every charge is at the provider now, and being answered (600 ms): the holder stops
    // with all of them in flight, past its lease.
    holder.signal("-STOP");
    let paused = Instant::now();

    // The clients retry on the other process until they are answered: each key is taken
    // over once the holder's lease ends, and charged again under the same downstream key.
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let mut answered = BTreeSet::new();
    for i in 0..KEYS {
        let key = format!("order-{i}");
        let id = loop {
            let response = post(&client, ports[1], &key).await;
            if let Ok(response) = response
                && response.status() == 201
            {
                let body: serde_json::Value = response.json().await.unwrap();
                break body["id"].as_str().unwrap().to_owned();
            }
            assert!(
                paused.elapsed() < Duration::from_secs(30),
                "{key} never answered"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        answered.insert(id);
    }
    let taken_over_after = paused.elapsed();
    // The holder runs again: its late completes are refused (its keys were taken over).
    holder.signal("-CONT");
    tokio::time::sleep(Duration::from_millis(1_500)).await;

    let statement: provider::Statement = client
        .get(format!("{provider_url}/charges"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    println!(
        "provider: {KEYS} payments, {} charges, {} replays, {} told in progress; the keys \
         were taken over within {taken_over_after:?} of the pause",
        statement.charges.len(),
        statement.replays,
        statement.in_flight
    );
    assert!(
        taken_over_after >= Duration::from_millis(700),
        "answered before the paused holder's lease could end: {taken_over_after:?}"
    );
    // One charge per payment, each under a downstream key, never the client's key.
    assert_eq!(statement.charges.len(), KEYS, "{:?}", statement.charges);
    let keys: BTreeSet<&str> = statement
        .charges
        .iter()
        .map(|(_, key)| key.as_str())
        .collect();
    assert_eq!(keys.len(), KEYS);
    assert!(
        keys.iter()
            .all(|key| key.starts_with("idem1_") && key.len() == 70),
        "{keys:?}"
    );
    // Every retry on the taker ran the charge again, and the provider answered it the first
    // charge: the answers are the statement's charges.
    assert!(statement.replays >= KEYS, "{} replays", statement.replays);
    let ids: BTreeSet<String> = statement.charges.iter().map(|(id, _)| id.clone()).collect();
    assert_eq!(answered, ids);
}
