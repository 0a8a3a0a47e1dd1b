//! A minimal caller: drives one `idem_core::Attempt` against a store with real time, running
//! the action inline (the tests' actions are far shorter than the lease, so no renewal is
//! due while they run).

use std::time::{Duration, Instant};

use idem::Store;
use idem_core::{ActionResult, Attempt, Outcome, Step, Timestamp};

/// What the caller saw besides the outcome.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// Store commands that failed with an error.
    pub store_errors: u32,
    /// Times the action ran.
    pub runs: u32,
}

/// Runs `attempt` to its end; `action` is called at most once.
pub async fn drive<S, F>(store: &S, mut attempt: Attempt, action: F) -> (Outcome, Seen)
where
    S: Store,
    F: AsyncFnOnce() -> ActionResult,
{
    let start = Instant::now();
    let now = || Timestamp::from_millis(u64::try_from(start.elapsed().as_millis()).unwrap_or(0));
    let mut action = Some(action);
    let mut seen = Seen::default();
    let operation = attempt.operation().clone();
    let key = attempt.key().clone();
    loop {
        match attempt.poll(now()) {
            Step::Send { command, .. } => match store.apply(&operation, &key, command).await {
                Ok(reply) => attempt.handle_reply(reply, now()).expect("reply expected"),
                Err(_) => {
                    seen.store_errors += 1;
                    attempt
                        .handle_store_error(now())
                        .expect("command outstanding");
                }
            },
            Step::Run => {
                let run = action.take().expect("Run is handed out once");
                seen.runs += 1;
                let result = run().await;
                attempt
                    .handle_action_result(result, now())
                    .expect("action running");
            }
            Step::Wait { until } => {
                let until = until.expect("nothing runs concurrently, so a wait has a deadline");
                let wait = until.saturating_duration_since(now());
                tokio::time::sleep(wait.max(Duration::from_millis(1))).await;
            }
            Step::Done(outcome) => return (outcome, seen),
        }
    }
}
