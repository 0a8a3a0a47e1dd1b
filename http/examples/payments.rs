//! A payments service under the idempotency layer.
//!
//! ```text
//! cargo run -p idem-http --example payments -- --addr 127.0.0.1:3000 [--redis URL [--fences]] [--action-ms N]
//! ```
//!
//! `POST /charges` with `{"amount": <integer>, "currency": "<string>"}` and an
//! `Idempotency-Key` charges the card once per key and answers `201` with the charge;
//! `GET /statement` lists the provider's charge ids so far (the card statement). The provider
//! records a charge the moment the request reaches it, then takes `--action-ms` to answer,
//! as a real one does: a client that gives up in between has been charged all the same.
//! Amounts over 1,000,000 are declined with `402`, which is the request's answer and is
//! replayed like a success.
//!
//! With `--ledger FILE`, the provider writes each charge as a line (`<key> <id> <downstream>`,
//! the last the request's downstream key, MODEL.md `D1`, or `-` without the layer) appended to
//! that file, so that several processes share one card statement. On SIGTERM or Ctrl-C the
//! service stops gracefully: it stops accepting connections, refuses new charges (503), lets
//! the charges that run finish and be recorded for `--shutdown-grace-ms`, cuts the rest
//! (their keys are left to their leases) and prints what it did as one line,
//! `shutdown finished=N cut=M`.
//!
//! With `--provider-url URL`, charges go to a provider over HTTP that deduplicates by its own
//! `Idempotency-Key` (`examples/provider.rs`), and each request's downstream key is that key:
//! every attempt of one payment is one charge there, even the second run idem can only
//! report, of a holder paused past its lease and taken over (MODEL.md `D1`).
//!
//! `GET /metrics` answers every counter in Prometheus's text format (METRICS.md says what
//! each means): the layer's per-route counters, and the coordinator's, labelled
//! `coordinator="payments"`, published at each scrape, so a scrape reads them as they are at
//! that moment and nothing runs between scrapes (`dashboards/idem.json` is built on them).
//!
//! `GET /openapi.json` is the service's OpenAPI document: `POST /charges` and
//! `GET /statement` as the handlers answer them, and, under the layer, the layer's own
//! contract on `POST /charges` (`idem_http::openapi::IdempotencyDoc`).

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use clap::{Parser, ValueEnum};
use idem::record::{Body, Command, Reply, StoredResult};
use idem::{
    AnyStore, Coordinator, Fence, Fingerprint, InFlightPolicy, Key, MemoryStore, Operation,
    Options, OwnerToken, Store, StoreFailurePolicy,
};
use idem_http::{Claimed, FENCING_TOKEN, IdempotencyKey, IdempotencyLayer, fencing_token};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use serde::Deserialize;
use serde_json::json;

/// A payments service whose `POST /charges` is safe to retry under an `Idempotency-Key`.
#[derive(Debug, Parser)]
#[command(name = "payments")]
pub(crate) struct Args {
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
    /// Serve the handler without the layer, but send the layer's own two store commands by
    /// hand around each charge (reserve before, complete after; a completed key answers the
    /// stored body): the like-for-like baseline the bench measures the layer against. Takes
    /// `--redis`; the key is the raw header, with no parsing, fingerprint or response codec.
    #[arg(long, requires = "redis", conflicts_with = "no_idempotency")]
    bare_store: bool,
    /// Charge through a provider over HTTP with idempotency of its own (`examples/provider.rs`),
    /// sending it each request's downstream key (MODEL.md `D1`), instead of the provider in
    /// this process.
    #[arg(long, value_name = "URL")]
    provider_url: Option<String>,
    /// Append each charge to this file as `<key> <id> <downstream>`: one statement for many
    /// processes.
    #[arg(long)]
    ledger: Option<PathBuf>,
    /// With `--redis`, every grant carries a fence (`RedisStoreBuilder::fences`, MODEL.md
    /// `F1`), which each charge sends its provider as `Fencing-Token` (`MemoryStore` fences
    /// every grant already).
    #[arg(long, requires = "redis")]
    fences: bool,
    /// The lease of a running charge, in milliseconds (renewed while it runs): how long a
    /// key stays held after its process died or cut it.
    #[arg(long, default_value_t = 30_000)]
    lease_ms: u64,
    /// On SIGTERM or Ctrl-C, how long running charges may take to finish before they are
    /// cut, in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    shutdown_grace_ms: u64,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum InFlight {
    Wait,
    Raise,
}

