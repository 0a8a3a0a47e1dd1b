//! The caller's choices, validated once (MODEL.md, "Options").
//!
//! Every limit is checked in [`OptionsBuilder::build`]; an [`Options`] value that exists is
//! valid, so the machines never meet a zero lease or a retention shorter than the request it
//! protects.

use std::time::Duration;

use thiserror::Error;

/// What a caller does when an identical request already holds the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum InFlightPolicy {
    /// Wait, with capped jittered backoff, until the holder completes (replay its result),
    /// releases (run the action) or lets its lease run out (take over), or until the
    /// waiter's own deadline passes (`InProgress`). For internal callers.
    #[default]
    Wait,
    /// Answer `InProgress` at once (HTTP 409). For public APIs that should not hold a
    /// connection while another request runs.
    Raise,
}

/// What a caller does when the store cannot be reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum StoreFailurePolicy {
    /// Run the action unprotected and say so in the outcome: availability over
    /// exactly-once (`I7` does not hold for such a call). The default, as in the article,
    /// for callers whose downstream provider deduplicates on its own key.
    #[default]
    FailOpen,
    /// Run nothing and answer `StoreUnavailable` (HTTP 503).
    FailClosed,
}

/// The shortest retention accepted: a record must outlive the request that made it.
pub const MIN_RETENTION: Duration = Duration::from_secs(60);
/// The shortest lease accepted.
pub const MIN_LEASE: Duration = Duration::from_secs(1);
/// The largest body limit accepted (Redis's limit on one string value).
pub const MAX_BODY_LIMIT: usize = 512 * 1024 * 1024;
/// The most retries of one store command accepted.
pub const MAX_STORE_RETRIES: u32 = 10;

/// Validated options for attempts; see [`Options::builder`] for the defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    in_flight: InFlightPolicy,
    on_store_failure: StoreFailurePolicy,
    lease: Duration,
    renew_every: Duration,
    retention: Duration,
    wait_deadline: Duration,
    backoff_initial: Duration,
    backoff_max: Duration,
    max_body_bytes: usize,
    store_retries: u32,
    reply_timeout: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            in_flight: InFlightPolicy::Wait,
            on_store_failure: StoreFailurePolicy::FailOpen,
            lease: Duration::from_secs(30),
            renew_every: Duration::from_secs(10),
            retention: Duration::from_secs(24 * 60 * 60),
            wait_deadline: Duration::from_secs(10),
            backoff_initial: Duration::from_millis(10),
            backoff_max: Duration::from_millis(500),
            max_body_bytes: 1024 * 1024,
            store_retries: 2,
            reply_timeout: Duration::from_millis(500),
        }
    }
}

impl Options {
    /// Starts from the defaults: policy `Wait`, fail open, lease 30 s renewed every 10 s,
    /// retention 24 h, waiter deadline 10 s, backoff 10 ms doubling to 500 ms, bodies up to
    /// 1 MiB, two retries of a store command whose outcome is unknown, and 500 ms for a store
    /// reply.
    pub fn builder() -> OptionsBuilder {
        OptionsBuilder::default()
    }

    /// The in-flight policy.
    pub fn in_flight(&self) -> InFlightPolicy {
        self.in_flight
    }
    /// The store-failure policy.
    pub fn on_store_failure(&self) -> StoreFailurePolicy {
        self.on_store_failure
    }
    /// How long a reservation lasts without renewal.
    pub fn lease(&self) -> Duration {
        self.lease
    }
    /// How often a running action's lease is renewed.
    pub fn renew_every(&self) -> Duration {
        self.renew_every
    }
    /// How long a completed result is replayed.
    pub fn retention(&self) -> Duration {
        self.retention
    }
    /// How long a waiter waits for an in-flight holder before answering `InProgress`.
    pub fn wait_deadline(&self) -> Duration {
        self.wait_deadline
    }
    /// The first backoff delay (waiting, and retries of store commands).
    pub fn backoff_initial(&self) -> Duration {
        self.backoff_initial
    }
    /// The largest backoff delay.
    pub fn backoff_max(&self) -> Duration {
        self.backoff_max
    }
    /// The largest result stored; a larger one is returned but not stored.
    pub fn max_body_bytes(&self) -> usize {
        self.max_body_bytes
    }
    /// How many times a store command whose outcome is unknown is retried.
    pub fn store_retries(&self) -> u32 {
        self.store_retries
    }
    /// How long a store command may go unanswered before the attempt counts it as failed,
    /// with its effect unknown (rule 12: the deadline is the core's, drivers enforce it).
    pub fn reply_timeout(&self) -> Duration {
        self.reply_timeout
    }
}

