//! The exhaustive model: every run of a few callers on one key, judged.
//!
//! loom and shuttle run the callers as threads and explore the schedules of their steps (loom
//! up to a preemption bound, shuttle by sampling). This model explores everything within its
//! bounds instead: every order of the callers' steps, every instant the clock can move to,
//! every placement of the run's store faults (a reply lost, the store unreachable, a command
//! that hangs and lands, or not, when the attempt gives it up), of a holder's crash and of a
//! holder's pause past its lease. It drives the same machines (the real `Attempt`, the real
//! `record::apply` or a broken variant of it, with fences) as the same driver would, writes
//! the same history, and asks the same judge of every run that ends ([`state`] for the
//! steps, [`mod@walk`] for the walk).
//!
//! A state holds the history written so far, so the state space is a tree and nothing is
//! merged: the count of states is the count of distinct partial runs, and a counterexample is
//! a whole run the judge reads, the shortest the model has.
//!
//! `cargo test -p idem-tests --release --test exhaustive` runs the two-caller scenarios and
//! every broken variant; `cargo run -p idem-tests --release --example exhaustive -- --callers
//! 3` the three-caller ones (MODEL.md, "The exhaustive model").

pub mod state;
pub mod walk;

use std::fmt;
use std::time::{Duration, Instant};

use idem_check::Variant;
use idem_core::{InFlightPolicy, OptionsError, StoreFailurePolicy};

use crate::caller::{Action, CallerPlan};
use crate::scenario::{LEASE_MS, Scenario, model_options};

pub use state::{Budget, Choice, State};
pub use walk::{Walked, walk};

/// How long a paused holder sleeps: past its lease, so that another caller can take the key
/// over, and back before the waiter's deadline runs out.
pub const PAUSE_MS: u64 = LEASE_MS + 100;

/// A bounded model: callers on one key, a store variant, and how many faults a run may
/// have.
#[derive(Debug, Clone)]
pub struct Model {
    /// What the report calls it.
    pub name: String,
    /// The store (and driver) under test.
    pub variant: Variant,
    /// The callers, all on key 0.
    pub callers: Vec<CallerPlan>,
    /// Whether key 0 starts out holding a value that is not a record.
    pub corrupt: bool,
    /// The faults each run may use.
    pub budget: Budget,
    /// Whether the actions' effects are writes that commit with the record (MODEL.md,
    /// "Effects that commit with the record").
    pub transactional: bool,
}

impl Model {
    /// The first state of the model.
    pub fn first_state(&self) -> State {
        let corrupt: &[usize] = if self.corrupt { &[0] } else { &[] };
        State::new(
            self.variant,
            1,
            corrupt,
            &self.callers,
            self.budget,
            PAUSE_MS,
            self.transactional,
        )
    }

    /// Walks every run of the model on `threads` threads.
    pub fn check(&self, threads: usize) -> Report {
        let started = Instant::now();
        let walked = walk(self.first_state(), threads);
        Report {
            name: self.name.clone(),
            variant: self.variant,
            walked,
            took: started.elapsed(),
        }
    }

    /// The smallest model in which `variant`'s bug can show: the callers of loom's and
    /// shuttle's scenario for it ([`Scenario::exposing`]), with one store fault, one crash
    /// and one pause (which is how a lease runs out here: the clock moves only at the
    /// callers' own instants).
    ///
    /// A transactional store's variant (`commit-without-owner-check`) gets the correct
    /// store's callers with transactional actions: the holder paused past its lease commits
    /// its writes although another caller took the key over and committed its own.
    pub fn exposing(variant: Variant) -> Result<Self, OptionsError> {
        let transactional = variant == Variant::CommitWithoutOwnerCheck;
        let scenario = Scenario::exposing(if transactional {
            Variant::Correct
        } else {
            variant
        })?;
        Ok(Self {
            name: variant.name().to_owned(),
            variant,
            callers: scenario.callers,
            corrupt: !scenario.corrupt_keys.is_empty(),
            budget: Budget {
                store_faults: 1,
                crashes: 1,
                pauses: 1,
            },
            transactional,
        })
    }

