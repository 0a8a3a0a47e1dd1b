//! A card provider with idempotency of its own, as payment APIs have: the provider the
//! payments example calls with `--provider-url`.
//!
//! ```text
//! cargo run -p idem-http --example provider -- --addr 127.0.0.1:4000 [--takes-ms N]
//! ```
//!
//! `POST /charges` with `{"amount": <integer>, "currency": "<string>"}` and an
//! `Idempotency-Key` header charges once per key: the charge is on the statement the moment
//! the first request arrives, and is answered `201` after `--takes-ms`. A request under a key
//! already charged is answered the same charge (`200`, `Idempotent-Replayed: true`); one that
//! arrives while the first is still being answered gets `409` with `Retry-After: 1`; one with
//! another amount or currency under the same key gets `422`. A request without the header is
//! refused with `400`: this provider never charges unprotected. `GET /charges` answers the
//! statement (each charge's id and key) and how many requests were replays, as JSON.
//!
//! It honours fences too (MODEL.md `F1`): a request may carry its holder's fence in
//! `Fencing-Token` (`idem_http::FENCING_TOKEN`). Per key, the provider keeps the highest fence
//! it has seen, and refuses a request whose fence is below it with `409` and no
//! `Retry-After` (counted `stale` on the statement): a holder granted the key after this
//! one has already called. A fence equal to the highest is the same holder's request again.
//!
//! The payments example sends it the downstream key of each request's claim (MODEL.md `D1`),
//! so every attempt of one payment, on any process, is one charge here: also the attempts
//! idem itself can only report, such as a holder paused past its lease and taken over.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use clap::Parser;
use idem::Fence;
use idem_http::FencingToken;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// A card provider that deduplicates by its own `Idempotency-Key`.
#[derive(Debug, Parser)]
#[command(name = "provider")]
pub(crate) struct Args {
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1:4000")]
    addr: SocketAddr,
    /// How long a charge takes to be answered, in milliseconds (it is made at once).
    #[arg(long, default_value_t = 200)]
    takes_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
struct ChargeRequest {
    amount: u64,
    currency: String,
}

/// One key's charge: the request it was made for, its answer once given, and the highest
/// fence a request under the key carried.
#[derive(Debug)]
struct Entry {
    request: ChargeRequest,
    id: String,
    answered: bool,
    fence: Option<Fence>,
}

/// What `GET /charges` answers.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub(crate) struct Statement {
    /// Every charge made, in order: its id and the key it was made under.
    pub(crate) charges: Vec<(String, String)>,
    /// Requests answered with an earlier charge (replays) or told to come back (409).
    pub(crate) replays: usize,
    pub(crate) in_flight: usize,
    /// Requests refused because their fence was below the highest the key had seen.
    #[serde(default)]
    pub(crate) stale: usize,
    /// Requests that carried a fence (`Fencing-Token`), refused or not.
    #[serde(default)]
    pub(crate) fenced: usize,
}

#[derive(Debug, Default)]
struct Provider {
    entries: HashMap<String, Entry>,
    statement: Statement,
}

#[derive(Clone)]
struct App {
    provider: Arc<Mutex<Provider>>,
    takes: Duration,
}

fn problem(status: StatusCode, detail: &str) -> Response {
    (status, Json(json!({ "error": detail }))).into_response()
}

async fn charge(
    State(app): State<App>,
    headers: HeaderMap,
    Json(request): Json<ChargeRequest>,
) -> Response {
    let Some(key) = headers
        .get("idempotency-key")
        .and_then(|value| value.to_str().ok())
        .filter(|key| !key.is_empty() && key.len() <= 255)
        .map(str::to_owned)
    else {
        return problem(StatusCode::BAD_REQUEST, "an Idempotency-Key is required");
    };
    let fence = match FencingToken::from_headers(&headers) {
        Ok(token) => token.map(|FencingToken(fence)| fence),
        Err(error) => return problem(StatusCode::BAD_REQUEST, &error.to_string()),
    };
    let id = {
        let mut provider = app.provider.lock().unwrap_or_else(|e| e.into_inner());
        let Provider { entries, statement } = &mut *provider;
        statement.fenced += usize::from(fence.is_some());
        if let (Some(fence), Some(entry)) = (fence, entries.get_mut(&key)) {
            if entry.fence.is_some_and(|highest| fence < highest) {
                statement.stale += 1;
                return problem(
                    StatusCode::CONFLICT,
                    "a holder granted this key after the sender has called: its fence is stale",
                );
            }
            entry.fence = Some(fence);
        }
        match entries.get(&key) {
            Some(entry) if entry.request != request => {
                return problem(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "this key was used with another request",
                );
            }
            Some(entry) if !entry.answered => {
                statement.in_flight += 1;
                let mut response = problem(
                    StatusCode::CONFLICT,
                    "a request with this key is in progress",
                );
                response
                    .headers_mut()
                    .insert("retry-after", axum::http::HeaderValue::from_static("1"));
                return response;
            }
            Some(entry) => {
                statement.replays += 1;
                let body = json!({ "id": entry.id, "amount": request.amount, "currency": request.currency });
                return (
                    StatusCode::OK,
                    [("idempotent-replayed", "true")],
                    Json(body),
                )
                    .into_response();
            }
            None => {
                let id = format!("ch_{}", statement.charges.len() + 1);
                statement.charges.push((id.clone(), key.clone()));
                entries.insert(
                    key.clone(),
                    Entry {
                        request: request.clone(),
                        id: id.clone(),
                        answered: false,
                        fence,
                    },
                );
                id
            }
        }
    };
    // The charge is made; answering it takes time, as a real provider's does.
    tokio::time::sleep(app.takes).await;
    if let Some(entry) = app
        .provider
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entries
        .get_mut(&key)
    {
        entry.answered = true;
    }
    let body = json!({ "id": id, "amount": request.amount, "currency": request.currency });
    (StatusCode::CREATED, Json(body)).into_response()
}

async fn statement(State(app): State<App>) -> Json<Statement> {
    let provider = app.provider.lock().unwrap_or_else(|e| e.into_inner());
    Json(provider.statement.clone())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    run(Args::parse()).await
}

/// Serves until the process ends.
pub(crate) async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let app = App {
        provider: Arc::default(),
        takes: Duration::from_millis(args.takes_ms),
    };
    let router = Router::new()
        .route("/charges", post(charge).get(statement))
        .with_state(app);
    let listener = tokio::net::TcpListener::bind(args.addr).await?;
    println!("provider on http://{}", listener.local_addr()?);
    axum::serve(listener, router).await?;
    Ok(())
}
