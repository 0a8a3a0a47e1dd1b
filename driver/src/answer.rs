//! What a successful call returns when the caller wants to know where the value came from.

use idem_core::Recording;

/// A call's value and its provenance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer<T> {
    /// The action's value: from this call's execution, or decoded from the stored result.
    pub value: T,
    /// Where the value came from.
    pub provenance: Provenance,
    /// Whether this call found an identical request holding the key and waited for it
    /// (policy `Wait`) before its answer: the holder's result replayed, or the action run
    /// after the holder released the key or let its lease end.
    pub waited: bool,
}

/// Where a call's value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provenance {
    /// The action ran in this call, under a reservation.
    Executed {
        /// Whether the lease lapsed while the action ran: another caller may have run it
        /// too (`I7`'s exception, MODEL.md "Non-guarantees").
        lease_lost: bool,
        /// Whether the result is recorded for replay.
        recording: Recording,
    },
    /// An identical request ran earlier; this is its stored result (`I8`).
    Replayed,
    /// The store could not be reached and the policy is `FailOpen`: the action ran without
    /// a reservation, and a retry in the same window may run it again.
    ExecutedUnprotected {
        /// Whether the result was recorded after all (the store came back in time).
        recording: Recording,
    },
}

impl Provenance {
    /// Whether the action ran in this call.
    pub fn executed(&self) -> bool {
        !matches!(self, Provenance::Replayed)
    }

    /// Whether the value is another call's stored result.
    pub fn replayed(&self) -> bool {
        matches!(self, Provenance::Replayed)
    }
}
