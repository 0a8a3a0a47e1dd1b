//! Responses as the layer holds, stores and replays them.
//!
//! A handler's response is read into a [`Captured`] inside the detached call (so a client
//! that hangs up never stops the reading either), up to the core's body limit. The
//! [`ResponseCodec`] stores it compactly; the first caller gets the captured response
//! itself, every header and extension as the handler made them, and a replay gets the
//! stored status, the allow-listed headers and the body, byte for byte.
//!
//! # The stored bytes
//!
//! ```text
//! u8      format version (1)
//! u16     status (big-endian)
//! u16     number of headers
//! per header:
//!   u8    name length, then the lowercase name
//!   u32   value length, then the value bytes
//! ...     the body, to the end
//! ```
//!
//! A 201 with `content-type: application/json`, `location: /charges/ch_1` and a 40-byte
//! body takes 97 bytes. Everything is checked when it is read back: a version, status, name
//! or value that is not valid, or lengths that overrun, is a decode error (answered 500
//! [`StoredResponseUnreadable`](crate::ProblemType::StoredResponseUnreadable)), never a
//! panic.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use idem::{BoxError, Codec};

/// The format version written first.
const VERSION: u8 = 1;

/// A handler's response, read up to a limit.
pub(crate) struct Captured<B> {
    pub(crate) parts: http::response::Parts,
    pub(crate) body: CapturedBody<B>,
}

/// The body of a [`Captured`] response.
pub(crate) enum CapturedBody<B> {
    /// Read to its end.
    Complete {
        data: Bytes,
        trailers: Option<HeaderMap>,
    },
    /// Over the limit: the bytes read so far, and the rest, still to be read by the client.
    Overflow { read: Bytes, rest: Pin<Box<B>> },
    /// The body failed after `read`.
    Failed { read: Bytes, error: BoxError },
}

impl<B> Captured<B> {
    /// The response to send: the whole head as the handler made it (or as decoded).
    pub(crate) fn into_response(self) -> Response<ResponseBody<B>> {
        let body = match self.body {
            CapturedBody::Complete { data, trailers } => Kind::Full {
                data: Some(data),
                trailers,
            },
            CapturedBody::Overflow { read, rest } => Kind::Chained {
                prefix: Some(read),
                rest,
            },
            CapturedBody::Failed { read, error } => Kind::Failed {
                prefix: Some(read),
                error: Some(error),
            },
        };
        Response::from_parts(self.parts, ResponseBody { kind: body })
    }
}

/// Reads `response`'s body, up to `limit` bytes, into a [`Captured`].
pub(crate) async fn capture<B>(response: Response<B>, limit: usize) -> Captured<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let (parts, body) = response.into_parts();
    let mut body = Box::pin(body);
    let hint = body.size_hint();
    if usize::try_from(hint.lower()).map_or(true, |lower| lower > limit) {
        // Known to be over the limit: nothing is buffered, the client reads it as it comes.
        return Captured {
            parts,
            body: CapturedBody::Overflow {
                read: Bytes::new(),
                rest: body,
            },
        };
    }
    let mut chunks: Vec<Bytes> = Vec::new();
    let mut len = 0usize;
    let mut trailers = None;
    let body = loop {
        match body.frame().await {
            None => {
                break CapturedBody::Complete {
                    data: concat(chunks, len),
                    trailers,
                };
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => {
                    len += data.len();
                    chunks.push(data);
                    if len > limit {
                        break CapturedBody::Overflow {
                            read: concat(chunks, len),
                            rest: body,
                        };
                    }
                }
                Err(frame) => {
                    if let Ok(more) = frame.into_trailers() {
                        trailers.get_or_insert_with(HeaderMap::new).extend(more);
                    }
                }
            },
            Some(Err(error)) => {
                break CapturedBody::Failed {
                    read: concat(chunks, len),
                    error: error.into(),
                };
            }
        }
    };
    Captured { parts, body }
}

