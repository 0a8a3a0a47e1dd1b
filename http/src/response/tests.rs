use std::sync::Arc;
use std::task::{Context, Poll};

use http::StatusCode;
use http::header::{HeaderName, HeaderValue};
use http_body::Frame;
use idem::Codec;

use super::*;
use http::header::{CONTENT_TYPE, DATE, LOCATION};
use http_body_util::Full;

fn codec() -> ResponseCodec {
    ResponseCodec::new(Arc::from(vec![CONTENT_TYPE, LOCATION]))
}

fn captured(status: u16, headers: &[(HeaderName, &str)], body: &[u8]) -> Captured<Full<Bytes>> {
    let mut response = Response::new(());
    *response.status_mut() = StatusCode::from_u16(status).unwrap();
    for (name, value) in headers {
        response
            .headers_mut()
            .append(name, HeaderValue::from_str(value).unwrap());
    }
    let (parts, ()) = response.into_parts();
    Captured {
        parts,
        body: CapturedBody::Complete {
            data: Bytes::copy_from_slice(body),
            trailers: None,
        },
    }
}

#[test]
fn a_response_round_trips_with_its_allow_listed_headers_only() {
    let body = br#"{"id":"ch_1","amount":100,"currency":"eur"}"#;
    let value = captured(
        201,
        &[
            (CONTENT_TYPE, "application/json"),
            (LOCATION, "/charges/ch_1"),
            (DATE, "Tue, 01 Dec 2026 00:00:00 GMT"),
        ],
        body,
    );
    let bytes = Codec::<Captured<Full<Bytes>>>::encode(&codec(), &value).unwrap();
    assert_eq!(bytes.len(), 5 + (5 + 12 + 16) + (5 + 8 + 13) + body.len());
    let back: Captured<Full<Bytes>> = codec().decode(&bytes).unwrap();
    assert_eq!(back.parts.status, 201);
    assert_eq!(back.parts.headers.len(), 2);
    assert_eq!(back.parts.headers[LOCATION], "/charges/ch_1");
    assert!(back.parts.headers.get(DATE).is_none());
    match back.body {
        CapturedBody::Complete { data, .. } => assert_eq!(&data[..], body),
        _ => panic!("not complete"),
    }
}

#[test]
fn repeated_headers_keep_their_order() {
    let value = captured(200, &[(LOCATION, "/a"), (LOCATION, "/b")], b"");
    let bytes = Codec::<Captured<Full<Bytes>>>::encode(&codec(), &value).unwrap();
    let back: Captured<Full<Bytes>> = codec().decode(&bytes).unwrap();
    let locations: Vec<_> = back.parts.headers.get_all(LOCATION).iter().collect();
    assert_eq!(locations, ["/a", "/b"]);
}

#[test]
fn every_truncation_and_corruption_is_a_decode_error() {
    let value = captured(201, &[(CONTENT_TYPE, "text/plain")], b"");
    let bytes = Codec::<Captured<Full<Bytes>>>::encode(&codec(), &value).unwrap();
    // With an empty body, every proper prefix is a truncation.
    for len in 0..bytes.len() {
        let decoded: Result<Captured<Full<Bytes>>, _> = codec().decode(&bytes[..len]);
        assert!(decoded.is_err(), "a prefix of {len} bytes decoded");
    }
    let mut wrong = bytes.clone();
    wrong[0] = 2;
    assert!(Codec::<Captured<Full<Bytes>>>::decode(&codec(), &wrong).is_err());
    let mut wrong = bytes.clone();
    wrong[1..3].copy_from_slice(&1000u16.to_be_bytes());
    assert!(Codec::<Captured<Full<Bytes>>>::decode(&codec(), &wrong).is_err());
    let mut wrong = bytes.clone();
    wrong[6] = b' ';
    assert!(Codec::<Captured<Full<Bytes>>>::decode(&codec(), &wrong).is_err());
    let mut wrong = bytes;
    let value_at = wrong.len() - 1;
    wrong[value_at] = b'\n';
    assert!(Codec::<Captured<Full<Bytes>>>::decode(&codec(), &wrong).is_err());
}

/// A body that yields its frames one by one, with no size hint.
struct Frames(std::collections::VecDeque<Result<Frame<Bytes>, BoxError>>);

impl Body for Frames {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Poll::Ready(self.get_mut().0.pop_front())
    }
}

