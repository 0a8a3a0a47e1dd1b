//! The call's side of the replay cache (MODEL.md, "The replay cache"): a reserve answered
//! from it with no round trip, and the completed records the call learns of, kept in it.
//!
//! The attempt machine still decides every step: the cache only stands in for the store's
//! answer to one reserve, and gives the answer the store would give (`I3`).

use idem_core::record::{Command, CommandKind, Reply};
use idem_core::{Execution, ProtocolError, Recording, Timestamp};

use super::Call;
use crate::store::Store;

impl<S: Store, C, T, E> Call<S, C, T, E> {
    /// Answers the attempt's `command` from the replay cache if it is a reserve and the cache
    /// holds the key's completed record: the attempt is fed the reply the store would give
    /// (its result, or key reuse for another fingerprint), and nothing is sent.
    pub(super) fn answered_from_cache(
        &mut self,
        command: &Command,
        now: Timestamp,
    ) -> Result<bool, ProtocolError> {
        let (Some(cache), Command::Reserve { fingerprint, .. }) = (&self.cache, command) else {
            return Ok(false);
        };
        let Some(reply) =
            cache.answer(&self.operation, &self.key, *fingerprint, now, &self.metrics)
        else {
            return Ok(false);
        };
        tracing::trace!(
            operation = %self.operation,
            key = %self.key,
            ?reply,
            "answered from the replay cache"
        );
        self.guard.attempt.handle_reply(reply, now)?;
        Ok(true)
    }

    /// Notes what a command sent at `now` may teach the cache: when the reserve left (a
    /// replay's remaining time counts from there), and the first complete's instant and
    /// result (the record it writes lives its retention from no earlier than that).
    pub(super) fn sending(&mut self, command: &Command, now: Timestamp) {
        if self.cache.is_none() {
            return;
        }
        match command {
            Command::Reserve { .. } => self.reserve_sent = now,
            Command::Complete { result, .. } if self.completing.is_none() => {
                self.completing = Some((now, result.clone()));
            }
            _ => {}
        }
    }

    /// Keeps a completed record the store replayed to the reserve, if the store said how
    /// long it has left.
    pub(super) fn store_replied(&self, kind: CommandKind, reply: &Reply, now: Timestamp) {
        let (Some(cache), CommandKind::Reserve) = (&self.cache, kind) else {
            return;
        };
        if let Reply::Replay {
            result,
            remaining: Some(remaining),
        } = reply
        {
            cache.keep(
                &self.operation,
                &self.key,
                self.guard.attempt.fingerprint(),
                result.clone(),
                self.reserve_sent,
                *remaining,
                now,
                &self.metrics,
            );
        }
    }

    /// Keeps the record this call's own complete wrote, once the attempt says it is
    /// recorded (committed, for a transactional call).
    pub(super) fn completed(&mut self, execution: &Execution, now: Timestamp) {
        if !matches!(
            execution.record,
            Recording::Stored | Recording::StoredWithoutBody
        ) {
            return;
        }
        let (Some(cache), Some((sent, result))) = (&self.cache, self.completing.take()) else {
            return;
        };
        cache.keep(
            &self.operation,
            &self.key,
            self.guard.attempt.fingerprint(),
            result,
            sent,
            self.guard.attempt.options().retention(),
            now,
            &self.metrics,
        );
    }
}
