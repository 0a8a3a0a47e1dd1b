//! Effects that commit with the record, one hand-written run each (MODEL.md, "Effects that
//! commit with the record"): a holder paused past its lease while another takes its key
//! over commits nothing; a commit whose reply was lost is settled by reading the record; a
//! holder that crashes mid-transaction commits nothing and the retry writes once. The
//! transactional store that commits without the owner check is caught on the first run.

use std::time::Duration;

use idem_sim::{
    ActionPlan, Cause, ClientPlan, Exercised, NetworkPlan, Plan, Response, Rule, RunReport, Slot,
    Variant, run_plan,
};

use idem_core::{Fingerprint, Key, Operation, Options};

/// The caller's clock is this far ahead of simulated time; the store's another way.
const CALLER_EPOCH: u64 = 10_000_000;

/// A client of the transactional key `order-1` that sends at `start` and takes `actions`
/// in turn, retrying after `timeout` ms without an answer if given.
fn client(start: u64, timeout: Option<u64>, actions: Vec<ActionPlan>) -> ClientPlan {
    ClientPlan {
        start,
        slot: 0,
        amount: 100,
        fingerprint: Fingerprint::of_bytes(b"order-1|100"),
        options: Options::builder()
            .lease(Duration::from_secs(1))
            .retention(Duration::from_secs(60))
            .store_retries(2)
            .build()
            .unwrap(),
        attached: false,
        timeout,
        retry_delay: 10,
        max_tries: actions.len() as u32,
        late_retry: None,
        clock_offset: CALLER_EPOCH,
        actions,
    }
}

fn plan(clients: Vec<ClientPlan>, network: NetworkPlan) -> Plan {
    Plan {
        slots: vec![Slot {
            operation: Operation::new("order.create").unwrap(),
            key: Key::new("order-1").unwrap(),
            corrupt: false,
            transactional: true,
        }],
        clients,
        messages: Vec::new(),
        network,
        outages: Vec::new(),
        store_offset: 1_000_000,
        notices: false,
    }
}

/// A 300 ms action that makes its writes at 100 ms.
fn write() -> ActionPlan {
    ActionPlan {
        effect_at: 100,
        ..ActionPlan::charge(300)
    }
}

fn answers(report: &RunReport, client: usize) -> Vec<String> {
    report.responses[client]
        .iter()
        .map(|r| r.as_ref().map_or("-".to_owned(), Response::to_string))
        .collect()
}

fn committed(report: &RunReport) -> Vec<&str> {
    report.charges().iter().map(|c| c.id.as_str()).collect()
}

/// c0 writes, then pauses 1.5 s (its 1 s lease runs out, renewals held back); c1 comes at
/// 1.2 s, takes the key over, writes and commits. c0 resumes, and its complete is refused:
/// its writes roll back, it is told `RolledBack`, and its retry replays c1's result.
fn paused_holder_and_taker() -> Plan {
    let paused = ActionPlan {
        pause: Some((150, 1_500)),
        ..write()
    };
    plan(
        vec![
            client(0, None, vec![paused, write()]),
            client(1_200, None, vec![write()]),
        ],
        NetworkPlan::reliable(1),
    )
}

#[test]
fn a_holder_paused_past_its_lease_commits_nothing_and_the_taker_commits_once() {
    let report = run_plan(&paused_holder_and_taker(), Variant::Correct, 0, true);
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    // Both wrote; only the taker's writes committed.
    assert_eq!(committed(&report), ["tx_2"]);
    assert_eq!((report.effects, report.transactional_effects), (1, 1));
    assert_eq!(answers(&report, 0), ["RolledBackError", "tx_2"]);
    assert_eq!(answers(&report, 1), ["tx_2"]);
    assert_eq!(report.extra.total() + report.extra_transactional.total(), 0);
    assert_eq!(report.exercised.get(Exercised::LeaseTakeover), 1);
    assert_eq!(report.exercised.get(Exercised::CommitRefused), 1);
    let trace = report.trace.unwrap();
    assert!(
        trace.contains("w0 writes tx_1 in its transaction"),
        "{trace}"
    );
    assert!(
        trace.contains("store rolls back the transaction of w0: tx_1 never happened"),
        "{trace}"
    );
    assert!(trace.contains("w0 done: RolledBack"), "{trace}");
}

#[test]
fn a_store_that_commits_without_the_owner_check_is_caught_writing_twice() {
    let report = run_plan(
        &paused_holder_and_taker(),
        Variant::CommitWithoutOwnerCheck,
        0,
        false,
    );
    // The refused complete of the paused holder commits its writes anyway.
    assert_eq!(committed(&report), ["tx_2", "tx_1"]);
    let caught: Vec<Rule> = report.violations.iter().map(|v| v.rule).collect();
    assert!(
        caught.contains(&Rule::TransactionalEffectOnce),
        "{caught:?}"
    );
    // Its lease had run out: under I7 that would have explained the second effect.
    assert_eq!(report.extra_transactional.get(Cause::LeaseExpired), 1);
    assert!(
        caught
            .iter()
            .all(|rule| *rule == Rule::TransactionalEffectOnce),
        "{caught:?}"
    );
}

