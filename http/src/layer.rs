//! [`IdempotencyLayer`]: a tower layer that runs a request's handler once per
//! `Idempotency-Key`, and answers every retry with the first response.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http::request::Parts;
use http::{Method, Request, Response, StatusCode};
use http_body::Body;
use http_body_util::{BodyExt, Either, Full, LengthLimitError, Limited};
use idem::{
    Answer, BoxError, Coordinator, Error, Fingerprint, InFlightPolicy, Key, Operation,
    OperationError, Provenance, Store,
};
use thiserror::Error;
use tower::{Layer, Service};

use crate::header::{BareToken, KeyHeaderError, key_from_headers};
use crate::problem::{Problem, ProblemType, RetryAfter};
use crate::response::{Captured, ResponseBody, ResponseCodec, capture};
use crate::telemetry::{Event, Route};

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
type ReleaseFn = dyn Fn(StatusCode) -> bool + Send + Sync;

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
    release: Arc<ReleaseFn>,
    retry: RetryAfter,
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
    /// - the key required (400 [`KeyMissing`](ProblemType::KeyMissing) without it), and
    ///   bare tokens refused ([`BareToken`]);
    /// - the operation named from the method and the route template (axum's
    ///   `MatchedPath`; the request path without axum), no tenant scope;
    /// - the fingerprint made of the method, the path and query, and the body's bytes;
    /// - request bodies up to 1 MiB (413 over it);
    /// - responses stored with [`DEFAULT_STORED_HEADERS`] and replayed with
    ///   `Idempotent-Replayed: true`;
    /// - responses recorded unless [`released_by_default`].
    pub fn builder(coordinator: Coordinator<S>) -> IdempotencyLayerBuilder<S> {
        IdempotencyLayerBuilder::new(coordinator)
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

/// Whether a response is released by default rather than recorded: a server error (5xx: a
/// failure, which a retry may cure), `408 Request Timeout` and `429 Too Many Requests`
/// (the request was not processed, and the client is told to try again). Every other
/// status is the request's outcome, recorded and replayed: 2xx, 3xx and the other 4xx, a
/// declined card's `402` included.
pub fn released_by_default(status: StatusCode) -> bool {
    status.is_server_error()
        || status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
}

/// Builds an [`IdempotencyLayer`]; see [`IdempotencyLayer::builder`] for the defaults.
pub struct IdempotencyLayerBuilder<S> {
    coordinator: Coordinator<S>,
    methods: Vec<Method>,
    key_required: bool,
    bare: BareToken,
    operation: Option<String>,
    tenant: Option<Arc<TenantFn>>,
    fingerprint: Fingerprinting,
    max_request_bytes: usize,
    stored_headers: Vec<HeaderName>,
    replay_header: HeaderName,
    release: Arc<ReleaseFn>,
}

impl<S> fmt::Debug for IdempotencyLayerBuilder<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdempotencyLayerBuilder")
            .field("methods", &self.methods)
            .field("operation", &self.operation)
            .field("stored_headers", &self.stored_headers)
            .finish_non_exhaustive()
    }
}

impl<S: Store> IdempotencyLayerBuilder<S> {
    fn new(coordinator: Coordinator<S>) -> Self {
        Self {
            coordinator,
            methods: vec![Method::POST, Method::PATCH],
            key_required: true,
            bare: BareToken::default(),
            operation: None,
            tenant: None,
            fingerprint: Fingerprinting::Request,
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            stored_headers: DEFAULT_STORED_HEADERS.to_vec(),
            replay_header: IDEMPOTENT_REPLAYED,
            release: Arc::new(released_by_default),
        }
    }

    /// The methods the layer covers (default `POST`, `PATCH`); requests with any other
    /// method pass through untouched, whatever headers they carry.
    #[must_use]
    pub fn methods(mut self, methods: impl IntoIterator<Item = Method>) -> Self {
        self.methods = methods.into_iter().collect();
        self
    }

    /// Whether a covered request must carry a key (default `true`). When it need not, a
    /// request without one passes through untouched (and is not protected).
    #[must_use]
    pub fn require_key(mut self, required: bool) -> Self {
        self.key_required = required;
        self
    }

    /// How an unquoted key is treated (default [`BareToken::Refuse`]).
    #[must_use]
    pub fn bare_token(mut self, bare: BareToken) -> Self {
        self.bare = bare;
        self
    }