/// The card provider: in this process (every charge on the statement from the moment it is
/// made, with no idempotency of its own), or a remote one with its own (`--provider-url`).
#[derive(Debug)]
struct Provider {
    statement: Mutex<Vec<String>>,
    ledger: Option<PathBuf>,
    takes: Duration,
    remote: Option<Remote>,
}

/// A provider over HTTP that deduplicates by its `Idempotency-Key` (`examples/provider.rs`).
#[derive(Debug)]
struct Remote {
    client: reqwest::Client,
    charges: String,
}

impl Remote {
    /// Charges under `key`, the provider's own idempotency key, sending the holder's `fence`
    /// when the store handed one out (`Fencing-Token`, MODEL.md `F1`). While the provider says
    /// the same key is in progress (409 with `Retry-After`, a takeover racing a paused
    /// holder's request), asks again after it, for up to 30 s; a 409 without it (a stale
    /// fence: a newer holder has called) is final.
    async fn charge(
        &self,
        key: &str,
        fence: Option<Fence>,
        order: &Order,
    ) -> Result<String, String> {
        let body = json!({ "amount": order.amount, "currency": order.currency });
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let mut request = self
                .client
                .post(&self.charges)
                .header("idempotency-key", key)
                .json(&body);
            if let Some(fence) = fence {
                request = request.header(FENCING_TOKEN, fencing_token(fence));
            }
            let response = request
                .send()
                .await
                .map_err(|error| format!("the provider did not answer: {error}"))?;
            let status = response.status();
            let retry_after = response
                .headers()
                .get(header::RETRY_AFTER)
                .and_then(|value| value.to_str().ok()?.parse::<u64>().ok());
            if status == StatusCode::CONFLICT
                && let Some(seconds) = retry_after
                && tokio::time::Instant::now() < deadline
            {
                let wait = Duration::from_secs(seconds);
                tokio::time::sleep(wait.min(Duration::from_secs(1))).await;
                continue;
            }
            if !status.is_success() {
                return Err(format!("the provider answered {status}"));
            }
            let charge: serde_json::Value = response
                .json()
                .await
                .map_err(|error| format!("the provider's answer is not JSON: {error}"))?;
            return charge["id"]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| "the provider's answer has no id".to_owned());
        }
    }
}

impl Provider {
    /// Charges the card. `key` is the client's key, for the ledger's reader; the claim's
    /// downstream key is what a real provider would take as its own `Idempotency-Key`
    /// (MODEL.md `D1`): the same on every attempt of one request, so the ledger shows which
    /// charges one request made, and a provider that deduplicates by it would have made one.
    ///
    /// With a remote provider, the downstream key is sent as its `Idempotency-Key` (the
    /// client's key where the handler runs without the layer), and the claim's fence as its
    /// `Fencing-Token`.
    async fn charge(
        &self,
        key: Option<&str>,
        claimed: Option<Claimed>,
        order: &Order,
    ) -> Result<String, String> {
        if let Some(remote) = &self.remote {
            let idempotency_key = match (&claimed, key) {
                (Some(claimed), _) => claimed.downstream_key().to_string(),
                (None, Some(key)) => key.to_owned(),
                (None, None) => return Err("no key to send the provider".to_owned()),
            };
            let fence = claimed.as_ref().and_then(|claimed| claimed.fence());
            return remote.charge(&idempotency_key, fence, order).await;
        }
        let id = {
            let mut statement = self.statement.lock().unwrap_or_else(|e| e.into_inner());
            let id = format!("ch_{}_{}", std::process::id(), statement.len() + 1);
            statement.push(id.clone());
            id
        };
        if let Some(ledger) = &self.ledger {
            // One short line appended in one write: lines of several processes never mix.
            let downstream =
                claimed.map_or_else(|| "-".to_owned(), |c| c.downstream_key().to_string());
            let line = format!("{} {id} {downstream}\n", key.unwrap_or("-"));
            let appended = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(ledger)
                .and_then(|mut file| file.write_all(line.as_bytes()));
            if let Err(error) = appended {
                tracing::error!(%error, "the ledger cannot be written");
            }
        }
        if !self.takes.is_zero() {
            tokio::time::sleep(self.takes).await;
        }
        Ok(id)
    }
}

