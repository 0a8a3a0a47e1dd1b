//! The test harness shared by the driver's test files: a payment provider that keeps the
//! card statement (`idem_check`'s, with its one-effect check), stores that fail on schedule,
//! and the deliberately broken stores of `idem_check`'s catalogue played in front of a
//! MemoryStore ([`InFront`]), plus a store that never notifies, which the checkers must
//! catch.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use idem::{
    Claim, Coordinator, Fingerprint, Key, MemoryStore, Operation, Options, Store, StoreError,
};
use idem_check::{Statement, Variant};
use idem_core::record::{Command, CommandKind, Reply};
use serde::{Deserialize, Serialize};

/// What the payment provider returns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Charge {
    pub id: String,
    pub amount: u64,
}

/// The provider's own failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderTimeout;

impl std::fmt::Display for ProviderTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("provider timed out")
    }
}

impl std::error::Error for ProviderTimeout {}

/// A payment provider that takes `takes` per charge and writes every charge on the
/// statement, under `order:key` (the idempotency key it was given).
#[derive(Debug, Default)]
pub struct Provider {
    statement: Mutex<Statement<String>>,
}

impl Provider {
    pub async fn charge(&self, order: &str, amount: u64, key: &str, takes: Duration) -> Charge {
        tokio::time::sleep(takes).await;
        let mut statement = self.statement.lock().unwrap();
        let id = statement
            .charge(format!("{order}:{key}"), None, 0)
            .id
            .clone();
        Charge { id, amount }
    }

    /// Charges `amount` for `order` under the claim's key: what an action does.
    pub async fn charge_for(
        &self,
        claim: Claim,
        order: &str,
        amount: u64,
        takes: Duration,
    ) -> Result<Charge, ProviderTimeout> {
        Ok(self
            .charge(order, amount, claim.key().as_str(), takes)
            .await)
    }

    /// The charge ids made so far.
    pub fn charges(&self) -> Vec<String> {
        let statement = self.statement.lock().unwrap();
        statement.ids().into_iter().map(str::to_owned).collect()
    }

    /// The `order:key` of every charge, in order.
    pub fn references(&self) -> Vec<String> {
        let statement = self.statement.lock().unwrap();
        statement.lines().iter().map(|c| c.key.clone()).collect()
    }

    /// The statement as it stands.
    pub fn statement(&self) -> Statement<String> {
        self.statement.lock().unwrap().clone()
    }
}

/// `I7` on the card statement, the checker of rule 1: something was charged, and every key
/// exactly once.
pub fn one_effect(provider: &Provider) -> Result<(), String> {
    provider.statement().one_effect_each()
}

pub fn fingerprint(order: &str, amount: u64) -> Fingerprint {
    Fingerprint::builder()
        .field("order_id", order)
        .field("amount", amount)
        .finish()
        .unwrap()
}

/// A coordinator on a fresh MemoryStore with seeded tokens.
pub fn coordinator(options: Options) -> Coordinator<MemoryStore> {
    Coordinator::new(MemoryStore::new(), options).with_seed(7)
}

/// A lease of 30 s (renewed every 10 s), the defaults otherwise.
pub fn defaults() -> idem::OptionsBuilder {
    Options::builder()
}

/// A 1 s lease, a minute's retention, `Raise` for a caller that finds the key held, and
/// fail-open at the first store failure: a holder, a caller that takes its key over and a run
/// while the store is down, each in a few steps.
pub fn takeover_options() -> Options {
    Options::builder()
        .lease(Duration::from_secs(1))
        .retention(Duration::from_secs(60))
        .in_flight(idem::InFlightPolicy::Raise)
        .on_store_failure(idem::StoreFailurePolicy::FailOpen)
        .store_retries(0)
        .build()
        .unwrap()
}

/// How an injected fault behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The command is not applied and fails.
    Fail,
    /// The command is applied, then its reply is lost (the caller sees a failure).
    LoseReply,
    /// The command is answered only after this long.
    Delay(Duration),
    /// The command is never answered (a store that hangs); it is not applied.
    Hang,
    /// The store answers that the key holds a value that is not a record.
    Corrupt,
    /// The store panics (a bug of the store's): the command is not applied.
    Panic,
}

