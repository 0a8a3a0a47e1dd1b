//! A run: callers on keys, a store variant, and ticks of the clock; run on a platform and
//! judged.

use std::sync::Arc;
use std::time::Duration;

use idem_core::record::CommandKind;
use idem_core::{InFlightPolicy, Options, OptionsError, StoreFailurePolicy};
use shuttle::rand::{Rng, thread_rng};

use idem_check::{Counterexample, History, Variant, check_run};

use crate::caller::{Action, CallerPlan, Fault, FaultKind, Shared, run_caller};
use crate::platform::Platform;
use crate::world::World;

/// Everything one run needs; cheap to clone into a model checker's closure.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The store (and caller protocol) under test.
    pub variant: Variant,
    /// How many keys the store has.
    pub keys: usize,
    /// The keys that hold a corrupt value (not a record) from the start.
    pub corrupt_keys: Vec<usize>,
    /// One thread each.
    pub callers: Vec<CallerPlan>,
    /// Jumps of the clock thread, in ms; empty for no clock thread. Each jump is a step the
    /// schedule can place anywhere, so a lease can run out between any two steps.
    pub clock_ticks: Vec<u64>,
}

impl Scenario {
    /// Runs the scenario once on platform `P` (inside a loom or shuttle model) and returns
    /// its history.
    pub fn run<P: Platform>(&self) -> History {
        let shared = Arc::new(Shared::<P> {
            world: P::lock(World::new(
                self.variant,
                self.keys,
                &self.corrupt_keys,
                &self.callers,
            )),
            clock: P::clock(),
        });
        let variant = self.variant;
        let mut threads = Vec::with_capacity(self.callers.len() + 1);
        for (caller, plan) in self.callers.iter().cloned().enumerate() {
            let shared = Arc::clone(&shared);
            threads.push(P::spawn(move || {
                run_caller(&shared, caller, &plan, variant)
            }));
        }
        if !self.clock_ticks.is_empty() {
            let shared = Arc::clone(&shared);
            let ticks = self.clock_ticks.clone();
            threads.push(P::spawn(move || {
                for tick in ticks {
                    P::advance_by(&shared.clock, tick);
                }
            }));
        }
        for thread in threads {
            P::join(thread);
        }
        P::with(&shared.world, World::take_history)
    }

    /// Whether a scenario of this harness can show `variant`'s bug: not the variants that
    /// rewrite keys, whose bug needs keys longer than 250 characters or two operations, nor
    /// the transactional store's and driver's, whose actions are not transactional here, nor
    /// the downstream key's, since these actions send none, nor the message consumer's,
    /// since these callers are not consumers.
    pub fn can_expose(variant: Variant) -> bool {
        !matches!(
            variant,
            Variant::TruncatedKeys
                | Variant::IgnoresOperation
                | Variant::CommitWithoutOwnerCheck
                | Variant::AbsentCommitRolledBack
                | Variant::DownstreamKeyPerAttempt
                | Variant::AckBeforeRecord
        )
    }

