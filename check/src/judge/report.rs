//! What the judge reports: each broken rule and where it was seen ([`Violation`]), the
//! verdict on a run with its extra effects counted by the cause that allows them
//! ([`Cause`], MODEL.md `I7` and "Non-guarantees"), and a run that broke a rule printed
//! with its whole history ([`Counterexample`]).

use std::collections::BTreeSet;
use std::fmt;

use super::Rule;
use crate::history::History;
use crate::tally::{Class, Tally};

/// Why an extra effect (a second charge under one key) is allowed (MODEL.md, `I7` and
/// "Non-guarantees").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cause {
    /// An attempt that charged ran unprotected because the store was unreachable.
    FailOpen,
    /// An attempt that charged reported `lease_lost`: its lease ran out during the action.
    LeaseExpired,
    /// A holder crashed after charging, before recording; its lease ran out before the
    /// holder of another charge got the key, and nobody got it before.
    HolderCrashed,
    /// An attached call was dropped while its action ran (`Abandoned(ActionDropped)`) and
    /// the action charged; its key was left to its lease exactly as after a crash.
    AbandonedMidAction,
    /// An attempt that charged could not record its result (`Recording::Unknown`).
    CompleteUnknown,
    /// The charge came after an earlier result's retention had run out.
    RetentionExpired,
}

impl Cause {
    /// Every cause, in the order summaries print them.
    pub const ALL: [Cause; 6] = [
        Cause::FailOpen,
        Cause::LeaseExpired,
        Cause::HolderCrashed,
        Cause::AbandonedMidAction,
        Cause::CompleteUnknown,
        Cause::RetentionExpired,
    ];

    /// The cause's name in summaries.
    pub fn name(self) -> &'static str {
        match self {
            Cause::FailOpen => "fail-open",
            Cause::LeaseExpired => "lease-expired",
            Cause::HolderCrashed => "holder-crashed",
            Cause::AbandonedMidAction => "abandoned-mid-action",
            Cause::CompleteUnknown => "complete-unknown",
            Cause::RetentionExpired => "retention-expired",
        }
    }
}

impl Class for Cause {
    const ALL: &'static [Self] = &Cause::ALL;
    const KIND: &'static str = "cause";
    fn name(self) -> &'static str {
        Cause::name(self)
    }
    fn index(self) -> usize {
        self as usize
    }
}

/// Extra effects counted by cause, in room for the causes alone.
pub type CauseCounts = Tally<Cause, { Cause::ALL.len() }>;

/// One broken rule, where it was seen, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The rule.
    pub rule: Rule,
    /// The event (an index into the history) at which it is seen, if one.
    pub event: Option<usize>,
    /// That event's time, on the store's clock.
    pub at: Option<u64>,
    /// What happened, for a person.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} violated", self.rule)?;
        if let (Some(event), Some(at)) = (self.event, self.at) {
            write!(f, " at #{event} (t+{at})")?;
        }
        write!(f, ": {}", self.detail)
    }
}

/// What the judge found in one run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Every rule broken, in the order found.
    pub violations: Vec<Violation>,
    /// The extra effects, each counted under the cause that allows it (transactional
    /// effects apart).
    pub extra: CauseCounts,
    /// The extra effects that committed with the record (transactional), by cause: only
    /// `retention-expired` is allowed; one counted under another cause (a lease lost, a
    /// holder crashed or dropped) is also a violation of `T1`.
    pub extra_transactional: CauseCounts,
    /// The extra effects at the run's provider (MODEL.md `D1`, `F1`), by cause: the same as
    /// [`extra`](Self::extra) at a provider without idempotency, none at one that
    /// deduplicates by the downstream key, only the runs that failed open at one that keeps a
    /// value per key under fences.
    pub extra_at_provider: CauseCounts,
    /// The extra calls that reached the provider and left no effect there, by the cause that
    /// made them extra: answered with the effect of their downstream key, refused as stale,
    /// or replaced by a newer holder's write. With
    /// [`extra_at_provider`](Self::extra_at_provider) it adds up to [`extra`](Self::extra).
    pub absorbed: CauseCounts,
    /// Stale writes at the run's provider: writes it applied made by a holder whose grant is
    /// older than the grant of a holder whose write it had already applied under the key (a
    /// holder paused past its lease whose request lands after its successor's, overwriting
    /// newer state). A provider that honours fences refuses every one (MODEL.md `F1`).
    pub stale_at_provider: u64,
    /// Of [`extra`](Self::extra), the extra effects under the keys of messages a broker
    /// delivered (MODEL.md `C1`), by cause.
    pub extra_messages: CauseCounts,
    /// Of [`extra_transactional`](Self::extra_transactional), those under the keys of
    /// messages, by cause.
    pub extra_transactional_messages: CauseCounts,
}

impl Verdict {
    /// Counts one extra effect under `cause`: committed with the record or not, under a
    /// message's key or not.
    pub(super) fn count_extra(&mut self, cause: Cause, transactional: bool, message: bool) {
        match (transactional, message) {
            (false, false) => self.extra.add(cause),
            (false, true) => {
                self.extra.add(cause);
                self.extra_messages.add(cause);
            }
            (true, false) => self.extra_transactional.add(cause),
            (true, true) => {
                self.extra_transactional.add(cause);
                self.extra_transactional_messages.add(cause);
            }
        }
    }

    /// Whether `rule` is among the broken rules.
    pub fn breaks(&self, rule: Rule) -> bool {
        self.violations.iter().any(|v| v.rule == rule)
    }

    /// The broken rules, without repeats.
    pub fn rules(&self) -> BTreeSet<Rule> {
        self.violations.iter().map(|v| v.rule).collect()
    }
}

/// A run that broke at least one rule: the violations and the whole history, which its
/// `Display` prints as a story.
#[derive(Debug, Clone)]
pub struct Counterexample {
    /// Every rule broken, in the order found.
    pub violations: Vec<Violation>,
    /// The run.
    pub history: History,
}

impl Counterexample {
    /// Whether `rule` is among the broken rules.
    pub fn breaks(&self, rule: Rule) -> bool {
        self.violations.iter().any(|v| v.rule == rule)
    }

    /// The broken rules, without repeats.
    pub fn rules(&self) -> BTreeSet<Rule> {
        self.violations.iter().map(|v| v.rule).collect()
    }
}

impl fmt::Display for Counterexample {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "counterexample: {} violation(s)", self.violations.len())?;
        for violation in &self.violations {
            writeln!(f, "  {violation}")?;
        }
        writeln!(f, "history (times on the store's clock, ms):")?;
        write!(f, "{}", self.history)
    }
}

impl std::error::Error for Counterexample {}