#[derive(Debug)]
struct Rule {
    command: CommandKind,
    calls: std::ops::Range<usize>,
    fault: Fault,
}

/// A store that fails commands on a schedule: the `n`th call of a command (counting from
/// zero) meets the first rule whose range holds `n`; `down` fails every command. It counts
/// the commands and the watches it is asked for, and passes watches to the inner store.
#[derive(Debug)]
pub struct FlakyStore<S> {
    pub inner: S,
    rules: Mutex<Vec<Rule>>,
    calls: Mutex<HashMap<CommandKind, usize>>,
    watches: AtomicUsize,
    down: AtomicBool,
}

impl<S: Store> FlakyStore<S> {
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            rules: Mutex::default(),
            calls: Mutex::default(),
            watches: AtomicUsize::new(0),
            down: AtomicBool::new(false),
        }
    }

    /// Calls `calls` of `command` meet `fault`.
    pub fn fault(self, command: CommandKind, calls: std::ops::Range<usize>, fault: Fault) -> Self {
        self.rules.lock().unwrap().push(Rule {
            command,
            calls,
            fault,
        });
        self
    }

    /// Forgets every scheduled fault.
    pub fn clear_faults(&self) {
        self.rules.lock().unwrap().clear();
    }

    /// Every command fails (not applied) while down.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    /// How many times `command` was called.
    pub fn calls(&self, command: CommandKind) -> usize {
        self.calls
            .lock()
            .unwrap()
            .get(&command)
            .copied()
            .unwrap_or(0)
    }

    /// How many watches were registered (`Store::watch`).
    pub fn watches(&self) -> usize {
        self.watches.load(Ordering::SeqCst)
    }

    fn fault_for(&self, command: CommandKind) -> Option<Fault> {
        if self.down.load(Ordering::SeqCst) {
            self.count(command);
            return Some(Fault::Fail);
        }
        let n = self.count(command);
        let rules = self.rules.lock().unwrap();
        rules
            .iter()
            .find(|rule| rule.command == command && rule.calls.contains(&n))
            .map(|rule| rule.fault)
    }

    fn count(&self, command: CommandKind) -> usize {
        let mut calls = self.calls.lock().unwrap();
        let slot = calls.entry(command).or_default();
        *slot += 1;
        *slot - 1
    }
}

impl<S: Store> Store for FlakyStore<S> {
    async fn apply(
        &self,
        operation: &Operation,
        key: &Key,
        command: Command,
    ) -> Result<Reply, StoreError> {
        match self.fault_for(command.kind()) {
            None => self.inner.apply(operation, key, command).await,
            Some(Fault::Fail) => Err(StoreError::unavailable(&command, "injected: not applied")),
            Some(Fault::LoseReply) => {
                let name = command.clone();
                self.inner.apply(operation, key, command).await?;
                Err(StoreError::unavailable(&name, "injected: reply lost"))
            }
            Some(Fault::Delay(delay)) => {
                tokio::time::sleep(delay).await;
                self.inner.apply(operation, key, command).await
            }
            Some(Fault::Hang) => std::future::pending().await,
            Some(Fault::Corrupt) => Err(StoreError::Corrupt {
                key: format!("{operation}:{key}"),
                detail: "injected: a value that is not a record".into(),
            }),
            Some(Fault::Panic) => panic!("injected: the store panicked"),
        }
    }

    fn changed<'a>(
        &'a self,
        operation: &'a Operation,
        key: &'a Key,
    ) -> impl Future<Output = ()> + Send + 'a {
        self.inner.changed(operation, key)
    }

    fn watch<'a>(
        &'a self,
        operation: &'a Operation,
        key: &'a Key,
    ) -> impl Future<Output = ()> + Send + 'a {
        self.watches.fetch_add(1, Ordering::SeqCst);
        self.inner.watch(operation, key)
    }
}

