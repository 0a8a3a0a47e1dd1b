//! A card provider whose statement is the ground truth: it records a charge the moment a
//! request reaches it, whatever happens to the caller afterwards. Every check of an
//! abnormal end is on this statement, not on what the callers were told.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// The statement: charges per idempotency key, in order.
#[derive(Debug, Default)]
pub struct Card {
    charges: Mutex<HashMap<String, u32>>,
}

impl Card {
    /// Charges the card for `key`, at once; returns the charge's id, `ch_N` for the key's
    /// N-th charge.
    pub fn charge(&self, key: &str) -> String {
        let mut charges = self.charges.lock().unwrap();
        let n = charges.entry(key.to_owned()).or_default();
        *n += 1;
        format!("ch_{n}")
    }

    /// How many times `key` was charged.
    pub fn charges(&self, key: &str) -> u32 {
        self.charges.lock().unwrap().get(key).copied().unwrap_or(0)
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

    /// The check: `key` was charged exactly once.
    pub fn one_charge(&self, key: &str) -> Result<(), String> {
        match self.charges(key) {
            1 => Ok(()),
            n => Err(format!("{key} charged {n} times")),
        }
    }
}
