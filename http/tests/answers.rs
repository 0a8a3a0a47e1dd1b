//! Errors that answer themselves: idem's errors inside a handler that makes its own idem
//! call, under an `IdempotencyLayer` of its own, and the service's own error type composed
//! with idem's through `HttpError`. Real server, real client.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use idem::{Coordinator, Fingerprint, InFlightPolicy};
use idem_http::{Disposition, HttpError, IdempotencyKey, IdempotencyLayer, ProblemType};
use support::{Answer, StoreKind, Switchable, options};
use tokio::sync::Notify;

on_both_stores![an_inner_409_releases_the_outer_key_and_a_later_retry_charges_once];

/// The card provider behind the inner call: counts its charges.
#[derive(Clone, Default)]
struct Provider {
    charges: Arc<AtomicUsize>,
    handler_runs: Arc<AtomicUsize>,
}

impl Provider {
    fn charge(&self) -> String {
        format!("ch_{}", self.charges.fetch_add(1, Ordering::SeqCst) + 1)
    }
}

#[derive(Clone)]
struct Shop {
    payments: Coordinator<Switchable>,
    provider: Provider,
}

fn charge_fingerprint() -> Fingerprint {
    Fingerprint::builder()
        .field("amount", 100)
        .finish()
        .unwrap()
}

/// `POST /orders`, under the layer: charges through its own idem call on the same key
/// (operation `payment.charge`), and answers idem's errors with `HttpError`.
async fn order(
    State(shop): State<Shop>,
    key: IdempotencyKey,
) -> Result<(StatusCode, String), HttpError<StatusCode>> {
    shop.provider.handler_runs.fetch_add(1, Ordering::SeqCst);
    let provider = shop.provider.clone();
    let id = shop
        .payments
        .execute(
            "payment.charge",
            &key,
            charge_fingerprint(),
            |_claim| async move { Ok(provider.charge()) },
        )
        .await
        .map_err(|error| HttpError::new(error, shop.payments.options()))?;
    Ok((StatusCode::CREATED, id))
}

async fn send(base: &str, path: &str, key: &str) -> Answer {
    let response = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .header("idempotency-key", key)
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .expect("the server answers");
    Answer::of(response).await
}

/// The shop bug: an inner call met the key held by another caller and answered 409; the
/// outer layer must release its own key for it (the answer carries
/// `Disposition::Release`), or every retry is replayed "409, retry later" for a day and the
/// order is never made.
async fn an_inner_409_releases_the_outer_key_and_a_later_retry_charges_once(kind: StoreKind) {
    let (store, _redis) = support::store(kind).await;
    let payments = Coordinator::new(
        store,
        options().in_flight(InFlightPolicy::Raise).build().unwrap(),
    );
    let provider = Provider::default();
    let layer = IdempotencyLayer::builder(payments.clone())
        .operation("shop.order")
        .build()
        .unwrap();
    let app = Router::new()
        .route("/orders", post(order).layer(layer))
        .with_state(Shop {
            payments: payments.clone(),
            provider: provider.clone(),
        });
    let (base, server) = support::serve(app).await;

    // Another caller holds the inner key: its charge runs until it is let go.
    let started = Arc::new(Notify::new());
    let finish = Arc::new(Notify::new());
    let holder = tokio::spawn({
        let (payments, provider) = (payments.clone(), provider.clone());
        let (started, finish) = (Arc::clone(&started), Arc::clone(&finish));
        async move {
            payments
                .execute(
                    "payment.charge",
                    "k-1",
                    charge_fingerprint(),
                    |_claim| async move {
                        let id = provider.charge();
                        started.notify_one();
                        finish.notified().await;
                        Ok::<_, StatusCode>(id)
                    },
                )
                .await
        }
    });
    started.notified().await;

    let conflict = send(&base, "/orders", "\"k-1\"").await;
    conflict.assert_problem(ProblemType::InProgress);
    assert!(conflict.header("retry-after").is_some());

    finish.notify_one();
    assert_eq!(holder.await.unwrap().unwrap(), "ch_1");

    let retry = send(&base, "/orders", "\"k-1\"").await;
    assert_eq!(retry.status, 201, "the outer key was released: {retry:?}");
    assert!(!retry.replayed(), "the handler ran again");
    assert_eq!(
        &retry.body[..],
        b"ch_1",
        "the inner call replays the holder's charge"
    );
    let again = send(&base, "/orders", "\"k-1\"").await;
    assert!(again.replayed(), "recorded now");
    assert_eq!(again.body, retry.body);
    assert_eq!(provider.charges.load(Ordering::SeqCst), 1, "charged once");
    assert_eq!(provider.handler_runs.load(Ordering::SeqCst), 2);
    server.abort();
}

