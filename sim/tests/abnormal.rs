//! Abnormal ends, one hand-written run each: a caller that goes away (attached and
//! detached), an action that panics, a key that holds no record, a store that answers
//! nothing. Each run is checked for what the client is answered and what is charged, and
//! each deliberately broken driver is caught on the same run.

use std::time::Duration;

use idem_sim::{
    ActionPlan, CallerGone, Cause, ClientPlan, Exercised, NetworkPlan, Outage, OutageKind, Plan,
    Response, Rule, RunReport, Slot, Stage, Variant, run_plan,
};

use idem_core::{Fingerprint, Key, Operation, Options, StoreFailurePolicy};

/// The caller's clock is this far ahead of simulated time; the store's another way.
const CALLER_EPOCH: u64 = 10_000_000;

fn options(on_store_failure: StoreFailurePolicy) -> Options {
    Options::builder()
        .lease(Duration::from_secs(1))
        .retention(Duration::from_secs(60))
        .on_store_failure(on_store_failure)
        .store_retries(1)
        .build()
        .unwrap()
}

/// A client of key `order-1` that sends at `start` and takes `actions` in turn.
fn client(start: u64, attached: bool, actions: Vec<ActionPlan>) -> ClientPlan {
    ClientPlan {
        start,
        slot: 0,
        amount: 100,
        fingerprint: Fingerprint::of_bytes(b"order-1|100"),
        options: options(StoreFailurePolicy::FailOpen),
        attached,
        timeout: None,
        retry_delay: 10,
        max_tries: actions.len() as u32,
        late_retry: None,
        clock_offset: CALLER_EPOCH,
        actions,
    }
}

fn plan(clients: Vec<ClientPlan>) -> Plan {
    Plan {
        slots: vec![Slot {
            operation: Operation::new("payment.charge").unwrap(),
            key: Key::new("order-1").unwrap(),
            corrupt: false,
            transactional: false,
        }],
        clients,
        messages: Vec::new(),
        network: NetworkPlan::reliable(1),
        outages: Vec::new(),
        store_offset: 1_000_000,
        notices: false,
    }
}

/// A 300 ms charge that takes effect at 100 ms.
fn charge() -> ActionPlan {
    ActionPlan {
        effect_at: 100,
        ..ActionPlan::charge(300)
    }
}

/// A 300 ms charge whose caller goes away `after` ms into it.
fn charge_gone_after(after: u64) -> ActionPlan {
    ActionPlan {
        caller_gone: Some(CallerGone {
            stage: Stage::Action,
            after,
        }),
        ..charge()
    }
}

fn answers(report: &RunReport) -> Vec<String> {
    report.responses[0]
        .iter()
        .map(|r| r.as_ref().map_or("-".to_owned(), Response::to_string))
        .collect()
}

fn checks(report: &RunReport) -> Vec<Rule> {
    report.violations.iter().map(|v| v.rule).collect()
}

#[test]
fn an_attached_call_dropped_after_its_effect_keeps_its_key_until_the_lease_ends() {
    let plan = plan(vec![client(
        0,
        true,
        vec![charge_gone_after(200), charge()],
    )]);
    let report = run_plan(&plan, Variant::Correct, 0, true);
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    // The dropped try answers nobody; the retry waits out the lease and charges again.
    assert_eq!(answers(&report), ["-", "ch_2"]);
    assert_eq!(report.charges().len(), 2);
    let (first, second) = (&report.charges()[0], &report.charges()[1]);
    assert!(
        second.at >= first.at + 1_000 - 100,
        "the retry charged at {}ms, before the first lease could end",
        second.at
    );
    assert_eq!(report.extra.get(Cause::AbandonedMidAction), 1);
    assert_eq!(report.extra.total(), 1);
    assert_eq!(report.exercised.get(Exercised::AbandonAfterEffect), 1);
    let trace = report.trace.unwrap();
    assert!(
        trace.contains("attached, w0 is abandoned (abandon-after-effect)"),
        "{trace}"
    );
    assert!(
        trace.contains("w0 done: Abandoned(ActionDropped)"),
        "{trace}"
    );
    assert!(!trace.contains("w0 sends #2 release"), "{trace}");
}

#[test]
fn a_driver_that_releases_a_dropped_actions_key_is_caught() {
    let plan = plan(vec![client(
        0,
        true,
        vec![charge_gone_after(200), charge()],
    )]);
    let report = run_plan(&plan, Variant::ReleaseOnAbandon, 0, false);
    // The retry gets the key at once and charges again, long before the lease would
    // have ended: "abandoned mid-action" explains no second charge then.
    assert_eq!(report.charges().len(), 2);
    assert!(report.charges()[1].at < report.charges()[0].at + 1_000 - 100);
    let caught = checks(&report);
    assert!(caught.contains(&Rule::I7), "{caught:?}");
    assert!(caught.contains(&Rule::DroppedActionKeepsKey), "{caught:?}");
    assert_eq!(report.extra.get(Cause::AbandonedMidAction), 0);
}

#[test]
fn a_call_dropped_before_its_effect_is_charged_only_when_the_request_was_in_flight() {
    // The world's coin for the in-flight provider request is seeded: over a few seeds
    // both sides come up, and each is honest.
    let plan = plan(vec![client(0, true, vec![charge_gone_after(50), charge()])]);
    let (mut landed, mut dropped) = (0, 0);
    for seed in 0..20 {
        let report = run_plan(&plan, Variant::Correct, seed, false);
        assert!(report.violations.is_empty(), "{:?}", report.violations);
        assert_eq!(
            answers(&report),
            ["-", &format!("ch_{}", report.charges().len())]
        );
        if report.exercised.get(Exercised::AbandonChargeInFlight) == 1 {
            landed += 1;
            assert_eq!(report.charges().len(), 2);
            assert_eq!(report.extra.get(Cause::AbandonedMidAction), 1);
        } else {
            dropped += 1;
            assert_eq!(report.exercised.get(Exercised::AbandonBeforeEffect), 1);
            assert_eq!(report.charges().len(), 1);
            assert_eq!(report.charges()[0].by, Some(1));
        }
    }
    assert!(
        landed > 0 && dropped > 0,
        "{landed} landed, {dropped} dropped"
    );
}

