//! A minimal caller: drives one `idem_core::Attempt` against a store with real time, running
//! the action inline (the tests' actions are far shorter than the lease, so no renewal is
//! due while they run).
//!
//! Like the real driver, it decides no timer of its own (rule 12): each command is awaited
//! until the attempt's `reply_by` and no longer. When the deadline passes first, the command
//! is dropped unanswered and the attempt itself gives it up at its next poll (its effect
//! unknown), then retries or ends as its policy says.

use std::time::{Duration, Instant};

use idem::{Store, StoreError};
use idem_core::{ActionResult, Attempt, Outcome, Step, Timestamp};

/// What the caller saw besides the outcome.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// Store commands that failed with an error (the store answered `Unavailable`).
    pub store_errors: u32,
    /// Commands given up unanswered at the attempt's reply deadline.
    pub timed_out: u32,
    /// Commands the store answered `Corrupt`.
    pub corrupt: u32,
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
    // The instant of a timestamp on this clock. `now` rounds down, so at or after this
    // instant `now()` is at or after the timestamp.
    let instant = |at: Timestamp| start + Duration::from_millis(at.as_millis());
    let mut action = Some(action);
    let mut seen = Seen::default();
    let operation = attempt.operation().clone();
    let key = attempt.key().clone();
    loop {
        match attempt.poll(now()) {
            Step::Send { command, reply_by } => {
                let apply = store.apply(&operation, &key, command);
                match tokio::time::timeout_at(instant(reply_by).into(), apply).await {
                    Ok(Ok(reply)) => attempt.handle_reply(reply, now()).expect("reply expected"),
                    Ok(Err(StoreError::Corrupt { .. })) => {
                        seen.corrupt += 1;
                        attempt
                            .handle_corrupt_record(now())
                            .expect("command outstanding");
                    }
                    Ok(Err(_)) => {
                        seen.store_errors += 1;
                        attempt
                            .handle_store_error(now())
                            .expect("command outstanding");
                    }
                    // The reply deadline passed: the command is dropped, and the next poll
                    // (now at or after `reply_by`) lets the attempt give it up.
                    Err(_) => {
                        seen.timed_out += 1;
                        assert!(now() >= reply_by, "dropped before the attempt's deadline");
                    }
                }
            }
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
                tokio::time::sleep_until(instant(until).into()).await;
            }
            Step::Done(outcome) => {
                assert!(
                    !attempt.awaiting_reply(),
                    "a finished attempt awaits nothing"
                );
                return (outcome, seen);
            }
        }
    }
}
