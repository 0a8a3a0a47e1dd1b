//! A payments service under the idempotency layer.
//!
//! ```text
//! cargo run -p idem-http --example payments -- --addr 127.0.0.1:3000 [--redis URL] [--action-ms N]
//! ```
//!
//! `POST /charges` with `{"amount": <integer>, "currency": "<string>"}` and an
//! `Idempotency-Key` charges the card once per key and answers `201` with the charge;
//! `GET /statement` lists the provider's charge ids so far (the card statement). The provider
//! records a charge the moment the request reaches it, then takes `--action-ms` to answer,
//! as a real one does: a client that gives up in between has been charged all the same.
//! Amounts over 1,000,000 are declined with `402`, which is the request's answer and is
//! replayed like a success.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use clap::{Parser, ValueEnum};
use idem::{AnyStore, Coordinator, InFlightPolicy, MemoryStore, Options, StoreFailurePolicy};
use idem_http::IdempotencyLayer;
use serde::Deserialize;
use serde_json::json;

/// A payments service whose `POST /charges` is safe to retry under an `Idempotency-Key`.
#[derive(Debug, Parser)]
#[command(name = "payments")]
struct Args {
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1:3000")]
    addr: SocketAddr,
    /// Keep idempotency records in this Redis (`redis://host:port`) instead of in memory.
    #[arg(long)]
    redis: Option<String>,
    /// How long the provider takes to answer a charge, in milliseconds.
    #[arg(long, default_value_t = 200)]
    action_ms: u64,
    /// What a retry that finds its first request still running gets: the first's response
    /// once it is done (`wait`), or 409 with Retry-After at once (`raise`).
    #[arg(long, value_enum, default_value_t = InFlight::Wait)]
    in_flight: InFlight,
    /// Serve the same handlers without the layer (the bare handler, for comparison).
    #[arg(long)]
    no_idempotency: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum InFlight {
    Wait,
    Raise,
}

/// The card provider: every charge is on the statement from the moment it is made.
#[derive(Debug)]
struct Provider {
    statement: Mutex<Vec<String>>,
    takes: Duration,
}

impl Provider {
    async fn charge(&self) -> String {
        let id = {
            let mut statement = self.statement.lock().unwrap_or_else(|e| e.into_inner());
            let id = format!("ch_{}", statement.len() + 1);
            statement.push(id.clone());
            id
        };
        if !self.takes.is_zero() {
            tokio::time::sleep(self.takes).await;
        }
        id
    }
}

#[derive(Debug, Deserialize)]
struct Order {
    amount: u64,
    currency: String,
}

async fn create_charge(
    State(provider): State<Arc<Provider>>,
    Json(order): Json<Order>,
) -> Response {
    if order.currency.len() != 3 || !order.currency.bytes().all(|b| b.is_ascii_alphabetic()) {
        let error = json!({ "error": "currency must be a three-letter code" });
        return (StatusCode::BAD_REQUEST, Json(error)).into_response();
    }
    if order.amount > 1_000_000 {
        let error = json!({ "error": "card_declined" });
        return (StatusCode::PAYMENT_REQUIRED, Json(error)).into_response();
    }
    let id = provider.charge().await;
    let location = format!("/charges/{id}");
    let body = json!({ "id": id, "amount": order.amount, "currency": order.currency });
    (
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        Json(body),
    )
        .into_response()
}

async fn statement(State(provider): State<Arc<Provider>>) -> Json<Vec<String>> {
    let statement = provider.statement.lock().unwrap_or_else(|e| e.into_inner());
    Json(statement.clone())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .init();
    let provider = Arc::new(Provider {
        statement: Mutex::new(Vec::new()),
        takes: Duration::from_millis(args.action_ms),
    });
    let charges = post(create_charge);
    let charges = if args.no_idempotency {
        charges
    } else {
        let store = match &args.redis {
            Some(url) => AnyStore::new(idem_redis::RedisStore::connect(url).await?),
            None => AnyStore::new(MemoryStore::new()),
        };
        let policy = match args.in_flight {
            InFlight::Wait => InFlightPolicy::Wait,
            InFlight::Raise => InFlightPolicy::Raise,
        };
        // A second charge is worse than a 503: fail closed.
        let options = Options::builder()
            .in_flight(policy)
            .on_store_failure(StoreFailurePolicy::FailClosed)
            .build()?;
        let coordinator = Coordinator::new(store, options);
        charges.layer(IdempotencyLayer::new(coordinator))
    };
    let app = Router::new()
        .route("/charges", charges)
        .route("/statement", get(statement))
        .with_state(provider);
    let listener = tokio::net::TcpListener::bind(args.addr).await?;
    println!(
        "payments on http://{} ({}; the provider takes {} ms)",
        listener.local_addr()?,
        if args.no_idempotency {
            "no idempotency layer".to_owned()
        } else {
            format!(
                "idempotency records in {}",
                args.redis.as_deref().unwrap_or("memory")
            )
        },
        args.action_ms
    );
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
