//! Problem details (RFC 9457): the body of every answer that idem-http makes itself.
//!
//! Each case has a stable `type` URI ([`ProblemType::uri`]); the table of all of them is in
//! the [crate docs](crate#problem-types). A problem never carries another request's
//! fingerprint or body: the `detail` says what is wrong with *this* request.

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use http::{Response, StatusCode};
use idem::{Error, Options};

use crate::disposition::Disposition;
use crate::header::{KeyHeaderError, Malformed};

/// `application/problem+json`, the media type of every problem.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// Where the `type` URIs point: the docs of [`ProblemType`], one anchor per variant.
const TYPE_BASE: &str =
    "https://docs.rs/idem-http/latest/idem_http/problem/enum.ProblemType.html#variant.";

/// Every kind of problem idem-http answers with; see the [crate docs](crate#problem-types)
/// for the table of statuses and `type` URIs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ProblemType {
    /// 400: the route requires an `Idempotency-Key` and the request has none. Nothing ran.
    KeyMissing,
    /// 400: the `Idempotency-Key` is not a Structured Field String (a bad escape, a
    /// character outside printable ASCII, no closing quote, trailing characters, a malformed
    /// parameter, the header twice, or unquoted where bare tokens are refused). Nothing ran.
    KeyMalformed,
    /// 400: the header is a String, but not a valid key: empty, over 255 characters, or
    /// holding a space or a character outside visible ASCII. Keys are never trimmed. Nothing
    /// ran.
    KeyInvalid,
    /// 403: the service scopes keys by tenant and could not tell this request's tenant.
    /// Nothing ran.
    TenantMissing,
    /// 413: the request body is over the layer's limit. Nothing ran.
    BodyTooLarge,
    /// 400: the request body could not be read to its end. Nothing ran.
    BodyUnreadable,
    /// 400: the fields that make up the request's fingerprint could not be read (the body is
    /// not the JSON the service names fields of, or the service's own fingerprint refused the
    /// request). Nothing ran.
    FingerprintUnavailable,
    /// 409, with `Retry-After`: an identical request with this key is still being processed
    /// (at once under policy `Raise`; after the waiter's deadline under `Wait`). Retry later
    /// with the same key.
    InProgress,
    /// 422: the key was already used for another request (another method, target or body),
    /// whether that request is still running or done. Use a new key for a new request.
    KeyReuse,
    /// 503, with `Retry-After`: the idempotency store cannot be reached and the service fails
    /// closed. Nothing ran; retry later with the same key.
    StoreUnavailable,
    /// 503, with `Retry-After`: the service is shutting down. Retry later with the same key.
    ShuttingDown,
    /// 503, with `Retry-After`: the service is running as many requests as it allows, so
    /// this one was not started. Nothing ran; retry later with the same key.
    Overloaded,
    /// 503, with `Retry-After`: the request's writes were rolled back together with its
    /// idempotency record (its transaction could not commit, or the key was no longer its
    /// own when it did). Nothing was committed; retry with the same key.
    RolledBack,
    /// 503, with `Retry-After`: the request's transaction was sent to commit, and whether it
    /// did could not be learned. Its writes and its idempotency record commit together or
    /// not at all, so a retry with the same key gets the committed response or runs the
    /// request, never both.
    CommitUnknown,
    /// 500: the record under this key cannot be read as one idem wrote. Nothing ran, and a
    /// retry gets the same answer: the record needs a person.
    CorruptRecord,
    /// 500: an identical request ended abnormally (its handler panicked), so whether its
    /// effect happened is unknown. It is not run again under this key.
    OutcomeUnknown,
    /// 500: an identical request completed, but its response was not stored (over the body
    /// limit, or its body failed). It is not run again under this key.
    ResponseNotStored,
    /// 500: the stored response of an identical request cannot be decoded. It is not run
    /// again under this key.
    StoredResponseUnreadable,
    /// 500: an internal error of idem-http or idem, or of the service's use of them (an
    /// operation name idem refuses). Nothing was processed.
    Internal,
}

