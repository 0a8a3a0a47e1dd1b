//! [`ResponseBody`]: the body of every response through the layer, the handler's own,
//! one held in memory, or one read in part and streamed on.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use idem::BoxError;

/// The body of every response that passes through the layer: the handler's own body
/// untouched (methods the layer does not cover, responses it does not record), a body held
/// in memory (recorded, replayed, or a problem), or a body read in part and streamed on.
pub struct ResponseBody<B> {
    pub(super) kind: Kind<B>,
}

pub(super) enum Kind<B> {
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