    /// One operation name for every request through this layer (default: named from the
    /// method and route). Validated by [`build`](Self::build).
    #[must_use]
    pub fn operation(mut self, name: impl Into<String>) -> Self {
        self.operation = Some(name.into());
        self
    }

    /// Scopes keys by the tenant (a user, an account, an API client) that `tenant` reads
    /// from the request, usually from an extension an authentication layer put there: two
    /// tenants' equal keys name two records ([`idem::OperationHandle::for_tenant`]). A
    /// request whose tenant is `None` is refused with 403
    /// [`TenantMissing`](ProblemType::TenantMissing) and nothing runs.
    #[must_use]
    pub fn tenant<F, T>(mut self, tenant: F) -> Self
    where
        F: Fn(&Parts) -> Option<T> + Send + Sync + 'static,
        T: AsRef<[u8]>,
    {
        self.tenant = Some(Arc::new(move |parts: &Parts, operation: &Operation| {
            tenant(parts).map(|tenant| operation.for_tenant(tenant))
        }));
        self
    }

    /// Fingerprints a request by its method, its path and query, and the named fields of
    /// its JSON body (a name starting with `/` is a JSON Pointer, RFC 6901; a missing field
    /// counts as `null`), instead of the body's bytes: two bodies that differ only in the
    /// order of their members, their whitespace or fields not named are the same request. A
    /// body that is not JSON is refused with 400
    /// [`FingerprintUnavailable`](ProblemType::FingerprintUnavailable).
    #[must_use]
    pub fn fingerprint_json_fields<I>(mut self, fields: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        self.fingerprint = Fingerprinting::JsonFields(fields.into_iter().map(Into::into).collect());
        self
    }

    /// Fingerprints a request with the service's own function of its head and body bytes
    /// (build it with [`Fingerprint::builder`]); an `Err` refuses the request with 400
    /// [`FingerprintUnavailable`](ProblemType::FingerprintUnavailable), its text as the
    /// detail.
    #[must_use]
    pub fn fingerprint_with<F>(mut self, fingerprint: F) -> Self
    where
        F: Fn(&Parts, &Bytes) -> Result<Fingerprint, String> + Send + Sync + 'static,
    {
        self.fingerprint = Fingerprinting::Custom(Arc::new(fingerprint));
        self
    }

    /// The largest request body read (default 1 MiB); a larger one is refused with 413
    /// [`BodyTooLarge`](ProblemType::BodyTooLarge) and nothing runs.
    #[must_use]
    pub fn max_request_bytes(mut self, limit: usize) -> Self {
        self.max_request_bytes = limit;
        self
    }

    /// The response headers stored and replayed (default [`DEFAULT_STORED_HEADERS`]); any
    /// other header reaches the first caller only. [`NEVER_STORED`] headers are refused by
    /// [`build`](Self::build).
    #[must_use]
    pub fn stored_headers(mut self, headers: impl IntoIterator<Item = HeaderName>) -> Self {
        self.stored_headers = headers.into_iter().collect();
        self
    }

    /// The header a replay carries, set to `true` (default `Idempotent-Replayed`).
    #[must_use]
    pub fn replay_header(mut self, name: HeaderName) -> Self {
        self.replay_header = name;
        self
    }

    /// Which response statuses are released (not recorded: a retry runs the handler
    /// again) rather than recorded and replayed (default [`released_by_default`]). The
    /// released response still goes to its own caller, unchanged.
    #[must_use]
    pub fn release_when<F>(mut self, release: F) -> Self
    where
        F: Fn(StatusCode) -> bool + Send + Sync + 'static,
    {
        self.release = Arc::new(release);
        self
    }

    /// The layer, or the first setting refused.
    pub fn build(self) -> Result<IdempotencyLayer<S>, ConfigError> {
        for name in &self.stored_headers {
            if NEVER_STORED.contains(name) {
                return Err(ConfigError::HeaderNeverStored(name.clone()));
            }
            if name.as_str().len() > 255 {
                return Err(ConfigError::HeaderNameTooLong(name.clone()));
            }
            if *name == self.replay_header {
                return Err(ConfigError::ReplayHeaderStored(name.clone()));
            }
        }
        if let Some(name) = &self.operation {
            let operation = Operation::new(name)?;
            if self.tenant.is_some() {
                operation.for_tenant("")?;
            }
        }
        Ok(IdempotencyLayer {
            config: Arc::new(self.config()),
        })
    }

