//! The response size limit, at its edge, through the layer: the store keeps a response's
//! status, stored headers and body within `max_body_bytes`, so a body is stored exactly
//! when it fits with its head, and one byte more is answered whole to its caller and 500
//! `ResponseNotStored` to a retry. Real server, real client, both stores.

mod support;

use axum::Router;
use axum::extract::Json;
use axum::http::{HeaderName, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::post;
use idem::Coordinator;
use idem_http::{IdempotencyLayer, ProblemType};
use serde::Deserialize;
use support::{Answer, StoreKind, options};

on_both_stores![a_body_that_fits_with_its_stored_head_is_stored_and_one_byte_more_is_not];

const LIMIT: usize = 1024;
const CONTENT_TYPE: &str = "text/plain";
const LOCATION: &str = "/blobs/1";

#[derive(Deserialize)]
struct Blob {
    len: usize,
}

/// Answers 201 with a body of `len` bytes, two stored headers and one that is not.
async fn blob(Json(blob): Json<Blob>) -> impl IntoResponse {
    (
        StatusCode::CREATED,
        [
            (header::CONTENT_TYPE, CONTENT_TYPE),
            (header::LOCATION, LOCATION),
            (
                HeaderName::from_static("x-not-stored"),
                "a value the store never sees",
            ),
        ],
        "x".repeat(blob.len),
    )
}

async fn send(base: &str, key: &str, len: usize) -> Answer {
    let response = reqwest::Client::new()
        .post(format!("{base}/blobs"))
        .header("idempotency-key", key)
        .header("content-type", "application/json")
        .body(format!(r#"{{"len":{len}}}"#))
        .send()
        .await
        .expect("the server answers");
    Answer::of(response).await
}

async fn a_body_that_fits_with_its_stored_head_is_stored_and_one_byte_more_is_not(kind: StoreKind) {
    let (store, _redis) = support::store(kind).await;
    let coordinator = Coordinator::new(store, options().max_body_bytes(LIMIT).build().unwrap());
    let layer = IdempotencyLayer::new(coordinator);
    let app = Router::new().route("/blobs", post(blob).layer(layer));
    let (base, server) = support::serve(app).await;

    // The stored format (response::codec): version, status and header count (5 bytes), then
    // each stored header with a 1-byte and a 4-byte length.
    let head = 5
        + (1 + 4 + "content-type".len() + CONTENT_TYPE.len())
        + (1 + 4 + "location".len() + LOCATION.len());
    let fits = LIMIT - head;

    let first = send(&base, "\"fits\"", fits).await;
    assert_eq!((first.status, first.body.len()), (201, fits));
    let replay = send(&base, "\"fits\"", fits).await;
    assert!(replay.replayed(), "{replay:?}");
    assert_eq!(replay.body, first.body);
    assert_eq!(replay.header("location"), Some(LOCATION));
    assert_eq!(replay.header("x-not-stored"), None);

    let over = send(&base, "\"over\"", fits + 1).await;
    assert_eq!(
        (over.status, over.body.len()),
        (201, fits + 1),
        "the first caller gets it whole"
    );
    send(&base, "\"over\"", fits + 1)
        .await
        .assert_problem(ProblemType::ResponseNotStored);
    server.abort();
}