/// A deliberately broken store of `idem_check`'s catalogue, played in front of a real one
/// (a MemoryStore unless said otherwise): the variant rewrites each command, or answers it
/// itself, and files the record where it would.
#[derive(Debug)]
pub struct InFront<S = MemoryStore> {
    pub inner: S,
    variant: Variant,
}

impl InFront {
    /// `variant` in front of a fresh MemoryStore.
    pub fn new(variant: Variant) -> Self {
        Self::over(variant, MemoryStore::new())
    }
}

impl<S: Store> InFront<S> {
    /// `variant` in front of `inner`.
    pub fn over(variant: Variant, inner: S) -> Self {
        assert!(
            variant.in_front(None, Command::Read).is_some(),
            "{} cannot be played in front of a store",
            variant.name()
        );
        Self { inner, variant }
    }
}

impl<S: Store> Store for InFront<S> {
    async fn apply(
        &self,
        operation: &Operation,
        key: &Key,
        command: Command,
    ) -> Result<Reply, StoreError> {
        // A store that files keys under the key alone shares one scope, named `_`.
        let (filed_operation, filed_key) = self.variant.files_as(operation.as_str(), key.as_str());
        let operation = Operation::new(if filed_operation.is_empty() {
            "_"
        } else {
            filed_operation
        })
        .unwrap();
        let key = Key::new(filed_key).unwrap();
        let live = if self.variant.reads_in_front(&command) {
            match self.inner.apply(&operation, &key, Command::Read).await? {
                Reply::Read(record) => record,
                _ => None,
            }
        } else {
            None
        };
        match self.variant.in_front(live.as_ref(), command) {
            Some(idem_check::InFront::Forward(command)) => {
                self.inner.apply(&operation, &key, command).await
            }
            Some(idem_check::InFront::Answer(reply)) => Ok(reply),
            Some(idem_check::InFront::ForwardThenAnswer(command, reply)) => {
                self.inner.apply(&operation, &key, command).await?;
                Ok(reply)
            }
            None => unreachable!("checked when built"),
        }
    }
}

/// MemoryStore without change notifications: waiters fall back to their backoff.
#[derive(Debug, Default)]
pub struct Silent {
    pub inner: MemoryStore,
}

impl Store for Silent {
    fn apply<'a>(
        &'a self,
        operation: &'a Operation,
        key: &'a Key,
        command: Command,
    ) -> impl Future<Output = Result<Reply, StoreError>> + Send + 'a {
        self.inner.apply(operation, key, command)
    }
}

/// Spawns a call of `payment.charge` under `key` whose action takes `takes`, then returns
/// `result`.
pub fn spawn_call<S: Store>(
    coordinator: &Coordinator<S>,
    key: &'static str,
    fingerprint: Fingerprint,
    takes: Duration,
    result: Result<u32, ProviderTimeout>,
) -> tokio::task::JoinHandle<Result<u32, idem::Error<ProviderTimeout>>> {
    let coordinator = coordinator.clone();
    tokio::spawn(async move {
        coordinator
            .execute(
                "payment.charge",
                key,
                fingerprint,
                move |_claim| async move {
                    tokio::time::sleep(takes).await;
                    result
                },
            )
            .await
    })
}

/// Reads the live record of `key`, as the store sees it now.
pub async fn read<S: Store>(store: &S, operation: &str, key: &str) -> Option<idem_core::Record> {
    read_under(store, &Operation::new(operation).unwrap(), key).await
}

/// As [`read`], under an operation already made (a tenant's, which no name spells).
pub async fn read_under<S: Store>(
    store: &S,
    operation: &Operation,
    key: &str,
) -> Option<idem_core::Record> {
    let key = Key::new(key).unwrap();
    match store.apply(operation, &key, Command::Read).await {
        Ok(Reply::Read(record)) => record,
        other => panic!("read answered {other:?}"),
    }
}

/// The caller's clock in this test, from `start`.
pub fn elapsed_ms(start: tokio::time::Instant) -> u128 {
    start.elapsed().as_millis()
}

/// A small seeded generator (SplitMix64) for command sequences and fault schedules.
#[derive(Debug)]
pub struct Seeded(pub u64);

impl Seeded {
    /// The next number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % n
    }
}
