//! [`Idempotency`], the service a layer makes: a covered request runs through idem under
//! its key, the response's [`Disposition`] decides what is recorded, and the answer (the
//! handler's response, a replay, a released response or a problem) is turned into the
//! response, counted and logged.

use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::FutureExt;
use http::header::HeaderValue;
use http::{Request, Response};
use http_body::Body;
use http_body_util::{Either, Full};
use idem::{Answer, BoxError, Ending, Error, InFlightPolicy, Key, Provenance, Store};
use tower::Service;

use super::{Config, DispositionFn, RequestBody};
use crate::claimed::Claimed;
use crate::disposition::Disposition;
use crate::header::{KeyHeaderError, key_from_headers};
use crate::problem::{Problem, ProblemType};
use crate::response::{Captured, ResponseBody, ResponseCodec};
use crate::telemetry::{Event, Route};

/// The service an [`IdempotencyLayer`](super::IdempotencyLayer) makes around `Svc`.
pub struct Idempotency<S, Svc> {
    pub(super) config: Arc<Config<S>>,
    pub(super) inner: Svc,
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
    /// A response that is not recorded: released ([`Disposition::Release`], or any
    /// response in a transaction the layer rolled back) or of unknown outcome
    /// ([`Disposition::Unknown`]); which is told by the call's ending.
    Unrecorded(Response<B>),
    /// The service failed without a response.
    Service(E),
    /// The request's transaction could not be begun: the handler never ran.
    Begin(BoxError),
    /// The handler kept the request's transaction past its response: nothing committed.
    TransactionKept,
}

