//! The Idempotency-Key draft's behaviour, as a conformance suite: each test is a rule of the
//! draft (or of this crate's answer where the draft leaves it open), checked with a real
//! client against a real server on loopback, once on `MemoryStore` and once on a real Redis.

mod support;

use std::time::{Duration, Instant};

use http::StatusCode;
use idem::InFlightPolicy;
use idem_http::{BareToken, Disposition, ProblemType};
use serde_json::json;
use support::{Fixture, StoreKind, options, order};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const NOW: Duration = Duration::ZERO;

on_both_stores![
    a_missing_key_is_400_where_required_and_passes_through_where_not,
    invalid_keys_are_400_and_nothing_runs,
    bare_tokens_name_the_same_record_as_strings_when_accepted,
    a_replay_is_the_first_response_byte_for_byte_with_the_replay_header,
    a_4xx_answer_is_the_outcome_and_is_replayed,
    another_body_under_a_used_key_is_422_while_the_first_runs_and_after,
    under_wait_a_concurrent_duplicate_gets_the_first_response,
    under_raise_a_concurrent_duplicate_is_409_with_retry_after,
    other_methods_pass_through_untouched_and_store_nothing,
    a_failure_the_handler_marks_is_released_and_a_retry_runs_again,
    an_unmarked_server_error_or_408_is_outcome_unknown_and_never_runs_again,
    what_is_recorded_is_configurable,
    a_store_outage_fails_closed_with_503_and_retry_after,
    a_store_outage_fails_open_when_told_and_the_handler_runs,
    a_body_over_the_limit_is_413_and_nothing_runs,
    a_handler_that_panics_is_outcome_unknown_and_never_runs_again,
    a_response_over_the_body_limit_reaches_its_caller_and_a_retry_is_500,
    json_fields_make_the_fingerprint_when_named,
    two_tenants_sending_one_key_get_two_records_and_two_charges,
    without_route_templates_no_path_names_an_operation,
];

/// A problem body shows no digest (no run of 16 hex digits) and nothing of a request body.
#[track_caller]
fn assert_discloses_nothing(answer: &support::Answer) {
    let text = String::from_utf8_lossy(&answer.body);
    let mut run = 0;
    for c in text.chars() {
        run = if c.is_ascii_hexdigit() { run + 1 } else { 0 };
        assert!(run < 16, "a digest in {text}");
    }
    assert!(!text.contains("amount") && !text.contains("eur"), "{text}");
}

async fn a_missing_key_is_400_where_required_and_passes_through_where_not(kind: StoreKind) {
    let f = Fixture::new(kind, NOW, options(), |layer| layer).await;
    let answer = f.post(None, &order(100)).await;
    answer.assert_problem(ProblemType::KeyMissing);
    assert_eq!(f.bank.runs(), 0, "nothing ran");

    let optional = Fixture::new(kind, NOW, options(), |layer| layer.require_key(false)).await;
    for _ in 0..2 {
        let answer = optional.post(None, &order(100)).await;
        assert_eq!(answer.status, 201);
        assert!(!answer.replayed());
    }
    assert_eq!(
        optional.bank.charges(),
        2,
        "without a key, nothing protects a retry"
    );
}