fn chunks(n: u8) -> Frames {
    Frames(
        (0..n)
            .map(|i| Ok(Frame::data(Bytes::from(vec![i; 10]))))
            .collect(),
    )
}

#[tokio::test]
async fn a_body_over_the_limit_is_not_stored_and_still_reaches_the_client_whole() {
    let value = capture(Response::new(chunks(4)), 25).await;
    assert!(Codec::<Captured<_>>::encode(&codec(), &value).is_err());
    let all = value
        .into_response()
        .into_body()
        .collect()
        .await
        .unwrap()
        .to_bytes();
    let expected: Vec<u8> = (0..4).flat_map(|i| vec![i; 10]).collect();
    assert_eq!(&all[..], &expected[..]);
    // At the limit exactly, it is read whole and stored.
    let value = capture(Response::new(chunks(4)), 40).await;
    let bytes = Codec::<Captured<_>>::encode(&codec(), &value).unwrap();
    assert_eq!(&bytes[5..], &expected[..]);
}

#[tokio::test]
async fn a_body_known_to_be_over_the_limit_is_not_read_at_all() {
    let response = Response::new(Full::new(Bytes::from(vec![7; 100])));
    let value = capture(response, 99).await;
    assert!(matches!(&value.body, CapturedBody::Overflow { read, .. } if read.is_empty()));
    let all = value
        .into_response()
        .into_body()
        .collect()
        .await
        .unwrap()
        .to_bytes();
    assert_eq!(all.len(), 100);
}

#[tokio::test]
async fn a_failing_body_is_not_stored_and_fails_for_the_client_after_its_bytes() {
    let mut frames = chunks(2);
    frames
        .0
        .push_back(Err("connection to the backend lost".into()));
    let value = capture(Response::new(frames), 1000).await;
    assert!(Codec::<Captured<_>>::encode(&codec(), &value).is_err());
    let mut body = value.into_response().into_body();
    let mut read = 0;
    let error = loop {
        match body.frame().await {
            Some(Ok(frame)) => read += frame.into_data().unwrap().len(),
            Some(Err(error)) => break error,
            None => panic!("the failure was swallowed"),
        }
    };
    assert_eq!(read, 20);
    assert_eq!(error.to_string(), "connection to the backend lost");
}

#[tokio::test]
async fn trailers_reach_the_first_caller() {
    let mut frames = chunks(1);
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from_static("0"));
    frames.0.push_back(Ok(Frame::trailers(trailers)));
    let value = capture(Response::new(frames), 1000).await;
    let collected = value.into_response().into_body().collect().await.unwrap();
    assert_eq!(collected.trailers().unwrap()["grpc-status"], "0");
    assert_eq!(collected.to_bytes().len(), 10);
}

/// A response with two stored headers and two that are not, and a body of `len` bytes.
fn response_of(len: usize) -> Response<Full<Bytes>> {
    Response::builder()
        .status(201)
        .header(CONTENT_TYPE, "text/plain")
        .header(LOCATION, "/x/1")
        .header(DATE, "Tue, 01 Dec 2026 00:00:00 GMT")
        .header("x-run", "1")
        .body(Full::new(Bytes::from(vec![b'x'; len])))
        .unwrap()
}

#[test]
fn the_overhead_is_what_the_stored_head_takes() {
    let head = response_of(0).into_parts().0;
    assert_eq!(codec().overhead(&head), 5 + (5 + 12 + 10) + (5 + 8 + 4));
    for len in [0, 1, 40, 1000] {
        let value = captured(
            201,
            &[(CONTENT_TYPE, "text/plain"), (LOCATION, "/x/1")],
            &vec![b'x'; len],
        );
        let bytes = Codec::<Captured<Full<Bytes>>>::encode(&codec(), &value).unwrap();
        assert_eq!(bytes.len(), codec().overhead(&value.parts) + len);
    }
}