fn concat(mut chunks: Vec<Bytes>, len: usize) -> Bytes {
    match chunks.len() {
        0 => Bytes::new(),
        1 => chunks.pop().unwrap_or_default(),
        _ => {
            let mut out = BytesMut::with_capacity(len);
            for chunk in chunks {
                out.extend_from_slice(&chunk);
            }
            out.freeze()
        }
    }
}

/// Stores a response as status, allow-listed headers and body; see the
/// [module docs](self#the-stored-bytes).
#[derive(Debug, Clone)]
pub(crate) struct ResponseCodec {
    stored_headers: Arc<[HeaderName]>,
}

impl ResponseCodec {
    pub(crate) fn new(stored_headers: Arc<[HeaderName]>) -> Self {
        Self { stored_headers }
    }
}

impl<B: Send + 'static> Codec<Captured<B>> for ResponseCodec {
    fn encode(&self, value: &Captured<B>) -> Result<Vec<u8>, BoxError> {
        let data = match &value.body {
            CapturedBody::Complete { data, .. } => data,
            CapturedBody::Overflow { .. } => {
                return Err("the response body is over the limit".into());
            }
            CapturedBody::Failed { .. } => return Err("the response body failed".into()),
        };
        let headers = &value.parts.headers;
        let stored = || {
            self.stored_headers
                .iter()
                .flat_map(|name| headers.get_all(name).iter().map(move |value| (name, value)))
        };
        let mut size = 5 + data.len();
        let mut count = 0u16;
        for (name, value) in stored() {
            size += 5 + name.as_str().len() + value.len();
            count = count.checked_add(1).ok_or("too many headers to store")?;
        }
        let mut out = Vec::with_capacity(size);
        out.push(VERSION);
        out.extend_from_slice(&value.parts.status.as_u16().to_be_bytes());
        out.extend_from_slice(&count.to_be_bytes());
        for (name, value) in stored() {
            let name_len = u8::try_from(name.as_str().len()).map_err(|_| "header name too long")?;
            let value_len = u32::try_from(value.len()).map_err(|_| "header value too long")?;
            out.push(name_len);
            out.extend_from_slice(name.as_str().as_bytes());
            out.extend_from_slice(&value_len.to_be_bytes());
            out.extend_from_slice(value.as_bytes());
        }
        out.extend_from_slice(data);
        Ok(out)
    }

    fn decode(&self, bytes: &[u8]) -> Result<Captured<B>, BoxError> {
        let mut input = Reader { bytes };
        let version = input.take(1)?[0];
        if version != VERSION {
            return Err(format!("unknown stored response format {version}").into());
        }
        let status = StatusCode::from_u16(input.u16()?)?;
        let count = input.u16()?;
        let mut headers = HeaderMap::with_capacity(usize::from(count));
        for _ in 0..count {
            let name_len = usize::from(input.take(1)?[0]);
            let name = HeaderName::from_bytes(input.take(name_len)?)?;
            let value_len = usize::try_from(input.u32()?)?;
            let value = HeaderValue::from_bytes(input.take(value_len)?)?;
            headers.append(name, value);
        }
        let mut response = Response::new(());
        *response.status_mut() = status;
        *response.headers_mut() = headers;
        let (parts, ()) = response.into_parts();
        Ok(Captured {
            parts,
            body: CapturedBody::Complete {
                data: Bytes::copy_from_slice(input.bytes),
                trailers: None,
            },
        })
    }
}

