//! The payments example serves its OpenAPI document: started as a real process, its
//! `GET /openapi.json` is fetched over HTTP and passed to a real OpenAPI validator
//! (`openapi-spec-validator`, `support/openapi.rs`), and the validated document describes
//! the layer's contract on `POST /charges`: the `Idempotency-Key` header, the four problem
//! responses with `Retry-After` on 409, and the replay header on 201. Without the layer
//! (`--no-idempotency`), the document it serves promises none of it, and still validates.
//!
//! The process is this test binary itself, started again with the example's arguments in
//! `IDEM_OPENAPI_PAYMENTS_ARGS`: it then serves the example's own code (included below)
//! instead of testing. Hence `harness = false`: `main` is either the server or the test, and
//! the test prints the plain closing line `1 passed, 0 failed` (or `0 passed, 1 failed`).

#[allow(dead_code, unused_imports)]
#[path = "../examples/payments.rs"]
mod payments;
#[path = "support/openapi.rs"]
mod validator;

use std::time::Duration;

use clap::Parser;
use idem_tests::process::{ExampleProcess, child_args, free_port, run_test, serve};
use serde_json::Value;

const CHILD: &str = "IDEM_OPENAPI_PAYMENTS_ARGS";

fn main() {
    if let Some(args) = child_args(CHILD, "payments") {
        serve(payments::run(payments::Args::parse_from(args)));
    } else {
        run_test(
            "openapi_served",
            the_served_document_is_valid_and_complete(),
        );
    }
}

/// Starts the example with `args`, fetches its document, and validates it.
async fn served_document(args: &[&str]) -> Value {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut all = vec!["--addr", &addr, "--action-ms", "0"];
    all.extend_from_slice(args);
    let _server = ExampleProcess::start(CHILD, &all, "payments on");
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let response = client
        .get(format!("http://{addr}/openapi.json"))
        .send()
        .await
        .expect("the example answers");
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"],
        "application/json",
        "{:?}",
        response.headers()
    );
    let text = response.text().await.expect("the document");
    if let Err(report) = validator::validate(&text) {
        panic!("the validator refused the served document: {report}\n{text}");
    }
    serde_json::from_str(&text).expect("the document is JSON")
}

async fn the_served_document_is_valid_and_complete() {
    let document = served_document(&[]).await;
    let charges = &document["paths"]["/charges"]["post"];
    let key = charges["parameters"]
        .as_array()
        .and_then(|parameters| {
            parameters
                .iter()
                .find(|parameter| parameter["name"] == "Idempotency-Key")
        })
        .unwrap_or_else(|| panic!("no Idempotency-Key parameter: {charges:#}"));
    assert_eq!(key["in"], "header");
    assert_eq!(key["required"], true);
    assert_eq!(key["schema"]["type"], "string");
    let responses = &charges["responses"];
    for status in ["400", "409", "422", "503"] {
        assert_eq!(
            responses[status]["content"]["application/problem+json"]["schema"]["$ref"],
            "#/components/schemas/Problem",
            "{status}: {responses:#}"
        );
    }
    assert!(responses["409"]["headers"]["Retry-After"].is_object());
    assert!(responses["201"]["headers"]["Idempotent-Replayed"].is_object());
    // The handler's own answers are there as they are.
    assert_eq!(
        responses["201"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/Charge"
    );
    assert!(responses["201"]["headers"]["Location"].is_object());
    assert!(responses["400"]["content"]["application/json"].is_object());
    assert_eq!(
        document["components"]["schemas"]["Problem"]["required"],
        serde_json::json!(["type", "title", "status", "detail"])
    );
    assert!(document["paths"]["/statement"]["get"].is_object());

    // Without the layer, none of the layer's promises.
    let bare = served_document(&["--no-idempotency"]).await;
    let charges = &bare["paths"]["/charges"]["post"];
    assert!(charges.get("parameters").is_none(), "{charges:#}");
    assert!(charges["responses"].get("409").is_none());
    assert!(bare["components"]["schemas"].get("Problem").is_none());
}
