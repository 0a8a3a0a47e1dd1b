//! The record machine: the state of one key and its transitions (MODEL.md, "The record
//! machine").
//!
//! Every store is an implementation of exactly this machine: `MemoryStore` calls
//! [`apply`] under its shard lock, and the Redis adapter's scripts are a second
//! implementation tested step for step against it. [`apply`] is a pure function of
//! (state, command, `now`) to (reply, write); `now` is the **store's** clock.
//!
//! An expired record (its lease or its retention run out at `now`) behaves exactly like an
//! absent one (`I9`): [`apply`] first forgets it, then decides.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::time::Timestamp;
use crate::{Fence, Fingerprint, OwnerToken};

mod live;
mod replay_life;
mod transition;

pub use live::{LiveRecord, LiveReserve, reserve_live};
pub use replay_life::{REPLAY_LIFE_SLACK, replay_life};
pub use transition::{apply, apply_fenced, commits};

/// A stored result: the JSON (or other encoding) of the action's value, as the driver wrote
/// it. The core never looks inside.
///
/// The bytes are shared, not copied, by every clone: the attempt keeps its result while the
/// complete that carries it is out, its outcome hands it to the caller, and a store answers
/// with the record it keeps, each a clone of one body. Equality and hashing are by the
/// bytes.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct Body(Arc<[u8]>);

impl Body {
    /// Wraps encoded bytes, copied once into the block every clone shares (whatever holds
    /// them: a vector, a slice, a string).
    pub fn new(bytes: impl AsRef<[u8]>) -> Self {
        Self(Arc::from(bytes.as_ref()))
    }

    /// The encoded bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The encoded bytes, by value (a copy: the body's own bytes may be shared).
    pub fn into_bytes(self) -> Vec<u8> {
        self.0.to_vec()
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the body is zero bytes long.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Body {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match std::str::from_utf8(&self.0) {
            Ok(text) if text.len() <= 64 => write!(f, "Body({text:?})"),
            Ok(_) | Err(_) => write!(f, "Body({} bytes)", self.0.len()),
        }
    }
}

/// What a completed record holds for the requests that replay it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum StoredResult {
    /// The action succeeded; this is its encoded value, replayed byte for byte (`I8`).
    Value(Body),
    /// The action succeeded, but its value was not kept: it was over the body limit, or the
    /// driver could not encode it (rule 9). The effect happened; a replay says "result not
    /// stored" and never runs the action again.
    NotStored,
    /// The action panicked (or its value panicked while being encoded): whether its effect
    /// happened is unknown. Recording that, rather than releasing the key, is what keeps a
    /// retry from a second effect (rule 11); a replay says "outcome unknown".
    Panicked,
}

impl StoredResult {
    /// The stored value, if there is one.
    pub fn value(&self) -> Option<&Body> {
        match self {
            StoredResult::Value(body) => Some(body),
            StoredResult::NotStored | StoredResult::Panicked => None,
        }
    }
}

/// The state of a key that holds something. An absent key is `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// Reserved: the attempt holding `owner` is running the action, and nobody else may
    /// until `lease_until` (store clock) passes or the owner completes or releases.
    Pending {
        /// Who holds the key.
        owner: OwnerToken,
        /// What request holds it.
        fingerprint: Fingerprint,
        /// When the lease runs out, on the store's clock. The record is expired from this
        /// instant on.
        lease_until: Timestamp,
        /// The fence of this grant (`F1`), on a store that hands fences out; `None` on one
        /// that does not.
        fence: Option<Fence>,
    },
    /// Done: the request's result, replayed to every identical request until `expires_at`.
    Completed {
        /// The attempt that recorded it. Kept so that a complete whose reply was lost can be
        /// retried safely (the retry is recognised, not refused).
        owner: OwnerToken,
        /// What request it answers.
        fingerprint: Fingerprint,
        /// What identical requests are answered with.
        result: StoredResult,
        /// When retention runs out, on the store's clock.
        expires_at: Timestamp,
    },
}