/// The service's own error: what a shop answers for its failures, with `From` for the
/// foreign errors its code meets (`std::io::Error` here, as `sqlx::Error` would be).
#[derive(Debug)]
enum ShopError {
    OutOfStock,
    Database(std::io::Error),
}

impl From<std::io::Error> for ShopError {
    fn from(error: std::io::Error) -> Self {
        ShopError::Database(error)
    }
}

impl IntoResponse for ShopError {
    fn into_response(self) -> Response {
        match self {
            ShopError::OutOfStock => (StatusCode::CONFLICT, "out of stock").into_response(),
            ShopError::Database(error) => (
                StatusCode::SERVICE_UNAVAILABLE,
                Disposition::Release,
                format!("database: {error}"),
            )
                .into_response(),
        }
    }
}

#[derive(Clone)]
struct Orders {
    payments: Coordinator<Switchable>,
    database_down: Arc<AtomicBool>,
    rows: Arc<AtomicUsize>,
}

impl Orders {
    /// Writes the order row, or fails as a database that is down does.
    async fn write_row(&self, item: &str) -> Result<usize, std::io::Error> {
        if self.database_down.load(Ordering::SeqCst) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionRefused,
                "connection refused",
            ));
        }
        if item == "unobtainium" {
            return Ok(0);
        }
        Ok(self.rows.fetch_add(1, Ordering::SeqCst) + 1)
    }
}

fn item_fingerprint(item: &str) -> Fingerprint {
    Fingerprint::builder().field("item", item).finish().unwrap()
}

/// `POST /orders/{item}`: `?` on the foreign error inside the action, `?` on idem's error
/// after it; no newtype around either.
async fn composed(
    State(orders): State<Orders>,
    axum::extract::Path(item): axum::extract::Path<String>,
    key: IdempotencyKey,
) -> Result<(StatusCode, String), HttpError<ShopError>> {
    let writer = orders.clone();
    let fingerprint = item_fingerprint(&item);
    let row = orders
        .payments
        .execute("shop.order", &key, fingerprint, |_claim| async move {
            let row = writer.write_row(&item).await?;
            if row == 0 {
                return Err(ShopError::OutOfStock);
            }
            Ok(format!("order {row}"))
        })
        .await?;
    Ok((StatusCode::CREATED, row))
}

