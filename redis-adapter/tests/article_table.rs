//! The article's table (`idem_sim::SCENARIOS`, the rows `idem-sim table` prints on
//! simulated time) run through the driver's `Coordinator` on a real Redis: each row's
//! responses and card statement must be the ones the row expects. `wait` and `raise` charge
//! once, as on simulated time.
//!
//! [`run_row`] is what `idem-sim table --redis URL` runs per row. The `result-cache` row runs
//! a deliberately broken store (a result cache in front of Redis) and must show its two
//! charges: the same comparison that passes the other rows catches it.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem::{Coordinator, Error, Fingerprint, Options, Store};
use idem_redis::RedisStore;
use idem_sim::{RowResult, SCENARIOS, Scenario, TableStore};
use support::RedisServer;
use support::broken::ResultCache;

/// The card statement of one row.
#[derive(Debug, Default)]
struct Statement(Mutex<Vec<String>>);

impl Statement {
    fn charge(&self) -> String {
        let mut charges = self.0.lock().unwrap();
        let id = format!("ch_{}", charges.len() + 1);
        charges.push(id.clone());
        id
    }
}

/// The response names of `idem_sim`'s table.
fn response(answer: Result<String, Error<String>>) -> String {
    match answer {
        Ok(id) => id,
        Err(Error::InProgress) => "InProgressError".into(),
        Err(Error::KeyReuse { .. }) => "KeyReuseError".into(),
        Err(Error::StoreUnavailable(_)) => "StoreUnavailableError".into(),
        Err(Error::Action(_)) => "ActionFailed".into(),
        Err(Error::ResultNotStored) => "NoBody".into(),
        Err(other) => format!("{other}"),
    }
}

async fn run_calls<S: Store>(scenario: &Scenario, payments: Coordinator<S>) -> RowResult {
    let statement = Arc::new(Statement::default());
    let tasks: Vec<_> = scenario
        .calls
        .iter()
        .map(|call| {
            let (call, payments, statement) = (*call, payments.clone(), statement.clone());
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(call.at_ms)).await;
                let fp = Fingerprint::of_bytes(format!("order-1|{}", call.amount).as_bytes());
                let answer = payments
                    .execute("payment.charge", "order-1", fp, |_claim| async move {
                        tokio::time::sleep(Duration::from_millis(call.provider_ms)).await;
                        if call.provider_fails {
                            Err("provider timed out".to_owned())
                        } else {
                            Ok(statement.charge())
                        }
                    })
                    .await;
                response(answer)
            })
        })
        .collect();
    let mut responses = Vec::new();
    for task in tasks {
        responses.push(task.await.unwrap());
    }
    let charges = statement.0.lock().unwrap().clone();
    RowResult { responses, charges }
}

/// Runs one row against the Redis at `url` (or, for an unreachable-store row, against
/// `unreachable`), under a prefix of its own.
async fn run_row(scenario: &Scenario, url: &str, unreachable: &str) -> RowResult {
    let options = Options::builder()
        .in_flight(scenario.in_flight)
        .on_store_failure(scenario.on_store_failure)
        .build()
        .unwrap();
    let builder = RedisStore::builder()
        .prefix(format!("idem-table:{}:", scenario.label))
        .command_timeout(Duration::from_millis(200))
        .connect_timeout(Duration::from_millis(200));
    match scenario.store {
        TableStore::Idem => {
            let store = builder.connect(url).await.unwrap();
            run_calls(scenario, Coordinator::new(store, options)).await
        }
        TableStore::ResultCache => {
            let store = ResultCache(builder.connect(url).await.unwrap());
            run_calls(scenario, Coordinator::new(store, options)).await
        }
        TableStore::Unreachable => {
            let store = builder.connect_lazy(unreachable).unwrap();
            run_calls(scenario, Coordinator::new(store, options)).await
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_articles_table_on_real_redis() {
    let server = RedisServer::start();
    let mut down = RedisServer::start();
    down.kill();
    let (url, unreachable) = (server.url(), down.url());
    // Rows run side by side, each under its own prefix.
    let rows: Vec<_> = SCENARIOS
        .iter()
        .map(|scenario| {
            let (url, unreachable) = (url.clone(), unreachable.clone());
            tokio::spawn(async move { run_row(scenario, &url, &unreachable).await })
        })
        .collect();
    let mut mismatches = Vec::new();
    for (scenario, row) in SCENARIOS.iter().zip(rows) {
        let row = row.await.unwrap();
        println!("{}", row.line(scenario));
        // The broken row is judged by its statement: the simulation's cache answers the
        // second caller from the stored result, the Coordinator in front of this one
        // answers with the caller's own charge; both charge twice.
        let as_expected = if scenario.store == TableStore::ResultCache {
            row.charges
                .iter()
                .map(String::as_str)
                .eq(scenario.expected_charges.iter().copied())
        } else {
            row.matches(scenario)
        };
        if !as_expected {
            mismatches.push(row.line(scenario));
        }
    }
    assert!(mismatches.is_empty(), "rows that differ: {mismatches:#?}");
    // The table exercises the rows the issue names, and the broken one.
    for label in ["wait", "raise", "result-cache"] {
        assert!(SCENARIOS.iter().any(|s| s.label == label), "{label}");
    }
    let cache = SCENARIOS
        .iter()
        .find(|s| s.store == TableStore::ResultCache);
    assert_eq!(cache.map(|s| s.expected_charges.len()), Some(2));
}