impl ProblemType {
    /// All of them, in the order of the table.
    pub const ALL: [ProblemType; 19] = [
        ProblemType::KeyMissing,
        ProblemType::KeyMalformed,
        ProblemType::KeyInvalid,
        ProblemType::TenantMissing,
        ProblemType::BodyTooLarge,
        ProblemType::BodyUnreadable,
        ProblemType::FingerprintUnavailable,
        ProblemType::InProgress,
        ProblemType::KeyReuse,
        ProblemType::StoreUnavailable,
        ProblemType::ShuttingDown,
        ProblemType::Overloaded,
        ProblemType::RolledBack,
        ProblemType::CommitUnknown,
        ProblemType::CorruptRecord,
        ProblemType::OutcomeUnknown,
        ProblemType::ResponseNotStored,
        ProblemType::StoredResponseUnreadable,
        ProblemType::Internal,
    ];

    /// The variant's name, which ends its `type` URI and labels its counter.
    pub fn name(self) -> &'static str {
        match self {
            ProblemType::KeyMissing => "KeyMissing",
            ProblemType::KeyMalformed => "KeyMalformed",
            ProblemType::KeyInvalid => "KeyInvalid",
            ProblemType::TenantMissing => "TenantMissing",
            ProblemType::BodyTooLarge => "BodyTooLarge",
            ProblemType::BodyUnreadable => "BodyUnreadable",
            ProblemType::FingerprintUnavailable => "FingerprintUnavailable",
            ProblemType::InProgress => "InProgress",
            ProblemType::KeyReuse => "KeyReuse",
            ProblemType::StoreUnavailable => "StoreUnavailable",
            ProblemType::ShuttingDown => "ShuttingDown",
            ProblemType::Overloaded => "Overloaded",
            ProblemType::RolledBack => "RolledBack",
            ProblemType::CommitUnknown => "CommitUnknown",
            ProblemType::CorruptRecord => "CorruptRecord",
            ProblemType::OutcomeUnknown => "OutcomeUnknown",
            ProblemType::ResponseNotStored => "ResponseNotStored",
            ProblemType::StoredResponseUnreadable => "StoredResponseUnreadable",
            ProblemType::Internal => "Internal",
        }
    }

    /// The stable `type` URI: this variant's entry in these docs.
    pub fn uri(self) -> String {
        format!("{TYPE_BASE}{}", self.name())
    }

    /// The HTTP status answered with.
    pub fn status(self) -> StatusCode {
        match self {
            ProblemType::KeyMissing
            | ProblemType::KeyMalformed
            | ProblemType::KeyInvalid
            | ProblemType::BodyUnreadable
            | ProblemType::FingerprintUnavailable => StatusCode::BAD_REQUEST,
            ProblemType::TenantMissing => StatusCode::FORBIDDEN,
            ProblemType::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ProblemType::InProgress => StatusCode::CONFLICT,
            ProblemType::KeyReuse => StatusCode::UNPROCESSABLE_ENTITY,
            ProblemType::StoreUnavailable
            | ProblemType::ShuttingDown
            | ProblemType::Overloaded
            | ProblemType::RolledBack
            | ProblemType::CommitUnknown => StatusCode::SERVICE_UNAVAILABLE,
            ProblemType::CorruptRecord
            | ProblemType::OutcomeUnknown
            | ProblemType::ResponseNotStored
            | ProblemType::StoredResponseUnreadable
            | ProblemType::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The short, fixed summary (`title`).
    pub fn title(self) -> &'static str {
        match self {
            ProblemType::KeyMissing => "Idempotency-Key missing",
            ProblemType::KeyMalformed => "Idempotency-Key malformed",
            ProblemType::KeyInvalid => "Idempotency-Key invalid",
            ProblemType::TenantMissing => "Tenant unknown",
            ProblemType::BodyTooLarge => "Request body too large",
            ProblemType::BodyUnreadable => "Request body unreadable",
            ProblemType::FingerprintUnavailable => "Request fingerprint unavailable",
            ProblemType::InProgress => "Request in progress",
            ProblemType::KeyReuse => "Idempotency-Key reused",
            ProblemType::StoreUnavailable => "Idempotency store unavailable",
            ProblemType::ShuttingDown => "Service shutting down",
            ProblemType::Overloaded => "Service overloaded",
            ProblemType::RolledBack => "Nothing committed",
            ProblemType::CommitUnknown => "Commit outcome unknown",
            ProblemType::CorruptRecord => "Idempotency record corrupt",
            ProblemType::OutcomeUnknown => "Outcome unknown",
            ProblemType::ResponseNotStored => "Response not stored",
            ProblemType::StoredResponseUnreadable => "Stored response unreadable",
            ProblemType::Internal => "Internal error",
        }
    }

    /// Whether the same request may succeed later with the same key: every 409 and 503
    /// problem. Each of them also tells an outer
    /// [`IdempotencyLayer`](crate::IdempotencyLayer) to release its own key
    /// ([`Disposition::Release`]), so that its retry runs again rather than being answered
    /// this problem for the record's whole retention.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            ProblemType::InProgress
                | ProblemType::StoreUnavailable
                | ProblemType::ShuttingDown
                | ProblemType::Overloaded
                | ProblemType::RolledBack
                | ProblemType::CommitUnknown
        )
    }
}