/// `POST /raw/{item}`: the foreign error answered by a closure, with no type of the
/// service's.
async fn by_closure(
    State(orders): State<Orders>,
    axum::extract::Path(item): axum::extract::Path<String>,
    key: IdempotencyKey,
) -> Response {
    let writer = orders.clone();
    let answer = orders
        .payments
        .execute(
            "shop.raw",
            &key,
            item_fingerprint(&item),
            |_claim| async move { writer.write_row(&item).await.map(|row| row.to_string()) },
        )
        .await;
    match answer {
        Ok(row) => (StatusCode::CREATED, row).into_response(),
        Err(error) => HttpError::new(error, orders.payments.options()).into_response_with(
            |database: std::io::Error| {
                (StatusCode::BAD_GATEWAY, format!("raw: {database}")).into_response()
            },
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_services_own_error_composes_with_idems_without_a_newtype() {
    let (store, _redis) = support::store(StoreKind::Memory).await;
    let orders = Orders {
        payments: Coordinator::new(store.clone(), options().build().unwrap()),
        database_down: Arc::default(),
        rows: Arc::default(),
    };
    let app = Router::new()
        .route("/orders/{item}", post(composed))
        .route("/raw/{item}", post(by_closure))
        .with_state(orders.clone());
    let (base, server) = support::serve(app).await;

    // The foreign error, through the service's own type: its answer, and the key released.
    orders.database_down.store(true, Ordering::SeqCst);
    let down = send(&base, "/orders/book", "\"o-1\"").await;
    assert_eq!(down.status, 503);
    assert_eq!(&down.body[..], b"database: connection refused");
    assert_eq!(
        down.header("content-type"),
        Some("text/plain; charset=utf-8")
    );
    orders.database_down.store(false, Ordering::SeqCst);
    let made = send(&base, "/orders/book", "\"o-1\"").await;
    assert_eq!((made.status, &made.body[..]), (201, &b"order 1"[..]));
    let replayed = send(&base, "/orders/book", "\"o-1\"").await;
    assert_eq!(
        (replayed.status, &replayed.body[..]),
        (201, &b"order 1"[..])
    );
    assert_eq!(orders.rows.load(Ordering::SeqCst), 1);

    // The service's own refusal, answered as itself.
    let refused = send(&base, "/orders/unobtainium", "\"o-2\"").await;
    assert_eq!(
        (refused.status, &refused.body[..]),
        (409, &b"out of stock"[..])
    );

    // idem's own errors are still problems: the same key for another item.
    send(&base, "/orders/pen", "\"o-1\"")
        .await
        .assert_problem(ProblemType::KeyReuse);
    // With the store down, 503 with Retry-After, marked for an outer layer to release.
    store.set_down(true);
    let unavailable = send(&base, "/orders/pen", "\"o-3\"").await;
    unavailable.assert_problem(ProblemType::StoreUnavailable);
    assert!(unavailable.header("retry-after").is_some());
    store.set_down(false);

    // The closure answers the foreign error as it is.
    orders.database_down.store(true, Ordering::SeqCst);
    let raw = send(&base, "/raw/book", "\"r-1\"").await;
    assert_eq!(
        (raw.status, &raw.body[..]),
        (502, &b"raw: connection refused"[..])
    );
    orders.database_down.store(false, Ordering::SeqCst);
    let raw = send(&base, "/raw/book", "\"r-1\"").await;
    assert_eq!((raw.status, &raw.body[..]), (201, &b"2"[..]));
    store.set_down(true);
    send(&base, "/raw/book", "\"r-2\"")
        .await
        .assert_problem(ProblemType::StoreUnavailable);
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_errors_tell_an_outer_layer_what_the_inner_call_did() {
    let release = |error: idem::Error<StatusCode>| {
        HttpError::from(error)
            .into_response()
            .extensions()
            .get::<Disposition>()
            .copied()
    };
    for retryable in [
        idem::Error::InProgress,
        idem::Error::RolledBack,
        idem::Error::CommitUnknown,
        idem::Error::RuntimeShutdown,
        idem::Error::ShuttingDown,
        idem::Error::Overloaded,
    ] {
        assert_eq!(release(retryable), Some(Disposition::Release));
    }
    for kept in [idem::Error::OutcomeUnknown, idem::Error::ResultNotStored] {
        assert_eq!(release(kept), None, "judged by the outer layer's own rule");
    }
    // The action's own error carries whatever its answer says; one whose effect is unknown
    // is marked so, unless its answer says otherwise.
    assert_eq!(
        release(idem::Error::Action(StatusCode::PAYMENT_REQUIRED)),
        None
    );
    assert_eq!(
        release(idem::Error::ActionUnknown(StatusCode::PAYMENT_REQUIRED)),
        Some(Disposition::Unknown)
    );
    let said = HttpError::from(idem::Error::ActionUnknown((
        StatusCode::BAD_GATEWAY,
        Disposition::Record,
        "declined before charging",
    )));
    assert_eq!(
        said.into_response().extensions().get::<Disposition>(),
        Some(&Disposition::Record)
    );
    // The service's own error, outside the idem call, carries its own answer's mark.
    let marked = HttpError::action(ShopError::Database(std::io::Error::other("down")));
    assert_eq!(
        marked.into_response().extensions().get::<Disposition>(),
        Some(&Disposition::Release)
    );
    // 503 with Retry-After for the transactional ends, which were 500 before.
    let slow = idem::Options::builder()
        .reply_timeout(Duration::from_secs(2))
        .store_retries(1)
        .build()
        .unwrap();
    for (error, kind) in [
        (idem::Error::RolledBack, ProblemType::RolledBack),
        (idem::Error::CommitUnknown, ProblemType::CommitUnknown),
    ] {
        let response = HttpError::<StatusCode>::new(error, &slow).into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()["retry-after"], "4");
        let body = axum::body::to_bytes(response.into_body(), 4096)
            .await
            .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["type"], kind.uri());
    }
}