#[test]
fn an_attached_call_dropped_mid_reserve_releases_and_the_retry_runs() {
    let gone = ActionPlan {
        caller_gone: Some(CallerGone {
            stage: Stage::Reserve,
            after: 0,
        }),
        ..charge()
    };
    let plan = plan(vec![client(0, true, vec![gone, charge()])]);
    let report = run_plan(&plan, Variant::Correct, 0, true);
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert_eq!(answers(&report), ["-", "ch_1"]);
    assert_eq!(report.charges().len(), 1);
    assert_eq!(report.exercised.get(Exercised::AbandonMidReserve), 1);
    let trace = report.trace.unwrap();
    assert!(trace.contains("w0 sends #2 release"), "{trace}");
    assert!(trace.contains("w0 done: Abandoned(Settled)"), "{trace}");
}

#[test]
fn a_detached_call_whose_caller_goes_away_runs_on_and_the_retry_replays_it() {
    let plan = plan(vec![client(
        0,
        false,
        vec![charge_gone_after(50), charge()],
    )]);
    let report = run_plan(&plan, Variant::Correct, 0, true);
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    // The first try's answer goes to nobody, but it is recorded; the retry replays it.
    assert_eq!(answers(&report), ["ch_1", "ch_1"]);
    assert_eq!(report.charges().len(), 1);
    assert_eq!(report.exercised.get(Exercised::DetachedCallerGone), 1);
    assert!(
        report
            .trace
            .unwrap()
            .contains("detached, w0 runs on to its end")
    );
}

#[test]
fn a_panic_after_the_effect_is_recorded_and_replayed_as_outcome_unknown() {
    let panics = ActionPlan {
        panic_at: Some(200),
        ..charge()
    };
    let plan = plan(vec![client(0, false, vec![panics, charge()])]);
    let report = run_plan(&plan, Variant::Correct, 0, false);
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert_eq!(answers(&report), ["Panicked", "OutcomeUnknownError"]);
    assert_eq!(report.charges().len(), 1);
    assert_eq!(report.exercised.get(Exercised::PanicAfterEffect), 1);
    assert_eq!(report.exercised.get(Exercised::PanicReplayed), 1);

    let report = run_plan(&plan, Variant::PanicReleases, 0, false);
    assert_eq!(answers(&report), ["ActionFailed", "ch_2"]);
    let caught = checks(&report);
    assert!(caught.contains(&Rule::PanicIsOutcomeUnknown), "{caught:?}");
    assert!(caught.contains(&Rule::I7), "{caught:?}");
}

#[test]
fn a_key_that_holds_no_record_runs_nothing() {
    let mut plan = plan(vec![client(0, false, vec![charge(), charge()])]);
    plan.slots[0].corrupt = true;
    let report = run_plan(&plan, Variant::Correct, 0, true);
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert_eq!(answers(&report), ["CorruptRecordError"]);
    assert!(report.charges().is_empty());
    let trace = report.trace.unwrap();
    assert!(trace.contains("the key holds no record"), "{trace}");

    // A driver that takes "corrupt" for an unreachable store fails open and charges.
    let report = run_plan(&plan, Variant::CorruptFailsOpen, 0, false);
    assert_eq!(report.charges().len(), 1);
    assert_eq!(checks(&report)[0], Rule::CorruptRecordRunsNothing);
    // A store that reads the value as an absent key writes a record over it.
    let report = run_plan(&plan, Variant::CorruptReadAsAbsent, 0, false);
    assert_eq!(answers(&report), ["ch_1"]);
    assert!(
        checks(&report).contains(&Rule::CorruptRecordRunsNothing),
        "{:?}",
        report.violations
    );
}

#[test]
fn a_store_that_answers_nothing_is_given_up_at_the_attempts_own_deadlines() {
    let mut closed = client(0, false, vec![charge()]);
    closed.options = options(StoreFailurePolicy::FailClosed);
    let mut plan = plan(vec![closed]);
    plan.outages = vec![Outage {
        start: 0,
        end: 60_000,
        kind: OutageKind::Silent,
    }];
    let report = run_plan(&plan, Variant::Correct, 0, true);
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert_eq!(answers(&report), ["StoreUnavailableError"]);
    assert!(report.charges().is_empty());
    let trace = report.trace.unwrap();
    // Two reserves (one retry), then the settlement's release and its retry: all
    // swallowed, each given up at its reply deadline, and the key left to its lease.
    assert_eq!(trace.matches("swallowed").count(), 4, "{trace}");
    assert!(trace.contains("w0 done: Abandoned(LeftToLease)"), "{trace}");
    let reply_timeout = plan.clients[0].options.reply_timeout().as_millis() as u64;
    let sent: Vec<u64> = trace
        .lines()
        .filter(|line| line.contains(" sends #"))
        .map(|line| line.split_whitespace().next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(sent.len(), 4, "{trace}");
    // Each command is given up no earlier than its reply deadline.
    for pair in sent.windows(2) {
        assert!(pair[1] - pair[0] >= reply_timeout, "{sent:?}");
    }
}
