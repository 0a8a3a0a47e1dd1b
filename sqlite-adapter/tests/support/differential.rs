//! The differential checker: random command sequences, with time moving, applied to the
//! core's record machine and to a store; every reply must agree, step for step.
//!
//! The store reports the instant of its clock each command was judged by; the model is
//! stepped at that same instant, so the comparison is exact although the clock is real.
//! The model hands a grant the fence the store granted, and the checker holds each key's
//! grants to F1: every fence above the ones before it; renewals, repeated reserves and
//! reads must then show the model's (the holder's) fence. Leases and retentions of a few
//! milliseconds, with sleeps between steps, make expiry happen often.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use idem::StoreError;
use idem_core::record::{Command, Record, Reply, StoredResult, apply_fenced};
use idem_core::{Body, Fence, Fingerprint, Key, Operation, OwnerToken, Timestamp};
use idem_sqlite::SqliteStore;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

#[derive(Debug, Clone)]
pub enum Step {
    /// A command on record `slot` (0..4: two keys under two operations).
    Send { slot: usize, command: Command },
    /// Let the clock move.
    Sleep(u64),
}

fn command() -> impl Strategy<Value = Command> {
    let owner = (1..=3_u128).prop_map(OwnerToken::from_u128);
    let fp = (0..2_u8).prop_map(|n| Fingerprint::of_bytes(&[n]));
    let ms = |max: u64| (0..max).prop_map(Duration::from_millis);
    let body = prop_oneof![
        4 => proptest::collection::vec(any::<u8>(), 0..8)
            .prop_map(|bytes| StoredResult::Value(Body::new(bytes))),
        1 => Just(StoredResult::NotStored),
        1 => Just(StoredResult::Panicked),
    ];
    prop_oneof![
        3 => (owner.clone(), fp.clone(), ms(40)).prop_map(|(owner, fingerprint, lease)| {
            Command::Reserve { owner, fingerprint, lease }
        }),
        2 => (owner.clone(), fp, body, ms(80)).prop_map(|(owner, fingerprint, body, retention)| {
            Command::Complete { owner, fingerprint, result: body, retention }
        }),
        2 => (owner.clone(), ms(40)).prop_map(|(owner, lease)| Command::Renew { owner, lease }),
        1 => owner.prop_map(|owner| Command::Release { owner }),
        1 => Just(Command::Read),
    ]
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let step = prop_oneof![
        4 => (0..4_usize, command()).prop_map(|(slot, command)| Step::Send { slot, command }),
        1 => (0..25_u64).prop_map(Step::Sleep),
    ];
    proptest::collection::vec(step, 1..16)
}

/// A store that says at which instant of its clock it decided: the real one, or a broken
/// one.
pub trait TimedStore {
    async fn apply_timed(
        &self,
        operation: &Operation,
        key: &Key,
        command: Command,
    ) -> Result<(Reply, Timestamp), StoreError>;
}

impl TimedStore for SqliteStore {
    async fn apply_timed(
        &self,
        operation: &Operation,
        key: &Key,
        command: Command,
    ) -> Result<(Reply, Timestamp), StoreError> {
        SqliteStore::apply_timed(self, operation, key, command).await
    }
}

/// Fresh keys for every case, so cases never see each other's records.
fn names(case: u64) -> Vec<(Operation, Key)> {
    let mut out = Vec::new();
    for operation in ["payment.charge", "order.cancel"] {
        for key in ["a", "b"] {
            out.push((
                Operation::new(operation).unwrap(),
                Key::new(format!("case-{case}-{key}")).unwrap(),
            ));
        }
    }
    out
}

pub async fn run_case(store: &impl TimedStore, steps: &[Step], case: u64) -> Result<(), String> {
    let names = names(case);
    let mut model: HashMap<usize, Option<Record>> = HashMap::new();
    let mut last_fence: HashMap<usize, Fence> = HashMap::new();
    for (i, step) in steps.iter().enumerate() {
        match step {
            Step::Sleep(ms) => tokio::time::sleep(Duration::from_millis(*ms)).await,
            Step::Send { slot, command } => {
                let (operation, key) = &names[*slot];
                let (got, now) = store
                    .apply_timed(operation, key, command.clone())
                    .await
                    .map_err(|e| format!("step {i}: store error {e}"))?;
                let state = model.entry(*slot).or_default();
                let granted = match &got {
                    Reply::Reserved(reservation) => reservation.fence,
                    _ => None,
                };
                let mut drawn = None;
                let transition = apply_fenced(state.as_ref(), command.clone(), now, || {
                    // A grant without a fence disagrees with the model's below.
                    let fence = granted.unwrap_or(Fence::MIN);
                    drawn = Some(fence);
                    fence
                });
                if let (Some(fence), Some(granted)) = (drawn, granted)
                    && let Some(last) = last_fence.insert(*slot, fence)
                    && granted <= last
                {
                    return Err(format!(
                        "step {i}: F1: {command:?} on slot {slot} granted {granted:?}, \
                         not above the earlier {last:?}"
                    ));
                }
                if drawn.is_some() && granted.is_none() {
                    return Err(format!("step {i}: F1: a grant without a fence"));
                }
                if got != transition.reply {
                    return Err(format!(
                        "step {i}: {command:?} on slot {slot} at {now:?} on {state:?}: \
                         sqlite {got:?}, model {:?}",
                        transition.reply
                    ));
                }
                transition.apply_to(state);
            }
        }
    }
    Ok(())
}

/// Runs `cases` random sequences; the first disagreement, shrunk, is the error.
pub fn check(
    runtime: &tokio::runtime::Runtime,
    store: &impl TimedStore,
    cases: u32,
) -> Result<(), String> {
    static CASE: AtomicU64 = AtomicU64::new(0);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&steps(), |steps| {
            let case = CASE.fetch_add(1, Ordering::Relaxed);
            runtime
                .block_on(run_case(store, &steps, case))
                .map_err(TestCaseError::fail)
        })
        .map_err(|e| e.to_string())
}