impl fmt::Display for ProblemType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One problem answer: an RFC 9457 body with the type's status, and `Retry-After` where the
/// case has one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    kind: ProblemType,
    detail: String,
    retry_after: Option<u64>,
}

impl Problem {
    /// The answer of an extractor that found nothing to hand the handler (no claim, no
    /// transaction): 500 [`Internal`](ProblemType::Internal) saying why, marked
    /// [`Disposition::Release`](crate::Disposition::Release), since the handler never ran.
    #[cfg(feature = "axum")]
    pub(crate) fn handler_not_run(why: &impl fmt::Display) -> axum::response::Response {
        use axum::response::IntoResponse;
        let detail = format!("{why}; the request was not processed.");
        let mut response = Problem::new(ProblemType::Internal, detail).into_response();
        response
            .extensions_mut()
            .insert(crate::Disposition::Release);
        response
    }

    /// A problem of `kind`, its detail saying what is wrong with this request.
    pub fn new(kind: ProblemType, detail: impl Into<String>) -> Self {
        Self {
            kind,
            detail: detail.into(),
            retry_after: None,
        }
    }

    /// The same, with `Retry-After: seconds`.
    #[must_use]
    pub fn with_retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    /// Its type.
    pub fn kind(&self) -> ProblemType {
        self.kind
    }

    /// Its detail.
    pub fn detail(&self) -> &str {
        &self.detail
    }

    /// Its `Retry-After`, in seconds.
    pub fn retry_after(&self) -> Option<u64> {
        self.retry_after
    }

    /// Its status.
    pub fn status(&self) -> StatusCode {
        self.kind.status()
    }

    /// The problem for a refused `Idempotency-Key` header.
    pub fn from_key_error(error: &KeyHeaderError) -> Self {
        let kind = match error {
            KeyHeaderError::Missing => ProblemType::KeyMissing,
            KeyHeaderError::Malformed { .. } => ProblemType::KeyMalformed,
            KeyHeaderError::InvalidKey(_) => ProblemType::KeyInvalid,
        };
        let detail = match error {
            KeyHeaderError::Missing => "This request must carry an Idempotency-Key header: \
                 Idempotency-Key: \"your-unique-key\"."
                .to_owned(),
            KeyHeaderError::Malformed {
                reason: Malformed::Unquoted,
                ..
            } => "The Idempotency-Key must be a quoted string (a Structured Field String): \
                  Idempotency-Key: \"your-unique-key\"."
                .to_owned(),
            other => format!("{other}."),
        };
        Self::new(kind, detail)
    }

    /// The problem for an idem error, with `Retry-After` computed from `options`
    /// ([`RetryAfter`]); `None` for the action's own error ([`Error::Action`],
    /// [`Error::ActionUnknown`]), whose answer is the service's.
    pub fn from_error<E>(error: &Error<E>, options: &Options) -> Option<Self> {
        Self::from_error_with(error, RetryAfter::from_options(options))
    }