/// Replies are lost half the time: among the first seeds, one where the reply to the
/// commit is lost after the store committed. The attempt cannot send the complete again
/// outside its transaction: it reads the record, finds its own result, and says
/// `Executed`; the writes committed once.
#[test]
fn a_commit_whose_reply_was_lost_is_settled_by_reading_the_record() {
    let network = NetworkPlan {
        reply_lost: 500,
        ..NetworkPlan::reliable(1)
    };
    let plan = plan(vec![client(0, None, vec![write()])], network);
    let (seed, report) = (0..200)
        .map(|seed| (seed, run_plan(&plan, Variant::Correct, seed, true)))
        .find(|(_, report)| {
            let trace = report.trace.as_deref().unwrap_or("");
            trace.contains("store commits tx_1 of w0 with its record")
                && trace.contains("w0 sends #")
                && report.exercised.get(Exercised::CommitRead) > 0
                && report.responses[0] == [Some(Response::Result("tx_1".into()))]
        })
        .expect("a seed whose commit reply is lost and whose read is answered");
    assert!(
        report.violations.is_empty(),
        "seed {seed}: {:?}",
        report.violations
    );
    assert_eq!(committed(&report), ["tx_1"]);
    let trace = report.trace.unwrap();
    let commit = trace
        .lines()
        .position(|l| l.contains("store commits tx_1"))
        .unwrap();
    let after: Vec<&str> = trace.lines().skip(commit).collect();
    assert!(after[1].contains("the reply to #"), "{trace}");
    assert!(after[1].ends_with("is lost"), "{trace}");
    assert!(
        after
            .iter()
            .any(|l| l.contains("read of w0: Read(Some(Completed")),
        "seed {seed}: {trace}"
    );
    assert!(
        after.iter().any(|l| l.contains("w0 done: Executed")),
        "{trace}"
    );
}

/// c0 crashes 50 ms after making its writes: its transaction dies with it, nothing
/// commits, and its key is held until the lease ends. Its retry (after a 400 ms timeout)
/// waits for that, then writes and commits: one effect.
#[test]
fn a_crash_mid_transaction_commits_nothing_and_the_retry_writes_once() {
    let crashing = ActionPlan {
        crash_at: Some(150),
        ..write()
    };
    let plan = plan(
        vec![client(0, Some(400), vec![crashing, write()])],
        NetworkPlan::reliable(1),
    );
    let report = run_plan(&plan, Variant::Correct, 0, true);
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert_eq!(answers(&report, 0), ["-", "tx_2"]);
    assert_eq!(committed(&report), ["tx_2"]);
    assert_eq!(report.exercised.get(Exercised::TransactionCrashed), 1);
    assert_eq!(report.extra.total() + report.extra_transactional.total(), 0);
    // The retry took the key over only when the crashed holder's lease ended.
    let taken = report.charges()[0].at;
    let trace = report.trace.unwrap();
    assert!(
        trace.contains("w0 writes tx_1 in its transaction"),
        "{trace}"
    );
    assert!(!trace.contains("commits tx_1"), "{trace}");
    assert!(taken >= 1_000_000 + 1_000, "committed at {taken}");
}

/// c0 writes at 100 ms and pauses from 150 ms for 1.5 s: its 1 s lease runs out, and the
/// renewal it sends on waking is refused, which sweeps its expired record. Its action ends
/// at 2 s and its complete inserts the record again; that commit lands late, after the
/// attempt gave the complete up and read the record. The read finds no record (the insert
/// is not yet visible), which says nothing of the commit: the attempt answers
/// `CommitUnknown`, and the commit then lands, one effect.
fn swept_and_committed_late() -> Plan {
    let paused = ActionPlan {
        pause: Some((150, 1_500)),
        ..ActionPlan {
            effect_at: 100,
            ..ActionPlan::charge(2_000)
        }
    };
    let network = NetworkPlan {
        commit_late: 1_000,
        ..NetworkPlan::reliable(1)
    };
    plan(vec![client(0, None, vec![paused])], network)
}

#[test]
fn a_read_that_finds_no_record_while_an_insert_commits_is_commit_unknown() {
    let report = run_plan(&swept_and_committed_late(), Variant::Correct, 0, true);
    let trace = report.trace.clone().unwrap();
    assert!(
        report.violations.is_empty(),
        "{:?}\n{trace}",
        report.violations
    );
    assert_eq!(answers(&report, 0), ["CommitUnknownError"], "{trace}");
    assert_eq!(committed(&report), ["tx_1"], "{trace}");
    assert_eq!(report.exercised.get(Exercised::CommitLate), 1, "{trace}");
    assert_eq!(
        report.exercised.get(Exercised::CommitLandedAfterRead),
        1,
        "{trace}"
    );
    // In that order: the insert applied, the read answered "none", the attempt's end, then
    // the commit.
    let line = |needle: &str| {
        trace
            .lines()
            .position(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no {needle:?} in\n{trace}"))
    };
    let inserted = line("complete of w0, inserting its record");
    let read = line("read of w0: Read(None)");
    let ended = line("w0 done: CommitUnknown");
    let landed = line("store commits tx_1 of w0 with its record");
    assert!(inserted < read && read < ended && ended < landed, "{trace}");
}

#[test]
fn a_driver_that_takes_no_record_for_a_rollback_is_caught() {
    let report = run_plan(
        &swept_and_committed_late(),
        Variant::AbsentCommitRolledBack,
        0,
        true,
    );
    // The same run: the attempt is told its writes rolled back, and they commit.
    assert_eq!(committed(&report), ["tx_1"]);
    assert_eq!(answers(&report, 0), ["RolledBackError"]);
    let caught: Vec<Rule> = report.violations.iter().map(|v| v.rule).collect();
    assert_eq!(
        caught,
        [Rule::TransactionalEffectOnce],
        "{:?}",
        report.violations
    );
}
