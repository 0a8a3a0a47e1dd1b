//! A shop whose orders and idempotency records live in one PostgreSQL, and commit together.
//!
//! ```text
//! cargo run -p idem-http --example shop -- --database-url postgres://postgres@127.0.0.1:5432/postgres [--addr 127.0.0.1:3000] [--payment-ms 3000]
//! ```
//!
//! `POST /orders` with `{"sku": "<string>", "quantity": <integer>}`, an `Idempotency-Key`
//! and the tenant in `X-Tenant` makes one order per key and tenant, and answers `201` with
//! it. The handler writes the order row on the request's transaction, which the layer owns:
//! the row commits together with idem's record of the `201`, or not at all. So there is one
//! record per request, one key scope (the tenant's), and one fingerprint (the order's JSON
//! fields, in whatever order the client sends them); a retry after a lost response, a crash
//! or a database restart makes the order at most once, and gets the same answer.
//!
//! After the row, the handler calls the payment provider, which takes `--payment-ms`: the
//! slow part of an order, during which the database may go away.

use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use clap::Parser;
use idem::{Coordinator, Options, StoreFailurePolicy};
use idem_http::{IdempotencyLayer, Tx};
use idem_postgres::{PostgresStore, RecordTransaction};
use serde::{Deserialize, Serialize};

/// A shop whose `POST /orders` is safe to retry under an `Idempotency-Key`.
#[derive(Debug, Parser)]
#[command(name = "shop")]
struct Args {
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1:3000")]
    addr: SocketAddr,
    /// The shop's database; idem keeps its records there too.
    #[arg(long)]
    database_url: String,
    /// How long the payment provider takes, in milliseconds.
    #[arg(long, default_value_t = 200)]
    payment_ms: u64,
}

/// An order as the client asks for it.
#[derive(Debug, Deserialize)]
pub struct NewOrder {
    pub sku: String,
    pub quantity: i32,
}

/// An order as made.
#[derive(Debug, Serialize)]
pub struct Order {
    pub id: i64,
    pub tenant: String,
    pub sku: String,
    pub quantity: i32,
}

/// The payment provider: it takes its time.
#[derive(Debug, Clone)]
pub struct Payments {
    pub takes: Duration,
}

const ORDERS: &str = "CREATE TABLE IF NOT EXISTS orders (
    id bigserial PRIMARY KEY,
    tenant text NOT NULL,
    sku text NOT NULL,
    quantity integer NOT NULL
)";

/// The tenant an order is made for.
fn tenant(headers: &HeaderMap) -> Option<String> {
    let tenant = headers.get("x-tenant")?.to_str().ok()?;
    (!tenant.is_empty()).then(|| tenant.to_owned())
}

/// `POST /orders`: the order row, on the request's transaction; then the payment; then
/// `201` with the order.
async fn create_order(
    State(payments): State<Payments>,
    headers: HeaderMap,
    mut tx: Tx<RecordTransaction>,
    Json(order): Json<NewOrder>,
) -> Result<(StatusCode, Json<Order>), (StatusCode, String)> {
    let tenant = tenant(&headers).ok_or((StatusCode::BAD_REQUEST, "no X-Tenant".to_owned()))?;
    if order.quantity < 1 {
        let problem = "the quantity must be at least 1".to_owned();
        return Err((StatusCode::UNPROCESSABLE_ENTITY, problem));
    }
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO orders (tenant, sku, quantity) VALUES ($1, $2, $3) RETURNING id",
    )
    .bind(&tenant)
    .bind(&order.sku)
    .bind(order.quantity)
    .fetch_one(&mut **tx)
    .await
    .map_err(|error| (StatusCode::SERVICE_UNAVAILABLE, error.to_string()))?;
    tokio::time::sleep(payments.takes).await;
    let order = Order {
        id,
        tenant,
        sku: order.sku,
        quantity: order.quantity,
    };
    Ok((StatusCode::CREATED, Json(order)))
}

/// The shop on the database at `url`, its tables created if they are missing.
pub async fn shop(url: &str, payments: Payments) -> Result<Router, Box<dyn std::error::Error>> {
    // Two pools: idem's statements on one, the requests' transactions on the other, so an
    // order holding its transaction never takes the connection its lease's renewal needs.
    let store = PostgresStore::connect(url).await?;
    sqlx::query(ORDERS).execute(store.pool()).await?;
    store.migrate().await?;
    // A second order is worse than a 503: fail closed. A lease of 5 s, renewed while an
    // order runs: a cut-off order frees its key within 5 s, while a retry still waits.
    let options = Options::builder()
        .on_store_failure(StoreFailurePolicy::FailClosed)
        .lease(Duration::from_secs(5))
        .build()?;
    let idempotency = IdempotencyLayer::builder(Coordinator::new(store, options))
        .tenant(|parts| tenant(&parts.headers))
        .fingerprint_json_fields(["sku", "quantity"])
        .in_transaction()
        .build()?;
    Ok(Router::new()
        .route("/orders", post(create_order).layer(idempotency))
        .with_state(payments))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .init();
    let payments = Payments {
        takes: Duration::from_millis(args.payment_ms),
    };
    let app = shop(&args.database_url, payments).await?;
    let listener = tokio::net::TcpListener::bind(args.addr).await?;
    println!("shop on http://{}", listener.local_addr()?);
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