    /// As [`from_error`](Self::from_error), with the `Retry-After` values given.
    ///
    /// Every idem error has its answer: the statuses are [`Error::http_status`]'s, except
    /// [`Error::InvalidOperation`], which is 500 [`Internal`](ProblemType::Internal) here
    /// (the operation name is the service's, never the client's), and every 409 and 503
    /// carries `Retry-After`.
    pub fn from_error_with<E>(error: &Error<E>, retry: RetryAfter) -> Option<Self> {
        let problem = match error {
            // The action's own error: answered as the service's own response.
            Error::Action(_) | Error::ActionUnknown(_) => return None,
            Error::InvalidKey(key) => Problem::new(
                ProblemType::KeyInvalid,
                format!("{}.", KeyHeaderError::InvalidKey(key.clone())),
            ),
            Error::InProgress => Problem::new(
                ProblemType::InProgress,
                "A request with this Idempotency-Key is still being processed; retry later \
                 with the same key to get its response.",
            )
            .with_retry_after(retry.in_progress),
            Error::KeyReuse { .. } => Problem::new(
                ProblemType::KeyReuse,
                "This Idempotency-Key was already used for a different request; send a new \
                 request with a new key.",
            ),
            Error::StoreUnavailable(_) => Problem::new(
                ProblemType::StoreUnavailable,
                "The idempotency store cannot be reached, so the request was not processed; \
                 retry later with the same key.",
            )
            .with_retry_after(retry.unavailable),
            Error::RuntimeShutdown => Problem::new(
                ProblemType::ShuttingDown,
                "The service is shutting down; retry later with the same key.",
            )
            .with_retry_after(retry.unavailable),
            Error::ShuttingDown => Problem::new(
                ProblemType::ShuttingDown,
                "The service is shutting down, so the request was not processed; retry later \
                 with the same key.",
            )
            .with_retry_after(retry.unavailable),
            Error::Overloaded => Problem::new(
                ProblemType::Overloaded,
                "The service is processing as many requests as it allows, so this one was not \
                 processed; retry later with the same key.",
            )
            .with_retry_after(retry.unavailable),
            Error::RolledBack => Problem::new(
                ProblemType::RolledBack,
                "The request's writes were rolled back and nothing was committed; retry later \
                 with the same key.",
            )
            .with_retry_after(retry.unavailable),
            Error::CommitUnknown => Problem::new(
                ProblemType::CommitUnknown,
                "Whether the request's writes were committed could not be learned; they \
                 commit together with its idempotency record or not at all, so a retry with \
                 the same key gets the committed response or runs the request, never both.",
            )
            .with_retry_after(retry.unavailable),
            Error::CorruptRecord { .. } => Problem::new(
                ProblemType::CorruptRecord,
                "The idempotency record of this key cannot be read; the request was not \
                 processed, and will not be under this key.",
            ),
            Error::OutcomeUnknown => Problem::new(
                ProblemType::OutcomeUnknown,
                "An earlier request with this Idempotency-Key ended abnormally, so whether it \
                 took effect is unknown; it is not processed again under this key.",
            ),
            Error::ResultNotStored => Problem::new(
                ProblemType::ResponseNotStored,
                "An earlier request with this Idempotency-Key was processed, but its response \
                 was not stored; it is not processed again under this key.",
            ),
            Error::Decode(_) => Problem::new(
                ProblemType::StoredResponseUnreadable,
                "The stored response of an earlier request with this Idempotency-Key cannot \
                 be read; it is not processed again under this key.",
            ),
            Error::InvalidOperation(_) => Problem::new(
                ProblemType::Internal,
                "The service named an operation the idempotency layer refuses; the request \
                 was not processed.",
            ),
            Error::Protocol(_) => Problem::new(
                ProblemType::Internal,
                "An internal error of the idempotency layer; the request was not processed.",
            ),
            // A case added to idem after this version: its status class still holds.
            _ => Problem::new(
                ProblemType::Internal,
                "An internal error of the idempotency layer.",
            ),
        };
        Some(problem)
    }

