//! [`IdempotencyLayer`]: a tower layer that runs a request's handler once per
//! `Idempotency-Key`, and answers every retry with the first response.
//!
//! Here are the layer, its settings and the configuration it shares with the services it
//! makes; `builder` holds [`IdempotencyLayerBuilder`], `service` the [`Idempotency`]
//! service that runs a covered request through idem and answers it, and `request` what is
//! read from a request (its operation name, its body within the limit, its fingerprint).

mod builder;
mod request;
mod service;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use http::Method;
use http::header::{self, HeaderName};
use http::request::Parts;
use http_body_util::{Either, Full};
use idem::{BoxError, Coordinator, Fingerprint, Operation, OperationError, Store};
use thiserror::Error;
use tower::Layer;

use crate::disposition::Disposition;
use crate::header::BareToken;
use crate::problem::RetryAfter;
use crate::response::ResponseCodec;
use crate::transaction::Loan;

pub use builder::IdempotencyLayerBuilder;
pub use service::Idempotency;

/// The body the wrapped service receives: the client's own, untouched, on requests the
/// layer does not cover, or the buffered bytes on those it does.
pub type RequestBody<B> = Either<B, Full<Bytes>>;

/// The headers a replay carries by default, when the first response had them.
pub const DEFAULT_STORED_HEADERS: [HeaderName; 9] = [
    header::CONTENT_TYPE,
    header::CONTENT_ENCODING,
    header::CONTENT_LANGUAGE,
    header::CONTENT_LOCATION,
    header::LOCATION,
    header::ETAG,
    header::LAST_MODIFIED,
    header::LINK,
    header::CACHE_CONTROL,
];

/// Headers that are never stored: hop-by-hop headers (RFC 9110 section 7.6.1), and those
/// that describe one message rather than the answer (`Date`, `Content-Length`, which is the
/// replayed body's own, `Set-Cookie`, which would hand one response's session to every
/// retry).
pub const NEVER_STORED: [HeaderName; 12] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    HeaderName::from_static("proxy-connection"),
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::DATE,
    header::CONTENT_LENGTH,
    header::SET_COOKIE,
];

/// `Idempotent-Replayed`, the header a replayed response carries, set to `true`.
pub const IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

/// The longest operation name, and the longest that can still be scoped by tenant (the
/// scope adds 35 bytes).
const MAX_OPERATION_LEN: usize = 100;
const SCOPABLE: usize = MAX_OPERATION_LEN - 35;

/// The request body limit by default: 1 MiB.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 1024 * 1024;

type TenantFn =
    dyn Fn(&Parts, &Operation) -> Option<Result<Operation, OperationError>> + Send + Sync;
type FingerprintFn = dyn Fn(&Parts, &Bytes) -> Result<Fingerprint, String> + Send + Sync;
type DispositionFn = dyn Fn(&http::response::Parts) -> Disposition + Send + Sync;
/// Begins a request's transaction, for a layer that owns it.
type BeginFn =
    dyn Fn() -> Pin<Box<dyn Future<Output = Result<Box<dyn Loan>, BoxError>> + Send>> + Send + Sync;

/// How a request's fingerprint is made.
#[derive(Clone)]
enum Fingerprinting {
    /// Method, path and query, and the body's bytes.
    Request,
    /// Method, path and query, and the named fields of the JSON body.
    JsonFields(Arc<[String]>),
    /// The service's own.
    Custom(Arc<FingerprintFn>),
}

/// How a request's operation is named.
#[derive(Clone)]
enum Naming {
    /// From the method and the route template (axum's `MatchedPath`), or the path.
    Route,
    /// One name for every request through the layer.
    Fixed(Operation),
}

/// Why a layer's configuration was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The operation name is not a valid idem operation, or is too long to be scoped by
    /// tenant (65 bytes at most with [`IdempotencyLayerBuilder::tenant`]).
    #[error("invalid operation name: {0}")]
    InvalidOperation(#[from] OperationError),
    /// A header that must never be replayed was put on the allow-list.
    #[error("the header {0} is never stored: it is hop-by-hop or belongs to one message")]
    HeaderNeverStored(HeaderName),
    /// A stored header's name is over 255 bytes.
    #[error("the header name {0} is over 255 bytes")]
    HeaderNameTooLong(HeaderName),
    /// The replay header would be stored with the response.
    #[error("the replay header {0} cannot also be a stored header")]
    ReplayHeaderStored(HeaderName),
    /// The layer owns the request's transaction, but a request may come without a key:
    /// a transaction commits only with a record, so every covered request must have one.
    #[error("a layer that owns the request's transaction requires the key")]
    TransactionWithoutKey,
}

