//! The downstream key at work (MODEL.md `D1`): two processes of the payments example on one
//! real Redis, charging through the provider example, which deduplicates by its own
//! `Idempotency-Key`. Each client sends its payment to the first process and hangs up; that
//! process is then paused (SIGSTOP) with every charge in flight, past its lease; the clients
//! retry on the second process, which takes each key over and runs the charge again, the
//! extra run idem can only report. Sent under the same downstream key, each is answered the
//! first charge by the provider: one charge per payment. The paused process is resumed and
//! its late completes are refused.
//!
//! The provider example also honours fences (MODEL.md `F1`): a request whose
//! `Fencing-Token` is below the highest its key has seen is refused (409, no `Retry-After`).
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
use std::time::{Duration, Instant};

use clap::Parser;
use support::RedisServer;
use support::process::{ExampleProcess, child_args, free_port, run_test, serve};

const PAYMENTS: &str = "IDEM_PAYMENTS_ARGS";
const PROVIDER: &str = "IDEM_PROVIDER_ARGS";
const KEYS: usize = 8;

fn main() {
    if let Some(args) = child_args(PAYMENTS, "payments") {
        serve(payments::run(payments::Args::parse_from(args)));
    } else if let Some(args) = child_args(PROVIDER, "provider") {
        serve(provider::run(provider::Args::parse_from(args)));
    } else {
        run_test(
            "provider",
            a_holder_paused_past_its_lease_charges_once_at_a_keyed_provider(),
        );
        run_test("provider fences", the_provider_refuses_a_stale_fence());
    }
}

fn payments(port: u16, redis: &str, provider: &str) -> ExampleProcess {
    ExampleProcess::start(
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
            "--fences",
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
    let _provider = ExampleProcess::start(
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
    // Both processes' stores fence their grants (Redis with fences): every request carried
    // its holder's fence, and the taker's, granted after the holder's, are above them, so
    // none was stale.
    assert!(
        statement.fenced >= 2 * KEYS,
        "{} of the requests carried a fence",
        statement.fenced
    );
    assert_eq!(statement.stale, 0);
}

/// The provider example over real HTTP: per key, a fence below the highest seen is refused
/// and counted stale; the same fence is the holder's request again, a higher one a newer
/// holder's; a value that is not a fence is a 400.
async fn the_provider_refuses_a_stale_fence() {
    let port = free_port();
    let _provider = ExampleProcess::start(
        PROVIDER,
        &["--addr", &format!("127.0.0.1:{port}"), "--takes-ms", "0"],
        "provider on",
    );
    let client = reqwest::Client::new();
    let charge = |key: &'static str, fence: Option<&'static str>| {
        let mut request = client
            .post(format!("http://127.0.0.1:{port}/charges"))
            .header("idempotency-key", key)
            .header("content-type", "application/json")
            .body(r#"{"amount": 100, "currency": "eur"}"#);
        if let Some(fence) = fence {
            request = request.header(idem_http::FENCING_TOKEN, fence);
        }
        async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            let retry_after = response.headers().contains_key("retry-after");
            (status, retry_after)
        }
    };
    assert_eq!(charge("k1", Some("5")).await, (201, false));
    // A holder granted before the one that called: refused, and told not to retry.
    assert_eq!(charge("k1", Some("4")).await, (409, false));
    // The same holder again, then a newer one: the first charge, replayed.
    assert_eq!(charge("k1", Some("5")).await, (200, false));
    assert_eq!(charge("k1", Some("9")).await, (200, false));
    assert_eq!(charge("k1", Some("5")).await, (409, false));
    // Keys are apart; a request without a fence is not judged by one.
    assert_eq!(charge("k2", Some("1")).await, (201, false));
    assert_eq!(charge("k1", None).await, (200, false));
    assert_eq!(charge("k3", Some("0")).await, (400, false));
    let statement: provider::Statement = client
        .get(format!("http://127.0.0.1:{port}/charges"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(statement.charges.len(), 2, "{:?}", statement.charges);
    assert_eq!(statement.stale, 2);
}