    /// The body, `application/problem+json`: `type`, `title`, `status` and `detail`, in
    /// that order.
    pub fn body(&self) -> Bytes {
        let text = |value: &str| serde_json::Value::from(value).to_string();
        Bytes::from(format!(
            "{{\"type\":{},\"title\":{},\"status\":{},\"detail\":{}}}",
            text(&self.kind.uri()),
            text(self.kind.title()),
            self.kind.status().as_u16(),
            text(&self.detail),
        ))
    }

    /// The whole response, with any body type that can be made from bytes.
    ///
    /// A retryable problem (every 409 and 503: nothing was done, or what was done is
    /// recorded under the key and a retry finds it) carries [`Disposition::Release`] in its
    /// extensions, so that an outer [`IdempotencyLayer`](crate::IdempotencyLayer), around
    /// a handler whose own idem call answered it, releases its key instead of recording a
    /// "retry later" for the whole retention.
    pub fn to_response<B: From<Bytes>>(&self) -> Response<B> {
        let mut response = Response::new(B::from(self.body()));
        *response.status_mut() = self.status();
        if self.kind.is_retryable() {
            response.extensions_mut().insert(Disposition::Release);
        }
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if let Some(seconds) = self.retry_after {
            headers.insert(RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.status().as_u16(),
            self.kind.title(),
            self.detail
        )
    }
}

impl std::error::Error for Problem {}

/// The `Retry-After` values, in whole seconds, computed from the coordinator's options.
///
/// - **409 in progress**: the longest pause the core itself makes between two looks at a
///   held key (`backoff_max`, 500 ms by default), rounded up, at least 1 s. A client that
///   retries at that pace learns of the holder's end about as soon as a waiting caller
///   inside the service would.
/// - **503 store unavailable, shutting down, overloaded, rolled back or commit unknown**:
///   how long one request spends trying the store before it gives up (`(store_retries + 1)
///   × reply_timeout`, 1.5 s by default), rounded up, at least 1 s. A retry sooner than
///   that most likely meets the same outage (a transaction that could not commit, or whose
///   commit went unanswered, met a store in trouble too) or the same load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryAfter {
    /// For 409 in progress.
    pub in_progress: u64,
    /// For 503.
    pub unavailable: u64,
}

impl RetryAfter {
    /// The values for `options`; see the rule above.
    pub fn from_options(options: &Options) -> Self {
        let tries = options.store_retries().saturating_add(1);
        Self {
            in_progress: whole_seconds(options.backoff_max()),
            unavailable: whole_seconds(options.reply_timeout().saturating_mul(tries)),
        }
    }
}

