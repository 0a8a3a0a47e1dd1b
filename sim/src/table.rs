//! The article's scenarios, as data: each row's calls, timings, store and policies, and
//! the responses and charges it must produce. The simulation runs them on simulated time
//! ([`Scenario::simulate`]); other modes (a real store) can run the same rows and compare
//! with the same expectations.

use idem_core::{Fingerprint, InFlightPolicy, Key, Operation, Options, StoreFailurePolicy};

use crate::explore::run_plan;
use crate::plan::{
    ActionPlan, CALLER_EPOCH, ClientPlan, NetworkPlan, Outage, OutageKind, Plan, PlanError, Slot,
};
use idem_check::Variant;

use crate::report::{Response, RunReport};

/// The store a row runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableStore {
    /// idem's reservation protocol.
    Idem,
    /// The naive result cache (deliberately broken, [`Variant::ResultCache`]).
    ResultCache,
    /// idem, with the store unreachable for the whole row.
    Unreachable,
}

/// One request of a row: when it is sent (same key every time), its amount, and how the
/// provider treats it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Call {
    /// When the request is sent, ms after the row starts.
    pub at_ms: u64,
    /// The amount (with the key, what makes the fingerprint).
    pub amount: u32,
    /// How long the provider takes, ms.
    pub provider_ms: u64,
    /// Whether the provider times out without charging.
    pub provider_fails: bool,
}

const fn call(at_ms: u64, amount: u32, provider_ms: u64) -> Call {
    Call {
        at_ms,
        amount,
        provider_ms,
        provider_fails: false,
    }
}

/// One row of the article's tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scenario {
    /// The label that starts the row's line.
    pub label: &'static str,
    /// What the row shows.
    pub description: &'static str,
    /// The store.
    pub store: TableStore,
    /// The in-flight policy of every call.
    pub in_flight: InFlightPolicy,
    /// The store-failure policy of every call.
    pub on_store_failure: StoreFailurePolicy,
    /// The requests, all under one key.
    pub calls: &'static [Call],
    /// The response of each call, in call order.
    pub expected_responses: &'static [&'static str],
    /// The card statement.
    pub expected_charges: &'static [&'static str],
}

/// The article's rows: the first table (the provider takes 300 ms, the client retries
/// after 50 ms), then key reuse, a failing first call, and an unreachable store.
pub const SCENARIOS: &[Scenario] = &[
    Scenario {
        label: "result-cache",
        description: "a result cache: consistent answers, two charges",
        store: TableStore::ResultCache,
        in_flight: InFlightPolicy::Wait,
        on_store_failure: StoreFailurePolicy::FailOpen,
        calls: &[call(0, 100, 300), call(50, 100, 300)],
        expected_responses: &["ch_1", "ch_1"],
        expected_charges: &["ch_1", "ch_2"],
    },
    Scenario {
        label: "wait",
        description: "reservation, the retry waits for the first result (default)",
        store: TableStore::Idem,
        in_flight: InFlightPolicy::Wait,
        on_store_failure: StoreFailurePolicy::FailOpen,
        calls: &[call(0, 100, 300), call(50, 100, 300)],
        expected_responses: &["ch_1", "ch_1"],
        expected_charges: &["ch_1"],
    },
    Scenario {
        label: "raise",
        description: "reservation, the retry is told the first is in progress (409)",
        store: TableStore::Idem,
        in_flight: InFlightPolicy::Raise,
        on_store_failure: StoreFailurePolicy::FailOpen,
        calls: &[call(0, 100, 300), call(50, 100, 300)],
        expected_responses: &["ch_1", "InProgressError"],
        expected_charges: &["ch_1"],
    },
    Scenario {
        label: "same-amount",
        description: "same key, same amount: replayed",
        store: TableStore::Idem,
        in_flight: InFlightPolicy::Wait,
        on_store_failure: StoreFailurePolicy::FailOpen,
        calls: &[call(0, 100, 300), call(1_000, 100, 300)],
        expected_responses: &["ch_1", "ch_1"],
        expected_charges: &["ch_1"],
    },
    Scenario {
        label: "other-amount",
        description: "same key, amount 5: refused as key reuse (422)",
        store: TableStore::Idem,
        in_flight: InFlightPolicy::Wait,
        on_store_failure: StoreFailurePolicy::FailOpen,
        calls: &[call(0, 100, 300), call(1_000, 5, 300)],
        expected_responses: &["ch_1", "KeyReuseError"],
        expected_charges: &["ch_1"],
    },
    Scenario {
        label: "failure-then-retry",
        description: "the provider times out, the retry charges once: failures are not cached",
        store: TableStore::Idem,
        in_flight: InFlightPolicy::Wait,
        on_store_failure: StoreFailurePolicy::FailOpen,
        calls: &[
            Call {
                provider_fails: true,
                ..call(0, 100, 300)
            },
            call(1_000, 100, 300),
        ],
        expected_responses: &["ActionFailed", "ch_1"],
        expected_charges: &["ch_1"],
    },
    Scenario {
        label: "fail-open",
        description: "store unreachable, fail open: the action runs anyway",
        store: TableStore::Unreachable,
        in_flight: InFlightPolicy::Wait,
        on_store_failure: StoreFailurePolicy::FailOpen,
        calls: &[call(0, 100, 300)],
        expected_responses: &["ch_1"],
        expected_charges: &["ch_1"],
    },
    Scenario {
        label: "fail-closed",
        description: "store unreachable, fail closed: nothing runs (503)",
        store: TableStore::Unreachable,
        in_flight: InFlightPolicy::Wait,
        on_store_failure: StoreFailurePolicy::FailClosed,
        calls: &[call(0, 100, 300)],
        expected_responses: &["StoreUnavailableError"],
        expected_charges: &[],
    },
];

