//! [`Disposition`]: what the layer does with the response of a request it ran, decided by
//! what the handler said, never guessed from a status that something else may have made.
//!
//! The layer sees only what comes out of the service it wraps, and that service may be more
//! than the handler: a timeout that cut the handler off answers 408, 503 or 504; a panic
//! catcher turns a panic after the charge into a 500; an authentication layer answers 401.
//! A rule that released every 5xx would give the key back after such a response, and the
//! retry would charge again (MODEL.md, "HTTP (idem-http)", the release rule). So the layer
//! releases only what it knows did nothing:
//!
//! - a response that carries [`Disposition::Release`] in its extensions (the handler, or
//!   idem's own [`HttpError`](crate::HttpError) for an inner call that ran nothing, said
//!   so);
//! - `401`, `407` and `429`: refusals at the door (credentials, a proxy's credentials, a
//!   rate limit), made before any handler ran.
//!
//! Every other response is recorded, except a server error or a `408` that the handler did
//! not mark: whoever made it (the handler, a timeout, a panic catcher), its effect is
//! unknown, so the key is recorded as "outcome unknown", as a panic is (rule 11), and every
//! retry is answered 500 [`OutcomeUnknown`](crate::ProblemType::OutcomeUnknown) instead of a
//! second effect. In a transaction the layer owns, such a response rolls the handler's
//! writes back, so nothing happened and the key is released.

use http::StatusCode;
use http::response::Parts;

/// What the layer does with a response: record it, release the key, or record the outcome
/// as unknown.
///
/// A handler says what its response means by putting a `Disposition` in the response's
/// extensions; with axum, a `Disposition` is a response part:
///
/// ```
/// use axum::http::StatusCode;
/// use axum::response::IntoResponse;
/// use idem_http::Disposition;
///
/// // The provider refused before charging: nothing happened, a retry may run again.
/// async fn charge() -> impl IntoResponse {
///     (StatusCode::BAD_GATEWAY, Disposition::Release, "the provider is unavailable")
/// }
/// ```
///
/// A response without one is judged by [`Disposition::by_default`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Disposition {
    /// The response is the request's outcome: recorded, and replayed to every identical
    /// request (I8).
    Record,
    /// Nothing happened: the key is released (I5), the response goes to its caller
    /// unchanged, and a retry runs the handler again.
    Release,
    /// Whether the request took effect is unknown: the key is recorded as such and never
    /// released (rule 11); the response goes to its caller unchanged, and every identical
    /// request gets 500 [`OutcomeUnknown`](crate::ProblemType::OutcomeUnknown). In a
    /// transaction the layer owns, the writes roll back and the key is released instead.
    Unknown,
}

impl Disposition {
    /// The disposition of a response: the one its extensions carry, else by its status.
    /// `401`, `407` and `429` are released; a server error and `408` are [`Unknown`]; every
    /// other status (2xx, 3xx and the other 4xx, a declined card's `402` included) is
    /// recorded.
    ///
    /// [`Unknown`]: Disposition::Unknown
    pub fn by_default(response: &Parts) -> Disposition {
        if let Some(marked) = response.extensions.get::<Disposition>() {
            return *marked;
        }
        Disposition::of_status(response.status)
    }

    /// The disposition of an unmarked response with this status (see
    /// [`by_default`](Self::by_default)).
    pub fn of_status(status: StatusCode) -> Disposition {
        match status {
            StatusCode::UNAUTHORIZED
            | StatusCode::PROXY_AUTHENTICATION_REQUIRED
            | StatusCode::TOO_MANY_REQUESTS => Disposition::Release,
            StatusCode::REQUEST_TIMEOUT => Disposition::Unknown,
            status if status.is_server_error() => Disposition::Unknown,
            _ => Disposition::Record,
        }
    }
}

#[cfg(feature = "axum")]
impl axum::response::IntoResponseParts for Disposition {
    type Error = std::convert::Infallible;

    fn into_response_parts(
        self,
        mut parts: axum::response::ResponseParts,
    ) -> Result<axum::response::ResponseParts, Self::Error> {
        parts.extensions_mut().insert(self);
        Ok(parts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(status: StatusCode, marked: Option<Disposition>) -> Parts {
        let mut response = http::Response::builder().status(status).body(()).unwrap();
        if let Some(marked) = marked {
            response.extensions_mut().insert(marked);
        }
        response.into_parts().0
    }

    #[test]
    fn unmarked_responses_are_judged_by_status() {
        for (status, expected) in [
            (StatusCode::OK, Disposition::Record),
            (StatusCode::CREATED, Disposition::Record),
            (StatusCode::SEE_OTHER, Disposition::Record),
            (StatusCode::BAD_REQUEST, Disposition::Record),
            (StatusCode::PAYMENT_REQUIRED, Disposition::Record),
            (StatusCode::CONFLICT, Disposition::Record),
            (StatusCode::UNPROCESSABLE_ENTITY, Disposition::Record),
            (StatusCode::UNAUTHORIZED, Disposition::Release),
            (
                StatusCode::PROXY_AUTHENTICATION_REQUIRED,
                Disposition::Release,
            ),
            (StatusCode::TOO_MANY_REQUESTS, Disposition::Release),
            (StatusCode::REQUEST_TIMEOUT, Disposition::Unknown),
            (StatusCode::INTERNAL_SERVER_ERROR, Disposition::Unknown),
            (StatusCode::BAD_GATEWAY, Disposition::Unknown),
            (StatusCode::SERVICE_UNAVAILABLE, Disposition::Unknown),
            (StatusCode::GATEWAY_TIMEOUT, Disposition::Unknown),
        ] {
            assert_eq!(
                Disposition::by_default(&parts(status, None)),
                expected,
                "{status}"
            );
        }
    }

    #[test]
    fn a_mark_overrides_the_status() {
        assert_eq!(
            Disposition::by_default(&parts(
                StatusCode::SERVICE_UNAVAILABLE,
                Some(Disposition::Release)
            )),
            Disposition::Release
        );
        assert_eq!(
            Disposition::by_default(&parts(
                StatusCode::INTERNAL_SERVER_ERROR,
                Some(Disposition::Record)
            )),
            Disposition::Record
        );
        assert_eq!(
            Disposition::by_default(&parts(StatusCode::OK, Some(Disposition::Unknown))),
            Disposition::Unknown
        );
        assert_eq!(
            Disposition::by_default(&parts(
                StatusCode::TOO_MANY_REQUESTS,
                Some(Disposition::Record)
            )),
            Disposition::Record
        );
    }
}