    fn config(self) -> Config<S> {
        let naming = match self.operation.as_deref().map(Operation::new) {
            Some(Ok(operation)) => Naming::Fixed(operation),
            _ => Naming::Route,
        };
        let mut stored = self.stored_headers;
        stored.dedup();
        let retry = RetryAfter::from_options(self.coordinator.options());
        Config {
            coordinator: self.coordinator,
            methods: self.methods,
            key_required: self.key_required,
            bare: self.bare,
            naming,
            tenant: self.tenant,
            fingerprint: self.fingerprint,
            max_request_bytes: self.max_request_bytes,
            codec: ResponseCodec::new(Arc::from(stored)),
            replay_header: self.replay_header,
            release: self.release,
            retry,
        }
    }
}

/// The service an [`IdempotencyLayer`] makes around `Svc`.
pub struct Idempotency<S, Svc> {
    config: Arc<Config<S>>,
    inner: Svc,
}

impl<S, Svc: Clone> Clone for Idempotency<S, Svc> {
    fn clone(&self) -> Self {
        Self {
            config: Arc::clone(&self.config),
            inner: self.inner.clone(),
        }
    }
}

impl<S, Svc: fmt::Debug> fmt::Debug for Idempotency<S, Svc> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Idempotency")
            .field("config", &self.config)
            .field("inner", &self.inner)
            .finish()
    }
}

/// Why the action did not produce a response to record.
enum Failure<B, E> {
    /// The handler answered with a status that is released.
    Released(Response<B>),
    /// The service failed without a response.
    Service(E),
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

impl<S, Svc, ReqB, ResB> Service<Request<ReqB>> for Idempotency<S, Svc>
where
    S: Store,
    Svc: Service<Request<RequestBody<ReqB>>, Response = Response<ResB>> + Clone + Send + 'static,
    Svc::Future: Send + 'static,
    Svc::Error: Send + 'static,
    ReqB: Body<Data = Bytes> + Send + 'static,
    ReqB::Error: Into<BoxError>,
    ResB: Body<Data = Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
{
    type Response = Response<ResponseBody<ResB>>;
    type Error = Svc::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqB>) -> Self::Future {
        // The service that was polled ready serves this request; a clone takes its place.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        if !self.config.methods.contains(request.method()) {
            let response = inner.call(request.map(Either::Left));
            return Box::pin(async move { Ok(response.await?.map(ResponseBody::inner)) });
        }
        Box::pin(Arc::clone(&self.config).handle(inner, request))
    }
}

impl<S: Store> Config<S> {
    async fn handle<Svc, ReqB, ResB>(
        self: Arc<Self>,
        mut inner: Svc,
        request: Request<ReqB>,
    ) -> Result<Response<ResponseBody<ResB>>, Svc::Error>
    where
        Svc: Service<Request<RequestBody<ReqB>>, Response = Response<ResB>> + Send + 'static,
        Svc::Future: Send + 'static,
        Svc::Error: Send + 'static,
        ReqB: Body<Data = Bytes> + Send + 'static,
        ReqB::Error: Into<BoxError>,
        ResB: Body<Data = Bytes> + Send + 'static,
        ResB::Error: Into<BoxError>,
    {
        let (parts, body) = request.into_parts();
        let route = Route::of(&parts);
        let key = match key_from_headers(&parts.headers, self.bare) {
            Ok(Some(key)) => key,
            Ok(None) if !self.key_required => {
                let request = Request::from_parts(parts, Either::Left(body));
                return Ok(inner.call(request).await?.map(ResponseBody::inner));
            }
            Ok(None) => {
                return Ok(self.refuse(&route, &Problem::from_key_error(&KeyHeaderError::Missing)));
            }
            Err(error) => return Ok(self.refuse(&route, &Problem::from_key_error(&error))),
        };
        let operation = match self.operation(&parts, &route) {
            Ok(operation) => operation,
            Err(problem) => return Ok(self.refuse(&route, &problem)),
        };
        let bytes = match self.read_body(&parts, body).await {
            Ok(bytes) => bytes,
            Err(problem) => return Ok(self.refuse(&route, &problem)),
        };
        let fingerprint = match self.fingerprint(&parts, &bytes) {
            Ok(fingerprint) => fingerprint,
            Err(problem) => return Ok(self.refuse(&route, &problem)),
        };
        let request = Request::from_parts(parts, Either::Right(Full::new(bytes)));
        let handle = match self
            .coordinator
            .operation_with_codec::<Captured<ResB>, Failure<ResB, Svc::Error>, _>(
                operation.as_str(),
                self.codec.clone(),
            ) {
            Ok(handle) => handle,
            Err(_) => {
                let problem =
                    Problem::new(ProblemType::Internal, "The operation name was refused.");
                return Ok(self.refuse(&route, &problem));
            }
        };
        let release = Arc::clone(&self.release);
        let limit = self.coordinator.options().max_body_bytes();
        // Detached: the handler runs on a task of its own, to its end, and is recorded even
        // if this future is dropped (the client hung up, a timeout fired).
        let answer = handle
            .execute_with_provenance(key.as_str(), fingerprint, move |_claim| async move {
                let response = inner.call(request).await.map_err(Failure::Service)?;
                if release(response.status()) {
                    return Err(Failure::Released(response));
                }
                Ok(capture(response, limit).await)
            })
            .await;
        self.answer(&route, &key, answer)
    }