/// Builds [`Options`]; see [`Options::builder`].
#[derive(Debug, Clone, Default)]
pub struct OptionsBuilder {
    in_flight: Option<InFlightPolicy>,
    on_store_failure: Option<StoreFailurePolicy>,
    lease: Option<Duration>,
    renew_every: Option<Duration>,
    retention: Option<Duration>,
    wait_deadline: Option<Duration>,
    backoff_initial: Option<Duration>,
    backoff_max: Option<Duration>,
    max_body_bytes: Option<usize>,
    store_retries: Option<u32>,
    reply_timeout: Option<Duration>,
}

macro_rules! setters {
    ($($(#[$doc:meta])* $name:ident: $ty:ty;)*) => {
        $(
            $(#[$doc])*
            #[must_use]
            pub fn $name(mut self, value: $ty) -> Self {
                self.$name = Some(value);
                self
            }
        )*
    };
}

impl OptionsBuilder {
    setters! {
        /// `Wait` (default) or `Raise`.
        in_flight: InFlightPolicy;
        /// `FailOpen` (default) or `FailClosed`.
        on_store_failure: StoreFailurePolicy;
        /// At least 1 s and below the retention; longer than the slowest honest attempt
        /// between two renewals. Default 30 s.
        lease: Duration;
        /// Above zero and below the part of the lease the caller counts as its own
        /// ([`confirmed_lease`](crate::confirmed_lease): the lease less 1% and 5 ms), so
        /// that a renewal is sent before the caller's view of its lease runs out. Default a
        /// third of the lease.
        renew_every: Duration;
        /// At least 60 s. Default 24 h.
        retention: Duration;
        /// Above zero. Default 10 s.
        wait_deadline: Duration;
        /// Above zero. Default 10 ms.
        backoff_initial: Duration;
        /// At least the initial backoff. Default 500 ms.
        backoff_max: Duration;
        /// At most 512 MiB; zero stores no bodies. Default 1 MiB.
        max_body_bytes: usize;
        /// At most 10. Default 2.
        store_retries: u32;
        /// Above zero and below the renewal interval, so that a renewal that is never
        /// answered is retried before the lease runs out. Default 500 ms, or half the
        /// renewal interval if that is shorter.
        reply_timeout: Duration;
    }

    /// Checks every limit and returns the options, or the first rule broken.
    pub fn build(self) -> Result<Options, OptionsError> {
        let defaults = Options::default();
        let lease = self.lease.unwrap_or(defaults.lease);
        let retention = self.retention.unwrap_or(defaults.retention);
        let renew_every = self.renew_every.unwrap_or(lease / 3);
        let backoff_initial = self.backoff_initial.unwrap_or(defaults.backoff_initial);
        let backoff_max = self.backoff_max.unwrap_or(defaults.backoff_max);
        let wait_deadline = self.wait_deadline.unwrap_or(defaults.wait_deadline);
        let max_body_bytes = self.max_body_bytes.unwrap_or(defaults.max_body_bytes);
        let store_retries = self.store_retries.unwrap_or(defaults.store_retries);
        // Unset, it also fits a short renewal interval: at most half of it.
        let reply_timeout = self
            .reply_timeout
            .unwrap_or(defaults.reply_timeout.min(renew_every / 2));

        if retention < MIN_RETENTION {
            return Err(OptionsError::RetentionTooShort { retention });
        }
        if lease < MIN_LEASE {
            return Err(OptionsError::LeaseTooShort { lease });
        }
        if lease >= retention {
            return Err(OptionsError::LeaseNotBelowRetention { lease, retention });
        }
        if renew_every.is_zero() || renew_every >= crate::confirmed_lease(lease) {
            return Err(OptionsError::RenewNotWithinLease { renew_every, lease });
        }
        if wait_deadline.is_zero() {
            return Err(OptionsError::WaitDeadlineZero);
        }
        if backoff_initial.is_zero() {
            return Err(OptionsError::BackoffZero);
        }
        if backoff_max < backoff_initial {
            return Err(OptionsError::BackoffMaxBelowInitial {
                initial: backoff_initial,
                max: backoff_max,
            });
        }
        if max_body_bytes > MAX_BODY_LIMIT {
            return Err(OptionsError::BodyLimitTooLarge { max_body_bytes });
        }
        if store_retries > MAX_STORE_RETRIES {
            return Err(OptionsError::TooManyStoreRetries { store_retries });
        }
        if reply_timeout.is_zero() || reply_timeout >= renew_every {
            return Err(OptionsError::ReplyTimeoutNotWithinRenewal {
                reply_timeout,
                renew_every,
            });
        }
        Ok(Options {
            in_flight: self.in_flight.unwrap_or(defaults.in_flight),
            on_store_failure: self.on_store_failure.unwrap_or(defaults.on_store_failure),
            lease,
            renew_every,
            retention,
            wait_deadline,
            backoff_initial,
            backoff_max,
            max_body_bytes,
            store_retries,
            reply_timeout,
        })
    }
}

/// An option broke one of its rules.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum OptionsError {
    /// The retention is under [`MIN_RETENTION`].
    #[error("retention {retention:?} is too short; it must be at least {MIN_RETENTION:?}")]
    RetentionTooShort {
        /// The refused retention.
        retention: Duration,
    },
    /// The lease is under [`MIN_LEASE`].
    #[error("lease {lease:?} is too short; it must be at least {MIN_LEASE:?}")]
    LeaseTooShort {
        /// The refused lease.
        lease: Duration,
    },
    /// The lease is not shorter than the retention.
    #[error("lease {lease:?} must be shorter than the retention {retention:?}")]
    LeaseNotBelowRetention {
        /// The refused lease.
        lease: Duration,
        /// The retention it was compared with.
        retention: Duration,
    },
    /// The renewal interval is zero or not shorter than the part of the lease the caller
    /// counts as its own ([`confirmed_lease`](crate::confirmed_lease)).
    #[error(
        "renewal interval {renew_every:?} must be above zero and below the lease {lease:?} less 1% and 5 ms"
    )]
    RenewNotWithinLease {
        /// The refused interval.
        renew_every: Duration,
        /// The lease it was compared with.
        lease: Duration,
    },
    /// The waiter deadline is zero.
    #[error("waiter deadline must be above zero")]
    WaitDeadlineZero,
    /// The initial backoff is zero.
    #[error("initial backoff must be above zero")]
    BackoffZero,
    /// The largest backoff is below the first.
    #[error("largest backoff {max:?} is below the initial backoff {initial:?}")]
    BackoffMaxBelowInitial {
        /// The initial backoff.
        initial: Duration,
        /// The refused maximum.
        max: Duration,
    },
    /// The body limit is over [`MAX_BODY_LIMIT`].
    #[error("body limit {max_body_bytes} bytes is over the largest accepted, {MAX_BODY_LIMIT}")]
    BodyLimitTooLarge {
        /// The refused limit.
        max_body_bytes: usize,
    },
    /// The reply timeout is zero or not shorter than the renewal interval.
    #[error(
        "reply timeout {reply_timeout:?} must be above zero and below the renewal interval {renew_every:?}"
    )]
    ReplyTimeoutNotWithinRenewal {
        /// The refused timeout.
        reply_timeout: Duration,
        /// The renewal interval it was compared with.
        renew_every: Duration,
    },
    /// More than [`MAX_STORE_RETRIES`] retries.
    #[error("{store_retries} store retries requested; at most {MAX_STORE_RETRIES} are accepted")]
    TooManyStoreRetries {
        /// The refused count.
        store_retries: u32,
    },
}
