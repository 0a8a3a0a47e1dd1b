//! The `Idempotency-Key` header for tower and axum services, on [`idem`].
//!
//! A client that retries a `POST` (a timeout, a dropped connection) must not be charged
//! twice, and must get the answer of the request that went through. [`IdempotencyLayer`]
//! does that for any HTTP service: it reserves the request's key before the handler runs,
//! runs the handler once, records its response, and answers every retry with it, including
//! the retry that arrives while the first request is still running.
//!
//! # The layer
//!
//! ```
//! use axum::{Json, Router, body::Body, http::{Request, StatusCode}, routing::post};
//! use http_body_util::BodyExt;
//! use idem::{Coordinator, MemoryStore, Options};
//! use idem_http::IdempotencyLayer;
//! use tower::ServiceExt;
//!
//! async fn charge(Json(order): Json<serde_json::Value>) -> (StatusCode, Json<serde_json::Value>) {
//!     // Runs once per key: the provider is called here.
//!     (StatusCode::CREATED, Json(serde_json::json!({ "id": "ch_1", "amount": order["amount"] })))
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let coordinator = Coordinator::new(MemoryStore::new(), Options::default());
//! let app = Router::new()
//!     .route("/charges", post(charge))
//!     .layer(IdempotencyLayer::new(coordinator));
//!
//! let request = || {
//!     Request::post("/charges")
//!         .header("idempotency-key", r#""8e03978e-40d5-43e8-bc93-6894a57f9324""#)
//!         .header("content-type", "application/json")
//!         .body(Body::from(r#"{"amount": 100, "currency": "eur"}"#))
//! };
//! let first = app.clone().oneshot(request()?).await?;
//! assert_eq!(first.status(), StatusCode::CREATED);
//! let retry = app.oneshot(request()?).await?;
//! assert_eq!(retry.status(), StatusCode::CREATED);
//! assert_eq!(retry.headers()["idempotent-replayed"], "true");
//! let (first, retry) = (first.into_body().collect().await?, retry.into_body().collect().await?);
//! assert_eq!(first.to_bytes(), retry.to_bytes());
//! # Ok(())
//! # }
//! ```
//!
//! Every setting is on [`IdempotencyLayer::builder`]: the methods covered, whether the key
//! is required, bare tokens, the operation name, a tenant scope, the fingerprint, the body
//! limit, the stored headers, the replay header and which statuses are released:
//!
//! ```
//! # use axum::{Router, routing::post};
//! # use idem::{Coordinator, MemoryStore, Options};
//! use idem_http::{BareToken, IdempotencyLayer};
//!
//! # async fn charge() {}
//! # fn main() -> Result<(), idem_http::ConfigError> {
//! # let coordinator = Coordinator::new(MemoryStore::new(), Options::default());
//! /// What an authentication layer put on the request.
//! #[derive(Clone)]
//! struct Account(String);
//!
//! let charges = IdempotencyLayer::builder(coordinator)
//!     .operation("payment.charge")
//!     .tenant(|parts| parts.extensions.get::<Account>().map(|account| account.0.clone()))
//!     .fingerprint_json_fields(["amount", "currency"])
//!     .bare_token(BareToken::Accept)
//!     .build()?;
//! let app: Router = Router::new().route("/charges", post(charge).layer(charges));
//! # Ok(())
//! # }
//! ```
//!
//! # The extractor
//!
//! A handler that calls the coordinator itself (to fingerprint a typed body, or to make
//! one call among several) takes the key with [`IdempotencyKey`], which reads the header
//! exactly as the layer does and rejects with the same problem, and answers idem's errors
//! with [`HttpError`]:
//!
//! ```
//! use axum::{Json, Router, extract::State, http::StatusCode, routing::post};
//! use idem::{Coordinator, Fingerprint, MemoryStore, Options};
//! use idem_http::{HttpError, IdempotencyKey};
//! use serde::Deserialize;
//!
//! #[derive(Deserialize)]
//! struct Order { amount: u64, currency: String }
//!
//! async fn charge(
//!     State(payments): State<Coordinator<MemoryStore>>,
//!     key: IdempotencyKey,
//!     Json(order): Json<Order>,
//! ) -> axum::response::Result<(StatusCode, String)> {
//!     let fingerprint = Fingerprint::builder()
//!         .field("amount", order.amount)
//!         .field("currency", &order.currency)
//!         .finish()
//!         .map_err(|_| StatusCode::BAD_REQUEST)?;
//!     let id = payments
//!         .execute("payment.charge", &key, fingerprint, |claim| async move {
//!             // The key goes on to the provider, which deduplicates on it too.
//!             Ok::<_, StatusCode>(format!("ch_{}", claim.key()))
//!         })
//!         .await
//!         .map_err(|error| HttpError::new(error, payments.options()))?;
//!     Ok((StatusCode::CREATED, id))
//! }
//!
//! let payments = Coordinator::new(MemoryStore::new(), Options::default());
//! let app: Router = Router::new().route("/charges", post(charge)).with_state(payments);
//! ```
//!
//! An `Err` of the action (here a `StatusCode`) is answered as the action's own response;
//! every other case as its problem.
//!
//! # What the layer does
//!
//! For a request whose method it covers (`POST` and `PATCH` by default; `GET`, `HEAD`,
//! `OPTIONS`, `PUT`, `DELETE` and the rest pass through untouched, with no key needed and
//! nothing stored):
//!
//! 1. **The key.** `Idempotency-Key` is read as a Structured Field String
//!    ([`header`]): missing, malformed or not a valid key is 400.
//! 2. **The scope.** The key is scoped by operation, named after the method and the route
//!    template (or one name the service gives), and by the tenant the service reads from
//!    the request, if any: two routes' or two tenants' equal keys never meet. The key
//!    itself is stored as sent.
//! 3. **The fingerprint.** The body is read up to a limit (413 over it), and the request is
//!    fingerprinted by its method, path and query, and body bytes (or named JSON fields, or
//!    the service's own function). The same key with another fingerprint is 422, whether the
//!    first request is still running or done.
//! 4. **Once.** The handler runs on a task of its own (idem's detached call): a client that
//!    hangs up or a `TimeoutLayer` that fires never stops a handler that started; it runs
//!    to its end and its response is recorded, and the retry gets it.
//! 5. **What is recorded.** 2xx, 3xx and 4xx answers are the request's outcome (a declined
//!    card's 402 included): recorded and replayed. 5xx, 408 and 429 are failures: the key is
//!    released, the response still goes to its caller, and a retry runs the handler again
//!    ([`released_by_default`], configurable).
//! 6. **The replay.** The first caller gets the handler's response unchanged. A retry gets
//!    the same status, the stored headers (an allow-list, [`DEFAULT_STORED_HEADERS`]; never
//!    hop-by-hop headers, `Date` or `Set-Cookie`) and the body byte for byte, plus
//!    `Idempotent-Replayed: true`. Bodies are stored up to the coordinator's body limit
//!    (`Options::max_body_bytes`, 1 MiB by default); a larger response still reaches its
//!    caller, and a retry gets 500 [`ResponseNotStored`](ProblemType::ResponseNotStored).
//! 7. **In flight.** Under policy `Wait` (idem's default) a retry waits for the first and
//!    gets its response; under `Raise`, or once the waiter's deadline passes, it gets 409
//!    with `Retry-After` ([`RetryAfter`]).
//! 8. **Store outage.** Fail closed: 503 with `Retry-After`, nothing runs. Fail open: the
//!    handler runs unprotected, and the layer says so in a warning and in
//!    `idem_http_failed_open_total`. A corrupt record is 500, and nothing runs.
//!
//! # Problem types
//!
//! Every answer the layer or the extractor makes itself is `application/problem+json`
//! (RFC 9457) with `type`, `title`, `status` and `detail`, and never shows another request's
//! fingerprint or body. The `type` is the URI of the variant's entry in these docs
//! (`https://docs.rs/idem-http/latest/idem_http/problem/enum.ProblemType.html#variant.` and
//! the name below):
//!
//! | `type` ends in | status | `Retry-After` | when | nothing ran? | retry with the same key |
//! |---|---|---|---|---|---|
//! | `KeyMissing` | 400 | | the route requires a key and there is none | yes | after fixing the request |
//! | `KeyMalformed` | 400 | | the header is not a String (unquoted under `BareToken::Refuse`, a bad escape, a control character, no closing quote, trailing characters, a bad parameter, two headers) | yes | after fixing the request |
//! | `KeyInvalid` | 400 | | the String is not a key: empty, over 255 characters, a space or a character outside visible ASCII | yes | after fixing the request |
//! | `TenantMissing` | 403 | | the service scopes keys by tenant and the request has none | yes | no |
//! | `BodyTooLarge` | 413 | | the request body is over the limit | yes | no |
//! | `BodyUnreadable` | 400 | | the request body failed before its end | yes | yes |
//! | `FingerprintUnavailable` | 400 | | the fingerprint's fields cannot be read (not JSON, or the service's function refused) | yes | no |
//! | `InProgress` | 409 | `ceil(backoff_max)`, at least 1 s | an identical request is being processed | this request, yes | yes, it gets the first's response |
//! | `KeyReuse` | 422 | | the key was used for another request, running or done | yes | no: use a new key |
//! | `StoreUnavailable` | 503 | `ceil((store_retries + 1) × reply_timeout)`, at least 1 s | the store is down and the layer fails closed | yes | yes |
//! | `ShuttingDown` | 503 | as above | the runtime is shutting down | | yes |
//! | `CorruptRecord` | 500 | | the key's record is not one idem wrote | yes | no: the same answer |
//! | `OutcomeUnknown` | 500 | | an identical request's handler panicked: its effect is unknown | yes | no: the same answer |
//! | `ResponseNotStored` | 500 | | an identical request ran, but its response was over the limit or its body failed | yes | no: the same answer |
//! | `StoredResponseUnreadable` | 500 | | the stored response does not decode | yes | no: the same answer |
//! | `Internal` | 500 | | a bug of idem-http or idem | yes | |
//!
//! A response the handler made (a 5xx it answered, a 402 it recorded) is never rewritten
//! into a problem.
//!
//! # Features
//!
//! - `axum` (default): [`IdempotencyKey`], [`HttpError`], `IntoResponse` for [`Problem`],
//!   and route templates from axum's `MatchedPath` as operation names.
//! - `metrics`: per-route counters and the coordinator's counters through the `metrics`
//!   facade (the `metrics` module, with the feature on).

mod disposition;
pub mod header;
mod layer;
pub mod problem;
mod response;
mod telemetry;

#[cfg(feature = "axum")]
mod extract;
#[cfg(feature = "metrics")]
pub mod metrics;

pub use disposition::Disposition;
pub use header::{BareToken, IDEMPOTENCY_KEY, KeyHeaderError};
pub use layer::{
    ConfigError, DEFAULT_MAX_REQUEST_BYTES, DEFAULT_STORED_HEADERS, IDEMPOTENT_REPLAYED,
    Idempotency, IdempotencyLayer, IdempotencyLayerBuilder, NEVER_STORED, RequestBody,
};
pub use problem::{PROBLEM_JSON, Problem, ProblemType, RetryAfter};
pub use response::ResponseBody;

#[cfg(feature = "axum")]
pub use extract::{HttpError, IdempotencyKey};
