//! The test harness: a card provider behind a real axum server on loopback, the layer in
//! front of it on `MemoryStore` or on a real `redis-server` started on a free port, and a
//! real HTTP client.
//!
//! If `redis-server` is not on PATH the Redis tests fail saying so: a silent skip would hide
//! a suite that never ran.

#![allow(dead_code)]

pub mod broken;
pub mod checks;
pub mod promql;
pub mod scrape;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Json, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use idem::record::{Command, Reply};
use idem::{AnyStore, Coordinator, Key, MemoryStore, Operation, Options, Store, StoreError};
use idem_http::{Disposition, IdempotencyLayer, IdempotencyLayerBuilder, ProblemType};
use serde::Deserialize;
use serde_json::json;

#[allow(unused_imports)]
pub use idem_tests::process;
#[allow(unused_imports)]
pub use idem_tests::redis::{self, RedisServer};

/// Which store a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    Memory,
    Redis,
}

/// Runs each named test, `async fn name(kind: StoreKind)`, once on each store.
#[macro_export]
macro_rules! on_both_stores {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::support::StoreKind::Memory).await
                }
            )*
        }
        mod redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::support::StoreKind::Redis).await
                }
            )*
        }
    };
}

/// The card provider and the handler's own counts.
#[derive(Debug, Clone, Default)]
pub struct Bank {
    /// The card statement: one charge id per charge, in order.
    statement: Arc<Mutex<Vec<String>>>,
    /// How many times a handler ran (every method, every outcome).
    runs: Arc<AtomicUsize>,
    /// Statuses the charge handler answers with, without charging, before it charges.
    failures: Arc<Mutex<VecDeque<Failure>>>,
    /// How long a charge takes after it is on the statement.
    takes: Arc<Mutex<Duration>>,
}

impl Bank {
    pub fn new(takes: Duration) -> Self {
        let bank = Self::default();
        *bank.takes.lock().unwrap() = takes;
        bank
    }

    pub fn statement(&self) -> Vec<String> {
        self.statement.lock().unwrap().clone()
    }

    pub fn charges(&self) -> usize {
        self.statement.lock().unwrap().len()
    }

    /// How long a charge takes from now on.
    pub fn set_takes(&self, takes: Duration) {
        *self.takes.lock().unwrap() = takes;
    }

    pub fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }

    /// The next charge requests answer `status` without charging, once each, marked
    /// [`Disposition::Release`]: the provider refused before charging, and the handler
    /// says so.
    pub fn fail_next(&self, status: StatusCode) {
        self.failures
            .lock()
            .unwrap()
            .push_back((status, Some(Disposition::Release)));
    }

    /// The next charge requests answer `status` without charging and without a mark, once
    /// each: the layer cannot tell it from a handler that failed after charging.
    pub fn answer_next_unmarked(&self, status: StatusCode) {
        self.failures.lock().unwrap().push_back((status, None));
    }

    fn charge(&self) -> String {
        let mut statement = self.statement.lock().unwrap();
        let id = format!("ch_{}", statement.len() + 1);
        statement.push(id.clone());
        id
    }
}

/// A charge request's answer without a charge: its status, and the mark the handler puts
/// on it, if any.
type Failure = (StatusCode, Option<Disposition>);

#[derive(Debug, Deserialize)]
pub struct Order {
    pub amount: i64,
    pub currency: String,
}

/// `POST /charges`: records the charge on the statement at once, then takes its time,
/// then answers 201 with the charge, a `Location`, and headers that a replay must not
/// repeat (`x-run`, `set-cookie`). Amount 402 is declined (402, nothing charged); 500
/// panics after charging; 7777 answers a 4 KiB body.
async fn charge(State(bank): State<Bank>, Json(order): Json<Order>) -> Response {
    let run = bank.runs.fetch_add(1, Ordering::SeqCst) + 1;
    let failure = bank.failures.lock().unwrap().pop_front();
    if let Some((status, mark)) = failure {
        let mut response = (
            status,
            Json(json!({ "error": "provider unavailable", "run": run })),
        )
            .into_response();
        if let Some(mark) = mark {
            response.extensions_mut().insert(mark);
        }
        return response;
    }
    if order.amount == 402 {
        return (
            StatusCode::PAYMENT_REQUIRED,
            Json(json!({ "error": "card_declined" })),
        )
            .into_response();
    }
    let id = bank.charge();
    let takes = *bank.takes.lock().unwrap();
    tokio::time::sleep(takes).await;
    assert!(
        order.amount != 500,
        "the provider's client panicked after charging"
    );
    let mut headers = HeaderMap::new();
    headers.insert(
        header::LOCATION,
        HeaderValue::from_str(&format!("/charges/{id}")).unwrap(),
    );
    headers.insert("x-run", HeaderValue::from(run));
    headers.insert(
        header::SET_COOKIE,
        HeaderValue::from_static("session=first"),
    );
    let mut body = json!({ "id": id, "amount": order.amount, "currency": order.currency });
    if order.amount == 7777 {
        body["padding"] = json!("x".repeat(4096));
    }
    (StatusCode::CREATED, headers, Json(body)).into_response()
}

/// Any other method on `/charges`: counts the run and echoes the method.
async fn other(State(bank): State<Bank>, method: axum::http::Method) -> Response {
    let run = bank.runs.fetch_add(1, Ordering::SeqCst) + 1;
    (
        StatusCode::OK,
        [("x-run", run.to_string())],
        method.to_string(),
    )
        .into_response()
}

async fn statement(State(bank): State<Bank>) -> Json<Vec<String>> {
    Json(bank.statement())
}

