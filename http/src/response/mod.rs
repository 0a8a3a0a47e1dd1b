//! Responses as the layer holds, stores and replays them.
//!
//! A handler's response is read into a [`Captured`] inside the detached call (so a client
//! that hangs up never stops the reading either), up to what the store keeps: the core's
//! limit on stored bytes (`Options::max_body_bytes`) less what the status and the stored
//! headers take ([`ResponseCodec::capture`]). A body within that is stored; a body over it
//! reaches its caller whole, is not stored (rule 9), and a retry is answered 500
//! [`ResponseNotStored`](crate::ProblemType::ResponseNotStored): one edge, known before
//! the body is read. The
//! [`ResponseCodec`] stores it compactly; the first caller gets the captured response
//! itself, every header and extension as the handler made them, and a replay gets the
//! stored status, the allow-listed headers and the body, byte for byte.
//!
//! Here a response is captured; `codec` holds the [`ResponseCodec`] and its stored bytes,
//! and `body` the [`ResponseBody`] every response through the layer carries.

mod body;
mod codec;
#[cfg(test)]
mod tests;

use std::pin::Pin;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, Response};
use http_body::Body;
use http_body_util::BodyExt;
use idem::BoxError;

use body::Kind;
pub use body::ResponseBody;
pub(crate) use codec::ResponseCodec;

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

impl ResponseCodec {
    /// Reads `response`'s body into a [`Captured`], within what the store keeps of it:
    /// `max_stored` (the coordinator's `max_body_bytes`, which bounds the stored bytes) less
    /// the [`overhead`](ResponseCodec::overhead) of its status and stored headers. A body
    /// within that is stored whole; a longer one is not stored, and is still sent whole to
    /// its caller.
    pub(crate) async fn capture<B>(&self, response: Response<B>, max_stored: usize) -> Captured<B>
    where
        B: Body<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        let (head, body) = response.into_parts();
        let limit = max_stored.saturating_sub(self.overhead(&head));
        capture(Response::from_parts(head, body), limit).await
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
