//! The layers a service puts around its handlers, each inside and outside the idempotency
//! layer: tower-http's `TimeoutLayer` (408, 503, 504), tower's timeout through axum's
//! `HandleErrorLayer`, `CatchPanicLayer`, and rate limiters (one that makes a request wait,
//! one that refuses it with 429). In every arrangement a key is charged once however often
//! the client retries (MODEL.md, "HTTP (idem-http)", the release rule): a layer inside that
//! cuts the handler off or turns its panic into a 500 makes an unmarked response, recorded
//! as "outcome unknown", never released. The old rule (release every 5xx, 408 and 429) is
//! kept as a broken layer, and the same check catches it charging twice.

mod support;

use std::convert::Infallible;
use std::time::Duration;

use axum::error_handling::HandleErrorLayer;
use axum::routing::MethodRouter;
use http::StatusCode;
use idem::BoxError;
use idem_http::{Disposition, IdempotencyLayer, ProblemType};
use support::{Bank, Fixture, StoreKind, Switchable, options, order};
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::timeout::TimeoutLayer;

/// How long the provider takes after it has charged; the timeouts fire well before.
const TAKES: Duration = Duration::from_millis(300);
const CUT: Duration = Duration::from_millis(60);

on_both_stores![
    a_timeout_inside_the_layer_never_buys_a_second_charge,
    a_timeout_outside_the_layer_lets_the_charge_finish_and_the_retry_replays,
    a_panic_catcher_inside_or_outside_never_buys_a_second_charge,
    a_rate_limiter_that_makes_requests_wait_runs_each_once,
    a_rate_limiter_that_refuses_lets_the_request_run_once_let_through,
];

type Wrap = Box<dyn FnOnce(MethodRouter<Bank>, IdempotencyLayer<Switchable>) -> MethodRouter<Bank>>;

/// The bank behind `wrap`'s arrangement of the idempotency layer and other layers.
async fn fixture(kind: StoreKind, takes: Duration, wrap: Wrap) -> Fixture {
    fixture_with(kind, takes, wrap, |layer| layer).await
}

async fn fixture_with(
    kind: StoreKind,
    takes: Duration,
    wrap: Wrap,
    configure: impl FnOnce(
        idem_http::IdempotencyLayerBuilder<Switchable>,
    ) -> idem_http::IdempotencyLayerBuilder<Switchable>,
) -> Fixture {
    let (store, redis) = support::store(kind).await;
    let coordinator = idem::Coordinator::new(store.clone(), options().build().unwrap());
    let layer = configure(IdempotencyLayer::builder(coordinator.clone()))
        .build()
        .unwrap();
    let bank = Bank::new(takes);
    let app = support::routes(bank.clone(), |charges| wrap(charges, layer));
    Fixture::serve(bank, app, store, coordinator, redis).await
}

fn timeout(status: StatusCode) -> TimeoutLayer {
    TimeoutLayer::with_status_code(status, CUT)
}

/// `route` under tower's own timeout, its `Elapsed` error answered 408 by axum's
/// `HandleErrorLayer`.
fn with_tower_timeout<S>(route: MethodRouter<S>) -> MethodRouter<S>
where
    S: Clone + Send + Sync + 'static,
{
    route.layer(
        ServiceBuilder::new()
            .layer(HandleErrorLayer::new(|_: BoxError| async {
                StatusCode::REQUEST_TIMEOUT
            }))
            .timeout(CUT),
    )
}

