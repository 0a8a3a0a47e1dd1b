//! For axum handlers that call the coordinator themselves: the [`IdempotencyKey`]
//! extractor, and [`IntoResponse`] for [`Problem`] and for idem's errors ([`HttpError`]).

use std::fmt;

use axum::extract::{FromRequestParts, OptionalFromRequestParts};
use axum::response::{IntoResponse, Response};
use http::request::Parts;
use idem::{Error, Key, Options};

use crate::disposition::Disposition;
use crate::header::{BareToken, KeyHeaderError, key_from_headers};
use crate::problem::{Problem, ProblemType, RetryAfter};

/// The request's `Idempotency-Key`, read as the layer reads it (a Structured Field String,
/// or a bare token; see [`header`](crate::header)), for handlers that call the coordinator
/// themselves.
///
/// A missing or refused header is rejected with the same 400 problem the layer answers.
/// `Option<IdempotencyKey>` makes the key optional: `None` when the header is absent, and
/// still a 400 when it is malformed. A bare token is taken verbatim, as the layer takes it
/// by default ([`BareToken::Accept`]); a request that carries a [`BareToken`] extension is
/// read by it instead (strict for a whole router: `.layer(Extension(BareToken::Refuse))`).
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
/// # Composing with the service's own errors
///
/// `HttpError<E>` is generic over the action's error, and a handler returns
/// `Result<_, HttpError<E>>`: `?` turns idem's error into it, and the action's own `E` is
/// answered as itself (`E: IntoResponse`). There is no newtype to write around idem's
/// error. The service's own error type is the one axum's docs recommend anyway: an enum
/// with `From` for each foreign error (a database's, a provider client's) and one
/// `IntoResponse`. The action returns it, so `?` inside the action converts the foreign
/// error, and `?` after the call converts idem's:
///
/// ```
/// use axum::http::StatusCode;
/// use axum::response::{IntoResponse, Response};
/// use idem::{Coordinator, Fingerprint, MemoryStore};
/// use idem_http::{HttpError, IdempotencyKey};
///
/// /// The service's own error: its answer is its own business.
/// #[derive(Debug)]
/// enum ShopError {
///     OutOfStock,
///     /// A foreign error (here `std::io::Error`, for a `sqlx::Error` alike), which cannot
///     /// implement `IntoResponse` itself.
///     Database(std::io::Error),
/// }
///
/// impl From<std::io::Error> for ShopError {
///     fn from(error: std::io::Error) -> Self {
///         ShopError::Database(error)
///     }
/// }
///
/// impl IntoResponse for ShopError {
///     fn into_response(self) -> Response {
///         match self {
///             ShopError::OutOfStock => (StatusCode::CONFLICT, "out of stock").into_response(),
///             ShopError::Database(_) => StatusCode::SERVICE_UNAVAILABLE.into_response(),
///         }
///     }
/// }
///
/// async fn write_order_row() -> Result<u64, std::io::Error> {
///     Ok(7)
/// }
///
/// async fn order(
///     coordinator: Coordinator<MemoryStore>,
///     key: IdempotencyKey,
/// ) -> Result<(StatusCode, String), HttpError<ShopError>> {
///     let fingerprint = Fingerprint::builder().field("item", "book").finish().unwrap();
///     let id = coordinator
///         .execute("shop.order", &key, fingerprint, |_claim| async move {
///             // `?` turns the foreign error into the service's own.
///             let id = write_order_row().await?;
///             if id == 0 {
///                 return Err(ShopError::OutOfStock);
///             }
///             Ok(format!("order {id}"))
///         })
///         // `?` turns idem's error into `HttpError<ShopError>`.
///         .await?;
///     // Outside the idem call, the service's own error is answered as itself too.
///     write_order_row().await.map_err(|error| HttpError::action(error.into()))?;
///     Ok((StatusCode::CREATED, id))
/// }
/// ```
///
/// A foreign error can also be answered as it is, without a type of the service's, by a
/// closure: [`HttpError::into_response_with`]:
///
/// ```
/// use axum::http::StatusCode;
/// use axum::response::{IntoResponse, Response};
/// use idem::{Coordinator, Fingerprint, MemoryStore};
/// use idem_http::{HttpError, IdempotencyKey};
///
/// async fn order(coordinator: Coordinator<MemoryStore>, key: IdempotencyKey) -> Response {
///     let fingerprint = Fingerprint::builder().field("item", "book").finish().unwrap();
///     let answer = coordinator
///         .execute("shop.order", &key, fingerprint, |_claim| async move {
///             Ok::<_, std::io::Error>("order 7".to_owned())
///         })
///         .await;
///     match answer {
///         Ok(id) => (StatusCode::CREATED, id).into_response(),
///         Err(error) => HttpError::new(error, coordinator.options()).into_response_with(
///             |database: std::io::Error| {
///                 (StatusCode::SERVICE_UNAVAILABLE, database.to_string()).into_response()
///             },
///         ),
///     }
/// }
/// ```
///
/// # What an outer layer is told
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

    /// The service's own error, answered as itself: for `?` on the service's own errors
    /// in a handler that returns `Result<_, HttpError<E>>`, outside the idem call.
    pub fn action(error: E) -> Self {
        Self::from(Error::Action(error))
    }

    /// The idem error.
    pub fn into_inner(self) -> Error<E> {
        self.error
    }

    /// The problem this error is answered with; `None` for the action's own error.
    pub fn problem(&self) -> Option<Problem> {
        Problem::from_error_with(&self.error, self.retry)
    }

    /// The response: the problem, or the action's own error answered by `answer`. Use it
    /// for an action error that does not implement `IntoResponse` (a foreign type such as
    /// `sqlx::Error`); every other case is answered as [`IntoResponse`] answers it.
    pub fn into_response_with(self, answer: impl FnOnce(E) -> Response) -> Response {
        if let Some(problem) = self.problem() {
            return problem.into_response();
        }
        match self.error {
            Error::Action(error) => answer(error),
            // The action failed with its effect unknown, and its key says so: an outer layer
            // must not release its own key for it either (rule 11), whatever the status.
            Error::ActionUnknown(error) => {
                let mut response = answer(error);
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

impl<E> From<Error<E>> for HttpError<E> {
    fn from(error: Error<E>) -> Self {
        Self::new(error, &Options::default())
    }
}

impl<E: IntoResponse> IntoResponse for HttpError<E> {
    fn into_response(self) -> Response {
        self.into_response_with(IntoResponse::into_response)
    }
}

impl<E: fmt::Display> fmt::Display for HttpError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.fmt(f)
    }
}

impl<E: std::error::Error + 'static> std::error::Error for HttpError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}