/// At the edge: a body that fits with its head in the stored bytes is read whole and
/// encodes within the limit; one byte more is not read into memory past the limit, is not
/// stored, and still reaches its caller whole.
#[tokio::test]
async fn a_body_is_captured_against_the_limit_less_its_stored_head() {
    let max_stored = 100;
    let overhead = codec().overhead(&response_of(0).into_parts().0);
    let fits = max_stored - overhead;

    let value = codec().capture(response_of(fits), max_stored).await;
    assert!(matches!(&value.body, CapturedBody::Complete { data, .. } if data.len() == fits));
    let bytes = Codec::<Captured<_>>::encode(&codec(), &value).unwrap();
    assert_eq!(bytes.len(), max_stored, "stored at the limit exactly");

    // One byte more: known from its length to be over, so not read at all.
    let value = codec().capture(response_of(fits + 1), max_stored).await;
    assert!(matches!(&value.body, CapturedBody::Overflow { read, .. } if read.is_empty()));
    assert!(Codec::<Captured<_>>::encode(&codec(), &value).is_err());
    let whole = value.into_response().into_body().collect().await.unwrap();
    assert_eq!(whole.to_bytes().len(), fits + 1);

    // Without a length, read up to the edge and no further.
    let frames = Frames(
        (0..=fits)
            .map(|_| Ok(Frame::data(Bytes::from_static(b"x"))))
            .collect(),
    );
    let (head, _) = response_of(0).into_parts();
    let value = codec()
        .capture(Response::from_parts(head, frames), max_stored)
        .await;
    assert!(matches!(&value.body, CapturedBody::Overflow { read, .. } if read.len() == fits + 1));
    assert!(Codec::<Captured<_>>::encode(&codec(), &value).is_err());

    // A head over the whole limit leaves no room for any body.
    let value = codec().capture(response_of(1), overhead - 1).await;
    assert!(matches!(&value.body, CapturedBody::Overflow { .. }));
}

/// A body that comes in one frame, the usual case (a handler's `Full` body), is kept as that
/// frame's bytes, not copied; one in several frames is joined in order.
#[tokio::test]
async fn a_body_in_one_frame_is_kept_without_a_copy() {
    let body = Bytes::from(vec![b'x'; 4096]);
    let response = Response::new(Full::new(body.clone()));
    match capture(response, 8192).await.body {
        CapturedBody::Complete { data, .. } => {
            assert_eq!(data, body);
            assert_eq!(data.as_ptr(), body.as_ptr(), "the frame was copied");
        }
        _ => panic!("not complete"),
    }
    match capture(Response::new(chunks(3)), 8192).await.body {
        CapturedBody::Complete { data, .. } => {
            assert_eq!(data, [[0; 10], [1; 10], [2; 10]].concat());
        }
        _ => panic!("not complete"),
    }
}

/// A captured response's body read `read` first, then `rest`.
fn chained(read: &[u8], rest: &[u8]) -> ResponseBody<Full<Bytes>> {
    let (parts, ()) = Response::new(()).into_parts();
    let body = CapturedBody::Overflow {
        read: Bytes::copy_from_slice(read),
        rest: Box::pin(Full::new(Bytes::copy_from_slice(rest))),
    };
    Captured { parts, body }.into_response().into_body()
}

/// What a body tells the server before it is read (hyper sizes and ends a response by it):
/// its length when known, the bytes already read counted in, and whether anything is left.
#[test]
fn a_body_says_its_size_and_whether_anything_is_left() {
    let full = ResponseBody::<Full<Bytes>>::full(Bytes::from_static(b"abc"));
    assert_eq!(full.size_hint().exact(), Some(3));
    assert!(!full.is_end_stream());
    assert!(ResponseBody::<Full<Bytes>>::default().is_end_stream());
    let over = chained(&[1; 5], &[2; 10]);
    let hint = over.size_hint();
    assert_eq!((hint.lower(), hint.upper()), (15, Some(15)));
    assert!(!over.is_end_stream());
    // Read bytes still to send, though the rest has ended: not ended.
    assert!(!chained(&[1; 5], &[]).is_end_stream());
    assert!(chained(&[], &[]).is_end_stream());
    // A body that failed after nothing was read still has its error to tell.
    let (parts, ()) = Response::new(()).into_parts();
    let body = CapturedBody::<Full<Bytes>>::Failed {
        read: Bytes::new(),
        error: "the handler's body failed".into(),
    };
    let failed = Captured { parts, body }.into_response().into_body();
    assert!(!failed.is_end_stream());
    assert_eq!(failed.size_hint().upper(), Some(0));
    assert_eq!(
        format!("{full:?} {over:?}"),
        r#"ResponseBody { kind: "full" } ResponseBody { kind: "chained" }"#
    );
}