/// The client's view: sends the request under `key` until it gets an answer that is not a
/// timeout or a conflict (at most 20 tries, 100 ms apart), waits for every handler to end,
/// and checks that the card was charged once. Returns the last answer.
async fn retried_until_settled(
    f: &Fixture,
    key: &str,
    amount: i64,
) -> Result<support::Answer, String> {
    let mut answers = Vec::new();
    for _ in 0..20 {
        let answer = f.post(Some(key), &order(amount)).await;
        let settled = !matches!(answer.status, 408 | 409 | 429 | 503 | 504);
        answers.push(answer.status);
        if f.bank.charges() > 1 {
            let charges = f.bank.charges();
            return Err(format!(
                "charged {charges} times for one key (answers {answers:?})"
            ));
        }
        if settled {
            // Whatever still runs (a handler cut off, a detached one) ends first.
            tokio::time::sleep(TAKES + Duration::from_millis(200)).await;
            let charges = f.bank.charges();
            if charges != 1 {
                return Err(format!(
                    "charged {charges} times for one key (answers {answers:?})"
                ));
            }
            return Ok(answer);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("never settled: {answers:?}"))
}

async fn a_timeout_inside_the_layer_never_buys_a_second_charge(kind: StoreKind) {
    let arrangements: Vec<(&str, Wrap)> = vec![
        (
            "tower-http 408",
            Box::new(|c, idem| {
                c.layer::<_, Infallible>(timeout(StatusCode::REQUEST_TIMEOUT))
                    .layer::<_, Infallible>(idem)
            }),
        ),
        (
            "tower-http 503",
            Box::new(|c, idem| {
                c.layer::<_, Infallible>(timeout(StatusCode::SERVICE_UNAVAILABLE))
                    .layer::<_, Infallible>(idem)
            }),
        ),
        (
            "tower-http 504",
            Box::new(|c, idem| {
                c.layer::<_, Infallible>(timeout(StatusCode::GATEWAY_TIMEOUT))
                    .layer::<_, Infallible>(idem)
            }),
        ),
        (
            "tower timeout",
            Box::new(|c, idem| with_tower_timeout(c).layer::<_, Infallible>(idem)),
        ),
    ];
    for (name, wrap) in arrangements {
        let f = fixture(kind, TAKES, wrap).await;
        let first = f.post(Some("\"k\""), &order(100)).await;
        assert!(
            matches!(first.status, 408 | 503 | 504),
            "{name}: the first is cut off: {first:?}"
        );
        let last = retried_until_settled(&f, "\"k\"", 100)
            .await
            .unwrap_or_else(|error| panic!("{name}: {error}"));
        // The handler was cut off after charging: its outcome is unknown, and said so.
        last.assert_problem(ProblemType::OutcomeUnknown);
        assert_eq!(f.bank.runs(), 1, "{name}");
    }
}

async fn a_timeout_outside_the_layer_lets_the_charge_finish_and_the_retry_replays(kind: StoreKind) {
    let arrangements: Vec<(&str, Wrap)> = vec![
        (
            "tower-http 408",
            Box::new(|c, idem| {
                c.layer::<_, Infallible>(idem)
                    .layer::<_, Infallible>(timeout(StatusCode::REQUEST_TIMEOUT))
            }),
        ),
        (
            "tower-http 504",
            Box::new(|c, idem| {
                c.layer::<_, Infallible>(idem)
                    .layer::<_, Infallible>(timeout(StatusCode::GATEWAY_TIMEOUT))
            }),
        ),
        (
            "tower timeout",
            Box::new(|c, idem| with_tower_timeout(c.layer::<_, Infallible>(idem))),
        ),
    ];
    for (name, wrap) in arrangements {
        let f = fixture(kind, TAKES, wrap).await;
        let first = f.post(Some("\"k\""), &order(100)).await;
        assert!(matches!(first.status, 408 | 504), "{name}: {first:?}");
        let last = retried_until_settled(&f, "\"k\"", 100)
            .await
            .unwrap_or_else(|error| panic!("{name}: {error}"));
        // The detached handler ran to its end and was recorded: the retry gets the charge.
        assert_eq!(
            (last.status, last.replayed(), last.json()["id"].as_str()),
            (201, true, Some("ch_1")),
            "{name}"
        );
        assert_eq!(f.bank.runs(), 1, "{name}");
    }
}

async fn a_panic_catcher_inside_or_outside_never_buys_a_second_charge(kind: StoreKind) {
    let arrangements: Vec<(&str, Wrap)> = vec![
        (
            "inside",
            Box::new(|c, idem| {
                c.layer::<_, Infallible>(CatchPanicLayer::new())
                    .layer::<_, Infallible>(idem)
            }),
        ),
        (
            "outside",
            Box::new(|c, idem| {
                c.layer::<_, Infallible>(idem)
                    .layer::<_, Infallible>(CatchPanicLayer::new())
            }),
        ),
    ];
    for (name, wrap) in arrangements {
        let f = fixture(kind, Duration::ZERO, wrap).await;
        // Amount 500: the handler charges, then panics.
        let first = f.post(Some("\"k\""), &order(500)).await;
        assert_eq!(first.status, 500, "{name}: {first:?}");
        let last = retried_until_settled(&f, "\"k\"", 500)
            .await
            .unwrap_or_else(|error| panic!("{name}: {error}"));
        last.assert_problem(ProblemType::OutcomeUnknown);
        assert_eq!(f.bank.runs(), 1, "{name}");
    }
}

/// tower's `RateLimit` (one request per 400 ms) behind a `Buffer`, so that every clone of
/// the route shares the one limit: a request waits until it is let through, under its key's
/// lease when the limiter is inside, before the layer when it is outside.
async fn a_rate_limiter_that_makes_requests_wait_runs_each_once(kind: StoreKind) {
    fn limited<S: Clone + Send + Sync + 'static>(route: MethodRouter<S>) -> MethodRouter<S> {
        route.layer(
            ServiceBuilder::new()
                .layer(HandleErrorLayer::new(|_: BoxError| async {
                    StatusCode::SERVICE_UNAVAILABLE
                }))
                .buffer(64)
                .rate_limit(1, Duration::from_millis(400)),
        )
    }
    let arrangements: Vec<(&str, Wrap)> = vec![
        (
            "inside",
            Box::new(|c, idem| limited(c).layer::<_, Infallible>(idem)),
        ),
        (
            "outside",
            Box::new(|c, idem| limited(c.layer::<_, Infallible>(idem))),
        ),
    ];
    for (name, wrap) in arrangements {
        let f = fixture(kind, Duration::from_millis(20), wrap).await;
        // Three keys at once, each sent twice at once: the limiter lets one request in
        // every 400 ms, and each key is charged once.
        let keys = ["\"a\"", "\"b\"", "\"c\""];
        let body = order(100);
        let sends = keys
            .iter()
            .flat_map(|key| [*key, *key])
            .map(|key| f.post(Some(key), &body));
        let answers = futures::future::join_all(sends).await;
        for answer in &answers {
            assert_eq!(answer.status, 201, "{name}: {answer:?}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(f.bank.charges(), 3, "{name}: {:?}", f.bank.statement());
        for key in keys {
            let again = f.post(Some(key), &order(100)).await;
            assert!(again.replayed(), "{name}: {again:?}");
        }
        assert_eq!(f.bank.charges(), 3, "{name}");
    }
}

/// A limiter that refuses: `ConcurrencyLimit` of one under `LoadShed`, its `Overloaded`
/// answered 429 (a refusal at the door, released). A second key sent while the first runs
/// is refused; sent again once the first is done, it runs, once.
async fn a_rate_limiter_that_refuses_lets_the_request_run_once_let_through(kind: StoreKind) {
    fn limited<S: Clone + Send + Sync + 'static>(route: MethodRouter<S>) -> MethodRouter<S> {
        route.layer(
            ServiceBuilder::new()
                .layer(HandleErrorLayer::new(|_: BoxError| async {
                    StatusCode::TOO_MANY_REQUESTS
                }))
                .load_shed()
                .concurrency_limit(1),
        )
    }
    let arrangements: Vec<(&str, Wrap)> = vec![
        (
            "inside",
            Box::new(|c, idem| limited(c).layer::<_, Infallible>(idem)),
        ),
        (
            "outside",
            Box::new(|c, idem| limited(c.layer::<_, Infallible>(idem))),
        ),
    ];
    for (name, wrap) in arrangements {
        let f = fixture(kind, TAKES, wrap).await;
        let body = order(100);
        let (first, refused) = tokio::join!(f.post(Some("\"a\""), &body), async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            f.post(Some("\"b\""), &order(100)).await
        });
        assert_eq!(first.status, 201, "{name}: {first:?}");
        assert_eq!(refused.status, 429, "{name}: {refused:?}");
        assert_eq!(f.bank.charges(), 1, "{name}: the refused one never ran");
        let let_through = f.post(Some("\"b\""), &order(100)).await;
        assert_eq!(
            (let_through.status, let_through.replayed()),
            (201, false),
            "{name}: runs once let through"
        );
        let again = f.post(Some("\"b\""), &order(100)).await;
        assert!(again.replayed(), "{name}: {again:?}");
        assert_eq!(f.bank.charges(), 2, "{name}");
    }
}

/// The rule this crate had before: every 5xx, 408 and 429 released by status alone. With a
/// timeout inside the layer, the retry runs the handler again: the check catches the second
/// charge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releasing_by_status_alone_is_caught_charging_twice() {
    let released_by_status = |response: &http::response::Parts| {
        let status = response.status;
        if status.is_server_error()
            || status == StatusCode::REQUEST_TIMEOUT
            || status == StatusCode::TOO_MANY_REQUESTS
        {
            Disposition::Release
        } else {
            Disposition::Record
        }
    };
    let f = fixture_with(
        StoreKind::Memory,
        TAKES,
        Box::new(|c, idem| {
            c.layer::<_, Infallible>(timeout(StatusCode::REQUEST_TIMEOUT))
                .layer::<_, Infallible>(idem)
        }),
        |layer| layer.disposition(released_by_status),
    )
    .await;
    f.post(Some("\"k\""), &order(100)).await;
    let found = retried_until_settled(&f, "\"k\"", 100).await.unwrap_err();
    assert!(found.starts_with("charged"), "{found}");
    assert!(f.bank.charges() >= 2);
}