/// The routes, with `/charges` (every method of it) wrapped by `wrap`.
pub fn routes(bank: Bank, wrap: impl FnOnce(MethodRouter<Bank>) -> MethodRouter<Bank>) -> Router {
    let charges = post(charge)
        .get(other)
        .put(other)
        .delete(other)
        .patch(other)
        .options(other);
    Router::new()
        .route("/charges", wrap(charges))
        .route("/statement", get(statement))
        .with_state(bank)
}

/// A store that can be taken down: every command fails as a dead link does. Only for
/// `MemoryStore`, which cannot go down; Redis tests kill the real server.
#[derive(Debug, Clone)]
pub struct Switchable {
    inner: AnyStore,
    down: Arc<AtomicBool>,
}

impl Switchable {
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }
}

impl Store for Switchable {
    async fn apply(
        &self,
        operation: &Operation,
        key: &Key,
        command: Command,
    ) -> Result<Reply, StoreError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(StoreError::unavailable(&command, "connection refused"));
        }
        self.inner.apply(operation, key, command).await
    }

    async fn changed(&self, operation: &Operation, key: &Key) {
        self.inner.changed(operation, key).await
    }
}

/// One test's world: the bank, the server, the store, and a client.
pub struct Fixture {
    pub bank: Bank,
    pub base: String,
    pub client: reqwest::Client,
    pub store: Switchable,
    pub coordinator: Coordinator<Switchable>,
    pub redis: Option<RedisServer>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// Options for tests: the defaults, fail closed (a test of fail-open says so), and a short
/// store reply deadline so that an outage answers quickly.
pub fn options() -> idem::OptionsBuilder {
    Options::builder()
        .on_store_failure(idem::StoreFailurePolicy::FailClosed)
        .reply_timeout(Duration::from_millis(200))
        .store_retries(1)
}

/// A store of `kind`: a `MemoryStore`, or a Redis store on a server started for the test.
pub async fn store(kind: StoreKind) -> (Switchable, Option<RedisServer>) {
    let (inner, redis) = match kind {
        StoreKind::Memory => (AnyStore::new(MemoryStore::new()), None),
        StoreKind::Redis => {
            let server = RedisServer::start();
            let store = idem_redis::RedisStore::builder()
                .command_timeout(Duration::from_millis(300))
                .connect(&server.url())
                .await
                .expect("connect to the test's redis-server");
            (AnyStore::new(store), Some(server))
        }
    };
    let store = Switchable {
        inner,
        down: Arc::new(AtomicBool::new(false)),
    };
    (store, redis)
}

impl Fixture {
    /// The bank behind the layer that `configure` makes from the defaults.
    pub async fn new(
        kind: StoreKind,
        takes: Duration,
        options: idem::OptionsBuilder,
        configure: impl FnOnce(
            IdempotencyLayerBuilder<Switchable>,
        ) -> IdempotencyLayerBuilder<Switchable>,
    ) -> Self {
        let (store, redis) = store(kind).await;
        let coordinator = Coordinator::new(store.clone(), options.build().unwrap());
        let layer = configure(IdempotencyLayer::builder(coordinator.clone()))
            .build()
            .unwrap();
        let bank = Bank::new(takes);
        let app = routes(bank.clone(), |charges| charges.layer(layer));
        Self::serve(bank, app, store, coordinator, redis).await
    }

    /// Serves `app` on a free loopback port.
    pub async fn serve(
        bank: Bank,
        app: Router,
        store: Switchable,
        coordinator: Coordinator<Switchable>,
        redis: Option<RedisServer>,
    ) -> Self {
        let (base, server) = serve(app).await;
        Self {
            bank,
            base,
            client: reqwest::Client::new(),
            store,
            coordinator,
            redis,
            server,
        }
    }

    /// `POST /charges` with `key` (the header's raw value) and `body`.
    pub async fn post(&self, key: Option<&str>, body: &serde_json::Value) -> Answer {
        self.send(reqwest::Method::POST, key, body).await
    }

    pub async fn send(
        &self,
        method: reqwest::Method,
        key: Option<&str>,
        body: &serde_json::Value,
    ) -> Answer {
        let mut request = self
            .client
            .request(method, format!("{}/charges", self.base))
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(key) = key {
            request = request.header("idempotency-key", key);
        }
        Answer::of(request.send().await.expect("the server answers")).await
    }
}

/// Serves `app` on a free loopback port: the base URL and the server's task.
pub async fn serve(app: Router) -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (format!("http://{addr}"), server)
}

/// A response, read whole.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: bytes::Bytes,
}

impl Answer {
    pub async fn of(response: reqwest::Response) -> Self {
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response.bytes().await.expect("the body arrives whole");
        Self {
            status,
            headers,
            body,
        }
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|error| {
            panic!(
                "not JSON ({error}): {:?}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|value| value.to_str().unwrap())
    }

    pub fn replayed(&self) -> bool {
        self.header("idempotent-replayed") == Some("true")
    }

    /// Asserts that this is the problem `kind`: its status, `application/problem+json`,
    /// and the RFC 9457 members with the type's URI.
    #[track_caller]
    pub fn assert_problem(&self, kind: ProblemType) {
        assert_eq!(self.status, kind.status().as_u16(), "{self:?}");
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json"),
            "{self:?}"
        );
        let body = self.json();
        assert_eq!(body["type"], kind.uri(), "{body}");
        assert_eq!(body["title"], kind.title(), "{body}");
        assert_eq!(body["status"], kind.status().as_u16(), "{body}");
        assert!(
            body["detail"].as_str().is_some_and(|d| !d.is_empty()),
            "{body}"
        );
        assert_eq!(body.as_object().unwrap().len(), 4, "{body}");
        assert!(!self.replayed());
    }
}

/// An order body.
pub fn order(amount: i64) -> serde_json::Value {
    json!({ "amount": amount, "currency": "eur" })
}
