//! Deliberately broken stand-ins for the layer, kept to show that the checks catch them.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use bytes::Bytes;
use http::response::Parts;
use http_body_util::BodyExt;
use tower::{Layer, Service};

/// A result cache: it looks the key up, else runs the handler in the request's own future
/// and stores the whole response (every header) when it ends, keyed by the key alone.
/// Sequential retries of one request replay; a retry during the first request, or after
/// the first was dropped, charges again; another request under a used key gets the first's
/// answer; with `cache_failures`, a 5xx is replayed for ever.
#[derive(Debug, Clone, Default)]
pub struct ResultCache {
    stored: Arc<Mutex<HashMap<String, (Parts, Bytes)>>>,
    cache_failures: bool,
}

impl ResultCache {
    /// The same cache, storing 5xx answers too.
    pub fn caching_failures() -> Self {
        Self {
            cache_failures: true,
            ..Self::default()
        }
    }
}

impl<S> Layer<S> for ResultCache {
    type Service = Cached<S>;

    fn layer(&self, inner: S) -> Cached<S> {
        Cached {
            cache: self.clone(),
            inner,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Cached<S> {
    cache: ResultCache,
    inner: S,
}

impl<S> Service<Request> for Cached<S>
where
    S: Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let key = request
            .headers()
            .get("idempotency-key")
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        let cache = self.cache.clone();
        let mut inner = self.inner.clone();
        Box::pin(async move {
            if let Some(key) = &key
                && let Some((parts, body)) = cache.stored.lock().unwrap().get(key).cloned()
            {
                return Ok(Response::from_parts(parts, Body::from(body)));
            }
            let response = inner.call(request).await?;
            let (parts, body) = response.into_parts();
            let body = body
                .collect()
                .await
                .map(|c| c.to_bytes())
                .unwrap_or_default();
            if let Some(key) = key
                && (cache.cache_failures || !parts.status.is_server_error())
            {
                cache
                    .stored
                    .lock()
                    .unwrap()
                    .entry(key)
                    .or_insert((parts.clone(), body.clone()));
            }
            Ok(Response::from_parts(parts, Body::from(body)))
        })
    }
}