    /// The smallest scenario in which `variant`'s bug can show (for
    /// [`Variant::Correct`], the one where the lease runs out under two callers): one key,
    /// two callers of the same request, one clock tick of a lease. Most store bugs need a
    /// holder whose lease runs out and a second caller that takes over; the caller's role
    /// varies:
    ///
    /// - `ResultCache`, `GrantsEveryReserve`: two callers that overlap, nothing else.
    /// - `CompleteWithoutOwnerCheck`, `LateCompleteInTime`: the stale holder completes
    ///   after its lease ran out.
    /// - `FenceReusedAfterTakeover`: the second caller takes over the holder's expired
    ///   reservation.
    /// - `ReleaseWithoutOwnerCheck`: the stale holder's action fails and it releases.
    /// - `RenewWithoutOwnerCheck`, `IgnoresRenewals`: the holder's action is slow and
    ///   renews.
    /// - `CallerClockExpiry`: the second caller's clock runs more than a lease ahead.
    /// - `CachedFailure`: the holder's action fails, and the second caller comes after.
    /// - `KeyOnlyLookup`: the second caller sends another request under the key.
    /// - `PendingWithoutLease`: the holder crashes, and the second caller waits for it.
    /// - `ReserveForgetsOwner`: the reply to the holder's reserve is lost, and it retries.
    /// - `CorruptReadAsAbsent`: the key holds a corrupt value.
    /// - `PanicAsNotStored`: the holder charges and panics.
    ///
    /// The driver bugs need an abnormal end instead:
    ///
    /// - `ReleaseOnAbandon`: the holder charges and its caller goes away mid-action.
    /// - `PanicReleases`: the holder charges and panics.
    /// - `CorruptFailsOpen`: the key holds a corrupt value (and no lease runs out).
    ///
    /// The variants it cannot expose ([`Scenario::can_expose`]) get the correct store's
    /// scenario, which does not show them.
    pub fn exposing(variant: Variant) -> Result<Self, OptionsError> {
        let options = model_options(InFlightPolicy::Wait, StoreFailurePolicy::FailOpen)?;
        let mut holder = CallerPlan::new(0, 0, options.clone());
        let mut second = CallerPlan::new(0, 0, options);
        let mut clock_ticks = vec![LEASE_MS];
        let mut corrupt_keys = Vec::new();
        match variant {
            Variant::Correct
            | Variant::CompleteWithoutOwnerCheck
            | Variant::LateCompleteInTime
            | Variant::TruncatedKeys
            | Variant::IgnoresOperation
            | Variant::CommitWithoutOwnerCheck
            | Variant::AbsentCommitRolledBack
            | Variant::DownstreamKeyPerAttempt
            | Variant::FenceReusedAfterTakeover
            | Variant::AckBeforeRecord => {}
            Variant::ResultCache | Variant::GrantsEveryReserve => clock_ticks.clear(),
            Variant::ReleaseWithoutOwnerCheck => holder.actions = vec![Action::Fail],
            Variant::RenewWithoutOwnerCheck | Variant::IgnoresRenewals => {
                holder.action_wakeups = 3;
            }
            Variant::CallerClockExpiry => {
                clock_ticks.clear();
                second.skew_ms = i64::try_from(LEASE_MS).unwrap_or(i64::MAX) + 500;
            }
            Variant::CachedFailure => {
                clock_ticks.clear();
                holder.actions = vec![Action::Fail];
            }
            Variant::KeyOnlyLookup => {
                clock_ticks.clear();
                second.request = 1;
            }
            Variant::PendingWithoutLease => holder.actions = vec![Action::Crash],
            Variant::ReserveForgetsOwner => {
                clock_ticks.clear();
                holder.faults.push(Fault {
                    attempt: 0,
                    command: CommandKind::Reserve,
                    nth: 0,
                    kind: FaultKind::ReplyLost,
                });
            }
            Variant::ReleaseOnAbandon => holder.actions = vec![Action::AbandonAfterCharge],
            Variant::PanicReleases | Variant::PanicAsNotStored => {
                holder.actions = vec![Action::PanicAfterCharge];
            }
            Variant::CorruptFailsOpen | Variant::CorruptReadAsAbsent => {
                clock_ticks.clear();
                corrupt_keys.push(0);
            }
        }
        Ok(Self {
            variant,
            keys: 1,
            corrupt_keys,
            callers: vec![holder, second],
            clock_ticks,
        })
    }

