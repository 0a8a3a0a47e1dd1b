//! A card provider whose statement is the ground truth: it records a charge the moment a
//! request reaches it, whatever happens to the caller afterwards. Every check of an
//! abnormal end is on this statement (`idem_check`'s), not on what the callers were told.

use std::sync::Mutex;
use std::time::Duration;

use idem_check::Statement;

/// The statement: every charge, under its idempotency key, in order.
#[derive(Debug, Default)]
pub struct Card {
    statement: Mutex<Statement<String>>,
}

impl Card {
    /// Charges the card for `key`, at once; returns the charge's id, `ch_N` for the
    /// statement's N-th charge.
    pub fn charge(&self, key: &str) -> String {
        let mut statement = self.statement.lock().unwrap();
        statement.charge(key.to_owned(), None, 0).id.clone()
    }

    /// How many times `key` was charged.
    pub fn charges(&self, key: &str) -> usize {
        self.statement.lock().unwrap().count(&key.to_owned())
    }

    /// Waits until `key` has been charged at least once (at most a few seconds).
    pub async fn charged(&self, key: &str) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while self.charges(key) == 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{key} was never charged"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// The check, `I7` on the statement: `key` was charged exactly once.
    pub fn one_effect(&self, key: &str) -> Result<(), String> {
        self.statement.lock().unwrap().one_effect(&key.to_owned())
    }
}