async fn invalid_keys_are_400_and_nothing_runs(kind: StoreKind) {
    let f = Fixture::new(kind, NOW, options(), |layer| layer).await;
    let too_long = format!("\"{}\"", "k".repeat(256));
    let cases = [
        ("\"abc", ProblemType::KeyMalformed),
        (r#""a\bc""#, ProblemType::KeyMalformed),
        ("\"a\tb\"", ProblemType::KeyMalformed),
        (r#""a" "b""#, ProblemType::KeyMalformed),
        (r#""a", "b""#, ProblemType::KeyMalformed),
        (r#""a";"#, ProblemType::KeyMalformed),
        (r#""a";X=1"#, ProblemType::KeyMalformed),
        (r#""""#, ProblemType::KeyInvalid),
        (r#""a b""#, ProblemType::KeyInvalid),
        (r#"" a""#, ProblemType::KeyInvalid),
        // A bare token is taken verbatim, and must then be a key.
        ("a,b c", ProblemType::KeyInvalid),
        (too_long.as_str(), ProblemType::KeyInvalid),
    ];
    for (value, problem) in cases {
        let answer = f.post(Some(value), &order(100)).await;
        assert_eq!(answer.json()["type"], problem.uri(), "{value:?}");
        answer.assert_problem(problem);
    }
    // The header twice is not one String.
    let answer = f
        .client
        .post(format!("{}/charges", f.base))
        .header("idempotency-key", "\"a\"")
        .header("idempotency-key", "\"a\"")
        .header("content-type", "application/json")
        .body(order(100).to_string())
        .send()
        .await
        .unwrap();
    support::Answer::of(answer)
        .await
        .assert_problem(ProblemType::KeyMalformed);
    assert_eq!(f.bank.runs(), 0, "nothing ran");

    // The edges that are valid: 255 characters, every visible character, a parameter.
    let longest = format!("\"{}\"", "k".repeat(255));
    assert_eq!(f.post(Some(&longest), &order(100)).await.status, 201);
    let visible: String = (0x21u8..=0x7e).map(char::from).collect();
    let escaped = visible.replace('\\', r"\\").replace('"', "\\\"");
    assert_eq!(
        f.post(Some(&format!("\"{escaped}\"")), &order(100))
            .await
            .status,
        201
    );
    let answer = f.post(Some(r#""k-1";v=2"#), &order(100)).await;
    assert_eq!(answer.status, 201);
    assert!(
        f.post(Some(r#""k-1""#), &order(100)).await.replayed(),
        "parameters are ignored"
    );
    assert_eq!(f.bank.charges(), 3);
}

async fn bare_tokens_name_the_same_record_as_strings_when_accepted(kind: StoreKind) {
    // Accepted by default.
    let f = Fixture::new(kind, NOW, options(), |layer| layer).await;
    let first = f.post(Some("8e03978e-40d5"), &order(100)).await;
    assert_eq!(first.status, 201);
    let quoted = f.post(Some("\"8e03978e-40d5\""), &order(100)).await;
    assert!(quoted.replayed());
    assert_eq!(quoted.body, first.body);
    // A value that starts with a quote is read as a String, and must be one.
    f.post(Some("\"8e03978e-40d5"), &order(100))
        .await
        .assert_problem(ProblemType::KeyMalformed);
    f.post(Some("a b"), &order(100))
        .await
        .assert_problem(ProblemType::KeyInvalid);
    assert_eq!(f.bank.charges(), 1);

    // Strict: only the draft's String.
    let strict = Fixture::new(kind, NOW, options(), |layer| {
        layer.bare_token(BareToken::Refuse)
    })
    .await;
    strict
        .post(Some("8e03978e-40d5"), &order(100))
        .await
        .assert_problem(ProblemType::KeyMalformed);
    assert_eq!(strict.bank.runs(), 0, "nothing ran");
    assert_eq!(
        strict
            .post(Some("\"8e03978e-40d5\""), &order(100))
            .await
            .status,
        201
    );
}

async fn a_replay_is_the_first_response_byte_for_byte_with_the_replay_header(kind: StoreKind) {
    let f = Fixture::new(kind, NOW, options(), |layer| layer).await;
    let first = f.post(Some("\"k-1\""), &order(100)).await;
    assert_eq!(first.status, 201);
    assert!(!first.replayed());
    // The first caller gets the handler's response unchanged, every header included.
    assert_eq!(first.header("x-run"), Some("1"));
    assert_eq!(first.header("set-cookie"), Some("session=first"));
    assert_eq!(first.header("location"), Some("/charges/ch_1"));

    let again = f.post(Some("\"k-1\""), &order(100)).await;
    assert_eq!(again.status, first.status);
    assert_eq!(again.body, first.body, "the body, byte for byte");
    for name in ["content-type", "location"] {
        assert_eq!(again.header(name), first.header(name), "{name}");
    }
    assert!(again.replayed());
    assert_eq!(again.header("x-run"), None, "not on the allow-list");
    assert_eq!(again.header("set-cookie"), None, "never stored");
    assert_eq!(
        again.header("content-length"),
        Some(first.body.len().to_string().as_str())
    );
    assert_eq!((f.bank.charges(), f.bank.runs()), (1, 1));

    // Another replay header name, and another allow-list.
    let g = Fixture::new(kind, NOW, options(), |layer| {
        layer
            .replay_header(http::HeaderName::from_static("x-idempotent-replay"))
            .stored_headers([http::HeaderName::from_static("x-run")])
    })
    .await;
    g.post(Some("\"k\""), &order(1)).await;
    let again = g.post(Some("\"k\""), &order(1)).await;
    assert_eq!(again.header("x-idempotent-replay"), Some("true"));
    assert_eq!(again.header("idempotent-replayed"), None);
    assert_eq!(again.header("x-run"), Some("1"));
    assert_eq!(again.header("location"), None);
}

async fn a_4xx_answer_is_the_outcome_and_is_replayed(kind: StoreKind) {
    let f = Fixture::new(kind, NOW, options(), |layer| layer).await;
    let declined = f.post(Some("\"k\""), &order(402)).await;
    assert_eq!(declined.status, 402);
    let again = f.post(Some("\"k\""), &order(402)).await;
    assert_eq!((again.status, again.replayed()), (402, true));
    assert_eq!(again.body, declined.body);
    assert_eq!(
        f.bank.runs(),
        1,
        "a declined card is the answer, not a failure"
    );
}

async fn another_body_under_a_used_key_is_422_while_the_first_runs_and_after(kind: StoreKind) {
    let f = Fixture::new(kind, Duration::from_millis(600), options(), |layer| layer).await;
    let first = {
        let (client, base) = (f.client.clone(), f.base.clone());
        tokio::spawn(async move {
            let response = client
                .post(format!("{base}/charges"))
                .header("idempotency-key", "\"k\"")
                .header("content-type", "application/json")
                .body(order(100).to_string())
                .send()
                .await
                .unwrap();
            support::Answer::of(response).await
        })
    };
    tokio::time::sleep(Duration::from_millis(150)).await;
    let start = Instant::now();
    let reused = f.post(Some("\"k\""), &order(5)).await;
    reused.assert_problem(ProblemType::KeyReuse);
    assert_discloses_nothing(&reused);
    assert!(
        start.elapsed() < Duration::from_millis(400),
        "422 at once, not after waiting for the first"
    );
    assert_eq!(first.await.unwrap().status, 201);
    let after = f.post(Some("\"k\""), &order(5)).await;
    after.assert_problem(ProblemType::KeyReuse);
    assert_discloses_nothing(&after);
    // Another method or target is another request, too.
    let patch = f
        .send(reqwest::Method::PATCH, Some("\"k\""), &order(100))
        .await;
    assert_eq!(
        patch.status, 200,
        "PATCH is another operation: its own key space"
    );
    assert_eq!(f.bank.charges(), 1);
}

async fn under_wait_a_concurrent_duplicate_gets_the_first_response(kind: StoreKind) {
    let f = Fixture::new(kind, Duration::from_millis(400), options(), |layer| layer).await;
    let (client, base) = (f.client.clone(), f.base.clone());
    let first = tokio::spawn(async move {
        let response = client
            .post(format!("{base}/charges"))
            .header("idempotency-key", "\"k\"")
            .header("content-type", "application/json")
            .body(order(100).to_string())
            .send()
            .await
            .unwrap();
        support::Answer::of(response).await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let second = f.post(Some("\"k\""), &order(100)).await;
    let first = first.await.unwrap();
    assert_eq!((first.status, first.replayed()), (201, false));
    assert_eq!((second.status, second.replayed()), (201, true));
    assert_eq!(second.body, first.body);
    assert_eq!(f.bank.statement(), ["ch_1"]);
}

async fn under_raise_a_concurrent_duplicate_is_409_with_retry_after(kind: StoreKind) {
    let raise = options().in_flight(InFlightPolicy::Raise);
    let f = Fixture::new(kind, Duration::from_millis(400), raise, |layer| layer).await;
    let (client, base) = (f.client.clone(), f.base.clone());
    let first = tokio::spawn(async move {
        let response = client
            .post(format!("{base}/charges"))
            .header("idempotency-key", "\"k\"")
            .header("content-type", "application/json")
            .body(order(100).to_string())
            .send()
            .await
            .unwrap();
        support::Answer::of(response).await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let conflict = f.post(Some("\"k\""), &order(100)).await;
    conflict.assert_problem(ProblemType::InProgress);
    // backoff_max is 500 ms by default: rounded up to whole seconds.
    assert_eq!(conflict.header("retry-after"), Some("1"));
    let first = first.await.unwrap();
    let later = f.post(Some("\"k\""), &order(100)).await;
    assert!(later.replayed());
    assert_eq!(later.body, first.body);
    assert_eq!(f.bank.charges(), 1);
}

async fn other_methods_pass_through_untouched_and_store_nothing(kind: StoreKind) {
    // One operation name for every method: a record left by any method would meet the POST.
    let f = Fixture::new(kind, NOW, options(), |layer| layer.operation("charges")).await;
    let mut runs = 0;
    for method in ["GET", "PUT", "DELETE", "OPTIONS", "HEAD"] {
        for key in [Some("\"k\""), Some("not a valid key"), None] {
            let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
            let answer = f.send(method.clone(), key, &order(5)).await;
            runs += 1;
            assert_eq!(answer.status, 200, "{method} {key:?}");
            assert!(!answer.replayed());
            assert_eq!(answer.header("x-run"), Some(runs.to_string().as_str()));
        }
    }
    assert_eq!(f.bank.runs(), 15, "each ran, none was replayed or refused");
    // Nothing was stored under the key: a POST with another body runs.
    let post = f.post(Some("\"k\""), &order(100)).await;
    assert_eq!((post.status, post.replayed()), (201, false));
    let statement = f
        .client
        .get(format!("{}/statement", f.base))
        .send()
        .await
        .unwrap();
    assert_eq!(statement.status(), 200);
    // The covered methods are configurable.
    let g = Fixture::new(kind, NOW, options(), |layer| {
        layer.methods([http::Method::PUT])
    })
    .await;
    g.send(reqwest::Method::PUT, None, &order(1))
        .await
        .assert_problem(ProblemType::KeyMissing);
    assert_eq!(g.post(None, &order(1)).await.status, 201);
}

async fn a_failure_the_handler_marks_is_released_and_a_retry_runs_again(kind: StoreKind) {
    let f = Fixture::new(kind, NOW, options(), |layer| layer).await;
    f.bank.fail_next(StatusCode::SERVICE_UNAVAILABLE);
    let failed = f.post(Some("\"k\""), &order(100)).await;
    assert_eq!(failed.status, 503);
    assert_eq!(
        failed.json()["error"],
        "provider unavailable",
        "the handler's own answer"
    );
    assert!(!failed.replayed());
    let retry = f.post(Some("\"k\""), &order(100)).await;
    assert_eq!((retry.status, retry.replayed()), (201, false), "runs again");
    let again = f.post(Some("\"k\""), &order(100)).await;
    assert!(again.replayed());
    assert_eq!(again.body, retry.body);
    // 429, 401 and 407 are refusals at the door: released unmarked.
    for status in [
        StatusCode::TOO_MANY_REQUESTS,
        StatusCode::UNAUTHORIZED,
        StatusCode::PROXY_AUTHENTICATION_REQUIRED,
    ] {
        f.bank.answer_next_unmarked(status);
        assert_eq!(
            f.post(Some("\"k-2\""), &order(100)).await.status,
            status.as_u16()
        );
    }
    assert_eq!(f.post(Some("\"k-2\""), &order(100)).await.status, 201);
    assert_eq!((f.bank.runs(), f.bank.charges()), (6, 2));
}

async fn an_unmarked_server_error_or_408_is_outcome_unknown_and_never_runs_again(kind: StoreKind) {
    let f = Fixture::new(kind, NOW, options(), |layer| layer).await;
    for (key, status) in [
        ("\"k-500\"", StatusCode::INTERNAL_SERVER_ERROR),
        ("\"k-503\"", StatusCode::SERVICE_UNAVAILABLE),
        ("\"k-504\"", StatusCode::GATEWAY_TIMEOUT),
        ("\"k-408\"", StatusCode::REQUEST_TIMEOUT),
    ] {
        let runs = f.bank.runs();
        f.bank.answer_next_unmarked(status);
        let first = f.post(Some(key), &order(100)).await;
        assert_eq!(
            first.status,
            status.as_u16(),
            "the first caller gets it unchanged"
        );
        assert_eq!(first.json()["error"], "provider unavailable");
        for _ in 0..2 {
            f.post(Some(key), &order(100))
                .await
                .assert_problem(ProblemType::OutcomeUnknown);
        }
        assert_eq!(f.bank.runs(), runs + 1, "{status}: never run again");
    }
}

async fn what_is_recorded_is_configurable(kind: StoreKind) {
    let f = Fixture::new(kind, NOW, options(), |layer| {
        layer.disposition(|_| Disposition::Record)
    })
    .await;
    f.bank.answer_next_unmarked(StatusCode::SERVICE_UNAVAILABLE);
    let failed = f.post(Some("\"k\""), &order(100)).await;
    let again = f.post(Some("\"k\""), &order(100)).await;
    assert_eq!((again.status, again.replayed()), (503, true));
    assert_eq!(again.body, failed.body);
    let g = Fixture::new(kind, NOW, options(), |layer| {
        layer.disposition(|response| match response.status {
            StatusCode::PAYMENT_REQUIRED => Disposition::Release,
            _ => Disposition::by_default(response),
        })
    })
    .await;
    assert_eq!(g.post(Some("\"k\""), &order(402)).await.status, 402);
    let retry = g.post(Some("\"k\""), &order(402)).await;
    assert_eq!((retry.status, retry.replayed()), (402, false));
    assert_eq!(g.bank.runs(), 2);
}

/// Takes the fixture's store down: kills the real Redis, or switches `MemoryStore` off.
fn take_down(f: &mut Fixture) {
    match f.redis.as_mut() {
        Some(redis) => redis.kill(),
        None => f.store.set_down(true),
    }
}

async fn a_store_outage_fails_closed_with_503_and_retry_after(kind: StoreKind) {
    let mut f = Fixture::new(kind, NOW, options(), |layer| layer).await;
    assert_eq!(f.post(Some("\"k-0\""), &order(1)).await.status, 201);
    take_down(&mut f);
    let answer = f.post(Some("\"k\""), &order(100)).await;
    answer.assert_problem(ProblemType::StoreUnavailable);
    // Two tries of 200 ms each: 0.4 s, rounded up.
    assert_eq!(answer.header("retry-after"), Some("1"));
    assert_eq!(f.bank.runs(), 1, "nothing ran during the outage");
}

async fn a_store_outage_fails_open_when_told_and_the_handler_runs(kind: StoreKind) {
    let open = options().on_store_failure(idem::StoreFailurePolicy::FailOpen);
    let mut f = Fixture::new(kind, NOW, open, |layer| layer).await;
    take_down(&mut f);
    for _ in 0..2 {
        let answer = f.post(Some("\"k\""), &order(100)).await;
        assert_eq!((answer.status, answer.replayed()), (201, false));
    }
    // Unprotected: the retry charged again, and the coordinator says so.
    assert_eq!(f.bank.charges(), 2);
    assert_eq!(f.coordinator.metrics().failed_open, 2);
}

async fn a_body_over_the_limit_is_413_and_nothing_runs(kind: StoreKind) {
    let f = Fixture::new(kind, NOW, options(), |layer| layer.max_request_bytes(1024)).await;
    let padded = |len: usize| {
        let mut body = json!({ "amount": 1, "currency": "eur", "note": "" });
        let short = body.to_string().len();
        body["note"] = json!("n".repeat(len - short));
        body
    };
    assert_eq!(padded(1024).to_string().len(), 1024);
    assert_eq!(f.post(Some("\"k\""), &padded(1024)).await.status, 201);
    f.post(Some("\"k-2\""), &padded(1025))
        .await
        .assert_problem(ProblemType::BodyTooLarge);
    // Without a Content-Length: a chunked body is cut at the limit too.
    let addr = f.base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let body = padded(2000).to_string();
    let request = format!(
        "POST /charges HTTP/1.1\r\nhost: {addr}\r\nidempotency-key: \"k-3\"\r\n\
         content-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n\
         {:x}\r\n{body}\r\n0\r\n\r\n",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).await.unwrap();
    assert!(reply.starts_with("HTTP/1.1 413 "), "{reply}");
    assert!(reply.contains("application/problem+json"), "{reply}");
    assert!(reply.contains("#variant.BodyTooLarge"), "{reply}");
    assert_eq!(f.bank.runs(), 1);
}

async fn a_handler_that_panics_is_outcome_unknown_and_never_runs_again(kind: StoreKind) {
    let f = Fixture::new(kind, NOW, options(), |layer| layer).await;
    // The handler charges, then panics: its caller is told the outcome is unknown, as every
    // retry is, rather than having its connection dropped.
    let first = f.post(Some("\"k\""), &order(500)).await;
    first.assert_problem(ProblemType::OutcomeUnknown);
    let retry = f.post(Some("\"k\""), &order(500)).await;
    retry.assert_problem(ProblemType::OutcomeUnknown);
    assert_eq!((f.bank.runs(), f.bank.charges()), (1, 1));
}

async fn a_response_over_the_body_limit_reaches_its_caller_and_a_retry_is_500(kind: StoreKind) {
    let small = options().max_body_bytes(1024);
    let f = Fixture::new(kind, NOW, small, |layer| layer).await;
    let first = f.post(Some("\"k\""), &order(7777)).await;
    assert_eq!(first.status, 201);
    assert_eq!(first.json()["padding"].as_str().unwrap().len(), 4096);
    let retry = f.post(Some("\"k\""), &order(7777)).await;
    retry.assert_problem(ProblemType::ResponseNotStored);
    assert_eq!(f.bank.charges(), 1, "not charged again");
}

async fn json_fields_make_the_fingerprint_when_named(kind: StoreKind) {
    let f = Fixture::new(kind, NOW, options(), |layer| {
        layer.fingerprint_json_fields(["amount", "/currency"])
    })
    .await;
    let first = f
        .post(
            Some("\"k\""),
            &json!({ "amount": 100, "currency": "eur", "note": "a" }),
        )
        .await;
    assert_eq!(first.status, 201);
    let reordered = json!({ "note": "b", "currency": "eur", "amount": 100 });
    let again = f.post(Some("\"k\""), &reordered).await;
    assert!(
        again.replayed(),
        "member order and unnamed fields do not matter"
    );
    assert_eq!(again.body, first.body);
    f.post(Some("\"k\""), &json!({ "amount": 101, "currency": "eur" }))
        .await
        .assert_problem(ProblemType::KeyReuse);
    let not_json = f
        .client
        .post(format!("{}/charges", f.base))
        .header("idempotency-key", "\"k-2\"")
        .body("amount=100")
        .send()
        .await
        .unwrap();
    support::Answer::of(not_json)
        .await
        .assert_problem(ProblemType::FingerprintUnavailable);
    assert_eq!(f.bank.runs(), 1);
}

async fn two_tenants_sending_one_key_get_two_records_and_two_charges(kind: StoreKind) {
    let f = Fixture::new(kind, NOW, options(), |layer| {
        layer.tenant(|parts| {
            parts
                .headers
                .get("x-account")
                .map(|v| v.as_bytes().to_vec())
        })
    })
    .await;
    let as_account = |account: Option<&'static str>| {
        let mut request = f
            .client
            .post(format!("{}/charges", f.base))
            .header("idempotency-key", "\"k\"")
            .header("content-type", "application/json")
            .body(order(100).to_string());
        if let Some(account) = account {
            request = request.header("x-account", account);
        }
        async move { support::Answer::of(request.send().await.unwrap()).await }
    };
    let alice = as_account(Some("alice")).await;
    let bob = as_account(Some("bob")).await;
    assert_eq!((alice.status, bob.status), (201, 201));
    assert!(!bob.replayed(), "bob's key is not alice's");
    assert_eq!(alice.json()["id"], "ch_1");
    assert_eq!(bob.json()["id"], "ch_2");
    let alice_again = as_account(Some("alice")).await;
    assert!(alice_again.replayed());
    assert_eq!(alice_again.body, alice.body);
    let bob_again = as_account(Some("bob")).await;
    assert_eq!(bob_again.body, bob.body);
    as_account(None)
        .await
        .assert_problem(ProblemType::TenantMissing);
    assert_eq!(f.bank.statement(), ["ch_1", "ch_2"]);
}

async fn without_route_templates_no_path_names_an_operation(kind: StoreKind) {
    use tower::ServiceExt;
    // A plain tower service, no axum routes: no path names an operation (a client could
    // make a key space and a metrics series per request); every unmatched POST shares one,
    // and the fingerprint, which covers the path, tells them apart.
    let (store, _redis) = support::store(kind).await;
    let coordinator = idem::Coordinator::new(store, options().build().unwrap());
    let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = runs.clone();
    let service = tower::service_fn(
        move |request: http::Request<idem_http::RequestBody<axum::body::Body>>| {
            let run = counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
            async move {
                let path = request.uri().path().to_owned();
                let body = format!("{path} run {run}");
                Ok::<_, std::convert::Infallible>(http::Response::new(axum::body::Body::from(body)))
            }
        },
    );
    let service = tower::ServiceBuilder::new()
        .layer(idem_http::IdempotencyLayer::new(coordinator))
        .service(service)
        .map_response(axum::response::IntoResponse::into_response);
    let app = axum::Router::new().fallback_service(service);
    let (base, server) = support::serve(app).await;
    let client = reqwest::Client::new();
    let post = |path: &'static str, key: &'static str| {
        let request = client
            .post(format!("{base}{path}"))
            .header("idempotency-key", key)
            .body("same");
        async move { support::Answer::of(request.send().await.unwrap()).await }
    };
    let a = post("/a", "\"k\"").await;
    assert_eq!(a.body.as_ref(), &b"/a run 1"[..]);
    post("/b", "\"k\"")
        .await
        .assert_problem(ProblemType::KeyReuse);
    let b = post("/b", "\"k-b\"").await;
    assert_eq!((b.body.as_ref(), b.replayed()), (&b"/b run 2"[..], false));
    let a_again = post("/a", "\"k\"").await;
    assert!(a_again.replayed());
    assert_eq!(a_again.body, a.body);
    assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 2);
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_record_is_500_and_nothing_runs() {
    let f = Fixture::new(StoreKind::Redis, NOW, options(), |layer| {
        layer.operation("payment.charge")
    })
    .await;
    let port = f.redis.as_ref().unwrap().port;
    let reply =
        support::redis::raw_command(port, "SET idem:{}payment.charge:k not-a-record").unwrap();
    assert!(reply.starts_with("+OK"), "{reply}");
    let answer = f.post(Some("\"k\""), &order(100)).await;
    answer.assert_problem(ProblemType::CorruptRecord);
    assert!(!String::from_utf8_lossy(&answer.body).contains("not-a-record"));
    let again = f.post(Some("\"k\""), &order(100)).await;
    again.assert_problem(ProblemType::CorruptRecord);
    assert_eq!(f.bank.runs(), 0, "nothing ran under either policy");
    let value = support::redis::raw_command(port, "GET idem:{}payment.charge:k").unwrap();
    assert!(value.contains("not-a-record"), "left as it was: {value}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_template_names_the_operation() {
    for kind in [StoreKind::Memory, StoreKind::Redis] {
        let (store, redis) = support::store(kind).await;
        let coordinator = idem::Coordinator::new(store, options().build().unwrap());
        let refund = axum::routing::post(|| async { (StatusCode::CREATED, "refunded") })
            .layer(idem_http::IdempotencyLayer::new(coordinator));
        let app = axum::Router::new().route("/orders/{id}/refund", refund);
        let (base, server) = support::serve(app).await;
        let client = reqwest::Client::new();
        let refund = |order: u32| {
            let request = client
                .post(format!("{base}/orders/{order}/refund"))
                .header("idempotency-key", "\"k\"");
            async move { support::Answer::of(request.send().await.unwrap()).await }
        };
        assert_eq!(refund(1).await.status, 201);
        // One operation for the route: the same key on another order is another request.
        refund(2).await.assert_problem(ProblemType::KeyReuse);
        assert!(refund(1).await.replayed());
        if let Some(redis) = &redis {
            let key = "idem:{}POST.orders._7Bid_7D.refund:k";
            let reply = support::redis::raw_command(redis.port, &format!("EXISTS {key}")).unwrap();
            assert_eq!(reply, ":1\r\n", "the record is under {key}");
        }
        server.abort();
    }
}