impl Record {
    /// The instant from which the record reads as absent: the end of the lease or of the
    /// retention. A store may drop the record then (Redis: `PEXPIREAT`).
    pub fn expires_at(&self) -> Timestamp {
        match self {
            Record::Pending { lease_until, .. } => *lease_until,
            Record::Completed { expires_at, .. } => *expires_at,
        }
    }

    /// Whether the record has run out at `now`.
    pub fn is_expired(&self, now: Timestamp) -> bool {
        now >= self.expires_at()
    }

    /// The record's owner token.
    pub fn owner(&self) -> OwnerToken {
        match self {
            Record::Pending { owner, .. } | Record::Completed { owner, .. } => *owner,
        }
    }

    /// The fingerprint of the request the record belongs to.
    pub fn fingerprint(&self) -> Fingerprint {
        match self {
            Record::Pending { fingerprint, .. } | Record::Completed { fingerprint, .. } => {
                *fingerprint
            }
        }
    }
}

/// A command to the record of one key. The key itself is the store's business: the machine
/// is the same for every key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Claim the key for `owner`, for `lease` from the store's `now`.
    Reserve {
        /// The attempt's token.
        owner: OwnerToken,
        /// The request's fingerprint.
        fingerprint: Fingerprint,
        /// How long the reservation lasts without renewal.
        lease: Duration,
    },
    /// Record the result of `owner`'s action, kept for `retention` from the store's `now`.
    Complete {
        /// The attempt's token.
        owner: OwnerToken,
        /// The request's fingerprint; used only when the key no longer holds the reservation.
        fingerprint: Fingerprint,
        /// What identical requests will be answered with.
        result: StoredResult,
        /// How long the result is replayed.
        retention: Duration,
    },
    /// Extend `owner`'s lease to `lease` from the store's `now`.
    Renew {
        /// The attempt's token.
        owner: OwnerToken,
        /// The new lease, from now.
        lease: Duration,
    },
    /// Give the key up without a result (the action failed), so a retry may run it again.
    Release {
        /// The attempt's token.
        owner: OwnerToken,
    },
    /// Look at the key without changing it.
    Read,
}

impl Command {
    /// Which command this is.
    pub fn kind(&self) -> CommandKind {
        match self {
            Command::Reserve { .. } => CommandKind::Reserve,
            Command::Complete { .. } => CommandKind::Complete,
            Command::Renew { .. } => CommandKind::Renew,
            Command::Release { .. } => CommandKind::Release,
            Command::Read => CommandKind::Read,
        }
    }

    /// The command's name, for logs and metrics.
    pub fn name(&self) -> &'static str {
        self.kind().name()
    }
}

/// The five commands of the record machine, without their arguments: for counting, logging
/// and naming faults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CommandKind {
    /// [`Command::Reserve`].
    Reserve,
    /// [`Command::Complete`].
    Complete,
    /// [`Command::Renew`].
    Renew,
    /// [`Command::Release`].
    Release,
    /// [`Command::Read`].
    Read,
}

impl CommandKind {
    /// Every kind, in declaration order.
    pub const ALL: [CommandKind; 5] = [
        CommandKind::Reserve,
        CommandKind::Complete,
        CommandKind::Renew,
        CommandKind::Release,
        CommandKind::Read,
    ];

    /// The command's name: `reserve`, `complete`, `renew`, `release` or `read`.
    pub fn name(self) -> &'static str {
        match self {
            CommandKind::Reserve => "reserve",
            CommandKind::Complete => "complete",
            CommandKind::Renew => "renew",
            CommandKind::Release => "release",
            CommandKind::Read => "read",
        }
    }
}

impl fmt::Display for CommandKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a reserve or renew granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reservation {
    /// The holder.
    pub owner: OwnerToken,
    /// When the lease runs out, on the store's clock, if the store read its clock to grant
    /// it. The record machine always says; a store may grant a free key without reading its
    /// clock (the Redis adapter's single-command reserve) and then answers `None` to a
    /// reserve, never to a renew. Nothing in the attempt protocol depends on it: an attempt
    /// counts its lease from its own send (MODEL.md, attempt protocol, lease counting).
    pub lease_until: Option<Timestamp>,
    /// The grant's fence (MODEL.md `F1`): above every fence granted for the key before, and
    /// the same in every renewal of this reservation. `None` from a store that hands out no
    /// fences (MODEL.md, "Which stores hand out fences").
    pub fence: Option<Fence>,
}

