//! The shop example (`examples/shop.rs`) on the real PostgreSQL, through a real server and
//! client: the layer owns each request's transaction, so the order row and idem's record
//! commit together, under one key scope and one fingerprint.

#[allow(dead_code)]
#[path = "../examples/shop.rs"]
mod shop;

mod support;

use std::time::{Duration, Instant};

use idem_http::ProblemType;
use idem_tests::postgres::{PrivateServer, TestDb};
use serde_json::json;
use shop::Payments;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use support::{Answer, serve};

/// The shop at `url`, served on a free loopback port, with a client.
struct Shop {
    base: String,
    client: reqwest::Client,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Shop {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl Shop {
    async fn open(url: &str, payment: Duration) -> Self {
        let app = shop::shop(url, Payments { takes: payment })
            .await
            .expect("the shop starts");
        let (base, server) = serve(app).await;
        Self {
            base,
            client: reqwest::Client::new(),
            server,
        }
    }

    /// `POST /orders` for `tenant` with `key` and the raw JSON `body`.
    fn order(&self, tenant: &str, key: &str, body: &str) -> reqwest::RequestBuilder {
        self.client
            .post(format!("{}/orders", self.base))
            .header("x-tenant", tenant)
            .header("idempotency-key", format!("\"{key}\""))
            .header("content-type", "application/json")
            .body(body.to_owned())
    }

    async fn send(&self, tenant: &str, key: &str, body: &str) -> Answer {
        let sent = self.order(tenant, key, body).send();
        // Generous: an order takes seconds at most here.
        let response = tokio::time::timeout(Duration::from_secs(60), sent)
            .await
            .expect("the shop answers")
            .expect("the server answers");
        Answer::of(response).await
    }
}

/// The orders made, as `(tenant, sku, quantity)`, in order.
async fn orders(pool: &PgPool) -> Vec<(String, String, i32)> {
    sqlx::query_as("SELECT tenant, sku, quantity FROM orders ORDER BY id")
        .fetch_all(pool)
        .await
        .expect("read the orders")
}

/// A pool of the test's own on `url`, to look at the database.
async fn look(url: &str) -> PgPool {
    PgPoolOptions::new()
        .max_connections(2)
        .connect(url)
        .await
        .expect("connect to look")
}

/// The trial's case: PostgreSQL stopped 0.5 s into a 3 s order (after the order row was
/// written on the request's transaction) and started again after the order's slow part.
/// The first request commits nothing and says so (a retryable server error, not a `201`);
/// once the database is back the key is not blocked: the retry makes the order (it waits
/// for the first attempt's lease, never gets a 409, and nothing is recorded for a day),
/// and every later retry replays it. One order row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_down_mid_order_makes_one_order_and_the_key_is_free_once_it_is_back() {
    let server = PrivateServer::start(&[]);
    let url = server.url("postgres");
    let shop = Shop::open(&url, Duration::from_secs(3)).await;
    let watch = look(&url).await;
    let body = r#"{"sku": "tea", "quantity": 2}"#;

    let sent = Instant::now();
    let first = tokio::spawn(shop.order("acme", "order-1", body).send());
    // The order row is written and the handler is in its slow part once the request's
    // transaction is open and idle.
    let in_payment = async {
        loop {
            let idle: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity WHERE state = 'idle in transaction'",
            )
            .fetch_one(&watch)
            .await
            .unwrap();
            if idle == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(20), in_payment)
        .await
        .expect("the order reaches its slow part");
    tokio::time::sleep(Duration::from_millis(500).saturating_sub(sent.elapsed())).await;
    watch.close().await;
    let stopped = tokio::task::spawn_blocking(move || {
        server.stop();
        server
    });
    let server = stopped.await.unwrap();

    let first = Answer::of(first.await.unwrap().expect("the first request is answered")).await;
    assert!(
        first.status >= 500 && !first.replayed(),
        "the first order could not commit and says so: {first:?}"
    );
    assert_eq!(
        first.header("content-type"),
        Some("application/problem+json")
    );

    let server = tokio::task::spawn_blocking(move || {
        server.start_again();
        server
    })
    .await
    .unwrap();
    let watch = look(&url).await;
    assert!(orders(&watch).await.is_empty(), "nothing committed");

    // Soon after the database is back: the order is made, not a 409.
    let retry = shop.send("acme", "order-1", body).await;
    assert_eq!(retry.status, 201, "{retry:?}");
    assert!(!retry.replayed());
    let order = retry.json();
    assert_eq!(
        (order["sku"].clone(), order["quantity"].clone()),
        (json!("tea"), json!(2))
    );
    // Every later retry replays it, the same bytes.
    let again = shop.send("acme", "order-1", body).await;
    assert!(again.replayed());
    assert_eq!((again.status, &again.body), (201, &retry.body));
    assert_eq!(
        orders(&watch).await,
        [("acme".to_owned(), "tea".to_owned(), 2)]
    );
    drop(server);
}

/// One order per key and tenant, its fingerprint the order's JSON fields: the same order
/// with its fields reordered (and spaced otherwise) is replayed, not 422; another order
/// under the key is 422; another tenant's equal key is another order; a request without a
/// tenant is refused before anything runs; a refused quantity (422) is the request's
/// outcome, recorded with nothing written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_order_per_key_and_tenant_whatever_the_order_of_its_fields() {
    let db = TestDb::create().await;
    let shop = Shop::open(&db.url(), Duration::ZERO).await;
    let first = shop
        .send("acme", "k-1", r#"{"sku": "tea", "quantity": 2}"#)
        .await;
    assert_eq!(first.status, 201);
    let reordered = shop
        .send("acme", "k-1", r#"{ "quantity":2,"sku":"tea" }"#)
        .await;
    assert!(reordered.replayed(), "{reordered:?}");
    assert_eq!(reordered.body, first.body);
    shop.send("acme", "k-1", r#"{"sku": "tea", "quantity": 3}"#)
        .await
        .assert_problem(ProblemType::KeyReuse);
    let other_tenant = shop
        .send("bolt", "k-1", r#"{"sku": "tea", "quantity": 2}"#)
        .await;
    assert_eq!((other_tenant.status, other_tenant.replayed()), (201, false));
    let untenanted = shop
        .client
        .post(format!("{}/orders", shop.base))
        .header("idempotency-key", "\"k-2\"")
        .header("content-type", "application/json")
        .body(r#"{"sku": "tea", "quantity": 2}"#)
        .send()
        .await
        .unwrap();
    Answer::of(untenanted)
        .await
        .assert_problem(ProblemType::TenantMissing);
    let refused = shop
        .send("acme", "k-3", r#"{"sku": "tea", "quantity": 0}"#)
        .await;
    assert_eq!(refused.status, 422);
    let refused_again = shop
        .send("acme", "k-3", r#"{"quantity": 0, "sku": "tea"}"#)
        .await;
    assert!(refused_again.replayed());
    let pool = db.pool(2).await;
    assert_eq!(
        orders(&pool).await,
        [
            ("acme".to_owned(), "tea".to_owned(), 2),
            ("bolt".to_owned(), "tea".to_owned(), 2)
        ]
    );
    let records: i64 = sqlx::query_scalar("SELECT count(*) FROM idem_records")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(
        records, 3,
        "one record per key and tenant, each in PostgreSQL"
    );
}
