//! What a run of the kit found: one verdict per check, and for a failure the first divergence
//! with the history that led to it.

use std::fmt;
use std::time::Duration;

/// The kit's checks, in the order a run makes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Check {
    /// Every (state, command) pair of the record machine: eight states built through the
    /// store (absent, held, held past its lease, completed with a value, without one, after a
    /// panic, completed past its retention, released) times thirteen commands, each followed
    /// by a read.
    Transitions,
    /// Complete, renew and release by an owner that does not hold the key are refused and
    /// change nothing (rule 4, `I2`).
    Owners,
    /// A lease and a retention end exactly when the store's clock says (rule 10): a key
    /// polled across the end is held up to it and free from it on.
    Expiry,
    /// Reserves racing on one key, free or expired, grant it to exactly one caller (`I1`); a
    /// complete racing a takeover never leaves both.
    Races,
    /// A value the store did not write is answered `Corrupt` by every command and never
    /// changed.
    Corrupt,
    /// The largest result the store promises comes back byte for byte; an empty one too.
    Sizes,
    /// Keys and operations are compared byte for byte: names that differ in case, or by a
    /// character SQL treats as a wildcard, are separate records (`I12`).
    Names,
    /// Random command sequences, with time moving, agree with the record machine step for
    /// step; a failure is shrunk to a short history.
    Differential,
    /// For a store that sends change notices: a waiter told "in flight" is woken when the
    /// holder completes or releases, with its watch registered before its reserve or after,
    /// and when the change lands before the watch is first polled.
    Notices,
}

impl Check {
    /// Every check, in the order a run makes them.
    pub const ALL: [Check; 9] = [
        Check::Transitions,
        Check::Owners,
        Check::Expiry,
        Check::Races,
        Check::Corrupt,
        Check::Sizes,
        Check::Names,
        Check::Differential,
        Check::Notices,
    ];

    /// The check's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Check::Transitions => "transitions",
            Check::Owners => "owners",
            Check::Expiry => "expiry",
            Check::Races => "races",
            Check::Corrupt => "corrupt",
            Check::Sizes => "sizes",
            Check::Names => "names",
            Check::Differential => "differential",
            Check::Notices => "notices",
        }
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The first thing a check found wrong, and how it got there.
#[derive(Debug, Clone)]
pub struct Divergence {
    /// What was wrong.
    pub detail: String,
    /// The commands and replies that led to it, in order, the last one the divergent one
    /// (shrunk, for the differential check).
    pub history: Vec<String>,
}

impl fmt::Display for Divergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.detail)?;
        for line in &self.history {
            writeln!(f, "    {line}")?;
        }
        Ok(())
    }
}

/// A check's verdict.
#[derive(Debug, Clone)]
pub enum Verdict {
    /// Nothing was found wrong; what was tried.
    Passed(String),
    /// The store diverged.
    Failed(Divergence),
    /// The check could not run on this store, and why (never a failure hidden: the report
    /// shows it).
    Skipped(String),
}

/// One check's result.
#[derive(Debug, Clone)]
pub struct CheckResult {
    /// Which check.
    pub check: Check,
    /// What it found.
    pub verdict: Verdict,
    /// How long it took.
    pub elapsed: Duration,
}

/// A run of the kit on one store.
#[derive(Debug, Clone)]
pub struct Report {
    /// The store's name, as the caller gave it.
    pub subject: String,
    /// One result per check, in order.
    pub results: Vec<CheckResult>,
}

impl Report {
    /// Whether no check failed (skipped ones are not failures; [`skipped`](Self::skipped)
    /// lists them).
    pub fn passed(&self) -> bool {
        self.failures().next().is_none()
    }

    /// The checks that failed.
    pub fn failures(&self) -> impl Iterator<Item = &CheckResult> {
        self.results
            .iter()
            .filter(|result| matches!(result.verdict, Verdict::Failed(_)))
    }

    /// The checks that could not run.
    pub fn skipped(&self) -> impl Iterator<Item = &CheckResult> {
        self.results
            .iter()
            .filter(|result| matches!(result.verdict, Verdict::Skipped(_)))
    }

    /// The result of `check`, if the run made it.
    pub fn result(&self, check: Check) -> Option<&CheckResult> {
        self.results.iter().find(|result| result.check == check)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let failed = self.failures().count();
        writeln!(
            f,
            "{}: {}",
            self.subject,
            if failed == 0 {
                "conforms".to_owned()
            } else {
                format!("{failed} check(s) FAILED")
            }
        )?;
        for result in &self.results {
            let ms = result.elapsed.as_millis();
            match &result.verdict {
                Verdict::Passed(what) => {
                    writeln!(f, "  pass  {:<13} {ms:>6} ms  {what}", result.check.name())?
                }
                Verdict::Skipped(why) => {
                    writeln!(f, "  skip  {:<13} {ms:>6} ms  {why}", result.check.name())?
                }
                Verdict::Failed(divergence) => {
                    write!(
                        f,
                        "  FAIL  {:<13} {ms:>6} ms  {divergence}",
                        result.check.name()
                    )?;
                }
            }
        }
        Ok(())
    }
}