/// `duration` rounded up to whole seconds, at least 1.
fn whole_seconds(duration: Duration) -> u64 {
    let seconds = duration.as_secs() + u64::from(duration.subsec_nanos() > 0);
    seconds.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_type_has_its_own_uri_and_a_status_of_its_class() {
        let mut uris: Vec<String> = ProblemType::ALL.iter().map(|kind| kind.uri()).collect();
        uris.sort();
        uris.dedup();
        assert_eq!(uris.len(), ProblemType::ALL.len());
        for kind in ProblemType::ALL {
            assert!(kind.uri().ends_with(&format!("#variant.{kind}")));
            let status = kind.status();
            assert!(
                status.is_client_error() || status.is_server_error(),
                "{kind}"
            );
            assert_eq!(
                kind.is_retryable(),
                matches!(status.as_u16(), 409 | 503),
                "{kind}"
            );
        }
    }

    #[test]
    fn retry_after_follows_the_options() {
        let defaults = RetryAfter::from_options(&Options::default());
        assert_eq!(
            defaults,
            RetryAfter {
                in_progress: 1,
                unavailable: 2
            }
        );
        let options = Options::builder()
            .backoff_max(Duration::from_millis(2_500))
            .store_retries(4)
            .reply_timeout(Duration::from_millis(700))
            .build()
            .unwrap();
        let computed = RetryAfter::from_options(&options);
        assert_eq!(
            computed,
            RetryAfter {
                in_progress: 3,
                unavailable: 4
            }
        );
    }

    #[test]
    fn every_idem_error_has_its_answer_and_retryable_ones_release_an_outer_key() {
        use idem::record::Command;
        use idem::{Fingerprint, Key, KeyError, Operation, OperationError, StoreError};

        let options = Options::builder()
            .backoff_max(Duration::from_millis(2_500))
            .store_retries(2)
            .reply_timeout(Duration::from_millis(1_500))
            .build()
            .unwrap();
        let fingerprint = Fingerprint::of_bytes(b"a");
        let cases: Vec<(Error<&str>, ProblemType, Option<u64>)> = vec![
            (
                Error::InvalidKey(KeyError::Empty),
                ProblemType::KeyInvalid,
                None,
            ),
            (
                Error::InvalidOperation(OperationError::Empty),
                ProblemType::Internal,
                None,
            ),
            (Error::InProgress, ProblemType::InProgress, Some(3)),
            (
                Error::KeyReuse {
                    stored: fingerprint,
                    given: fingerprint,
                },
                ProblemType::KeyReuse,
                None,
            ),
            (
                Error::StoreUnavailable(StoreError::unavailable(&Command::Read, "down")),
                ProblemType::StoreUnavailable,
                Some(5),
            ),
            (Error::RuntimeShutdown, ProblemType::ShuttingDown, Some(5)),
            (Error::ShuttingDown, ProblemType::ShuttingDown, Some(5)),
            (Error::Overloaded, ProblemType::Overloaded, Some(5)),
            (Error::RolledBack, ProblemType::RolledBack, Some(5)),
            (Error::CommitUnknown, ProblemType::CommitUnknown, Some(5)),
            (
                Error::CorruptRecord {
                    operation: Operation::new("op").unwrap(),
                    key: Key::new("k").unwrap(),
                    detail: "garbage".to_owned(),
                },
                ProblemType::CorruptRecord,
                None,
            ),
            (Error::OutcomeUnknown, ProblemType::OutcomeUnknown, None),
            (Error::ResultNotStored, ProblemType::ResponseNotStored, None),
            (
                Error::Decode("not JSON".into()),
                ProblemType::StoredResponseUnreadable,
                None,
            ),
        ];
        for (error, kind, retry_after) in cases {
            let problem = Problem::from_error(&error, &options).expect("a problem");
            assert_eq!(problem.kind(), kind, "{error}");
            assert_eq!(problem.retry_after(), retry_after, "{error}");
            assert!(!problem.detail().is_empty());
            let response: Response<Bytes> = problem.to_response();
            assert_eq!(
                response.headers().get(RETRY_AFTER).is_some(),
                retry_after.is_some()
            );
            let expected = (error.is_retryable() && !matches!(error, Error::Action(_)))
                .then_some(Disposition::Release);
            assert_eq!(
                response.extensions().get::<Disposition>().copied(),
                expected,
                "{error}"
            );
            if kind != ProblemType::Internal {
                assert_eq!(
                    Some(response.status().as_u16()),
                    error.http_status(),
                    "{error}"
                );
            }
        }
        assert_eq!(Problem::from_error(&Error::Action("no"), &options), None);
        assert_eq!(
            Problem::from_error(&Error::ActionUnknown("no"), &options),
            None
        );
    }

    #[test]
    fn the_body_is_problem_json_with_the_rfc_members() {
        let problem = Problem::new(ProblemType::KeyReuse, "d").with_retry_after(5);
        let response: Response<Bytes> = problem.to_response();
        assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(response.headers()[CONTENT_TYPE], PROBLEM_JSON);
        assert_eq!(response.headers()[RETRY_AFTER], "5");
        let body: serde_json::Value = serde_json::from_slice(response.body()).unwrap();
        assert_eq!(body["type"], ProblemType::KeyReuse.uri());
        assert_eq!(body["status"], 422);
        assert_eq!(body["title"], "Idempotency-Key reused");
        assert_eq!(body["detail"], "d");
    }
}
