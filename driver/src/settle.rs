//! What happens to an attempt when its call ends before the attempt does.
//!
//! A caller's future can be dropped at any `.await` (a request timeout, a client that hung
//! up, `tokio::select!` choosing another branch). In the coordinator's default, detached
//! mode that drops only the caller's wait: the call moves to a task of its own and runs to
//! its end. An *attached* call ([`Coordinator::execute_attached`](crate::Coordinator::execute_attached))
//! runs inside the caller's future, so dropping that future drops the attempt mid-way, and
//! `AttemptGuard` then [abandons](idem_core::Attempt::abandon) it: the attempt machine, not
//! this module, decides what settles it (a release while no effect can have happened; the
//! complete of an action that ended; nothing for an action dropped mid-run, whose key is
//! left to its lease). A call that ended fail-closed is abandoned the same way, so that a
//! reserve that may have landed is released.
//!
//! The settlement runs on a task spawned on the current tokio runtime, pumping the attempt's
//! own [`poll`](idem_core::Attempt::poll) loop: its reply deadlines, its retries and its
//! backoff (rule 12). With no runtime to spawn on (the future was dropped outside one),
//! nothing is sent and the lease frees the key within one lease (`I6`).

use std::sync::Arc;

use idem_core::{Abandonment, Attempt, Outcome, Step};
use tokio::runtime::Handle;

use crate::clock::Clock;
use crate::metrics::{Counter, Metrics};
use crate::store::{Store, StoreError};

/// The attempt of one call, and what it needs to be settled if the call ends first.
#[derive(Debug)]
pub(crate) struct AttemptGuard<S: Store> {
    pub(crate) attempt: Attempt,
    /// The driver refused to start the action it was handed (no detached place): the call
    /// was not abandoned by its caller, and its grant is given back.
    pub(crate) declined: bool,
    store: Arc<S>,
    metrics: Arc<Metrics>,
    clock: Clock,
}

impl<S: Store> AttemptGuard<S> {
    pub(crate) fn new(
        attempt: Attempt,
        store: Arc<S>,
        metrics: Arc<Metrics>,
        clock: Clock,
    ) -> Self {
        Self {
            attempt,
            declined: false,
            store,
            metrics,
            clock,
        }
    }
}

impl<S: Store> Drop for AttemptGuard<S> {
    fn drop(&mut self) {
        let ended = self.attempt.is_done();
        let attempt = &mut self.attempt;
        attempt.abandon(self.clock.now());
        let (operation, key) = (attempt.operation().clone(), attempt.key().clone());
        if !ended && !self.declined {
            self.metrics.count(Counter::Abandoned);
        }
        if let Some(outcome) = attempt.outcome() {
            if *outcome == Outcome::Abandoned(Abandonment::ActionDropped) {
                self.metrics.count(Counter::LeftToLease);
                tracing::warn!(
                    %operation,
                    %key,
                    "call dropped while its action ran; its effect may have happened, so the \
                     key stays held until its lease ends, and a retry after that may run the \
                     action again"
                );
            } else if !ended {
                tracing::debug!(%operation, %key, ?outcome, "call dropped; nothing to settle");
            }
            return;
        }
        let Ok(runtime) = Handle::try_current() else {
            tracing::warn!(
                %operation,
                %key,
                "call ended outside a tokio runtime; the lease will free the key"
            );
            return;
        };
        tracing::debug!(%operation, %key, "settling what the attempt may hold");
        let settlement = settle(
            attempt.clone(),
            Arc::clone(&self.store),
            Arc::clone(&self.metrics),
            self.clock,
        );
        runtime.spawn(settlement);
    }
}

/// Pumps an abandoned attempt to its end: the commands it asks for, with its reply
/// deadlines and retries, until it says how it ended.
async fn settle<S: Store>(
    mut attempt: Attempt,
    store: Arc<S>,
    metrics: Arc<Metrics>,
    clock: Clock,
) {
    let (operation, key) = (attempt.operation().clone(), attempt.key().clone());
    loop {
        match attempt.poll(clock.now()) {
            Step::Send { command, reply_by } => {
                let kind = command.kind();
                let answer = match clock.instant(reply_by) {
                    Some(deadline) => {
                        let apply = store.apply_bounded(&operation, &key, command);
                        tokio::time::timeout_at(deadline, apply).await.ok()
                    }
                    None => Some(store.apply(&operation, &key, command).await),
                };
                let now = clock.now();
                let fed = match answer {
                    Some(Ok(reply)) => attempt.handle_reply(reply, now),
                    Some(Err(StoreError::Corrupt { detail, .. })) => {
                        tracing::warn!(%operation, %key, %detail, "settling met a corrupt record");
                        attempt.handle_corrupt_record(now)
                    }
                    Some(Err(error)) => {
                        metrics.store_error(kind);
                        tracing::warn!(%operation, %key, command = %kind, %error, "settling failed");
                        attempt.handle_store_error(now)
                    }
                    // The reply deadline passed: the next poll gives the command up.
                    None => {
                        metrics.store_error(kind);
                        Ok(())
                    }
                };
                if let Err(error) = fed {
                    tracing::error!(%operation, %key, %error, "settlement protocol error");
                    return;
                }
            }
            Step::Wait { until: Some(until) } => clock.sleep_until(Some(until)).await,
            Step::Done(outcome) => {
                tracing::debug!(%operation, %key, ?outcome, "settled");
                return;
            }
            // An abandoned attempt never runs its action, and always has a timer or a
            // command of its own while it settles.
            Step::Run | Step::Wait { until: None } => {
                tracing::error!(%operation, %key, "an abandoned attempt asked for no timer");
                return;
            }
        }
    }
}