/// Why the record machine did not carry out a complete, renew or release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A live record of another owner holds the key: this caller's lease ran out and the key
    /// was taken over (or completed) by someone else.
    NotOwner,
    /// The key holds nothing live: this caller's lease ran out and nobody took the key
    /// (renew, release; a complete records its result instead).
    LeaseLost,
    /// The caller's own completed record holds the key: there is no lease left to renew or
    /// release, and a completed record is never removed before it expires (`I3`).
    AlreadyCompleted,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Refusal::NotOwner => "another owner holds the key",
            Refusal::LeaseLost => "the lease ran out",
            Refusal::AlreadyCompleted => "the key is already completed",
        })
    }
}

/// How a complete was recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completion {
    /// The owner's live reservation became the completed record.
    InTime,
    /// The owner's lease had run out and nobody had taken the key: the result was recorded
    /// all the same, because the effect happened and recording it prevents a second one.
    AfterLeaseExpiry,
    /// The owner had already completed the key (a retried complete whose reply was lost);
    /// the record is unchanged (`I3`).
    Repeated,
}

/// The record machine's answer to a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Reserve: the key is the caller's. Also the answer to a reserve retried by the owner
    /// that already holds the key, with the reservation unchanged (`I11`).
    Reserved(Reservation),
    /// Reserve: an identical request holds the key, live until `lease_until`.
    InFlight {
        /// When the holder's lease runs out unless renewed, on the store's clock. The record
        /// machine always says; a store that answers a live record from its bytes alone
        /// ([`LiveReserve::reply_without_clock`], the Redis fast reserve) leaves it unsaid.
        /// Nothing in the attempt protocol reads it: a waiter's pace is its own backoff.
        lease_until: Option<Timestamp>,
    },
    /// Reserve: an identical request completed; what its record holds.
    Replay {
        /// The stored result.
        result: StoredResult,
        /// How long the record has left at the instant the store answered, on the store's
        /// clock (its `expires_at` minus that `now`), if the store read its clock to answer.
        /// The record machine always says; a store that answers a live record from its
        /// bytes alone ([`LiveReserve::reply_without_clock`], the Redis fast reserve) leaves it unsaid.
        /// Nothing in the attempt protocol reads it: a driver's replay cache does, and keeps
        /// the record for less than this (MODEL.md, "The replay cache").
        remaining: Option<Duration>,
    },
    /// Reserve: the key belongs to a request with another fingerprint (`I4`).
    KeyReuse {
        /// The fingerprint the key is held or completed under.
        stored: Fingerprint,
    },
    /// Complete: the result is recorded.
    Completed(Completion),
    /// Renew: the lease now lasts until the reservation's `lease_until`.
    Renewed(Reservation),
    /// Release: the reservation is gone.
    Released,
    /// Complete, renew or release: nothing changed, and why.
    Refused(Refusal),
    /// Read: the live record, or `None` for an absent or expired key.
    Read(Option<Record>),
}

/// What a store must do to the key after a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    /// Leave the key as it is.
    Unchanged,
    /// Store this record, to expire at [`Record::expires_at`].
    Put(Record),
    /// Remove the key.
    Delete,
}

/// A reply and the write that goes with it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct Transition {
    /// What the caller is told.
    pub reply: Reply,
    /// What the store does to the key.
    pub write: Write,
}

impl Transition {
    fn unchanged(reply: Reply) -> Self {
        Self {
            reply,
            write: Write::Unchanged,
        }
    }

    /// Applies the write to an in-memory state and returns the reply.
    pub fn apply_to(self, state: &mut Option<Record>) -> Reply {
        match self.write {
            Write::Unchanged => {}
            Write::Put(record) => *state = Some(record),
            Write::Delete => *state = None,
        }
        self.reply
    }
}
