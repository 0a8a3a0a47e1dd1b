//! The article's table through the driver on MariaDB: every row of
//! `idem_sim::SCENARIOS`, on real time, with the same calls, timings, expected responses
//! and charges as the simulation prints. The `result-cache` row runs the naive protocol
//! (look the key up, else charge and store it with `INSERT IGNORE`) on the
//! same database, for contrast: both clients get `ch_1`, and the card is charged twice.
//! The store-unreachable rows point the store at a port where nothing listens.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem::{Coordinator, Error, Fingerprint, Options};
use idem_mysql::MySqlStore;
use idem_sim::{Call, RowResult, SCENARIOS, Scenario, TableStore};
use sqlx::MySqlPool;
use support::TestDb;

/// The card statement: charge ids in the order charges were made.
#[derive(Debug, Default)]
struct Provider {
    charges: Mutex<Vec<String>>,
}

/// The provider timed out without charging.
#[derive(Debug)]
struct ProviderTimeout;

impl Provider {
    async fn charge(&self, call: &Call) -> Result<String, ProviderTimeout> {
        tokio::time::sleep(Duration::from_millis(call.provider_ms)).await;
        if call.provider_fails {
            return Err(ProviderTimeout);
        }
        let mut charges = self.charges.lock().unwrap();
        let id = format!("ch_{}", charges.len() + 1);
        charges.push(id.clone());
        Ok(id)
    }
}

fn response(result: Result<String, Error<ProviderTimeout>>) -> String {
    match result {
        Ok(id) => id,
        Err(Error::InProgress) => "InProgressError".to_owned(),
        Err(Error::KeyReuse { .. }) => "KeyReuseError".to_owned(),
        Err(Error::StoreUnavailable(_)) => "StoreUnavailableError".to_owned(),
        Err(Error::Action(ProviderTimeout)) => "ActionFailed".to_owned(),
        Err(other) => format!("error: {other:?}"),
    }
}

fn fingerprint(amount: u32) -> Fingerprint {
    Fingerprint::builder()
        .field("order_id", "order-1")
        .field("amount", amount)
        .finish()
        .unwrap()
}

/// The naive result cache on the same database: look up, else charge and store; on losing
/// the race to store, return the winner's result.
async fn pay_through_cache(
    pool: MySqlPool,
    provider: Arc<Provider>,
    key: String,
    call: Call,
) -> String {
    let cached: Option<String> =
        sqlx::query_scalar("SELECT value FROM result_cache WHERE `key` = ?")
            .bind(&key)
            .fetch_optional(&pool)
            .await
            .unwrap();
    if let Some(stored) = cached {
        return stored;
    }
    let Ok(id) = provider.charge(&call).await else {
        return "ActionFailed".to_owned();
    };
    sqlx::query("INSERT IGNORE INTO result_cache (`key`, value) VALUES (?, ?)")
        .bind(&key)
        .bind(&id)
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query_scalar("SELECT value FROM result_cache WHERE `key` = ?")
        .bind(&key)
        .fetch_one(&pool)
        .await
        .unwrap()
}

/// Starts each call at its time, as its own task; the responses in call order.
async fn run_calls<F, Fut>(calls: &[Call], start: F) -> Vec<String>
where
    F: Fn(Call) -> Fut,
    Fut: std::future::Future<Output = String> + Send + 'static,
{
    let began = tokio::time::Instant::now();
    let mut tasks = Vec::new();
    for call in calls {
        tokio::time::sleep_until(began + Duration::from_millis(call.at_ms)).await;
        tasks.push(tokio::spawn(start(*call)));
    }
    let mut responses = Vec::new();
    for task in tasks {
        responses.push(task.await.unwrap());
    }
    responses
}

async fn run_scenario(db: &TestDb, pool: &MySqlPool, scenario: &Scenario) -> RowResult {
    let provider = Arc::new(Provider::default());
    let key = format!("{}-order-1", scenario.label);
    let responses = match scenario.store {
        TableStore::ResultCache => {
            run_calls(scenario.calls, |call| {
                pay_through_cache(pool.clone(), Arc::clone(&provider), key.clone(), call)
            })
            .await
        }
        TableStore::Idem | TableStore::Unreachable => {
            let store = if scenario.store == TableStore::Unreachable {
                let port = std::net::TcpListener::bind("127.0.0.1:0")
                    .and_then(|listener| listener.local_addr())
                    .unwrap()
                    .port();
                MySqlStore::builder()
                    .command_timeout(Duration::from_millis(200))
                    .connect_timeout(Duration::from_millis(100))
                    .connect_lazy(&format!("mysql://root@127.0.0.1:{port}/none"))
                    .unwrap()
            } else {
                MySqlStore::builder().build(db.pool(8).await)
            };
            let options = Options::builder()
                .in_flight(scenario.in_flight)
                .on_store_failure(scenario.on_store_failure)
                .retention(Duration::from_secs(60))
                .build()
                .unwrap();
            let coordinator = Arc::new(Coordinator::new(store, options));
            run_calls(scenario.calls, |call| {
                let (coordinator, provider, key) =
                    (Arc::clone(&coordinator), Arc::clone(&provider), key.clone());
                async move {
                    response(
                        coordinator
                            .execute(
                                "payment.charge",
                                &key,
                                fingerprint(call.amount),
                                move |_claim| async move { provider.charge(&call).await },
                            )
                            .await,
                    )
                }
            })
            .await
        }
    };
    let charges = provider.charges.lock().unwrap().clone();
    RowResult { responses, charges }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_article_table_on_mariadb_matches_the_simulated_one() {
    let db = TestDb::create().await;
    let store = db.store(2).await;
    let pool = store.pool().clone();
    sqlx::query("CREATE TABLE result_cache (`key` VARCHAR(255) PRIMARY KEY, value TEXT NOT NULL)")
        .execute(&pool)
        .await
        .unwrap();
    let mut rows = Vec::new();
    for scenario in SCENARIOS {
        rows.push((scenario, run_scenario(&db, &pool, scenario).await));
    }
    assert_eq!(rows.len(), SCENARIOS.len());
    for (scenario, row) in &rows {
        assert!(
            row.matches(scenario),
            "{}\n  expected responses={:?} charges={:?}",
            row.line(scenario),
            scenario.expected_responses,
            scenario.expected_charges
        );
    }
    // The rows that matter most, spelled out: the result cache charges twice while both
    // clients see ch_1; wait and raise charge once.
    let row = |label: &str| &rows.iter().find(|(s, _)| s.label == label).unwrap().1;
    assert_eq!(row("result-cache").charges, ["ch_1", "ch_2"]);
    assert_eq!(row("result-cache").responses, ["ch_1", "ch_1"]);
    assert_eq!(row("wait").charges, ["ch_1"]);
    assert_eq!(row("wait").responses, ["ch_1", "ch_1"]);
    assert_eq!(row("raise").charges, ["ch_1"]);
    assert_eq!(row("raise").responses[1], "InProgressError");
    // The simulated table says the same.
    for (scenario, row) in &rows {
        let (simulated, _) = scenario.simulate(false).unwrap();
        assert_eq!(&simulated, row, "{}", scenario.label);
    }
}
