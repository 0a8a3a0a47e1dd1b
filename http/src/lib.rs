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
//! limit, the stored headers, the replay header and what each response's
//! [`Disposition`] is:
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
//!     // Strict: only the draft's quoted String (bare tokens are accepted by default).
//!     .bare_token(BareToken::Refuse)
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
//! # The layer's transaction
//!
//! When the handler's effect is writes in the database that keeps idem's records (the order
//! row of `POST /orders`), the layer can own the request's transaction
//! ([`IdempotencyLayerBuilder::in_transaction`], on a store that begins its own:
//! idem-postgres's `PostgresStore`). It begins the transaction once the key is reserved,
//! the handler takes it with the [`Tx`] extractor and writes on it, and the layer commits
//! those writes together with the record of the response (MODEL.md, rule `T1`), so every
//! retry is answered the response whose writes committed, and a request's writes never
//! commit twice. One key scope, one key and one fingerprint (the layer's) stand for both;
//! the handler calls nothing of idem's.
//!
//! ```no_run
//! use axum::{Json, Router, http::StatusCode, routing::post};
//! use idem::{Coordinator, Options};
//! use idem_http::{IdempotencyLayer, Tx};
//! use idem_postgres::{PostgresStore, RecordTransaction};
//! use serde::Deserialize;
//!
//! #[derive(Deserialize)]
//! struct NewOrder { sku: String, quantity: i32 }
//!
//! async fn create_order(
//!     mut tx: Tx<RecordTransaction>,
//!     Json(order): Json<NewOrder>,
//! ) -> Result<(StatusCode, String), StatusCode> {
//!     // `&mut **tx` is the transaction's connection: a sqlx executor.
//!     let id: i64 = sqlx::query_scalar("INSERT INTO orders (sku, quantity) VALUES ($1, $2) RETURNING id")
//!         .bind(&order.sku)
//!         .bind(order.quantity)
//!         .fetch_one(&mut **tx)
//!         .await
//!         .map_err(|_| StatusCode::SERVICE_UNAVAILABLE)?;
//!     // No commit here: the layer commits the row with the record of this response.
//!     Ok((StatusCode::CREATED, format!("order {id}")))
//! }
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let store = PostgresStore::connect("postgres://app@127.0.0.1:5432/shop").await?;
//! store.migrate().await?;
//! let orders = IdempotencyLayer::builder(Coordinator::new(store, Options::default()))
//!     .fingerprint_json_fields(["sku", "quantity"])
//!     .in_transaction()
//!     .build()?;
//! let app: Router = Router::new().route("/orders", post(create_order).layer(orders));
//! # Ok(())
//! # }
//! ```
//!
//! What is committed follows the response's [`Disposition`]: a recorded response commits the
//! writes with its record; a response marked [`Disposition::Release`], one of unknown outcome
//! ([`Disposition::Unknown`]: an unmarked 5xx or 408), a service error or a panic rolls the
//! writes back and releases the key, since nothing was committed and so nothing happened: a
//! retry runs the handler again. A handler must not keep its `Tx` past its response (moved
//! into a task): the layer does not wait for it, answers 500, releases the key, and the
//! transaction rolls back when the task drops it. A commit refused because the key was
//! taken over (`RolledBack`) or whose outcome could not be learned (`CommitUnknown`) is a
//! retryable server error: the writes and the record committed together or not at all, so a
//! retry with the same key replays or runs, never both. `examples/shop.rs` is a whole
//! service, tested with its database stopped mid-order.
//!
//! # What the layer does
//!
//! For a request whose method it covers (`POST` and `PATCH` by default; `GET`, `HEAD`,
//! `OPTIONS`, `PUT`, `DELETE` and the rest pass through untouched, with no key needed and
//! nothing stored):
//!
//! 1. **The key.** `Idempotency-Key` is read as a Structured Field String, or as a bare
//!    token taken verbatim, as most clients send it (`"abc"` and `abc` are one key; strict
//!    parsing is [`BareToken::Refuse`]) ([`header`]): missing, malformed or not a valid key
//!    is 400.
//! 2. **The scope.** The key is scoped by operation, named after the method and the route
//!    template (or one name the service gives), and by the tenant the service reads from
//!    the request, if any: two routes' or two tenants' equal keys never meet. The key
//!    itself is stored as sent.
//! 3. **The fingerprint.** The body is read up to a limit (413 over it), and the request is
//!    fingerprinted by its method, path and query, and body bytes (or named JSON fields, or
//!    the service's own function). The same key with another fingerprint is 422, whether the
//!    first request is still running or done.
//! 4. **Once.** The handler runs as idem's detached call: a client that hangs up or a
//!    `TimeoutLayer` that fires never stops a handler that started (it moves to a task of its
//!    own); it runs to its end and its response is recorded, and the retry gets it.
//! 5. **What is recorded.** The layer records what the handler decided and releases only
//!    what it knows did nothing ([`Disposition`]): a response the handler marked
//!    [`Disposition::Release`] (a provider that refused before charging; idem's own errors
//!    through [`HttpError`] when an inner call ran nothing) and the refusals at the door,
//!    `401`, `407` and `429`, are released: the response goes to its caller and a retry runs
//!    the handler again. A server error or `408` the handler did not mark may have been made
//!    by a timeout or a panic catcher that cut the handler off after its effect, so its
//!    outcome is recorded as unknown: the response goes to its caller, and every retry gets
//!    500 [`OutcomeUnknown`](ProblemType::OutcomeUnknown), never a second run. Every other
//!    response (2xx, 3xx, the other 4xx, a declined card's 402 included) is recorded and
//!    replayed. A handler that panics is recorded as unknown too, and its caller gets that
//!    500. Configurable with [`IdempotencyLayerBuilder::disposition`].
//! 6. **The replay.** The first caller gets the handler's response unchanged. A retry gets
//!    the same status, the stored headers (an allow-list, [`DEFAULT_STORED_HEADERS`]; never
//!    hop-by-hop headers, `Date` or `Set-Cookie`) and the body byte for byte, plus
//!    `Idempotent-Replayed: true`. A response is stored when its body, status and stored
//!    headers fit the coordinator's body limit
//!    (`Options::max_body_bytes`, 1 MiB by default); a larger response still reaches its
//!    caller, and a retry gets 500 [`ResponseNotStored`](ProblemType::ResponseNotStored).
//! 7. **In flight.** Under policy `Wait` (idem's default) a retry waits for the first and
//!    gets its response; under `Raise`, or once the waiter's deadline passes, it gets 409
//!    with `Retry-After` ([`RetryAfter`]).
//! 8. **Store outage.** Fail closed: 503 with `Retry-After`, nothing runs. Fail open: the
//!    handler runs unprotected, and the layer says so in a warning and in
//!    `idem_http_failed_open_total`. A corrupt record is 500, and nothing runs.
//!
//! # Layer order
//!
//! The layer protects the handler from everything **outside** it: a client that hangs up or
//! a timeout outside drops only the request's future, and the detached handler runs on to
//! its end and is recorded. Whatever sits **inside** it, between the layer and the handler,
//! is part of the action: its answers are judged like the handler's. So:
//!
//! | layer | where | why |
//! |---|---|---|
//! | timeouts (`tower_http::timeout::TimeoutLayer`, `tower::timeout`) | outside | outside, a timeout answers its client and the handler finishes and is recorded, so the retry gets the charge; inside, it cuts the handler off and its 408/503/504 is recorded as "outcome unknown" (never a second charge, but never the first's answer either) |
//! | panic catchers (`CatchPanicLayer`) | either | the layer records a panic as "outcome unknown" and answers 500 itself; a catcher inside makes an unmarked 500, recorded the same way |
//! | authentication | outside | a 401 answered outside never reaches the layer; inside, `401` and `407` are released, so nothing is lost, but the layer needs the tenant an authentication layer puts on the request |
//! | rate limits, concurrency limits, load shedding | inside, or outside | inside, a request waits for its turn under its key's lease (a duplicate waits for it, never queues a second run), and a `429` refusal is released; a limiter that refuses with `503` must mark it [`Disposition::Release`] (in its `HandleErrorLayer` function), or put it outside |
//! | compression | outside | the stored response is replayed whatever the retry's `Accept-Encoding` says |
//!
//! With axum, `Router::route_layer(idem)` (or `post(handler).layer(idem)`) covers the routes
//! and leaves unmatched requests to the router's 404; a layer wrapping a whole router sees
//! no route template and names every request's operation `<METHOD>_unmatched` (the path is
//! still in the fingerprint), so give it a fixed [`operation`](IdempotencyLayerBuilder::operation).
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
//! | `ShuttingDown` | 503 | as above | the service is shutting down: the request was refused, or its handler cut at the stop's deadline (its key left to its lease) | | yes |
//! | `Overloaded` | 503 | as above | the service runs as many handlers as it allows (`Coordinator::with_max_detached`) | yes | yes |
//! | `RolledBack` | 503 | as above | a transactional call's writes were rolled back with its record (the commit failed, or the key was no longer its own) | yes | yes |
//! | `CommitUnknown` | 503 | as above | a transactional call's commit went unanswered: its writes and its record committed together, or neither did | unknown | yes: it gets the committed response, or runs |
//! | `CorruptRecord` | 500 | | the key's record is not one idem wrote | yes | no: the same answer |
//! | `OutcomeUnknown` | 500 | | an identical request's handler panicked: its effect is unknown | yes | no: the same answer |
//! | `ResponseNotStored` | 500 | | an identical request ran, but its response was over the limit or its body failed | yes | no: the same answer |
//! | `StoredResponseUnreadable` | 500 | | the stored response does not decode | yes | no: the same answer |
//! | `Internal` | 500 | | a bug of idem-http or idem, or an operation name idem refuses (the service's, never the client's) | yes | |
//!
//! A response the handler made (a 5xx it answered, a 402 it recorded) is never rewritten
//! into a problem. Every 409 and 503 problem carries [`Disposition::Release`] in its
//! extensions: a handler's own idem call that answered one did nothing (or left what it did
//! under its key), so an `IdempotencyLayer` around that handler releases its own key rather
//! than record "retry later" for the retention. [`HttpError`] answers every idem error by
//! this table, and the action's own error as the service's own response (its docs show a
//! service's error type, and a foreign one such as `sqlx::Error`, composed with idem's).
//!
//! # Features
//!
//! - `axum` (default): [`IdempotencyKey`], [`HttpError`], [`Tx`] and [`Claimed`] as extractors,
//!   `IntoResponse` for [`Problem`], and route templates from axum's `MatchedPath` as
//!   operation names.
//! - `metrics`: per-route counters and the coordinator's counters through the `metrics`
//!   facade (the `metrics` module, with the feature on).
//! - `openapi`: `openapi::IdempotencyDoc`, a `utoipa::Modify` that writes
//!   the layer's contract into a [utoipa](https://docs.rs/utoipa) OpenAPI document: the
//!   `Idempotency-Key` header parameter, required or not as the layer is configured, its
//!   `application/problem+json` answers (400, 409 with `Retry-After`, 413, 422, 500, 503)
//!   with the RFC 9457 `Problem` schema, and the replay header (the `openapi` module).

mod claimed;
mod disposition;
mod fencing;
pub mod header;
mod layer;
pub mod problem;
mod response;
mod telemetry;
mod transaction;

#[cfg(feature = "axum")]
mod extract;
#[cfg(feature = "metrics")]
pub mod metrics;
#[cfg(feature = "openapi")]
pub mod openapi;

pub use claimed::{ClaimUnavailable, Claimed};
pub use disposition::Disposition;
pub use fencing::{FENCING_TOKEN, FencingToken, FencingTokenError, fencing_token};
pub use header::{BareToken, IDEMPOTENCY_KEY, KeyHeaderError};
pub use layer::{
    ConfigError, DEFAULT_MAX_REQUEST_BYTES, DEFAULT_STORED_HEADERS, IDEMPOTENT_REPLAYED,
    Idempotency, IdempotencyLayer, IdempotencyLayerBuilder, NEVER_STORED, RequestBody,
};
pub use problem::{PROBLEM_JSON, Problem, ProblemType, RetryAfter};
pub use response::ResponseBody;
pub use transaction::{Tx, TxUnavailable};

#[cfg(feature = "axum")]
pub use extract::{HttpError, IdempotencyKey};
