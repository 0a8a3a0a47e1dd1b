//! For axum handlers that call the coordinator themselves: the [`IdempotencyKey`]
//! extractor, and [`IntoResponse`] for [`Problem`] and for idem's errors ([`HttpError`]).

use axum::extract::{FromRequestParts, OptionalFromRequestParts};
use axum::response::{IntoResponse, Response};
use http::request::Parts;
use idem::{Error, Key, Options};

use crate::disposition::Disposition;
use crate::header::{BareToken, KeyHeaderError, key_from_headers};
use crate::problem::{Problem, ProblemType, RetryAfter};

/// The request's `Idempotency-Key`, read as the layer reads it (a Structured Field String;
/// see [`header`](crate::header)), for handlers that call the coordinator themselves.
///
/// A missing or refused header is rejected with the same 400 problem the layer answers.
/// `Option<IdempotencyKey>` makes the key optional: `None` when the header is absent, and
/// still a 400 when it is malformed. Bare tokens are refused unless the request carries a
/// [`BareToken`] extension (for a whole router: `.layer(Extension(BareToken::Accept))`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(pub Key);

impl IdempotencyKey {
    /// The key as the client sent it.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl AsRef<str> for IdempotencyKey {
    fn as_ref(&self) -> &str {
        self.0.as_str()
    }
}

fn read(parts: &Parts) -> Result<Option<Key>, Problem> {
    let bare = parts
        .extensions
        .get::<BareToken>()
        .copied()
        .unwrap_or_default();
    key_from_headers(&parts.headers, bare).map_err(|error| Problem::from_key_error(&error))
}

impl<S: Send + Sync> FromRequestParts<S> for IdempotencyKey {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Problem> {
        read(parts)?
            .map(IdempotencyKey)
            .ok_or_else(|| Problem::from_key_error(&KeyHeaderError::Missing))
    }
}

impl<S: Send + Sync> OptionalFromRequestParts<S> for IdempotencyKey {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Option<Self>, Problem> {
        Ok(read(parts)?.map(IdempotencyKey))
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        self.to_response()
    }
}

/// An idem error as an HTTP answer: the action's own error as the action's response, every
/// other case as its [`Problem`], with `Retry-After` where it applies.
///
/// `?` converts an [`idem::Error`] with `Retry-After` computed from the default options;
/// [`HttpError::new`] computes it from the coordinator's own.
///
/// A handler that makes its own idem call may itself sit inside an
/// [`IdempotencyLayer`](crate::IdempotencyLayer) (another key, or the same key under
/// another operation). An idem error that means the inner call did nothing, or that a retry
/// with the same key finds what it did ([`Error::is_retryable`], except the action's own
/// error: 409 in progress, and every 503), is answered with [`Disposition::Release`] in the
/// response's extensions, so the outer layer releases its key: a retry runs the handler
/// again, instead of being answered "retry later" for the outer record's whole retention.
/// The action's own error carries whatever its `IntoResponse` puts there (a failure whose
/// effect is unknown is marked [`Disposition::Unknown`] unless it says otherwise).
///
/// ```
/// use axum::http::StatusCode;
/// use idem::{Coordinator, Fingerprint, MemoryStore};
/// use idem_http::{HttpError, IdempotencyKey};
///
/// async fn charge(
///     coordinator: Coordinator<MemoryStore>,
///     key: IdempotencyKey,
/// ) -> Result<String, HttpError<StatusCode>> {
///     let fingerprint = Fingerprint::builder().field("amount", 100).finish().unwrap();
///     let id = coordinator
///         .execute("payment.charge", &key, fingerprint, |claim| async move {
///             Ok(format!("ch_{}", claim.key()))
///         })
///         .await
///         .map_err(|error| HttpError::new(error, coordinator.options()))?;
///     Ok(id)
/// }
/// ```
#[derive(Debug)]
pub struct HttpError<E> {
    error: Error<E>,
    retry: RetryAfter,
}

impl<E> HttpError<E> {
    /// `error`, with `Retry-After` computed from `options` ([`RetryAfter`]).
    pub fn new(error: Error<E>, options: &Options) -> Self {
        Self {
            error,
            retry: RetryAfter::from_options(options),
        }
    }

    /// The idem error.
    pub fn into_inner(self) -> Error<E> {
        self.error
    }

    /// The problem this error is answered with; `None` for the action's own error.
    pub fn problem(&self) -> Option<Problem> {
        Problem::from_error_with(&self.error, self.retry)
    }
}

impl<E> From<Error<E>> for HttpError<E> {
    fn from(error: Error<E>) -> Self {
        Self::new(error, &Options::default())
    }
}

impl<E: IntoResponse> IntoResponse for HttpError<E> {
    fn into_response(self) -> Response {
        if let Some(problem) = self.problem() {
            return problem.into_response();
        }
        match self.error {
            Error::Action(error) => error.into_response(),
            // The action failed with its effect unknown, and its key says so: an outer layer
            // must not release its own key for it either (rule 11), whatever the status.
            Error::ActionUnknown(error) => {
                let mut response = error.into_response();
                if response.extensions().get::<Disposition>().is_none() {
                    response.extensions_mut().insert(Disposition::Unknown);
                }
                response
            }
            // `problem` is `None` only for the action's own error.
            _ => Problem::new(ProblemType::Internal, "An internal error.").into_response(),
        }
    }
}
