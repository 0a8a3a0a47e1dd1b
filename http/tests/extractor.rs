//! The `execute` path: a handler that takes the key with `IdempotencyKey` and calls the
//! coordinator itself, answering idem's errors with `HttpError`. Real server, real client.

mod support;

use std::time::Duration;

use axum::Router;
use axum::extract::{Extension, Json, State};
use axum::http::StatusCode;
use axum::routing::post;
use idem::{Coordinator, Fingerprint, InFlightPolicy};
use idem_http::{BareToken, HttpError, IdempotencyKey, ProblemType};
use serde::Deserialize;
use support::{Answer, StoreKind, Switchable, options};

#[derive(Debug, Deserialize)]
struct Order {
    amount: u64,
    /// What the provider answers: a charge, or this status as its failure.
    fail: Option<u16>,
}

type Payments = Coordinator<Switchable>;

/// Charges `amount` once per key; the provider takes 300 ms.
async fn charge(
    State(payments): State<Payments>,
    key: IdempotencyKey,
    Json(order): Json<Order>,
) -> Result<(StatusCode, String), HttpError<StatusCode>> {
    let fingerprint = Fingerprint::builder()
        .field("amount", order.amount)
        .finish()
        .map_err(|_| HttpError::from(idem::Error::Action(StatusCode::BAD_REQUEST)))?;
    let charge = payments
        .execute(
            "payment.charge",
            &key,
            fingerprint,
            move |claim| async move {
                tokio::time::sleep(Duration::from_millis(300)).await;
                match order.fail {
                    Some(status) => Err(StatusCode::from_u16(status).unwrap()),
                    None => Ok(format!("charged {} under {}", order.amount, claim.key())),
                }
            },
        )
        .await
        .map_err(|error| HttpError::new(error, payments.options()))?;
    Ok((StatusCode::CREATED, charge))
}

/// Echoes the key, if any.
async fn optional(key: Option<IdempotencyKey>) -> String {
    key.map_or_else(|| "none".to_owned(), |key| key.as_str().to_owned())
}

struct App {
    base: String,
    store: Switchable,
    _redis: Option<support::RedisServer>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for App {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn app(kind: StoreKind, options: idem::OptionsBuilder, bare: Option<BareToken>) -> App {
    let (store, redis) = support::store(kind).await;
    let payments = Coordinator::new(store.clone(), options.build().unwrap());
    let mut router = Router::new()
        .route("/charges", post(charge))
        .route("/optional", post(optional))
        .with_state(payments);
    if let Some(bare) = bare {
        router = router.layer(Extension(bare));
    }
    let (base, server) = support::serve(router).await;
    App {
        base,
        store,
        _redis: redis,
        server,
    }
}

async fn send(base: &str, path: &str, key: Option<&str>, body: serde_json::Value) -> Answer {
    let mut request = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    Answer::of(request.send().await.unwrap()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_extractor_reads_the_header_as_the_layer_does() {
    let a = app(StoreKind::Memory, options(), None).await;
    let body = serde_json::json!({ "amount": 100 });
    let first = send(&a.base, "/charges", Some(r#""k\"1""#), body.clone()).await;
    assert_eq!(first.status, 201);
    assert_eq!(&first.body[..], br#"charged 100 under k"1"#);
    for (value, problem) in [
        (None, ProblemType::KeyMissing),
        (Some("\"k1"), ProblemType::KeyMalformed),
        (Some("k 1"), ProblemType::KeyInvalid),
        (Some("\"k 1\""), ProblemType::KeyInvalid),
    ] {
        send(&a.base, "/charges", value, body.clone())
            .await
            .assert_problem(problem);
    }
    let none = send(&a.base, "/optional", None, body.clone()).await;
    assert_eq!(&none.body[..], b"none");
    let some = send(&a.base, "/optional", Some("\"k\""), body.clone()).await;
    assert_eq!(&some.body[..], b"k");
    // A bare token is taken verbatim, as the layer takes it: the same key as its String.
    let bare = send(&a.base, "/optional", Some("k"), body.clone()).await;
    assert_eq!(&bare.body[..], b"k");
    let replay = send(&a.base, "/charges", Some(r#"k"1"#), body.clone()).await;
    assert_eq!((replay.status, replay.body), (201, first.body));

    // With the extension, bare tokens are refused.
    let b = app(StoreKind::Memory, options(), Some(BareToken::Refuse)).await;
    send(&b.base, "/optional", Some("k1"), body.clone())
        .await
        .assert_problem(ProblemType::KeyMalformed);
    let quoted = send(&b.base, "/optional", Some("\"k1\""), body).await;
    assert_eq!(&quoted.body[..], b"k1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_errors_answer_with_their_problem_and_retry_after() {
    for kind in [StoreKind::Memory, StoreKind::Redis] {
        let raise = options()
            .in_flight(InFlightPolicy::Raise)
            .backoff_max(Duration::from_millis(2_500));
        let a = app(kind, raise, None).await;
        let body = serde_json::json!({ "amount": 100 });
        let base = a.base.clone();
        let first = tokio::spawn({
            let body = body.clone();
            async move { send(&base, "/charges", Some("\"k\""), body).await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let conflict = send(&a.base, "/charges", Some("\"k\""), body.clone()).await;
        conflict.assert_problem(ProblemType::InProgress);
        assert_eq!(
            conflict.header("retry-after"),
            Some("3"),
            "from backoff_max"
        );
        let reused = send(
            &a.base,
            "/charges",
            Some("\"k\""),
            serde_json::json!({ "amount": 5 }),
        )
        .await;
        reused.assert_problem(ProblemType::KeyReuse);
        let first = first.await.unwrap();
        assert_eq!(first.status, 201);
        let replay = send(&a.base, "/charges", Some("\"k\""), body.clone()).await;
        assert_eq!((replay.status, replay.body), (201, first.body));

        // The action's own error is its answer, and is not recorded.
        let teapot = serde_json::json!({ "amount": 7, "fail": 418 });
        let failed = send(&a.base, "/charges", Some("\"f\""), teapot).await;
        assert_eq!((failed.status, failed.body.len()), (418, 0));
        let retried = send(
            &a.base,
            "/charges",
            Some("\"f\""),
            serde_json::json!({ "amount": 7 }),
        )
        .await;
        assert_eq!(retried.status, 201, "failures are not cached");

        a.store.set_down(true);
        let down = send(&a.base, "/charges", Some("\"d\""), body).await;
        down.assert_problem(ProblemType::StoreUnavailable);
        assert_eq!(down.header("retry-after"), Some("1"), "two tries of 200 ms");
    }
}

#[test]
fn an_http_error_from_the_default_options_and_from_given_ones() {
    let default: HttpError<StatusCode> = idem::Error::InProgress.into();
    assert_eq!(default.problem().unwrap().retry_after(), Some(1));
    let slow = idem::Options::builder()
        .backoff_max(Duration::from_secs(4))
        .build()
        .unwrap();
    let given = HttpError::<StatusCode>::new(idem::Error::InProgress, &slow);
    assert_eq!(given.problem().unwrap().retry_after(), Some(4));
    let action = HttpError::from(idem::Error::Action(StatusCode::IM_A_TEAPOT));
    assert!(action.problem().is_none());
    assert!(matches!(
        action.into_inner(),
        idem::Error::Action(StatusCode::IM_A_TEAPOT)
    ));
}