    /// Whether [`Model::exposing`] can show `variant`'s bug: those of loom's and shuttle's
    /// scenarios ([`Scenario::can_expose`]) and the transactional store's. Not the driver's
    /// read after a lost commit reply (`absent-commit-rolled-back`), which needs an insert that
    /// commits after the read: here a command that hangs lands at the latest when its
    /// attempt gives it up, before the read is sent (the simulation's late commits show it).
    pub fn can_expose(variant: Variant) -> bool {
        Scenario::can_expose(variant) || variant == Variant::CommitWithoutOwnerCheck
    }

    /// The models of `callers` callers (2 or 3) on one key against the correct store: each
    /// a set of what the callers' actions do (the first caller's vary, the others succeed),
    /// its policies and whether its actions are transactional, with store faults (two for
    /// two callers, one for three), one crash and one pause placed everywhere they can go.
    pub fn correct(callers: usize) -> Result<Vec<Self>, OptionsError> {
        let wait_closed = model_options(InFlightPolicy::Wait, StoreFailurePolicy::FailClosed)?;
        let wait_open = model_options(InFlightPolicy::Wait, StoreFailurePolicy::FailOpen)?;
        let raise = model_options(InFlightPolicy::Raise, StoreFailurePolicy::FailClosed)?;
        // Each store fault multiplies the runs by about sixty: two for two callers, one for
        // three, keep the walk within minutes (MODEL.md, "The exhaustive model").
        let budget = Budget {
            store_faults: if callers <= 2 { 2 } else { 1 },
            crashes: 1,
            pauses: 1,
        };
        let caller = |request: u8, options: &idem_core::Options, actions: &[Action]| {
            let mut plan = CallerPlan::new(0, request, options.clone());
            plan.actions = actions.to_vec();
            plan.attempts = 2;
            plan.action_wakeups = 2;
            plan
        };
        // What the first caller's actions do; every other caller succeeds.
        let holders: [(&str, &[Action]); 5] = [
            ("succeed", &[Action::Succeed]),
            ("fail then succeed", &[Action::Fail, Action::Succeed]),
            ("panic after charging", &[Action::PanicAfterCharge]),
            (
                "abandoned mid-action",
                &[Action::AbandonAfterCharge, Action::Succeed],
            ),
            (
                "abandoned mid-reserve",
                &[Action::AbandonMidReserve, Action::Succeed],
            ),
        ];
        let mut models = Vec::new();
        for (what, actions) in holders {
            for (policy, options, transactional) in [
                ("wait, fail-closed", &wait_closed, false),
                ("wait, fail-open", &wait_open, false),
                ("wait, fail-closed, transactional", &wait_closed, true),
            ] {
                let mut plans = vec![caller(0, options, actions)];
                plans.extend((1..callers).map(|_| caller(0, options, &[Action::Succeed])));
                models.push(Self {
                    name: format!("{callers} callers, holder: {what}; {policy}"),
                    variant: Variant::Correct,
                    callers: plans,
                    corrupt: false,
                    budget,
                    transactional,
                });
            }
        }
        let mut plans = vec![caller(0, &raise, &[Action::Succeed])];
        plans.extend((1..callers).map(|n| caller(u8::from(n == 1), &raise, &[Action::Succeed])));
        models.push(Self {
            name: format!("{callers} callers, raise, two requests under the key"),
            variant: Variant::Correct,
            callers: plans,
            corrupt: false,
            budget,
            transactional: false,
        });
        let mut plans: Vec<CallerPlan> = (0..callers)
            .map(|_| caller(0, &wait_open, &[Action::Succeed]))
            .collect();
        if let Some(first) = plans.first_mut() {
            first.attempts = 1;
        }
        models.push(Self {
            name: format!("{callers} callers, a key that holds no record"),
            variant: Variant::Correct,
            callers: plans,
            corrupt: true,
            budget,
            transactional: false,
        });
        Ok(models)
    }
}

/// What walking one model found.
#[derive(Debug)]
pub struct Report {
    /// The model's name.
    pub name: String,
    /// Its store variant.
    pub variant: Variant,
    /// The counts, and the shortest counterexample.
    pub walked: Walked,
    /// How long the walk took.
    pub took: Duration,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} states, {} runs, depth {}, up to {} events, {:.1} s",
            self.name,
            self.walked.states,
            self.walked.runs,
            self.walked.depth,
            self.walked.events,
            self.took.as_secs_f64()
        )?;
        if let Some(events) = self.walked.counterexample_events() {
            write!(f, "; shortest counterexample: {events} events")?;
        }
        Ok(())
    }
}
