//! The judge: a pure function from a run's [`History`] to the rules of MODEL.md it broke,
//! and the cause of every extra effect.
//!
//! It does not re-run the record machine: it checks what MODEL.md promises, on the store's
//! own clock, from the outside. Every rule is named as MODEL.md names it ([`Rule`]):
//!
//! - at every store step (`steps`, with `sent` for what a command carries and `applied`
//!   for each applied store step): one live holder (`I1`), only the owner completes,
//!   renews or releases (`I2`), a completed record never changes (`I3`), another request is
//!   refused and never replayed (`I4`), nothing but a successful action's result is
//!   recorded (`I5`), a record lives no longer than its holder's leases and an expired one
//!   answers as absent (`I6`, `I9`), a lease never shrinks (`I10`), the holder's repeated
//!   reserve is its reservation unchanged (`I11`), keys are filed as given (`I12`), every
//!   grant is fenced above the ones before (`fences`, `F1`); and what the attempt machine
//!   says of its lease is what the store holds (the lease view);
//! - over the whole run (`effects`, with `honesty` and `answers`): one effect per key, each
//!   extra one carrying an allowed [`Cause`] (`I7`); an outcome that says its lease held
//!   really held it ("I7 reported honestly"); identical requests get identical answers,
//!   each a real result of that request (`I8`, `I4`);
//! - the abnormal ends of rule 11 (`ends`): a panicked action is recorded and replayed as
//!   "outcome unknown" and its key never released; a key that holds no record runs
//!   nothing; the key of an action dropped mid-run is never released; and every attempt
//!   ends, an abandoned one in the settlement its phase calls for (liveness);
//! - effects that commit with the record (`transaction`, `T1`): a transactional action's
//!   writes commit only with the complete that records its result, once per life of the
//!   record, and its outcome says whether they did;
//! - a message consumer's dispositions (`broker`, `C1`): a delivery is acknowledged only
//!   once its message's effect is recorded (or beyond the record's reach, as `I7` reports),
//!   never for a message whose effect never happened, and every message the broker holds is
//!   acknowledged or dead-lettered by the end of the run (liveness);
//! - the provider (`provider`, `D1`): every request carries the downstream key of its
//!   (operation, key), and which requests are effects at the run's [`Provider`] model, each
//!   extra one and each one the provider absorbed counted by its cause.
//!
//! [`Provider`]: crate::Provider
//!
//! A violation names its rule and the event at which it is seen; a [`Counterexample`]
//! prints them with the whole history as a story.
//!
//! Here are the judge's entry ([`judge`], [`check_run`]) and the rules it names ([`Rule`]);
//! what it reports is in `report` ([`Verdict`], [`Violation`], [`Cause`],
//! [`Counterexample`]), and the facts every rule reads, gathered in one pass over the
//! history, in `run`.

mod answers;
mod applied;
mod broker;
mod effects;
mod ends;
mod fences;
mod grouped;
mod honesty;
mod provider;
mod report;
mod run;
mod sent;
mod steps;
mod transaction;

use std::fmt;

use crate::history::History;

pub use report::{Cause, CauseCounts, Counterexample, Verdict, Violation};
use run::Run;

