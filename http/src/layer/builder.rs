//! [`IdempotencyLayerBuilder`]: every setting of an [`IdempotencyLayer`], checked when the
//! layer is built.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use http::Method;
use http::header::HeaderName;
use http::request::Parts;
use http::response;
use idem::{Coordinator, Fingerprint, Operation, Store, TransactionalStore};

use super::{
    BeginFn, Config, ConfigError, DEFAULT_MAX_REQUEST_BYTES, DEFAULT_STORED_HEADERS, DispositionFn,
    Fingerprinting, IDEMPOTENT_REPLAYED, IdempotencyLayer, NEVER_STORED, Naming, TenantFn,
};
use crate::disposition::Disposition;
use crate::header::BareToken;
use crate::problem::RetryAfter;
use crate::response::ResponseCodec;
use crate::transaction::{Loan, Slot};

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
    disposition: Arc<DispositionFn>,
    begin: Option<Arc<BeginFn>>,
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
    pub(super) fn new(coordinator: Coordinator<S>) -> Self {
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
            disposition: Arc::new(Disposition::by_default),
            begin: None,
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

    /// How an unquoted key is treated (default [`BareToken::Accept`]: taken verbatim).
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
    /// [`TenantMissing`](crate::ProblemType::TenantMissing) and nothing runs.
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
    /// [`FingerprintUnavailable`](crate::ProblemType::FingerprintUnavailable).
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
    /// [`FingerprintUnavailable`](crate::ProblemType::FingerprintUnavailable), its text as the
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
    /// [`BodyTooLarge`](crate::ProblemType::BodyTooLarge) and nothing runs.
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

    /// What the layer does with each response: record it, release the key, or record the
    /// outcome as unknown (default [`Disposition::by_default`]: what the handler marked,
    /// else by status). The response goes to its own caller unchanged whatever is decided.
    ///
    /// Release only what did nothing: a function that releases by status alone (every 5xx,
    /// say) also releases the 5xx that a timeout or a panic catcher inside the layer made
    /// for a handler it cut off, and the retry runs the effect a second time (MODEL.md,
    /// "HTTP (idem-http)").
    #[must_use]
    pub fn disposition<F>(mut self, disposition: F) -> Self
    where
        F: Fn(&response::Parts) -> Disposition + Send + Sync + 'static,
    {
        self.disposition = Arc::new(disposition);
        self
    }

    /// The layer, or the first setting refused.
    pub fn build(self) -> Result<IdempotencyLayer<S>, ConfigError> {
        if self.begin.is_some() && !self.key_required {
            return Err(ConfigError::TransactionWithoutKey);
        }
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

    pub(super) fn config(self) -> Config<S> {
        let naming = match self.operation.as_deref().map(Operation::new) {
            Some(Ok(operation)) => Naming::Fixed(operation),
            _ => Naming::Route,
        };
        // Each header once, in the order first given: a name listed twice is stored once.
        let mut stored: Vec<HeaderName> = Vec::with_capacity(self.stored_headers.len());
        for name in self.stored_headers {
            if !stored.contains(&name) {
                stored.push(name);
            }
        }
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
            disposition: self.disposition,
            retry,
            begin: self.begin,
        }
    }
}

impl<S: TransactionalStore> IdempotencyLayerBuilder<S> {
    /// The layer owns each covered request's transaction, on a store that can begin one
    /// (idem-postgres's `PostgresStore`): once the key is reserved, the layer begins a
    /// transaction ([`TransactionalStore::begin`]) and lends it to the handler, which takes
    /// it with the [`Tx`](crate::Tx) extractor and makes its writes on it; the layer then
    /// commits those writes together with the record of the response (MODEL.md, rule
    /// `T1`), so one scope, one key and one fingerprint (the layer's) stand for both, and
    /// every retry is answered the recorded response.
    ///
    /// A response the layer would not record ([`Disposition::Release`] or
    /// [`Disposition::Unknown`]), a failure without a response or a panic rolls the writes
    /// back and releases the key: nothing was committed, so nothing happened, and a retry
    /// runs the handler again. A commit refused because the key was taken over meanwhile
    /// answers 503-class `RolledBack`, one whose outcome could not be learned
    /// `CommitUnknown`: both retryable, neither a second effect.
    ///
    /// The key is then required ([`build`](Self::build) refuses
    /// [`require_key(false)`](Self::require_key)): a transaction commits only with a record.
    #[must_use]
    pub fn in_transaction(mut self) -> Self {
        let store = Arc::clone(self.coordinator.store());
        self.begin = Some(Arc::new(move || {
            let store = Arc::clone(&store);
            Box::pin(async move {
                let transaction = store.begin().await?;
                Ok(Box::new(Slot::new(transaction)) as Box<dyn Loan>)
            })
        }));
        self
    }
}
