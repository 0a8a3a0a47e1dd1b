//! What happens to a reservation when its call is dropped before it ends.
//!
//! A caller's future can be dropped at any `.await` (a request timeout, a client that hung
//! up, `tokio::select!` choosing another branch). The attempt is then abandoned mid-way, and
//! `AttemptGuard` sends what [`Attempt::settlement`](idem_core::Attempt::settlement) says
//! settles it:
//!
//! - the key may be held (a reserve was sent, the action was running, or a release was
//!   due): it is **released**, so a retry runs the action again at once rather than after
//!   the lease (`I5`; the dropped action counts as failed);
//! - the action had already succeeded: its result is **completed**, never released, because
//!   the effect happened and recording it is what prevents a second one (`I7`).
//!
//! The same release is sent when a call ends `StoreUnavailable` (fail closed): one of its
//! failed reserves may have been applied, and releasing it (only this attempt's own token
//! can) spares a retry one lease of `InProgress` if the store is back in time.
//!
//! The command is sent by a task spawned on the current tokio runtime, retried like the
//! attempt's own commands. With no runtime to spawn on (the future was dropped outside one),
//! nothing is sent and the lease frees the key within one lease (`I6`).

use std::sync::Arc;

use idem_core::Attempt;
use tokio::runtime::Handle;

use crate::store::Store;

/// The attempt of one call, and the store to settle it in if the call is dropped.
#[derive(Debug)]
pub(crate) struct AttemptGuard<S: Store> {
    pub(crate) attempt: Attempt,
    store: Arc<S>,
}

impl<S: Store> AttemptGuard<S> {
    pub(crate) fn new(attempt: Attempt, store: Arc<S>) -> Self {
        Self { attempt, store }
    }
}

impl<S: Store> Drop for AttemptGuard<S> {
    fn drop(&mut self) {
        // What to send is the attempt's decision (`Attempt::settlement`); the guard only
        // sends it.
        let Some(command) = self.attempt.settlement() else {
            return;
        };
        let operation = self.attempt.operation().clone();
        let key = self.attempt.key().clone();
        let Ok(runtime) = Handle::try_current() else {
            tracing::warn!(
                operation = %operation,
                key = %key,
                command = command.name(),
                "call dropped outside a tokio runtime; the lease will free the key"
            );
            return;
        };
        tracing::debug!(
            operation = %operation,
            key = %key,
            command = command.name(),
            "call dropped before it ended; settling the key"
        );
        let store = Arc::clone(&self.store);
        let retries = self.attempt.options().store_retries();
        let backoff = self.attempt.options().backoff_initial();
        runtime.spawn(async move {
            for attempt in 0..=retries {
                match store.apply(&operation, &key, command.clone()).await {
                    Ok(_) => return,
                    Err(error) => tracing::warn!(
                        operation = %operation,
                        key = %key,
                        command = command.name(),
                        attempt,
                        %error,
                        "settling a dropped call failed"
                    ),
                }
                tokio::time::sleep(backoff * (attempt + 1)).await;
            }
        });
    }
}
