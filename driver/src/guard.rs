//! What happens to a reservation when its call is dropped before it ends.
//!
//! A caller's future can be dropped at any `.await` (a request timeout, a client that hung
//! up, `tokio::select!` choosing another branch). The attempt is then abandoned mid-way, and
//! `AttemptGuard` settles what it can on the way out:
//!
//! - the key may be held (a reserve was sent, the action was running, or a release was
//!   due): it is **released**, so a retry runs the action again at once rather than after
//!   the lease (`I5`; the dropped action counts as failed);
//! - the action had already succeeded: its result is **completed**, never released, because
//!   the effect happened and recording it is what prevents a second one (`I7`).
//!
//! The command is sent by a task spawned on the current tokio runtime, retried like the
//! attempt's own commands. With no runtime to spawn on (the future was dropped outside one),
//! nothing is sent and the lease frees the key within one lease (`I6`).

use std::sync::Arc;

use idem_core::record::{Body, Command};
use idem_core::{ActionResult, Attempt, Options};
use tokio::runtime::Handle;

use crate::store::Store;

/// The attempt of one call, and what to send for it if the call is dropped.
#[derive(Debug)]
pub(crate) struct AttemptGuard<S: Store> {
    pub(crate) attempt: Attempt,
    store: Arc<S>,
    hold: Hold,
}

/// What the attempt may own in the store right now.
#[derive(Debug)]
enum Hold {
    /// Nothing: no reserve sent yet, the key is another's, or the attempt is over.
    Free,
    /// A reservation, possibly: a reserve was sent (its effect may be unknown) or granted,
    /// and no result is known yet.
    MaybeHeld,
    /// The action succeeded: this complete records it.
    Succeeded(Command),
}

impl<S: Store> AttemptGuard<S> {
    pub(crate) fn new(attempt: Attempt, store: Arc<S>) -> Self {
        Self {
            attempt,
            store,
            hold: Hold::Free,
        }
    }

    /// A command is about to be sent.
    pub(crate) fn sent(&mut self, command: &Command) {
        if matches!(command, Command::Reserve { .. }) && matches!(self.hold, Hold::Free) {
            self.hold = Hold::MaybeHeld;
        }
    }

    /// A reserve was answered: only `Reserved` means the key is this attempt's.
    pub(crate) fn reserve_answered(&mut self, granted: bool) {
        if !granted {
            self.hold = Hold::Free;
        }
    }

    /// The action finished with `result`. A success is remembered as the complete that
    /// records it; a failure leaves the key to be released.
    pub(crate) fn action_finished(&mut self, result: &ActionResult) {
        let options = self.attempt.options();
        let body = match result {
            ActionResult::Failed => return,
            // Rule 9, as the attempt applies it: a body over the limit is not stored.
            ActionResult::Succeeded(body) if body.len() <= options.max_body_bytes() => {
                Some(body.clone())
            }
            ActionResult::Succeeded(_) | ActionResult::Unrecordable => None,
        };
        self.hold = Hold::Succeeded(complete(&self.attempt, body, options));
    }

    /// The attempt ended: nothing is left to settle.
    pub(crate) fn finished(&mut self) {
        self.hold = Hold::Free;
    }
}

fn complete(attempt: &Attempt, body: Option<Body>, options: &Options) -> Command {
    Command::Complete {
        owner: attempt.owner(),
        fingerprint: attempt.fingerprint(),
        body,
        retention: options.retention(),
    }
}

impl<S: Store> Drop for AttemptGuard<S> {
    fn drop(&mut self) {
        let command = match std::mem::replace(&mut self.hold, Hold::Free) {
            Hold::Free => return,
            Hold::MaybeHeld => Command::Release {
                owner: self.attempt.owner(),
            },
            Hold::Succeeded(complete) => complete,
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
