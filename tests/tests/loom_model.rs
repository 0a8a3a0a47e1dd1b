//! loom: every schedule (up to the preemption bound) of two and three callers on one key,
//! driving the real attempt machine against the real record machine, with a clock thread
//! that can make the lease run out between any two steps, and the abnormal ends a driver
//! must handle: panics, callers that go away (the attempt abandoned and its settlement
//! pumped), hung commands given up at the attempt's own reply deadline, and a key that
//! holds a corrupt value. Each run is judged against MODEL.md's rules by idem-check's judge;
//! each test prints the number of schedules run and the paths they reached, and asserts the
//! paths it is about were reached.
//!
//! Bounds: two callers (four loom threads with the clock and the main thread) at preemption
//! bound 3, three callers (five threads, loom's limit) at bound 2; a caller making two
//! attempts (failing then retrying, or going away mid-reserve then retrying), whose steps
//! double, at bound 2, as is the corrupt key, where every command is answered at once.
//! Together about 300,000 schedules, under a minute on two cores.

use idem_check::EventKind;
use idem_core::{CommandKind, InFlightPolicy, Options, Outcome, StoreFailurePolicy};
use idem_tests::caller::{Action, CallerPlan, Fault, FaultKind};
use idem_tests::scenario::{LEASE_MS, model_options};
use idem_tests::{AttemptId, History, ModelCheck, Scenario, Variant, loom_check};

/// The caller that made attempt `who` of a history.
fn caller_of(history: &History, who: usize) -> Option<usize> {
    AttemptId::in_history(history, who).map(|id| id.caller)
}

fn options() -> Options {
    model_options(InFlightPolicy::Wait, StoreFailurePolicy::FailOpen)
        .expect("model options are valid")
}

/// The reserve of the first attempt fails twice with the store unreachable: with one retry
/// allowed, the attempt gives up on the store.
fn store_unreachable() -> Vec<Fault> {
    (0..2)
        .map(|nth| Fault {
            attempt: 0,
            command: CommandKind::Reserve,
            nth,
            kind: FaultKind::Unreachable,
        })
        .collect()
}

fn caller() -> CallerPlan {
    CallerPlan::new(0, 0, options())
}

fn one_key(callers: Vec<CallerPlan>) -> Scenario {
    Scenario {
        variant: Variant::Correct,
        keys: 1,
        corrupt_keys: Vec::new(),
        callers,
        clock_ticks: vec![LEASE_MS],
    }
}