/// The configuration shared by a layer and the services it makes.
struct Config<S> {
    coordinator: Coordinator<S>,
    methods: Vec<Method>,
    key_required: bool,
    bare: BareToken,
    naming: Naming,
    tenant: Option<Arc<TenantFn>>,
    fingerprint: Fingerprinting,
    max_request_bytes: usize,
    codec: ResponseCodec,
    replay_header: HeaderName,
    disposition: Arc<DispositionFn>,
    retry: RetryAfter,
    /// Set when the layer owns each covered request's transaction.
    begin: Option<Arc<BeginFn>>,
}

/// A tower [`Layer`] that makes the requests it covers safe to retry under an
/// `Idempotency-Key`; see the [crate docs](crate) for what it does, and
/// [`IdempotencyLayer::builder`] for every setting.
///
/// Cloning is cheap. A layer covers every route it wraps with the same settings; give a
/// route its own settings (its operation name, fingerprint fields, what is released) with a
/// layer of its own.
pub struct IdempotencyLayer<S> {
    config: Arc<Config<S>>,
}

impl<S> Clone for IdempotencyLayer<S> {
    fn clone(&self) -> Self {
        Self {
            config: Arc::clone(&self.config),
        }
    }
}

impl<S> fmt::Debug for IdempotencyLayer<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.config.fmt(f)
    }
}

impl<S> fmt::Debug for Config<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdempotencyLayer")
            .field("methods", &self.methods)
            .field("key_required", &self.key_required)
            .field("bare_token", &self.bare)
            .field(
                "operation",
                &match &self.naming {
                    Naming::Route => "from the route",
                    Naming::Fixed(operation) => operation.as_str(),
                },
            )
            .field("tenant", &self.tenant.is_some())
            .field(
                "fingerprint",
                &match &self.fingerprint {
                    Fingerprinting::Request => "method, target and body".to_owned(),
                    Fingerprinting::JsonFields(fields) => format!("JSON fields {fields:?}"),
                    Fingerprinting::Custom(_) => "the service's own".to_owned(),
                },
            )
            .field("max_request_bytes", &self.max_request_bytes)
            .field("codec", &self.codec)
            .field("replay_header", &self.replay_header)
            .field("retry_after", &self.retry)
            .field("in_transaction", &self.begin.is_some())
            .finish_non_exhaustive()
    }
}

impl<S: Store> IdempotencyLayer<S> {
    /// A layer with every default: see [`IdempotencyLayer::builder`].
    pub fn new(coordinator: Coordinator<S>) -> Self {
        Self {
            config: Arc::new(IdempotencyLayerBuilder::new(coordinator).config()),
        }
    }

    /// Starts from the defaults:
    ///
    /// - methods `POST` and `PATCH`; every other request passes through untouched;
    /// - the key required (400 [`KeyMissing`](crate::ProblemType::KeyMissing) without it), and
    ///   bare tokens taken verbatim ([`BareToken`]);
    /// - the operation named from the method and the route template (axum's
    ///   `MatchedPath`; the request path without axum), no tenant scope;
    /// - the fingerprint made of the method, the path and query, and the body's bytes;
    /// - request bodies up to 1 MiB (413 over it);
    /// - responses stored with [`DEFAULT_STORED_HEADERS`] and replayed with
    ///   `Idempotent-Replayed: true`;
    /// - each response's fate decided by [`Disposition::by_default`]: what the handler
    ///   marked, else recorded, except `401`, `407` and `429` (released) and a server error
    ///   or `408` (outcome unknown).
    pub fn builder(coordinator: Coordinator<S>) -> IdempotencyLayerBuilder<S> {
        IdempotencyLayerBuilder::new(coordinator)
    }
}

#[cfg(feature = "openapi")]
impl<S> IdempotencyLayer<S> {
    /// Its description in an OpenAPI document: [`IdempotencyDoc::for_layer`](crate::openapi::IdempotencyDoc::for_layer).
    pub(crate) fn describe(&self) -> crate::openapi::IdempotencyDoc {
        let config = &self.config;
        crate::openapi::IdempotencyDoc::new()
            .methods(config.methods.iter().cloned())
            .require_key(config.key_required)
            .bare_token(config.bare)
            .tenant_scoped(config.tenant.is_some())
            .replay_header(config.replay_header.clone())
            .retry_after(config.retry)
    }
}

impl<S, Svc> Layer<Svc> for IdempotencyLayer<S> {
    type Service = Idempotency<S, Svc>;

    fn layer(&self, inner: Svc) -> Self::Service {
        Idempotency {
            config: Arc::clone(&self.config),
            inner,
        }
    }
}
