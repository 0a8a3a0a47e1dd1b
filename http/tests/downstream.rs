//! The `Claimed` extractor (MODEL.md `D1`): a handler under the layer gets its request's
//! claim, and from it the downstream key to send its provider, the same on every retry of
//! the request (a released attempt, a run under `FailOpen` with the store down) and
//! different for another key or tenant. Real server, real client, on both stores.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use idem::{Coordinator, DownstreamKey, Key, Operation, StoreFailurePolicy};
use idem_http::{Claimed, Disposition, IdempotencyLayer, ProblemType};
use serde_json::json;
use support::{Answer, StoreKind, options, serve, store};

/// While set, the next request answers 503 marked "release": nothing happened.
#[derive(Clone, Default)]
struct RefuseNext(Arc<AtomicBool>);

/// Answers what the handler's claim says.
async fn charge(State(refuse): State<RefuseNext>, Claimed(claim): Claimed) -> Response {
    let body = json!({
        "downstream": claim.downstream_key().to_string(),
        "operation": claim.operation().as_str(),
        "protected": claim.is_protected(),
    });
    if refuse.0.swap(false, Ordering::SeqCst) {
        let mut response = (StatusCode::SERVICE_UNAVAILABLE, body.to_string()).into_response();
        response.extensions_mut().insert(Disposition::Release);
        return response;
    }
    (StatusCode::CREATED, axum::Json(body)).into_response()
}

async fn optional(claimed: Option<Claimed>) -> String {
    claimed.map_or_else(|| "none".to_owned(), |c| c.downstream_key().to_string())
}

async fn required(Claimed(claim): Claimed) -> String {
    claim.downstream_key().to_string()
}

struct App {
    base: String,
    refuse: RefuseNext,
    store: support::Switchable,
    _redis: Option<support::RedisServer>,
    _server: tokio::task::JoinHandle<()>,
}

async fn app(kind: StoreKind) -> App {
    let (store, redis) = store(kind).await;
    let coordinator = Coordinator::new(
        store.clone(),
        options()
            .on_store_failure(StoreFailurePolicy::FailOpen)
            .build()
            .unwrap(),
    );
    let plain = IdempotencyLayer::builder(coordinator.clone())
        .build()
        .unwrap();
    let tenants = IdempotencyLayer::builder(coordinator)
        .operation("charge")
        .tenant(|parts| {
            parts
                .headers
                .get("x-tenant")
                .map(|value| value.as_bytes().to_vec())
        })
        .build()
        .unwrap();
    let refuse = RefuseNext::default();
    let router = Router::new()
        .route("/charges", post(charge).layer(plain))
        .route("/tenants/charges", post(charge).layer(tenants))
        .route("/optional", post(optional))
        .route("/required", post(required))
        .with_state(refuse.clone());
    let (base, server) = serve(router).await;
    App {
        base,
        refuse,
        store,
        _redis: redis,
        _server: server,
    }
}

impl App {
    async fn post(&self, path: &str, key: Option<&str>, tenant: Option<&str>) -> Answer {
        let mut request = reqwest::Client::new()
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body("{}");
        if let Some(key) = key {
            request = request.header("idempotency-key", key);
        }
        if let Some(tenant) = tenant {
            request = request.header("x-tenant", tenant);
        }
        Answer::of(request.send().await.expect("the server answers")).await
    }
}

fn downstream(answer: &Answer) -> String {
    let body: serde_json::Value = serde_json::from_slice(&answer.body).unwrap();
    body["downstream"].as_str().unwrap().to_owned()
}

async fn every_retry_of_a_request_passes_on_the_same_key(kind: StoreKind) {
    let app = app(kind).await;
    // The first attempt refuses before doing anything and is released; the retry runs.
    app.refuse.0.store(true, Ordering::SeqCst);
    let released = app.post("/charges", Some("k-1"), None).await;
    assert_eq!(released.status, 503, "{released:?}");
    let ran = app.post("/charges", Some("k-1"), None).await;
    assert_eq!(ran.status, 201, "{ran:?}");
    assert_eq!(downstream(&released), downstream(&ran));
    // It is the key derived from the request's operation and key.
    let operation = ran.json()["operation"].as_str().unwrap().to_owned();
    let derived = DownstreamKey::derive(
        &Operation::new(&operation).unwrap(),
        &Key::new("k-1").unwrap(),
    );
    assert_eq!(downstream(&ran), derived.to_string());
    assert_eq!(ran.json()["protected"], true);

    // The store is down and the layer fails open: the handler runs unprotected, under the
    // same downstream key, which is what lets its provider catch the duplicate.
    app.store.set_down(true);
    let unprotected = app.post("/charges", Some("k-1"), None).await;
    app.store.set_down(false);
    assert_eq!(unprotected.status, 201, "{unprotected:?}");
    assert_eq!(unprotected.json()["protected"], false);
    assert_eq!(downstream(&unprotected), downstream(&ran));

    // Another key, another downstream key.
    let other = app.post("/charges", Some("k-2"), None).await;
    assert_ne!(downstream(&other), downstream(&ran));
}

async fn tenants_pass_on_different_keys_for_the_same_client_key(kind: StoreKind) {
    let app = app(kind).await;
    let acme = app
        .post("/tenants/charges", Some("k-1"), Some("acme"))
        .await;
    let globex = app
        .post("/tenants/charges", Some("k-1"), Some("globex"))
        .await;
    let acme_again = app
        .post("/tenants/charges", Some("k-1"), Some("acme"))
        .await;
    assert_eq!((acme.status, globex.status), (201, 201));
    assert!(acme_again.replayed());
    assert_ne!(downstream(&acme), downstream(&globex));
    assert_eq!(downstream(&acme), downstream(&acme_again));
    // Neither the operation nor the tenant shows in it.
    for answer in [&acme, &globex] {
        let key = downstream(answer);
        assert!(!key.contains("charge") && !key.contains("acme") && !key.contains("globex"));
    }
}

async fn a_handler_outside_the_layer_has_no_claim(kind: StoreKind) {
    let app = app(kind).await;
    let optional = app.post("/optional", Some("k-1"), None).await;
    assert_eq!((optional.status, &optional.body[..]), (200, &b"none"[..]));
    let required = app.post("/required", Some("k-1"), None).await;
    required.assert_problem(ProblemType::Internal);
}

on_both_stores!(
    every_retry_of_a_request_passes_on_the_same_key,
    tenants_pass_on_different_keys_for_the_same_client_key,
    a_handler_outside_the_layer_has_no_claim,
);