    /// A random scenario for shuttle, drawn from shuttle's own random source (so a failing
    /// schedule replays it exactly; call it only inside a shuttle run): five or six callers
    /// on two keys (the second, in one run of eight, holding a corrupt value), some sending
    /// another request under the same key, some with the `Raise` policy or failing closed;
    /// actions that succeed, fail, crash or panic (before or after their charge), quick or
    /// slow enough to renew; callers that go away mid-action or mid-reserve; skewed caller
    /// clocks; lost replies, hung commands (applied or not) and an unreachable store; client
    /// retries; and up to two jumps of the clock.
    pub fn random(variant: Variant) -> Result<Self, OptionsError> {
        const COMMANDS: [CommandKind; 4] = [
            CommandKind::Reserve,
            CommandKind::Renew,
            CommandKind::Complete,
            CommandKind::Release,
        ];
        let mut rng = thread_rng();
        let count = rng.gen_range(5..=6);
        let mut callers = Vec::with_capacity(count);
        for caller in 0..count {
            let policy = if rng.gen_ratio(1, 5) {
                InFlightPolicy::Raise
            } else {
                InFlightPolicy::Wait
            };
            let on_failure = if rng.gen_ratio(1, 2) {
                StoreFailurePolicy::FailOpen
            } else {
                StoreFailurePolicy::FailClosed
            };
            let request = u8::from(rng.gen_ratio(1, 6));
            let mut plan = CallerPlan::new(caller % 2, request, model_options(policy, on_failure)?);
            plan.attempts = rng.gen_range(1..=3);
            plan.actions = (0..plan.attempts)
                .map(|_| match rng.gen_range(0..24) {
                    0..=12 => Action::Succeed,
                    13..=15 => Action::Fail,
                    16..=17 => Action::Crash,
                    18 => Action::PanicAfterCharge,
                    19 => Action::PanicBeforeCharge,
                    20 => Action::AbandonAfterCharge,
                    21 => Action::AbandonBeforeCharge,
                    _ => Action::AbandonMidReserve,
                })
                .collect();
            plan.action_wakeups = rng.gen_range(0..=3);
            plan.skew_ms = rng.gen_range(-300..=300);
            if rng.gen_ratio(1, 3) {
                plan.faults.push(Fault {
                    attempt: rng.gen_range(0..plan.attempts),
                    command: COMMANDS[rng.gen_range(0..COMMANDS.len())],
                    nth: rng.gen_range(0..2),
                    kind: FaultKind::ReplyLost,
                });
            }
            if rng.gen_ratio(1, 4) {
                plan.faults.push(Fault {
                    attempt: rng.gen_range(0..plan.attempts),
                    command: COMMANDS[rng.gen_range(0..COMMANDS.len())],
                    nth: rng.gen_range(0..2),
                    kind: FaultKind::Hung {
                        applied: rng.gen_ratio(1, 2),
                    },
                });
            }
            if rng.gen_ratio(1, 10) {
                plan.faults.extend((0..2).map(|nth| Fault {
                    attempt: 0,
                    command: CommandKind::Reserve,
                    nth,
                    kind: FaultKind::Unreachable,
                }));
            }
            callers.push(plan);
        }
        let corrupt_keys = if rng.gen_ratio(1, 8) {
            vec![1]
        } else {
            Vec::new()
        };
        let clock_ticks = (0..rng.gen_range(0..=2))
            .map(|_| rng.gen_range(200..=1_500))
            .collect();
        Ok(Self {
            variant,
            keys: 2,
            corrupt_keys,
            callers,
            clock_ticks,
        })
    }

    /// Runs the scenario once on `P` and judges the run.
    pub fn check<P: Platform>(&self) -> Result<History, Box<Counterexample>> {
        let history = self.run::<P>();
        check_run(&history).map(|()| history)
    }
}

/// The options of the model runs: a lease of 1 s renewed every 400 ms, a waiter deadline of
/// 1.5 s and backoff from 500 ms, so that a handful of wake-ups reach every instant that
/// matters (a renewal, a lease end, a waiter's last poll), and one retry of a failed store
/// command.
pub fn model_options(
    policy: InFlightPolicy,
    on_store_failure: StoreFailurePolicy,
) -> Result<Options, OptionsError> {
    Options::builder()
        .in_flight(policy)
        .on_store_failure(on_store_failure)
        .lease(Duration::from_millis(1_000))
        .renew_every(Duration::from_millis(400))
        .retention(Duration::from_secs(60))
        .wait_deadline(Duration::from_millis(1_500))
        .backoff_initial(Duration::from_millis(500))
        .backoff_max(Duration::from_millis(1_000))
        .store_retries(1)
        .build()
}

/// One lease of the model options, in ms: the clock tick that lets a lease run out.
pub const LEASE_MS: u64 = 1_000;