#[derive(Debug, Deserialize)]
struct Order {
    amount: u64,
    currency: String,
}

async fn create_charge(
    State(provider): State<Arc<Provider>>,
    key: Option<IdempotencyKey>,
    claimed: Option<Claimed>,
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
    // Under the layer, the request's claim gives the key to pass on to the provider.
    let id = match provider
        .charge(key.as_ref().map(IdempotencyKey::as_str), claimed, &order)
        .await
    {
        Ok(id) => id,
        Err(error) => {
            return (StatusCode::BAD_GATEWAY, Json(json!({ "error": error }))).into_response();
        }
    };
    let location = format!("/charges/{id}");
    let body = json!({ "id": id, "amount": order.amount, "currency": order.currency });
    (
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        Json(body),
    )
        .into_response()
}

/// The bench's baseline: the store's reserve and complete sent by hand, with nothing of the
/// layer or the driver around them (no key parsing, no fingerprint of the request line, no
/// response codec, no lease renewal, no detached task).
struct BareStore {
    store: idem_redis::RedisStore,
    operation: Operation,
    lease: Duration,
    owners: AtomicU64,
    salt: u64,
}

impl BareStore {
    async fn charge(&self, provider: &Provider, headers: &HeaderMap, body: &[u8]) -> Response {
        let key = headers
            .get("idempotency-key")
            .and_then(|value| value.to_str().ok())
            .and_then(|value| Key::new(value.trim_matches('"')).ok());
        let Some(key) = key else {
            return StatusCode::BAD_REQUEST.into_response();
        };
        let owner = OwnerToken::from_u128(
            (u128::from(self.salt) << 64) | u128::from(self.owners.fetch_add(1, Ordering::Relaxed)),
        );
        let fingerprint = Fingerprint::of_bytes(body);
        let reserve = Command::Reserve {
            owner,
            fingerprint,
            lease: self.lease,
        };
        match self.store.apply(&self.operation, &key, reserve).await {
            Ok(Reply::Reserved(_)) => {}
            Ok(Reply::Replay {
                result: StoredResult::Value(stored),
                ..
            }) => {
                let headers = [(header::CONTENT_TYPE, "application/json")];
                return (StatusCode::CREATED, headers, stored.as_bytes().to_vec()).into_response();
            }
            _ => return StatusCode::CONFLICT.into_response(),
        }
        let Ok(order) = serde_json::from_slice::<Order>(body) else {
            return StatusCode::BAD_REQUEST.into_response();
        };
        let Ok(id) = provider.charge(Some(key.as_str()), None, &order).await else {
            return StatusCode::BAD_GATEWAY.into_response();
        };
        let answer = json!({ "id": id, "amount": order.amount, "currency": order.currency });
        let answer = serde_json::to_vec(&answer).unwrap_or_default();
        let complete = Command::Complete {
            owner,
            fingerprint,
            result: StoredResult::Value(Body::new(&answer)),
            retention: Duration::from_secs(24 * 60 * 60),
        };
        match self.store.apply(&self.operation, &key, complete).await {
            Ok(Reply::Completed(_)) => {
                let location = format!("/charges/{id}");
                let headers = [
                    (header::LOCATION, location),
                    (header::CONTENT_TYPE, "application/json".to_owned()),
                ];
                (StatusCode::CREATED, headers, answer).into_response()
            }
            _ => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
        }
    }
}

/// `GET /metrics`: the coordinator's counters published as they are now, then every counter
/// rendered in Prometheus's text format.
fn scrape(exporter: &PrometheusHandle, coordinator: Option<&Coordinator<AnyStore>>) -> Response {
    if let Some(coordinator) = coordinator {
        idem_http::metrics::publish_coordinator_metrics(coordinator, "payments");
    }
    exporter.run_upkeep();
    let text = "text/plain; version=0.0.4; charset=utf-8";
    ([(header::CONTENT_TYPE, text)], exporter.render()).into_response()
}

async fn statement(State(provider): State<Arc<Provider>>) -> Json<Vec<String>> {
    let statement = provider.statement.lock().unwrap_or_else(|e| e.into_inner());
    Json(statement.clone())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .init();
    run(Args::parse()).await
}

