//! The layer owns the request's transaction (`IdempotencyLayerBuilder::in_transaction`): the
//! handler's writes on its `Tx` commit with the record of a recorded response, and roll
//! back with everything else. Here on a store that keeps its records in `MemoryStore` and
//! its rows in memory beside them, behind a real axum server and a real client; the shop
//! test (`shop.rs`) runs the same on the real PostgreSQL.

mod support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::post;
use idem::record::{Command, Reply};
use idem::{
    BoxError, Coordinator, Key, MemoryStore, Operation, Options, Store, StoreError, Transaction,
    TransactionalStore,
};
use idem_http::{ConfigError, Disposition, IdempotencyLayer, ProblemType, Tx};
use support::{Answer, serve};
use tokio::sync::Notify;

/// The rows committed so far, beside the records.
#[derive(Debug, Clone, Default)]
struct Table(Arc<Mutex<Vec<String>>>);

impl Table {
    fn rows(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

/// Records in a `MemoryStore`, rows in a `Table`; its transactions buffer rows and add
/// them to the table only when the record's complete recorded the result.
#[derive(Debug, Clone, Default)]
struct Shop {
    records: Arc<MemoryStore>,
    table: Table,
    begin_fails: Arc<AtomicBool>,
    begun: Arc<AtomicUsize>,
}

impl Store for Shop {
    async fn apply(
        &self,
        operation: &Operation,
        key: &Key,
        command: Command,
    ) -> Result<Reply, StoreError> {
        self.records.apply(operation, key, command).await
    }
}

/// An open transaction: rows written, not committed.
#[derive(Debug)]
struct Writes {
    rows: Vec<String>,
    shop: Shop,
}

impl Writes {
    fn insert(&mut self, row: impl Into<String>) {
        self.rows.push(row.into());
    }
}

impl Transaction for Writes {
    async fn complete(
        self,
        operation: Operation,
        key: Key,
        command: Command,
    ) -> Result<Reply, StoreError> {
        let reply = self.shop.records.apply(&operation, &key, command).await?;
        if idem::record::commits(&reply) {
            self.shop.table.0.lock().unwrap().extend(self.rows);
        }
        Ok(reply)
    }
}

impl TransactionalStore for Shop {
    type Transaction = Writes;

    async fn begin(&self) -> Result<Writes, BoxError> {
        if self.begin_fails.load(Ordering::SeqCst) {
            return Err("the database is down".into());
        }
        self.begun.fetch_add(1, Ordering::SeqCst);
        Ok(Writes {
            rows: Vec::new(),
            shop: self.clone(),
        })
    }
}

/// What the handler does after writing its row, by the request body.
#[derive(Debug, Clone, Default)]
struct Handler {
    runs: Arc<AtomicUsize>,
    /// A task that kept the transaction is let go.
    let_go: Arc<Notify>,
    /// The kept transaction was dropped by its task.
    kept_dropped: Arc<Notify>,
}

/// `POST /orders`: writes one row on the request's transaction, then answers by the body:
/// `ok` 201, `declined` 402 (recorded), `refused` 502 marked `Release`, `cut` an unmarked
/// 500 (outcome unknown), `panic` panics, `keep` moves the transaction into a task that
/// outlives the response, `twice` takes the transaction a second time.
async fn order(
    State(handler): State<Handler>,
    mut tx: Tx<Writes>,
    body: String,
) -> axum::response::Response {
    let run = handler.runs.fetch_add(1, Ordering::SeqCst) + 1;
    tx.insert(format!("{body}-{run}"));
    match body.as_str() {
        "ok" => (StatusCode::CREATED, format!("order {run}")).into_response(),
        "declined" => (StatusCode::PAYMENT_REQUIRED, "declined").into_response(),
        "refused" => (StatusCode::BAD_GATEWAY, Disposition::Release, "refused").into_response(),
        "cut" => (StatusCode::INTERNAL_SERVER_ERROR, "cut off").into_response(),
        "panic" => panic!("the handler panicked after its write"),
        "keep" => {
            tokio::spawn(async move {
                handler.let_go.notified().await;
                tx.insert("late");
                drop(tx);
                handler.kept_dropped.notify_one();
            });
            (StatusCode::CREATED, "order kept").into_response()
        }
        _ => (StatusCode::BAD_REQUEST, "unknown").into_response(),
    }
}

struct World {
    shop: Shop,
    handler: Handler,
    base: String,
    client: reqwest::Client,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for World {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl World {
    async fn new() -> Self {
        let shop = Shop::default();
        let coordinator = Coordinator::new(shop.clone(), Options::default());
        let layer = IdempotencyLayer::builder(coordinator)
            .in_transaction()
            .build()
            .unwrap();
        let handler = Handler::default();
        let app = Router::new()
            .route("/orders", post(order).layer(layer))
            .with_state(handler.clone());
        let (base, server) = serve(app).await;
        Self {
            shop,
            handler,
            base,
            client: reqwest::Client::new(),
            server,
        }
    }

    async fn post(&self, key: &str, body: &str) -> Answer {
        let request = self
            .client
            .post(format!("{}/orders", self.base))
            .header("idempotency-key", format!("\"{key}\""))
            .body(body.to_owned())
            .send();
        // Generous: an answer this late means the layer hung.
        let response = tokio::time::timeout(Duration::from_secs(20), request)
            .await
            .expect("the layer answers without waiting for a kept transaction")
            .expect("the server answers");
        Answer::of(response).await
    }

    fn runs(&self) -> usize {
        self.handler.runs.load(Ordering::SeqCst)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writes_commit_with_the_recorded_response_and_every_retry_gets_it() {
    let world = World::new().await;
    let first = world.post("k-1", "ok").await;
    assert_eq!(first.status, 201);
    assert_eq!(first.body, "order 1");
    let retry = world.post("k-1", "ok").await;
    assert_eq!((retry.status, &retry.body[..]), (201, &b"order 1"[..]));
    assert!(retry.replayed());
    // A recorded 4xx commits its writes too: it is the request's outcome.
    let declined = world.post("k-2", "declined").await;
    assert_eq!(declined.status, 402);
    assert!(world.post("k-2", "declined").await.replayed());
    assert_eq!(world.shop.table.rows(), ["ok-1", "declined-2"]);
    assert_eq!(world.runs(), 2);
    // A transaction is begun for the runs only, never for a replay.
    assert_eq!(world.shop.begun.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_that_is_not_recorded_rolls_back_and_releases_the_key() {
    let world = World::new().await;
    // Marked Release, and an unmarked 500 (outside a transaction, an unknown outcome):
    // in the layer's transaction both roll the write back, so nothing happened.
    let refused = world.post("k-1", "refused").await;
    assert_eq!(refused.status, 502);
    assert!(!refused.replayed());
    let cut = world.post("k-2", "cut").await;
    assert_eq!(cut.status, 500);
    assert_eq!(cut.body, "cut off", "the handler's own response, unchanged");
    assert!(world.shop.table.rows().is_empty());
    // Both keys were released: the retries run and commit once.
    assert_eq!(world.post("k-1", "ok").await.status, 201);
    assert_eq!(world.post("k-2", "ok").await.status, 201);
    assert_eq!(world.shop.table.rows(), ["ok-3", "ok-4"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_rolls_back_and_releases_the_key() {
    let world = World::new().await;
    let panicked = world.post("k", "panic").await;
    panicked.assert_problem(ProblemType::Internal);
    assert!(world.shop.table.rows().is_empty());
    let retry = world.post("k", "ok").await;
    assert_eq!((retry.status, retry.replayed()), (201, false));
    assert_eq!(world.shop.table.rows(), ["ok-2"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_that_keeps_the_transaction_is_not_waited_for_and_commits_nothing() {
    let world = World::new().await;
    // The task holding the transaction waits for the test, which waits for the answer: a
    // layer that waited for the transaction would never answer.
    let kept = world.post("k", "keep").await;
    kept.assert_problem(ProblemType::Internal);
    assert!(world.shop.table.rows().is_empty());
    // The task writes on, then drops the transaction: it rolls back.
    let dropped = world.handler.kept_dropped.notified();
    world.handler.let_go.notify_one();
    dropped.await;
    assert!(world.shop.table.rows().is_empty());
    // The key was released: the retry runs and commits once.
    let retry = world.post("k", "ok").await;
    assert_eq!((retry.status, retry.replayed()), (201, false));
    assert_eq!(world.shop.table.rows(), ["ok-2"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_that_cannot_be_begun_runs_nothing_and_releases_the_key() {
    let world = World::new().await;
    world.shop.begin_fails.store(true, Ordering::SeqCst);
    let refused = world.post("k", "ok").await;
    refused.assert_problem(ProblemType::StoreUnavailable);
    assert!(refused.header("retry-after").is_some());
    assert_eq!(world.runs(), 0);
    world.shop.begin_fails.store(false, Ordering::SeqCst);
    assert_eq!(world.post("k", "ok").await.status, 201);
    assert_eq!(world.shop.table.rows(), ["ok-1"]);
}

/// A handler that takes `Tx` where no layer lends one, or takes it twice.
async fn greedy(first: Tx<Writes>, second: Tx<Writes>) -> StatusCode {
    drop((first, second));
    StatusCode::CREATED
}

async fn lone(tx: Tx<Writes>) -> StatusCode {
    drop(tx);
    StatusCode::CREATED
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_not_lent_or_taken_twice_is_rejected_and_the_key_released() {
    let shop = Shop::default();
    let plain = IdempotencyLayer::new(Coordinator::new(shop.clone(), Options::default()));
    let owning = IdempotencyLayer::builder(Coordinator::new(shop.clone(), Options::default()))
        .in_transaction()
        .build()
        .unwrap();
    let app = Router::new()
        .route("/plain", post(lone).layer(plain))
        .route("/twice", post(greedy).layer(owning));
    let (base, server) = serve(app).await;
    let client = reqwest::Client::new();
    for path in ["/plain", "/twice"] {
        for _ in 0..2 {
            let answer = Answer::of(
                client
                    .post(format!("{base}{path}"))
                    .header("idempotency-key", "\"k\"")
                    .send()
                    .await
                    .unwrap(),
            )
            .await;
            // Released, not recorded: the second try is rejected afresh, never replayed.
            answer.assert_problem(ProblemType::Internal);
            assert!(!answer.replayed(), "{path}");
        }
    }
    assert!(shop.table.rows().is_empty());
    server.abort();
}

#[test]
fn a_layer_that_owns_the_transaction_requires_the_key() {
    let coordinator = Coordinator::new(Shop::default(), Options::default());
    let refused = IdempotencyLayer::builder(coordinator)
        .in_transaction()
        .require_key(false)
        .build();
    assert_eq!(refused.unwrap_err(), ConfigError::TransactionWithoutKey);
}
