//! The checks, one module each, and what they share: the records a check names, and sending
//! a command that is judged as it is answered.

pub(crate) mod corrupt;
pub(crate) mod differential;
pub(crate) mod expiry;
pub(crate) mod names;
pub(crate) mod notices;
pub(crate) mod owners;
pub(crate) mod races;
pub(crate) mod sizes;
pub(crate) mod transitions;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use idem_core::record::{Command, Reply, StoredResult};
use idem_core::{Body, Fingerprint, Key, Operation, OwnerToken, Timestamp};

use crate::judge::Judge;
use crate::report::Divergence;
use crate::subject::Subject;
use crate::timing::Timing;

/// A lease or retention that outlives every check.
pub(crate) const LONG: Duration = Duration::from_secs(60);

/// The operation every check's records live under, unless a check needs two.
pub(crate) const OPERATION: &str = "conformance.check";

/// Names no other run, check or process uses: a prefix from the wall clock, the process and a
/// counter, and the check's own numbering under it.
#[derive(Debug, Clone)]
pub(crate) struct Names {
    prefix: String,
}

impl Names {
    pub(crate) fn new(check: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos());
        Self {
            prefix: format!(
                "{check}-{}-{}-{}",
                std::process::id(),
                nanos % 1_000_000_000_000,
                NEXT.fetch_add(1, Ordering::Relaxed)
            ),
        }
    }

    /// Record `n` of the check, under [`OPERATION`].
    pub(crate) fn record(&self, n: usize) -> (Operation, Key) {
        self.under(OPERATION, n)
    }

    /// Record `n` of the check, under `operation`.
    pub(crate) fn under(&self, operation: &str, n: usize) -> (Operation, Key) {
        (
            Operation::new(operation).expect("the kit's operation names are valid"),
            Key::new(format!("{}-{n}", self.prefix)).expect("the kit's keys are valid"),
        )
    }
}

/// The owners and fingerprints checks use.
pub(crate) fn owner(n: u128) -> OwnerToken {
    OwnerToken::from_u128(n)
}

pub(crate) fn fingerprint(n: u8) -> Fingerprint {
    Fingerprint::of_bytes(&[b'f', n])
}

pub(crate) fn value(bytes: &[u8]) -> StoredResult {
    StoredResult::Value(Body::new(bytes))
}

/// A check in progress: the subject, and a judge that follows every record it touches.
pub(crate) struct Session<'a, S> {
    pub(crate) subject: &'a S,
    pub(crate) judge: Judge,
}

impl<'a, S: Subject> Session<'a, S> {
    pub(crate) fn new(subject: &'a S) -> Self {
        Self {
            subject,
            judge: Judge::new(),
        }
    }

    /// Sends `command`, judges the reply, and answers it with the instant it was decided.
    pub(crate) async fn send(
        &mut self,
        (operation, key): &(Operation, Key),
        command: Command,
    ) -> Result<(Reply, Timing), Divergence> {
        match self
            .subject
            .apply_timed(operation, key, command.clone())
            .await
        {
            Ok((reply, timing)) => {
                if let Err(detail) = self.judge.observe(operation, key, &command, &reply, timing) {
                    return Err(self.divergence_of(operation, key, detail));
                }
                Ok((reply, timing))
            }
            Err(error) => {
                let detail = format!("{operation}/{key}: the store failed: {error}");
                self.judge
                    .note_error(operation, key, &command, &error.to_string());
                Err(self.divergence_of(operation, key, detail))
            }
        }
    }

    /// Reads a record without holding the reply to the judge: for a record that commands
    /// the judge did not see (racing ones) have changed.
    pub(crate) async fn send_fresh_read(
        &self,
        (operation, key): &(Operation, Key),
    ) -> Result<(Reply, Timing), Divergence> {
        self.subject
            .apply_timed(operation, key, Command::Read)
            .await
            .map_err(|error| self.divergence(format!("{operation}/{key}: a read failed: {error}")))
    }

    pub(crate) fn divergence(&self, detail: String) -> Divergence {
        Divergence {
            detail,
            history: self.judge.transcript(),
        }
    }

    /// A divergence on one record, with that record's history.
    pub(crate) fn divergence_of(
        &self,
        operation: &Operation,
        key: &Key,
        detail: String,
    ) -> Divergence {
        Divergence {
            detail,
            history: self.judge.transcript_of(operation, key),
        }
    }

    /// The store's clock now, or a divergence saying it could not be read.
    pub(crate) async fn now(&self) -> Result<Timestamp, Divergence> {
        self.subject.now().await.map_err(|error| {
            self.divergence(format!("the store's clock could not be read: {error}"))
        })
    }

    /// Waits until the store's clock reads at least `instant`.
    pub(crate) async fn wait_until(&self, instant: Timestamp) -> Result<(), Divergence> {
        loop {
            let now = self.now().await?;
            if now >= instant {
                return Ok(());
            }
            let left = instant.as_millis() - now.as_millis();
            tokio::time::sleep(Duration::from_millis(left.min(50))).await;
        }
    }
}