/// Reads the stored bytes, refusing any overrun.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], BoxError> {
        if self.bytes.len() < n {
            return Err("the stored response is truncated".into());
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn u16(&mut self) -> Result<u16, BoxError> {
        let bytes = self.take(2)?;
        Ok(u16::from_be_bytes([bytes[0], bytes[1]]))
    }

    fn u32(&mut self) -> Result<u32, BoxError> {
        let bytes = self.take(4)?;
        Ok(u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    }
}

/// The body of every response that passes through the layer: the handler's own body
/// untouched (methods the layer does not cover, responses it does not record), a body held
/// in memory (recorded, replayed, or a problem), or a body read in part and streamed on.
pub struct ResponseBody<B> {
    kind: Kind<B>,
}

enum Kind<B> {
    Inner {
        body: Pin<Box<B>>,
    },
    Full {
        data: Option<Bytes>,
        trailers: Option<HeaderMap>,
    },
    Chained {
        prefix: Option<Bytes>,
        rest: Pin<Box<B>>,
    },
    Failed {
        prefix: Option<Bytes>,
        error: Option<BoxError>,
    },
}

impl<B> ResponseBody<B> {
    /// The handler's own body, untouched.
    pub fn inner(body: B) -> Self {
        Self {
            kind: Kind::Inner {
                body: Box::pin(body),
            },
        }
    }

    /// A body of `data`.
    pub fn full(data: Bytes) -> Self {
        Self {
            kind: Kind::Full {
                data: Some(data),
                trailers: None,
            },
        }
    }
}

/// An empty body, as a tower middleware that answers by itself makes one (a timeout).
impl<B> Default for ResponseBody<B> {
    fn default() -> Self {
        Self::full(Bytes::new())
    }
}

impl<B> From<Bytes> for ResponseBody<B> {
    fn from(data: Bytes) -> Self {
        Self::full(data)
    }
}

impl<B> std::fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.kind {
            Kind::Inner { .. } => "inner",
            Kind::Full { .. } => "full",
            Kind::Chained { .. } => "chained",
            Kind::Failed { .. } => "failed",
        };
        f.debug_struct("ResponseBody").field("kind", &kind).finish()
    }
}

impl<B> Body for ResponseBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        // Every field that is polled is boxed, so `Self` is `Unpin`.
        let this = self.get_mut();
        match &mut this.kind {
            Kind::Inner { body } => body.as_mut().poll_frame(cx).map_err(Into::into),
            Kind::Full { data, trailers } => {
                if let Some(data) = data.take().filter(|data| !data.is_empty()) {
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Poll::Ready(
                    trailers
                        .take()
                        .map(|trailers| Ok(Frame::trailers(trailers))),
                )
            }
            Kind::Chained { prefix, rest } => {
                if let Some(prefix) = prefix.take().filter(|prefix| !prefix.is_empty()) {
                    return Poll::Ready(Some(Ok(Frame::data(prefix))));
                }
                rest.as_mut().poll_frame(cx).map_err(Into::into)
            }
            Kind::Failed { prefix, error } => {
                if let Some(prefix) = prefix.take().filter(|prefix| !prefix.is_empty()) {
                    return Poll::Ready(Some(Ok(Frame::data(prefix))));
                }
                Poll::Ready(error.take().map(Err))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Full { data, trailers } => {
                data.as_ref().is_none_or(Bytes::is_empty) && trailers.is_none()
            }
            Kind::Chained { prefix, rest } => {
                prefix.as_ref().is_none_or(Bytes::is_empty) && rest.is_end_stream()
            }
            Kind::Failed { prefix, error } => {
                prefix.as_ref().is_none_or(Bytes::is_empty) && error.is_none()
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        let len = |bytes: &Option<Bytes>| bytes.as_ref().map_or(0, |bytes| bytes.len() as u64);
        match &self.kind {
            Kind::Inner { body } => body.size_hint(),
            Kind::Full { data, .. } => SizeHint::with_exact(len(data)),
            Kind::Chained { prefix, rest } => {
                let rest = rest.size_hint();
                let mut hint = SizeHint::new();
                hint.set_lower(rest.lower() + len(prefix));
                if let Some(upper) = rest.upper() {
                    hint.set_upper(upper + len(prefix));
                }
                hint
            }
            Kind::Failed { prefix, .. } => {
                let mut hint = SizeHint::new();
                hint.set_upper(len(prefix));
                hint
            }
        }
    }
}

#[cfg(test)]
mod tests {
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
}