/// What a row produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowResult {
    /// Each call's response, in call order (`"-"` for none).
    pub responses: Vec<String>,
    /// The charge ids on the card statement.
    pub charges: Vec<String>,
}

impl RowResult {
    /// Whether the row produced what the scenario expects.
    pub fn matches(&self, scenario: &Scenario) -> bool {
        self.responses
            .iter()
            .map(String::as_str)
            .eq(scenario.expected_responses.iter().copied())
            && self
                .charges
                .iter()
                .map(String::as_str)
                .eq(scenario.expected_charges.iter().copied())
    }

    /// The row's line: the label, then `responses=[..]` and `charges=[..]`.
    pub fn line(&self, scenario: &Scenario) -> String {
        format!(
            "{:<19} responses=[{}]  charges=[{}]  {}",
            scenario.label,
            self.responses.join(", "),
            self.charges.join(", "),
            scenario.description
        )
    }
}

impl Scenario {
    /// The row on simulated time, with the simulation's store and provider. The full
    /// report (with the trace when `trace` is set) comes along for the invariant checks.
    pub fn simulate(&self, trace: bool) -> Result<(RowResult, RunReport), PlanError> {
        let plan = self.plan()?;
        let variant = match self.store {
            TableStore::ResultCache => Variant::ResultCache,
            TableStore::Idem | TableStore::Unreachable => Variant::Correct,
        };
        let report = run_plan(&plan, variant, 0, trace);
        let responses = report
            .responses
            .iter()
            .flat_map(|tries| tries.iter())
            .map(|response| {
                response
                    .as_ref()
                    .map_or("-".to_owned(), Response::to_string)
            })
            .collect();
        let charges = report
            .charges()
            .iter()
            .map(|charge| charge.id.clone())
            .collect();
        Ok((RowResult { responses, charges }, report))
    }

    fn plan(&self) -> Result<Plan, PlanError> {
        let options = Options::builder()
            .in_flight(self.in_flight)
            .on_store_failure(self.on_store_failure)
            .build()
            .map_err(PlanError::Options)?;
        let operation = Operation::new("payment.charge").map_err(|_| PlanError::NoKeys)?;
        let key = Key::new("order-1").map_err(|_| PlanError::NoKeys)?;
        let clients = self
            .calls
            .iter()
            .map(|call| ClientPlan {
                start: call.at_ms,
                slot: 0,
                amount: call.amount,
                fingerprint: Fingerprint::of_bytes(format!("order-1|{}", call.amount).as_bytes()),
                options: options.clone(),
                attached: false,
                timeout: None,
                retry_delay: 0,
                max_tries: 1,
                late_retry: None,
                clock_offset: CALLER_EPOCH,
                actions: vec![if call.provider_fails {
                    ActionPlan::failing(call.provider_ms)
                } else {
                    ActionPlan::charge(call.provider_ms)
                }],
            })
            .collect();
        Ok(Plan {
            slots: vec![Slot {
                operation,
                key,
                corrupt: false,
                transactional: false,
            }],
            clients,
            messages: Vec::new(),
            network: NetworkPlan::reliable(1),
            outages: if self.store == TableStore::Unreachable {
                vec![Outage {
                    start: 0,
                    end: u64::MAX,
                    kind: OutageKind::Refusing,
                }]
            } else {
                Vec::new()
            },
            store_offset: 1_000_000,
            notices: false,
        })
    }
}