/// A rule of MODEL.md (or of the harness itself) that a run can break.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rule {
    /// One live holder per key.
    I1,
    /// Only the owner completes, renews or releases.
    I2,
    /// A completed record is never changed before it expires.
    I3,
    /// A request with another fingerprint is refused, never answered with the record.
    I4,
    /// Failures are not cached: only a successful action's result is recorded.
    I5,
    /// A dead holder frees its key within one lease.
    I6,
    /// One effect per key, unless an allowed cause explains each extra one.
    I7,
    /// `I7`'s proviso: an outcome that says its lease held (`lease_lost: false`) really
    /// held it, from its grant until its result was recorded.
    I7ReportedHonestly,
    /// Identical requests get identical answers.
    I8,
    /// An expired record behaves as an absent one.
    I9,
    /// A lease never shrinks.
    I10,
    /// Reserve is idempotent for its owner.
    I11,
    /// Keys and operations are never rewritten.
    I12,
    /// The attempt machine says its lease is held (`LeaseState::Held`, confirmed until an
    /// instant) only while the store holds that attempt's reservation, lasting at least
    /// that long.
    LeaseView,
    /// Every attempt that did not crash ends; an abandoned one settles as its phase calls
    /// for, and one its driver did not abandon never ends `Abandoned`.
    Liveness,
    /// Rule 11, a panic: a panicked action's key is completed as "outcome unknown"
    /// (`StoredResult::Panicked`, and only a panicked action's is), never released by its
    /// owner, and every replay of it says "outcome unknown".
    PanicIsOutcomeUnknown,
    /// Rule 11, a value that is not a record: the store never answers for it nor replaces
    /// it, an attempt told "corrupt" runs nothing after that and ends `CorruptRecord`, and
    /// nothing is charged under the key but by an attempt that failed open unanswered.
    CorruptRecordRunsNothing,
    /// Rule 11, an attached call dropped while its action ran: its owner never releases
    /// the key, which stays held until its lease ends.
    DroppedActionKeepsKey,
    /// The driver feeds the attempt machine only inputs it awaits.
    DriverProtocol,
    /// Effects that commit with the record (MODEL.md, "T1"): a transactional action's writes
    /// commit only with the complete that records its result, at most once per life of the
    /// record, never a second time because a holder lost its lease; its outcome says
    /// whether they committed.
    TransactionalEffectOnce,
    /// The downstream key (MODEL.md `D1`): every request an action sends its provider under
    /// one (operation, key) carries the key derived from that operation and key alone, the
    /// same on every attempt, so that a provider that deduplicates by it sees one call.
    DownstreamKeyStable,
    /// The fence (MODEL.md `F1`): on a store that hands fences out, every grant of a key
    /// carries a fence above every fence granted for that key before, and the holder keeps
    /// its own through its renewals.
    FenceIncreasing,
    /// Consumers (MODEL.md `C1`): a delivery is acknowledged only once its message's effect
    /// is recorded: the store applied its attempt's complete, or its attempt was a replay of
    /// a recorded result, or its attempt executed and its complete's outcome is unknown (or
    /// its effect is one `I7` reports: failed open, lease lost). Never a message whose
    /// effect never happened.
    AckAfterRecord,
}

impl Rule {
    /// Every rule, in the order above.
    pub const ALL: [Rule; 23] = [
        Rule::I1,
        Rule::I2,
        Rule::I3,
        Rule::I4,
        Rule::I5,
        Rule::I6,
        Rule::I7,
        Rule::I7ReportedHonestly,
        Rule::I8,
        Rule::I9,
        Rule::I10,
        Rule::I11,
        Rule::I12,
        Rule::LeaseView,
        Rule::Liveness,
        Rule::PanicIsOutcomeUnknown,
        Rule::CorruptRecordRunsNothing,
        Rule::DroppedActionKeepsKey,
        Rule::DriverProtocol,
        Rule::TransactionalEffectOnce,
        Rule::DownstreamKeyStable,
        Rule::FenceIncreasing,
        Rule::AckAfterRecord,
    ];

    /// The rule's name, as MODEL.md writes it.
    pub fn name(self) -> &'static str {
        match self {
            Rule::I1 => "I1",
            Rule::I2 => "I2",
            Rule::I3 => "I3",
            Rule::I4 => "I4",
            Rule::I5 => "I5",
            Rule::I6 => "I6",
            Rule::I7 => "I7",
            Rule::I7ReportedHonestly => "I7 reported honestly",
            Rule::I8 => "I8",
            Rule::I9 => "I9",
            Rule::I10 => "I10",
            Rule::I11 => "I11",
            Rule::I12 => "I12",
            Rule::LeaseView => "lease view",
            Rule::Liveness => "liveness",
            Rule::PanicIsOutcomeUnknown => "R11 panic-is-outcome-unknown",
            Rule::CorruptRecordRunsNothing => "R11 corrupt-record-runs-nothing",
            Rule::DroppedActionKeepsKey => "R11 dropped-action-keeps-key",
            Rule::DriverProtocol => "driver protocol",
            Rule::TransactionalEffectOnce => "T1 transactional-effect-once",
            Rule::DownstreamKeyStable => "D1 downstream-key-stable",
            Rule::FenceIncreasing => "F1 fence-increasing",
            Rule::AckAfterRecord => "C1 ack-after-record",
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Judges one run.
pub fn judge(history: &History) -> Verdict {
    let run = Run::new(history);
    let mut verdict = Verdict::default();
    steps::judge(&run, &mut verdict.violations);
    effects::judge(&run, &mut verdict);
    ends::judge(&run, &mut verdict.violations);
    transaction::judge(&run, &mut verdict);
    provider::judge(&run, &mut verdict);
    broker::judge(&run, &mut verdict.violations);
    verdict
}

/// Judges one run: `Ok` when it keeps every rule, else the counterexample.
pub fn check_run(history: &History) -> Result<(), Box<Counterexample>> {
    let verdict = judge(history);
    if verdict.violations.is_empty() {
        Ok(())
    } else {
        Err(Box::new(Counterexample {
            violations: verdict.violations,
            history: history.clone(),
        }))
    }
}
