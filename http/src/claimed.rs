//! The claim a request runs under, for handlers behind the layer: [`Claimed`].
//!
//! The layer runs the handler as the action of an idem call; the action's
//! [`Claim`](idem::Claim) is put in the request's extensions, so that a handler can pass the
//! call's [`downstream_key`](idem::Claim::downstream_key) on to the provider it calls
//! (MODEL.md `D1`), and its [`fence`](idem::Claim::fence) (`F1`, sent as
//! [`FENCING_TOKEN`](crate::FENCING_TOKEN)), and see whether it still holds its lease
//! before an effect.

use http::Extensions;
use idem::Claim;

/// The [`Claim`] the handler runs under, lent by an [`IdempotencyLayer`](crate::IdempotencyLayer):
/// the request's key, operation (with its tenant scope), lease, the downstream key to send
/// to a provider, which is the same on every retry of the request, whichever process serves it
/// and whether or not the store answered, and the fence of the request's grant, above every
/// earlier grant's of its key.
///
/// With axum it is an extractor (`Claimed(claim): Claimed`), rejected with a 500 problem
/// marked [`Disposition::Release`](crate::Disposition::Release) (the handler did not run)
/// when the request is not under the layer: the route has no layer, or the request is one the
/// layer does not cover (another method, or no key where the key is optional).
/// `Option<Claimed>` is `None` then instead, for handlers that also serve unprotected
/// requests. Without axum, take it with [`Claimed::from_extensions`].
#[derive(Debug, Clone)]
pub struct Claimed(pub Claim);

impl Claimed {
    /// The claim in the request's extensions, or why there is none.
    pub fn from_extensions(extensions: &Extensions) -> Result<Self, ClaimUnavailable> {
        extensions.get::<Claimed>().cloned().ok_or(ClaimUnavailable)
    }
}

impl std::ops::Deref for Claimed {
    type Target = Claim;

    fn deref(&self) -> &Claim {
        &self.0
    }
}

/// The request carries no claim: it is not under an idempotency layer, or not one the layer
/// covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "this request runs under no idempotency claim: the route is not under an idempotency layer, \
     or the layer does not cover this request"
)]
pub struct ClaimUnavailable;

#[cfg(feature = "axum")]
mod extract {
    use axum::extract::{FromRequestParts, OptionalFromRequestParts};
    use axum::response::{IntoResponse, Response};
    use http::request::Parts;

    use super::{ClaimUnavailable, Claimed};
    use crate::problem::Problem;

    impl<S: Send + Sync> FromRequestParts<S> for Claimed {
        type Rejection = ClaimUnavailable;

        async fn from_request_parts(
            parts: &mut Parts,
            _state: &S,
        ) -> Result<Self, ClaimUnavailable> {
            Claimed::from_extensions(&parts.extensions)
        }
    }

    impl<S: Send + Sync> OptionalFromRequestParts<S> for Claimed {
        type Rejection = std::convert::Infallible;

        async fn from_request_parts(
            parts: &mut Parts,
            _state: &S,
        ) -> Result<Option<Self>, Self::Rejection> {
            Ok(Claimed::from_extensions(&parts.extensions).ok())
        }
    }

    impl IntoResponse for ClaimUnavailable {
        /// 500 [`Internal`](crate::ProblemType::Internal), marked
        /// [`Disposition::Release`](crate::Disposition::Release): the handler never ran, so
        /// nothing happened.
        fn into_response(self) -> Response {
            Problem::handler_not_run(&self)
        }
    }
}