    /// The response for a call's answer.
    fn answer<ResB, E>(
        &self,
        route: &Route,
        key: &Key,
        answer: Result<Answer<Captured<ResB>>, Error<Failure<ResB, E>>>,
    ) -> Result<Response<ResponseBody<ResB>>, E> {
        let waiting = self.coordinator.options().in_flight() == InFlightPolicy::Wait;
        match answer {
            Ok(Answer {
                value,
                provenance,
                waited,
            }) => {
                if waited {
                    route.count(Event::Waited);
                }
                match provenance {
                    Provenance::Replayed => {
                        route.count(Event::Replayed);
                        let mut response = value.into_response();
                        response
                            .headers_mut()
                            .insert(self.replay_header.clone(), HeaderValue::from_static("true"));
                        return Ok(response);
                    }
                    Provenance::Executed { lease_lost, .. } => {
                        route.count(Event::Executed);
                        if lease_lost {
                            route.count(Event::LeaseLost);
                            tracing::warn!(%route, %key, "the handler ran, but its lease lapsed meanwhile");
                        }
                    }
                    Provenance::ExecutedUnprotected { recording } => {
                        route.count(Event::FailedOpen);
                        tracing::warn!(
                            %route,
                            %key,
                            ?recording,
                            "the handler ran unprotected: the idempotency store is unavailable and the layer fails open"
                        );
                    }
                }
                Ok(value.into_response())
            }
            Err(Error::Action(Failure::Released(response))) => {
                route.count(Event::Released);
                tracing::debug!(%route, %key, status = %response.status(), "released: not recorded, a retry runs again");
                Ok(response.map(ResponseBody::inner))
            }
            Err(Error::Action(Failure::Service(error))) => {
                route.count(Event::Released);
                Err(error)
            }
            Err(error) => {
                match &error {
                    Error::InProgress => {
                        route.count(Event::Conflict);
                        if waiting {
                            route.count(Event::Waited);
                        }
                    }
                    Error::KeyReuse { .. } => route.count(Event::KeyReuse),
                    _ => {}
                }
                let problem = Problem::from_error(&error, self.coordinator.options())
                    .unwrap_or_else(|| Problem::new(ProblemType::Internal, "An internal error."));
                Ok(self.refuse(route, &problem))
            }
        }
    }

    /// A problem response, counted.
    fn refuse<B>(&self, route: &Route, problem: &Problem) -> Response<ResponseBody<B>> {
        route.count(Event::Problem(problem.kind()));
        tracing::debug!(%route, problem = %problem.kind(), "refused");
        problem.to_response()
    }

    /// The request's operation: the fixed name, or one made from the method and route;
    /// scoped by tenant when the service gave a tenant function.
    fn operation(&self, parts: &Parts, route: &Route) -> Result<Operation, Problem> {
        let operation = match &self.naming {
            Naming::Fixed(operation) => operation.clone(),
            Naming::Route => {
                let max = if self.tenant.is_some() {
                    SCOPABLE
                } else {
                    MAX_OPERATION_LEN
                };
                route.operation(max).map_err(|_| {
                    Problem::new(ProblemType::Internal, "The route could not be named.")
                })?
            }
        };
        let Some(tenant) = &self.tenant else {
            return Ok(operation);
        };
        match tenant(parts, &operation) {
            Some(Ok(scoped)) => Ok(scoped),
            Some(Err(_)) => Err(Problem::new(
                ProblemType::Internal,
                "The operation could not be scoped by tenant.",
            )),
            None => Err(Problem::new(
                ProblemType::TenantMissing,
                "The service could not tell which tenant this request is made for, so its key cannot be scoped; nothing was processed.",
            )),
        }
    }

