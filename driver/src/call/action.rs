//! The action of a call: started with its claim (a panic while making its future is its
//! panic), what it returned or how it panicked fed to the attempt (rule 11: a value whose
//! encoding panics is a panic after the effect), and its claim told what the attempt knows
//! of its lease.

use std::any::Any;
use std::future::Future;
use std::panic::{self, AssertUnwindSafe};
use std::pin::Pin;

use futures::FutureExt;
use idem_core::record::Body;
use idem_core::{ActionResult, LeaseState, Timestamp};

use super::{ActionFuture, Call};
use crate::claim::{Claim, LeasePublisher, LeaseView};
use crate::codec::Codec;
use crate::ending::Ending;
use crate::error::Error;
use crate::store::Store;

impl<S: Store, C: Codec<T>, T, E> Call<S, C, T, E> {
    /// Starts the action the attempt handed out, with its claim.
    pub(super) fn start<F, Fut>(
        &mut self,
        action: F,
        now: Timestamp,
        mut running: Pin<&mut ActionFuture<Fut>>,
    ) -> Result<(), Error<E>>
    where
        F: FnOnce(Claim) -> Fut,
        Fut: Future<Output: Into<Ending<T, E>>>,
    {
        let claim = self.claim(now);
        tracing::debug!(
            operation = %self.operation,
            key = %self.key,
            protected = claim.is_protected(),
            "running the action"
        );
        // A panic while making the future counts as the action's panic.
        match panic::catch_unwind(AssertUnwindSafe(|| Box::pin(action(claim)))) {
            Ok(future) => {
                running.set(AssertUnwindSafe(future).catch_unwind().fuse());
                Ok(())
            }
            Err(payload) => self.action_finished(Err::<Ending<T, E>, _>(payload), now),
        }
    }

    /// The action finished (returned or panicked): keep its value, error or panic, and
    /// tell the attempt what to record.
    pub(super) fn action_finished(
        &mut self,
        result: Result<impl Into<Ending<T, E>>, Box<dyn Any + Send>>,
        now: Timestamp,
    ) -> Result<(), Error<E>> {
        // The claim's lease no longer matters; a lease-lost future now never resolves.
        self.lease = None;
        let fed = match result.map(Into::into) {
            Ok(Ending::Succeeded(value)) => {
                // Rule 11: a value whose encoding panics is a panic after the effect.
                match panic::catch_unwind(AssertUnwindSafe(|| self.codec.encode(&value))) {
                    Ok(Ok(bytes)) => {
                        self.value = Some(value);
                        ActionResult::Succeeded(Body::new(bytes))
                    }
                    Ok(Err(error)) => {
                        tracing::warn!(
                            operation = %self.operation,
                            key = %self.key,
                            %error,
                            "the action's value cannot be encoded; completing without a body"
                        );
                        self.value = Some(value);
                        ActionResult::Unrecordable
                    }
                    Err(payload) => self.panicked(payload),
                }
            }
            Ok(Ending::Failed(error)) => {
                self.failure = Some(error);
                ActionResult::Failed
            }
            // A transactional action's writes roll back with its transaction: nothing
            // happened, so the key is given back as for a failure.
            Ok(Ending::Unknown(error)) if self.transaction.is_some() => {
                self.failure = Some(error);
                ActionResult::Failed
            }
            Ok(Ending::Unknown(error)) => {
                tracing::warn!(
                    operation = %self.operation,
                    key = %self.key,
                    "the action failed with its effect unknown; the key is recorded as such \
                     and never given back"
                );
                self.unknown = Some(error);
                ActionResult::Panicked
            }
            Err(payload) => self.panicked(payload),
        };
        self.guard.attempt.handle_action_result(fed, now)?;
        Ok(())
    }

    fn panicked(&mut self, payload: Box<dyn Any + Send>) -> ActionResult {
        tracing::error!(
            operation = %self.operation,
            key = %self.key,
            "the action panicked; its effect is unknown, so the key is recorded as such and \
             never given back"
        );
        self.panic = Some(payload);
        ActionResult::Panicked
    }

    /// The claim handed to the action, and the channel that keeps its lease view.
    fn claim(&mut self, now: Timestamp) -> Claim {
        let publisher = LeasePublisher::new(self.lease_view(now));
        let claim = Claim::new(
            self.operation.clone(),
            self.key.clone(),
            self.guard.attempt.owner(),
            self.guard.attempt.fence(),
            &publisher,
        );
        self.lease = Some(publisher);
        claim
    }

    fn lease_view(&self, now: Timestamp) -> LeaseView {
        let attempt = &self.guard.attempt;
        LeaseView {
            state: attempt.lease(now),
            confirmed_until: attempt
                .lease_confirmed_until()
                .and_then(|until| self.clock.instant(until)),
        }
    }

    /// Tells the running action's claim what the attempt knows about its lease.
    pub(super) fn publish_lease(&self, now: Timestamp) {
        let Some(publisher) = &self.lease else {
            return;
        };
        let view = self.lease_view(now);
        if view.state == LeaseState::NotRunning {
            return;
        }
        let before = publisher.publish(view);
        if before.state != view.state && view.state != LeaseState::Held {
            tracing::warn!(
                operation = %self.operation,
                key = %self.key,
                lease = ?view.state,
                "the running action's lease is no longer confirmed"
            );
        }
    }
}
