//! What the consumer tests share: the brokers, and a handler that does what a message's body
//! says and records every run.

#![allow(dead_code)]

pub mod amqp;
pub mod nats;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idem::{Claim, Coordinator, MemoryStore, Options};
use idem_consumer::{Consumer, Message, Redelivery};

/// What the handler saw, per message id: the deliveries it ran, by their number.
#[derive(Debug, Default)]
pub struct Seen {
    pub runs: HashMap<String, Vec<u32>>,
}

pub type Shared = Arc<Mutex<Seen>>;

/// A handler that does what the body says: `ok`; `fail-N` (fails its first N runs);
/// `panic`; `slow` (takes 400 ms); `slow-MS`. Every run is recorded before it acts.
pub fn handler(
    seen: &Shared,
) -> impl Fn(Claim, Message) -> std::pin::Pin<Box<dyn Future<Output = Result<String, String>> + Send>>
+ Clone
+ Send
+ Sync
+ 'static {
    let seen = seen.clone();
    move |_claim: Claim, message: Message| {
        let seen = seen.clone();
        Box::pin(async move {
            let id = message.id.clone().unwrap_or_default();
            let runs = {
                let mut seen = seen.lock().unwrap();
                let runs = seen.runs.entry(id.clone()).or_default();
                runs.push(message.delivery);
                runs.len()
            };
            let body = String::from_utf8(message.body).unwrap();
            match body.as_str() {
                "panic" => panic!("the handler of {id} panicked"),
                "slow" => tokio::time::sleep(Duration::from_millis(400)).await,
                slow if slow.starts_with("slow-") => {
                    let ms: u64 = slow["slow-".len()..].parse().unwrap();
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                }
                fail if fail.starts_with("fail-") => {
                    let failures: usize = fail["fail-".len()..].parse().unwrap();
                    if runs <= failures {
                        return Err(format!("{id} failed its run {runs}"));
                    }
                }
                _ => {}
            }
            Ok(format!("done {id}"))
        })
    }
}

pub fn runs(seen: &Shared, id: &str) -> Vec<u32> {
    seen.lock()
        .unwrap()
        .runs
        .get(id)
        .cloned()
        .unwrap_or_default()
}

/// A consumer of `orders.ship` on a `MemoryStore`: 8 handlers, 5 s of grace.
pub fn consumer(redelivery: Redelivery) -> Consumer<MemoryStore, String, String> {
    consumer_with(Options::default(), redelivery)
}

/// As [`consumer`], with the coordinator's `options`.
pub fn consumer_with(
    options: Options,
    redelivery: Redelivery,
) -> Consumer<MemoryStore, String, String> {
    let coordinator = Coordinator::new(MemoryStore::new(), options);
    Consumer::new(coordinator.operation("orders.ship").unwrap())
        .redelivery(redelivery)
        .concurrency(8)
        .shutdown_grace(Duration::from_secs(5))
}

/// Redeliveries 10 ms to 50 ms apart.
pub fn quick(max_deliveries: u32) -> Redelivery {
    Redelivery::new(
        max_deliveries,
        Duration::from_millis(10),
        Duration::from_millis(50),
    )
    .unwrap()
}

/// Waits until `done` holds, for at most 20 s.
pub async fn eventually(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done().await {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