/// Calls the handler (the inner service, made ready) and turns its response into the
/// call's ending by its [`Disposition`]; a recorded response is read up to what the store
/// keeps of it: `limit` (the coordinator's `max_body_bytes`) less what `codec` stores of its
/// head.
async fn respond<B, E>(
    call: impl Future<Output = Result<Response<B>, E>>,
    disposition: &DispositionFn,
    codec: &ResponseCodec,
    limit: usize,
) -> Ending<Captured<B>, Failure<B, E>>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let response = match call.await {
        Ok(response) => response,
        // No response: the handler may have been cut off mid-effect.
        Err(error) => return Ending::Unknown(Failure::Service(error)),
    };
    let (parts, body) = response.into_parts();
    let verdict = disposition(&parts);
    let response = Response::from_parts(parts, body);
    match verdict {
        Disposition::Record => Ending::Succeeded(codec.capture(response, limit).await),
        Disposition::Release => Ending::Failed(Failure::Unrecorded(response)),
        Disposition::Unknown => Ending::Unknown(Failure::Unrecorded(response)),
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// What a call through idem answers.
type CallAnswer<B, E> = Result<Answer<Captured<B>>, Error<Failure<B, E>>>;

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
        if !self.config.methods.contains(request.method()) {
            // The service that was polled ready serves this request; a clone takes its place.
            let clone = self.inner.clone();
            let mut inner = std::mem::replace(&mut self.inner, clone);
            let response = inner.call(request.map(Either::Left));
            return Box::pin(async move { Ok(response.await?.map(ResponseBody::inner)) });
        }
        // A covered request may wait for its key, or be answered from the record without
        // the handler: it takes a clone, made ready only once the handler is to run, so a
        // waiter or a replay never holds the inner service's capacity (a concurrency
        // limit's permit, a buffer's slot). The service polled ready stays for the next
        // request.
        Box::pin(Arc::clone(&self.config).handle(self.inner.clone(), request))
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
                std::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
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
        // The operation is valid already (named here, or scoped by tenant with a character
        // no plain name may hold): it is not validated again as a string.
        let handle = self
            .coordinator
            .operation_of::<Captured<ResB>, Failure<ResB, Svc::Error>, _>(
                operation,
                self.codec.clone(),
            );
        let disposition = Arc::clone(&self.disposition);
        let codec = self.codec.clone();
        let limit = self.coordinator.options().max_body_bytes();
        // Detached: the handler runs to its end and is recorded even if this future is
        // dropped (the client hung up, a timeout outside the layer fired): it then moves to a
        // task of its own.
        let call: Pin<Box<dyn Future<Output = CallAnswer<ResB, Svc::Error>> + Send + '_>> =
            match &self.begin {
                None => Box::pin(handle.execute_with_ending(
                    key.as_str(),
                    fingerprint,
                    move |claim| async move {
                        // Not ready is a failure before the request was handed over: nothing ran.
                        if let Err(error) = std::future::poll_fn(|cx| inner.poll_ready(cx)).await {
                            return Ending::Failed(Failure::Service(error));
                        }
                        let mut request = request;
                        request.extensions_mut().insert(Claimed(claim));
                        respond(inner.call(request), &*disposition, &codec, limit).await
                    },
                )),
                Some(begin) => {
                    let (begin, route, logged) =
                        (Arc::clone(begin), route.to_string(), key.clone());
                    Box::pin(handle.execute_in_transaction_with_ending(
                        key.as_str(),
                        fingerprint,
                        move |claim| async move {
                            if let Err(error) =
                                std::future::poll_fn(|cx| inner.poll_ready(cx)).await
                            {
                                return Ending::Failed(Failure::Service(error));
                            }
                            let mut request = request;
                            request.extensions_mut().insert(Claimed(claim));
                            let loan = match begin().await {
                                Ok(loan) => loan,
                                Err(error) => return Ending::Failed(Failure::Begin(error)),
                            };
                            loan.lend(request.extensions_mut());
                            let ending =
                                respond(inner.call(request), &*disposition, &codec, limit).await;
                            // The response is read: the transaction must be back in its slot.
                            let transaction = loan.take_back();
                            match (ending, transaction) {
                                (Ending::Succeeded(captured), Some(transaction)) => {
                                    Ending::Succeeded((captured, transaction))
                                }
                                (Ending::Succeeded(_), None) => {
                                    tracing::error!(
                                        %route,
                                        key = %logged,
                                        "the handler kept the request's transaction past its \
                                         response (moved into a task?): nothing is committed, \
                                         the key is released, and the transaction rolls back \
                                         when its holder drops it"
                                    );
                                    Ending::Failed(Failure::TransactionKept)
                                }
                                // Dropped with the ending: the writes roll back, the key is
                                // released (a transactional `Unknown` is released too).
                                (Ending::Failed(failure), _) => Ending::Failed(failure),
                                (Ending::Unknown(failure), _) => Ending::Unknown(failure),
                            }
                        },
                    ))
                }
            };
        let answer = match AssertUnwindSafe(call).catch_unwind().await {
            Ok(answer) => answer,
            Err(_) if self.begin.is_some() => {
                // In the layer's transaction a panic takes the writes with it: nothing was
                // committed, and the key was released (T1).
                tracing::error!(%route, %key, "the handler panicked; its writes were rolled back and the key released");
                route.count(Event::Released);
                let problem = Problem::new(
                    ProblemType::Internal,
                    "The request ended abnormally; nothing of it was committed, so a retry \
                     with the same key processes it again.",
                );
                return Ok(self.refuse(&route, &problem));
            }
            // The handler panicked: the record says "outcome unknown" (rule 11), and this
            // caller is told so too, instead of a connection dropped mid-response.
            Err(_) => {
                tracing::error!(%route, %key, "the handler panicked; its outcome is recorded as unknown");
                route.count(Event::Unknown);
                let problem = Problem::new(
                    ProblemType::OutcomeUnknown,
                    "The request ended abnormally, so whether it took effect is unknown; it is \
                     not processed again under this key.",
                );
                return Ok(self.refuse(&route, &problem));
            }
        };
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
            Err(Error::Action(Failure::Unrecorded(response))) => {
                route.count(Event::Released);
                tracing::debug!(%route, %key, status = %response.status(), "released: not recorded, a retry runs again");
                Ok(response.map(ResponseBody::inner))
            }
            Err(Error::Action(Failure::Service(error))) => {
                route.count(Event::Released);
                tracing::debug!(%route, %key, "the inner service failed before anything was recorded: released");
                Err(error)
            }
            Err(
                Error::Action(Failure::Begin(error)) | Error::ActionUnknown(Failure::Begin(error)),
            ) => {
                tracing::warn!(%route, %key, %error, "the request's transaction could not be begun: released, nothing ran");
                let problem = Problem::new(
                    ProblemType::StoreUnavailable,
                    "The database could not begin the request's transaction, so the request was \
                     not processed; retry later with the same key.",
                )
                .with_retry_after(self.retry.unavailable);
                Ok(self.refuse(route, &problem))
            }
            Err(
                Error::Action(Failure::TransactionKept)
                | Error::ActionUnknown(Failure::TransactionKept),
            ) => {
                let problem = Problem::new(
                    ProblemType::Internal,
                    "The handler kept the request's transaction past its response, so nothing \
                     was committed; a retry with the same key processes the request again.",
                );
                Ok(self.refuse(route, &problem))
            }
            Err(Error::ActionUnknown(Failure::Unrecorded(response))) => {
                route.count(Event::Unknown);
                tracing::warn!(
                    %route,
                    %key,
                    status = %response.status(),
                    "a response the handler did not mark (a server error or 408, maybe made by a \
                     timeout or a panic catcher): its outcome is recorded as unknown, never released"
                );
                Ok(response.map(ResponseBody::inner))
            }
            Err(Error::ActionUnknown(Failure::Service(error))) => {
                route.count(Event::Unknown);
                tracing::warn!(
                    %route,
                    %key,
                    "the inner service failed without a response: its outcome is recorded as unknown"
                );
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
}

#[cfg(test)]
mod tests {
    use std::task::{Context, Poll, Waker};

    use bytes::Bytes;
    use http::{Request, Response};
    use http_body_util::Full;
    use idem::{Coordinator, MemoryStore, Options};
    use tower::{Layer, Service};

    use crate::IdempotencyLayer;

    /// A service that is never ready: it says it is busy, or that it has failed.
    #[derive(Debug, Clone)]
    struct Unready {
        failed: bool,
    }

    impl<B> Service<Request<B>> for Unready {
        type Response = Response<Full<Bytes>>;
        type Error = &'static str;
        type Future = std::future::Ready<Result<Self::Response, Self::Error>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            if self.failed {
                Poll::Ready(Err("the handler failed"))
            } else {
                Poll::Pending
            }
        }

        fn call(&mut self, _: Request<B>) -> Self::Future {
            std::future::ready(Ok(Response::new(Full::new(Bytes::new()))))
        }
    }

    /// The layer is as ready as the service it wraps: a busy service's backpressure (a
    /// concurrency limit, a load shedder) reaches the caller, and so does its failure, rather
    /// than a request being taken that the service cannot serve.
    #[test]
    fn it_is_ready_when_the_service_it_wraps_is() {
        let layer = IdempotencyLayer::new(Coordinator::new(MemoryStore::new(), Options::default()));
        let mut cx = Context::from_waker(Waker::noop());
        for (failed, expected) in [
            (false, Poll::Pending),
            (true, Poll::Ready(Err("the handler failed"))),
        ] {
            let mut service = layer.layer(Unready { failed });
            let ready = Service::<Request<Full<Bytes>>>::poll_ready(&mut service, &mut cx);
            assert_eq!(ready, expected);
        }
    }

    /// What an operator's log shows of the service: its type, the layer's settings and the
    /// service it wraps.
    #[test]
    fn its_debug_form_names_the_layer_settings_and_the_inner_service() {
        let coordinator = Coordinator::new(MemoryStore::new(), Options::default());
        // Any value with a `Debug` form stands for the inner service.
        let service = IdempotencyLayer::new(coordinator).layer("the charges handler");
        let shown = format!("{service:?}");
        assert!(shown.starts_with("Idempotency {"), "{shown}");
        assert!(shown.contains("config: IdempotencyLayer {"), "{shown}");
        assert!(shown.contains("key_required: true"), "{shown}");
        assert!(shown.contains(r#"inner: "the charges handler""#), "{shown}");
    }
}