    /// The request body, read to its end within the limit.
    async fn read_body<B>(&self, parts: &Parts, body: B) -> Result<Bytes, Problem>
    where
        B: Body<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        let too_large = || {
            Problem::new(
                ProblemType::BodyTooLarge,
                format!(
                    "The request body is over {} bytes; nothing was processed.",
                    self.max_request_bytes
                ),
            )
        };
        let declared = parts
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.parse::<u64>().ok());
        if declared.is_some_and(|len| len > self.max_request_bytes as u64) {
            return Err(too_large());
        }
        match Limited::new(body, self.max_request_bytes).collect().await {
            Ok(collected) => Ok(collected.to_bytes()),
            Err(error) if error.is::<LengthLimitError>() => Err(too_large()),
            Err(_) => Err(Problem::new(
                ProblemType::BodyUnreadable,
                "The request body could not be read to its end; nothing was processed.",
            )),
        }
    }

    /// The request's fingerprint, as configured.
    fn fingerprint(&self, parts: &Parts, body: &Bytes) -> Result<Fingerprint, Problem> {
        let unavailable =
            |detail: String| Problem::new(ProblemType::FingerprintUnavailable, detail);
        let target = parts
            .uri
            .path_and_query()
            .map_or("/", |target| target.as_str());
        let builder = || {
            Fingerprint::builder()
                .field("method", parts.method.as_str())
                .field("target", target)
        };
        let builder = match &self.fingerprint {
            Fingerprinting::Request => return Ok(request_fingerprint(parts, target, body)),
            Fingerprinting::JsonFields(fields) => {
                let json: serde_json::Value = serde_json::from_slice(body).map_err(|error| {
                    unavailable(format!("The request body is not JSON: {error}."))
                })?;
                let named: serde_json::Map<String, serde_json::Value> = fields
                    .iter()
                    .map(|name| {
                        let value = if name.starts_with('/') {
                            json.pointer(name)
                        } else {
                            json.get(name)
                        };
                        (
                            name.clone(),
                            value.cloned().unwrap_or(serde_json::Value::Null),
                        )
                    })
                    .collect();
                builder().field("fields", named)
            }
            Fingerprinting::Custom(fingerprint) => {
                return fingerprint(parts, body).map_err(unavailable);
            }
        };
        builder
            .finish()
            .map_err(|error| unavailable(format!("The request's fingerprint failed: {error}.")))
    }
}

/// The default fingerprint: a SHA-256 over a label, the method, the path and query, and the
/// body's bytes, each but the body preceded by its length (so no two requests share the
/// input): one pass over the body, no copy of it.
fn request_fingerprint(parts: &Parts, target: &str, body: &[u8]) -> Fingerprint {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    hasher.update(b"idem-http request 1\0");
    for field in [parts.method.as_str(), target] {
        hasher.update((field.len() as u64).to_be_bytes());
        hasher.update(field.as_bytes());
    }
    hasher.update(body);
    Fingerprint::from_bytes(hasher.finalize().into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fingerprint(method: Method, target: &str, body: &[u8]) -> Fingerprint {
        let (parts, ()) = Request::builder()
            .method(method)
            .uri(target)
            .body(())
            .unwrap()
            .into_parts();
        request_fingerprint(&parts, target, body)
    }

    #[test]
    fn the_request_fingerprint_tells_every_part_apart() {
        let base = fingerprint(Method::POST, "/a", b"bc");
        assert_eq!(base, fingerprint(Method::POST, "/a", b"bc"));
        assert_ne!(base, fingerprint(Method::PATCH, "/a", b"bc"));
        assert_ne!(base, fingerprint(Method::POST, "/a?x=1", b"bc"));
        assert_ne!(base, fingerprint(Method::POST, "/a", b"bd"));
        // Moving bytes across a boundary changes it: lengths frame each part.
        assert_ne!(base, fingerprint(Method::POST, "/ab", b"c"));
        assert_ne!(base, fingerprint(Method::POST, "/a", b""));
    }
}