/// Explores `scenario`, asserts every schedule passed, and that the schedules reached each
/// path named in `reaches` (see `Coverage::counts`).
fn passes(
    name: &str,
    scenario: &Scenario,
    bound: usize,
    expect: Option<idem_tests::model_check::Expectation>,
    reaches: &[&'static str],
) -> ModelCheck {
    let checked = loom_check(scenario, bound, expect);
    println!(
        "{name}: {} schedules at preemption bound {bound}, {} threads",
        checked.schedules,
        scenario.callers.len() + 1 + usize::from(!scenario.clock_ticks.is_empty())
    );
    if let Some(counterexample) = &checked.counterexample {
        panic!("{name}: {counterexample}");
    }
    if let Some(failure) = &checked.failure {
        panic!("{name}: {failure}");
    }
    assert!(checked.schedules > 1, "{name}: ran only one schedule");
    println!("{name}: {}", checked.coverage);
    let missing = checked.coverage.missing_of(reaches);
    assert!(
        missing.is_empty(),
        "{name}: no schedule reached {missing:?}"
    );
    checked
}

/// The caller whose first action fails (caller 0) ends with the action run or the other
/// caller's result replayed, never with its failure: the failure was not cached (`I5`). The
/// lease (1 s) is shorter than a waiter's deadline (1.5 s) and the other caller's action is
/// quick, so a retry always gets an answer.
fn the_failed_caller_gets_an_answer(history: &History) -> Result<(), String> {
    let last = history
        .outcomes()
        .filter(|(event, _)| caller_of(history, event.who) == Some(0))
        .last()
        .map(|(event, outcome)| (event.who, outcome));
    match last {
        Some((_, Outcome::Executed(_) | Outcome::Replayed { .. })) => Ok(()),
        other => Err(format!("caller 0 ended with {other:?}")),
    }
}

#[test]
fn loom_two_callers_overlap() {
    passes(
        "loom_two_callers_overlap",
        &one_key(vec![caller(), caller()]),
        3,
        None,
        &[
            "executed",
            "replayed",
            "lease_lost",
            "takeovers",
            "repeated_effects",
        ],
    );
}

#[test]
fn loom_two_callers_holder_crashes() {
    let mut holder = caller();
    holder.actions = vec![Action::Crash];
    passes(
        "loom_two_callers_holder_crashes",
        &one_key(vec![holder, caller()]),
        3,
        None,
        &["crashes", "takeovers", "executed", "replayed"],
    );
}

#[test]
fn loom_two_callers_action_fails_then_retry_runs() {
    let mut failing = caller();
    failing.actions = vec![Action::Fail, Action::Succeed];
    failing.attempts = 2;
    passes(
        "loom_two_callers_action_fails_then_retry_runs",
        &one_key(vec![failing, caller()]),
        2,
        Some(the_failed_caller_gets_an_answer),
        &["action_failed", "executed", "replayed"],
    );
}

#[test]
fn loom_two_callers_slow_holder_renews() {
    let mut slow = caller();
    slow.action_wakeups = 3;
    passes(
        "loom_two_callers_slow_holder_renews",
        &one_key(vec![slow, caller()]),
        3,
        None,
        &["renewals", "lease_lost", "replayed"],
    );
}

#[test]
fn loom_two_callers_lost_replies() {
    let mut unlucky = caller();
    unlucky.action_wakeups = 2;
    unlucky.faults = vec![
        Fault {
            attempt: 0,
            command: CommandKind::Reserve,
            nth: 0,
            kind: FaultKind::ReplyLost,
        },
        Fault {
            attempt: 0,
            command: CommandKind::Complete,
            nth: 0,
            kind: FaultKind::ReplyLost,
        },
    ];
    passes(
        "loom_two_callers_lost_replies",
        &one_key(vec![unlucky, caller()]),
        3,
        None,
        &[
            "lost_replies",
            "executed",
            "replayed",
            "lease_lost",
            "lease_views",
        ],
    );
}

/// A reserve whose reply is lost is retried with the same token and gets the same
/// reservation back (`I11`); the machine must count that lease from the first send, or it
/// tells a slow action its lease is held after the store let it run out (`LeaseView`).
#[test]
fn loom_two_callers_lost_reserve_reply_slow_action() {
    let mut unlucky = caller();
    unlucky.action_wakeups = 2;
    unlucky.faults = vec![Fault {
        attempt: 0,
        command: CommandKind::Reserve,
        nth: 0,
        kind: FaultKind::ReplyLost,
    }];
    passes(
        "loom_two_callers_lost_reserve_reply_slow_action",
        &one_key(vec![unlucky, caller()]),
        3,
        None,
        &["lost_replies", "lease_views", "renewals", "takeovers"],
    );
}

#[test]
fn loom_two_callers_fail_open() {
    let mut cut_off = caller();
    cut_off.faults = store_unreachable();
    passes(
        "loom_two_callers_fail_open",
        &one_key(vec![cut_off, caller()]),
        3,
        None,
        &["failed_open", "repeated_effects"],
    );
}

#[test]
fn loom_two_callers_fail_closed() {
    let closed =
        model_options(InFlightPolicy::Wait, StoreFailurePolicy::FailClosed).expect("valid");
    let mut cut_off = CallerPlan::new(0, 0, closed);
    cut_off.faults = store_unreachable();
    passes(
        "loom_two_callers_fail_closed",
        &one_key(vec![cut_off, caller()]),
        3,
        None,
        &["store_unavailable", "executed", "abandoned"],
    );
}

#[test]
fn loom_two_requests_share_a_key() {
    let other = CallerPlan::new(0, 1, options());
    passes(
        "loom_two_requests_share_a_key",
        &one_key(vec![caller(), other]),
        3,
        None,
        &["key_reuse", "executed"],
    );
}

#[test]
fn loom_two_callers_raise() {
    let raise = model_options(InFlightPolicy::Raise, StoreFailurePolicy::FailOpen).expect("valid");
    let scenario = one_key(vec![
        CallerPlan::new(0, 0, raise.clone()),
        CallerPlan::new(0, 0, raise),
    ]);
    passes(
        "loom_two_callers_raise",
        &scenario,
        3,
        None,
        &["in_progress", "replayed", "executed"],
    );
}

#[test]
fn loom_two_callers_skewed_clocks_correct_store() {
    let mut ahead = caller();
    ahead.skew_ms = 1_500;
    let mut behind = caller();
    behind.skew_ms = -700;
    passes(
        "loom_two_callers_skewed_clocks_correct_store",
        &one_key(vec![ahead, behind]),
        3,
        None,
        &["executed", "replayed", "takeovers"],
    );
}

#[test]
fn loom_three_callers() {
    passes(
        "loom_three_callers",
        &one_key(vec![caller(), caller(), caller()]),
        2,
        None,
        &["executed", "replayed", "takeovers", "lease_lost"],
    );
}

#[test]
fn loom_three_callers_crash_and_failure() {
    let mut crashing = caller();
    crashing.actions = vec![Action::Crash];
    let mut failing = caller();
    failing.actions = vec![Action::Fail];
    passes(
        "loom_three_callers_crash_and_failure",
        &one_key(vec![crashing, failing, caller()]),
        2,
        None,
        &["crashes", "action_failed", "takeovers", "executed"],
    );
}

/// The holder's caller goes away (attached mode) after its action charged and renewed once:
/// the driver abandons the attempt and pumps its settlement, which sends nothing and leaves
/// the key to its lease. The other caller takes the key over only once that lease has
/// ended on the store's clock, and its charge is the one `I7` allows for the dropped action.
#[test]
fn loom_two_callers_holder_abandoned_mid_action() {
    let mut leaving = caller();
    leaving.actions = vec![Action::AbandonAfterCharge];
    leaving.action_wakeups = 2;
    passes(
        "loom_two_callers_holder_abandoned_mid_action",
        &one_key(vec![leaving, caller()]),
        3,
        Some(the_dropped_action_sent_nothing),
        &[
            "abandoned",
            "actions_dropped",
            "renewals",
            "takeovers",
            "repeated_effects",
            "executed",
            "replayed",
        ],
    );
}

/// A settlement of an action dropped mid-run sends nothing: every store command of the
/// abandoned attempt comes before its abandonment.
fn the_dropped_action_sent_nothing(history: &History) -> Result<(), String> {
    let abandoned = history.events.iter().position(|e| {
        caller_of(history, e.who) == Some(0) && matches!(e.kind, EventKind::Abandoned)
    });
    let sent_after = history.events.iter().enumerate().find(|(index, e)| {
        caller_of(history, e.who) == Some(0)
            && abandoned.is_some_and(|at| index > &at)
            && matches!(e.kind, EventKind::Store { .. })
    });
    match sent_after {
        Some((index, _)) => Err(format!("the abandoned holder sent a command at #{index}")),
        None => Ok(()),
    }
}

/// The first caller goes away while its reserve is out (the reserve lands, its reply is
/// dropped), and its client retries: the settlement releases what the reserve may have
/// taken, and nothing runs until a reservation does.
#[test]
fn loom_two_callers_abandoned_mid_reserve() {
    let mut leaving = caller();
    leaving.actions = vec![Action::AbandonMidReserve, Action::Succeed];
    leaving.attempts = 2;
    passes(
        "loom_two_callers_abandoned_mid_reserve",
        &one_key(vec![leaving, caller()]),
        2,
        None,
        &["abandoned", "settlement_releases", "executed", "replayed"],
    );
}

/// One caller's action charges and then panics, the other's panics before charging: each
/// key is completed "outcome unknown", never released, and an identical retry is answered
/// "outcome unknown" instead of running again.
#[test]
fn loom_two_callers_actions_panic() {
    let mut after = caller();
    after.actions = vec![Action::PanicAfterCharge];
    let mut before = caller();
    before.actions = vec![Action::PanicBeforeCharge];
    passes(
        "loom_two_callers_actions_panic",
        &one_key(vec![after, before]),
        3,
        None,
        &["panicked", "unknown_replays", "takeovers", "lease_lost"],
    );
}

/// The store never answers three of the holder's commands: its reserve and its first
/// renewal (each lands as the caller gives it up, later than the attempt can count on) and
/// its first complete (which never lands). The caller only waits until each command's
/// `reply_by`; the attempt gives each up itself and retries, and its lease accounting stays
/// honest.
#[test]
fn loom_two_callers_hung_commands() {
    let mut unlucky = caller();
    unlucky.action_wakeups = 2;
    unlucky.faults = [
        (CommandKind::Reserve, true),
        (CommandKind::Renew, true),
        (CommandKind::Complete, false),
    ]
    .into_iter()
    .map(|(command, applied)| Fault {
        attempt: 0,
        command,
        nth: 0,
        kind: FaultKind::Hung { applied },
    })
    .collect();
    passes(
        "loom_two_callers_hung_commands",
        &one_key(vec![unlucky, caller()]),
        3,
        None,
        &[
            "hung",
            "renewals",
            "lease_lost",
            "lease_views",
            "executed",
            "replayed",
        ],
    );
}

/// The key holds a corrupt value: a caller failing open and one failing closed are both
/// answered `CorruptRecord` at their first reserve, and nothing runs.
#[test]
fn loom_two_callers_corrupt_key() {
    let closed =
        model_options(InFlightPolicy::Wait, StoreFailurePolicy::FailClosed).expect("valid");
    let mut scenario = one_key(vec![caller(), CallerPlan::new(0, 0, closed)]);
    scenario.corrupt_keys = vec![0];
    let checked = passes(
        "loom_two_callers_corrupt_key",
        &scenario,
        2,
        Some(only_corrupt_record),
        &["corrupt"],
    );
    assert_eq!(
        checked.coverage.corrupt,
        2 * checked.coverage.runs,
        "every caller ends CorruptRecord"
    );
}

fn only_corrupt_record(history: &History) -> Result<(), String> {
    match history
        .outcomes()
        .find(|(_, o)| **o != Outcome::CorruptRecord)
    {
        Some((event, outcome)) => Err(format!(
            "{} ended {outcome:?}",
            history.attempts[event.who].label
        )),
        None if !history.statement.is_empty() => Err("a corrupt key was charged".into()),
        None => Ok(()),
    }
}