/// Serves until SIGTERM or Ctrl-C, then stops gracefully.
pub(crate) async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    // The recorder every counter goes to; `GET /metrics` renders it.
    let exporter = PrometheusBuilder::new().install_recorder()?;
    let provider = Arc::new(Provider {
        statement: Mutex::new(Vec::new()),
        ledger: args.ledger.clone(),
        takes: Duration::from_millis(args.action_ms),
        remote: args.provider_url.as_ref().map(|url| Remote {
            client: reqwest::Client::new(),
            charges: format!("{}/charges", url.trim_end_matches('/')),
        }),
    });
    let charges = post(create_charge);
    let mut described = None;
    let (charges, coordinator) = if args.no_idempotency {
        (charges, None)
    } else if let (true, Some(url)) = (args.bare_store, &args.redis) {
        let bare = Arc::new(BareStore {
            store: idem_redis::RedisStore::connect(url).await?,
            operation: Operation::new("POST_charges")?,
            lease: Duration::from_millis(args.lease_ms),
            owners: AtomicU64::new(0),
            salt: u64::from(std::process::id()),
        });
        let handler =
            move |State(provider): State<Arc<Provider>>, headers: HeaderMap, body: Bytes| {
                let bare = bare.clone();
                async move { bare.charge(&provider, &headers, &body).await }
            };
        (post(handler), None)
    } else {
        let store = match &args.redis {
            Some(url) => AnyStore::new(
                idem_redis::RedisStore::builder()
                    .fences(args.fences)
                    .connect(url)
                    .await?,
            ),
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
            .lease(Duration::from_millis(args.lease_ms))
            .build()?;
        let coordinator = Coordinator::new(store, options);
        let layer = IdempotencyLayer::new(coordinator.clone());
        described = Some(idem_http::openapi::IdempotencyDoc::for_layer(&layer));
        (charges.layer(layer), Some(coordinator))
    };
    let metrics = {
        let coordinator = coordinator.clone();
        get(move || std::future::ready(scrape(&exporter, coordinator.as_ref())))
    };
    let app = Router::new()
        .route("/charges", charges)
        .route("/statement", get(statement))
        .route("/metrics", metrics)
        .route("/openapi.json", openapi_json(described)?)
        .with_state(provider);
    let listener = tokio::net::TcpListener::bind(args.addr).await?;
    println!(
        "payments on http://{} ({}; the provider takes {} ms)",
        listener.local_addr()?,
        if args.no_idempotency {
            "no idempotency layer".to_owned()
        } else if args.bare_store {
            "no layer; the store's commands sent by hand".to_owned()
        } else {
            format!(
                "idempotency records in {}",
                args.redis.as_deref().unwrap_or("memory")
            )
        },
        args.action_ms
    );
    let (stopping, stop) = tokio::sync::watch::channel(false);
    let server = axum::serve(listener, app).with_graceful_shutdown({
        let mut stop = stop.clone();
        async move {
            let _ = stop.wait_for(|stop| *stop).await;
        }
    });
    let server = tokio::spawn(server.into_future());
    stop_signal().await;
    // No new connections from here; requests in flight end as their calls do.
    let _ = stopping.send(true);
    if let Some(coordinator) = coordinator {
        let grace = Duration::from_millis(args.shutdown_grace_ms);
        let report = coordinator.shutdown(grace).await;
        println!("shutdown finished={} cut={}", report.finished, report.cut);
    }
    server.await??;
    Ok(())
}

/// `GET /openapi.json`: the document, made once.
fn openapi_json(
    described: Option<idem_http::openapi::IdempotencyDoc>,
) -> Result<axum::routing::MethodRouter<Arc<Provider>>, Box<dyn std::error::Error>> {
    let document = api_document(described)?.to_json()?;
    Ok(get(move || async move {
        ([(header::CONTENT_TYPE, "application/json")], document)
    }))
}

/// The OpenAPI document: `POST /charges` and `GET /statement` as the handlers answer them
/// (axum's `Json` refuses a body that is not the order as text), and, when the layer
/// protects `POST /charges`, the layer's contract on it.
fn api_document(
    described: Option<idem_http::openapi::IdempotencyDoc>,
) -> Result<utoipa::openapi::OpenApi, idem_http::openapi::OpenApiError> {
    use utoipa::openapi::path::OperationBuilder;
    use utoipa::openapi::request_body::RequestBodyBuilder;
    use utoipa::openapi::{
        ArrayBuilder, ComponentsBuilder, Content, Header, HttpMethod, KnownFormat, ObjectBuilder,
        OpenApiBuilder, PathItem, PathsBuilder, Ref, Required, ResponseBuilder, SchemaFormat, Type,
    };

    let string = || ObjectBuilder::new().schema_type(Type::String);
    let amount = || {
        ObjectBuilder::new()
            .schema_type(Type::Integer)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
            .minimum(Some(0))
            .description(Some(
                "In the currency's smallest unit; over 1,000,000 is declined.",
            ))
    };
    let currency = || {
        string()
            .min_length(Some(3))
            .max_length(Some(3))
            .description(Some("A three-letter code."))
    };
    let order = ObjectBuilder::new()
        .schema_type(Type::Object)
        .property("amount", amount())
        .required("amount")
        .property("currency", currency())
        .required("currency");
    let charge = ObjectBuilder::new()
        .schema_type(Type::Object)
        .property(
            "id",
            string().description(Some("The provider's charge id.")),
        )
        .required("id")
        .property("amount", amount())
        .required("amount")
        .property("currency", currency())
        .required("currency");
    let error = ObjectBuilder::new()
        .schema_type(Type::Object)
        .property("error", string())
        .required("error");
    let json = |name: &str| Content::new(Some(Ref::from_schema_name(name)));
    let text = || Content::new(Some(string()));
    let mut location = Header::new(string());
    location.description = Some("The charge's URI.".to_owned());

    let create_charge = OperationBuilder::new()
        .operation_id(Some("create_charge"))
        .summary(Some("Charges the card once per Idempotency-Key"))
        .request_body(Some(
            RequestBodyBuilder::new()
                .content("application/json", json("Order"))
                .required(Some(Required::True))
                .build(),
        ))
        .response(
            "201",
            ResponseBuilder::new()
                .description("The charge.")
                .header("Location", location)
                .content("application/json", json("Charge")),
        )
        .response(
            "400",
            ResponseBuilder::new()
                .description("The currency is not a three-letter code, or the body is not JSON.")
                .content("application/json", json("Error"))
                .content("text/plain", text()),
        )
        .response(
            "402",
            ResponseBuilder::new()
                .description("The card was declined (`card_declined`).")
                .content("application/json", json("Error")),
        )
        .response(
            "415",
            ResponseBuilder::new()
                .description("The body is not `application/json`.")
                .content("text/plain", text()),
        )
        .response(
            "422",
            ResponseBuilder::new()
                .description("The body is JSON, but not an order.")
                .content("text/plain", text()),
        )
        .response(
            "502",
            ResponseBuilder::new()
                .description("The provider failed.")
                .content("application/json", json("Error")),
        );
    let statement = OperationBuilder::new()
        .operation_id(Some("statement"))
        .summary(Some(
            "The provider's charge ids so far (the card statement)",
        ))
        .response(
            "200",
            ResponseBuilder::new()
                .description("The charge ids, in the order they were made.")
                .content(
                    "application/json",
                    Content::new(Some(ArrayBuilder::new().items(string()))),
                ),
        );
    let mut document = OpenApiBuilder::new()
        .info(
            utoipa::openapi::InfoBuilder::new()
                .title("payments")
                .version(env!("CARGO_PKG_VERSION")),
        )
        .paths(
            PathsBuilder::new()
                .path("/charges", PathItem::new(HttpMethod::Post, create_charge))
                .path("/statement", PathItem::new(HttpMethod::Get, statement)),
        )
        .components(Some(
            ComponentsBuilder::new()
                .schema("Order", order)
                .schema("Charge", charge)
                .schema("Error", error)
                .build(),
        ))
        .build();
    if let Some(described) = described {
        described
            .operation(axum::http::Method::POST, "/charges")
            .apply(&mut document)?;
    }
    Ok(document)
}

/// SIGTERM (a deploy, a process manager) or Ctrl-C.
async fn stop_signal() {
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("install the SIGTERM handler");
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}
