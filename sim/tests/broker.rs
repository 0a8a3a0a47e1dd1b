//! The broker (MODEL.md `C1`), one hand-written run each: a duplicate publish is replayed
//! and acknowledged without running; a lost ack is delivered again after the ack-wait and
//! replayed; a slow handler past its ack-wait never runs beside the redelivery; a consumer
//! that crashes mid-handler is delivered again after the ack-wait, which runs the message
//! again only after the crashed holder's lease (`I7`'s cause), and once with the store's
//! transaction. The consumer that acknowledges before the record is caught on the first.

use std::time::Duration;

use idem_check::EventKind;
use idem_core::{Disposition, Fingerprint, InFlightPolicy, Key, Operation, Options, Redelivery};
use idem_sim::{
    ActionPlan, Cause, Exercised, MessagePlan, NetworkPlan, Plan, Rule, RunReport, Slot, Variant,
    run_plan,
};

/// The consumer's clock is this far ahead of simulated time; the store's another way.
const CALLER_EPOCH: u64 = 10_000_000;

fn options(wait: u64) -> Options {
    Options::builder()
        .in_flight(InFlightPolicy::Wait)
        .lease(Duration::from_secs(1))
        .retention(Duration::from_secs(60))
        .wait_deadline(Duration::from_millis(wait))
        .store_retries(2)
        .build()
        .unwrap()
}

/// Publication `copy` of the message `msg-1` at `publish`, its handler `actions` in turn,
/// the acks of its first deliveries lost as `acks_lost` says.
fn message(
    publish: u64,
    copy: u32,
    ack_wait: u64,
    actions: Vec<ActionPlan>,
    acks_lost: Vec<bool>,
) -> MessagePlan {
    MessagePlan {
        publish,
        copy,
        slot: 0,
        fingerprint: Fingerprint::of_bytes(b"msg-1|ship"),
        options: options(10_000),
        redelivery: Redelivery::new(4, Duration::from_millis(100), Duration::from_secs(1)).unwrap(),
        ack_wait,
        acks_lost,
        clock_offset: CALLER_EPOCH,
        actions,
    }
}

fn plan(messages: Vec<MessagePlan>, transactional: bool) -> Plan {
    Plan {
        slots: vec![Slot {
            operation: Operation::new("order.ship").unwrap(),
            key: Key::new("msg-1").unwrap(),
            corrupt: false,
            transactional,
        }],
        clients: Vec::new(),
        messages,
        network: NetworkPlan::reliable(1),
        outages: Vec::new(),
        store_offset: 1_000_000,
        notices: false,
    }
}

/// A 200 ms handler that charges at 100 ms.
fn ship() -> ActionPlan {
    ActionPlan {
        effect_at: 100,
        ..ActionPlan::charge(200)
    }
}

/// What the consumer told the broker of a delivery, and whether it was lost.
type Told = Option<(Disposition, bool)>;

/// Each delivery, in order: (message, delivery number, whether its handler ran, what the
/// consumer told the broker).
fn deliveries(report: &RunReport) -> Vec<(usize, u32, bool, Told)> {
    let history = &report.history;
    // (attempt, message, delivery, ran, told)
    let mut found: Vec<(usize, usize, u32, bool, Told)> = Vec::new();
    for event in &history.events {
        match &event.kind {
            EventKind::Delivered { message, delivery } => {
                found.push((event.who, *message, *delivery, false, None));
            }
            EventKind::Run { .. } => {
                if let Some(d) = found.iter_mut().find(|d| d.0 == event.who) {
                    d.3 = true;
                }
            }
            EventKind::Disposed { disposition, lost } => {
                if let Some(d) = found.iter_mut().find(|d| d.0 == event.who) {
                    d.4 = Some((*disposition, *lost));
                }
            }
            _ => {}
        }
    }
    found
        .into_iter()
        .map(|(_, m, n, ran, d)| (m, n, ran, d))
        .collect()
}

fn charges(report: &RunReport) -> Vec<&str> {
    report.charges().iter().map(|c| c.id.as_str()).collect()
}

const ACK: Told = Some((Disposition::Ack, false));
const ACK_LOST: Told = Some((Disposition::Ack, true));

/// m0 is published at 0 and acknowledged; the producer publishes it again (m1) at 1 s:
/// that delivery is a replay, acknowledged without running.
fn published_twice() -> Plan {
    plan(
        vec![
            message(0, 0, 5_000, vec![ship()], vec![]),
            message(1_000, 1, 5_000, vec![ship()], vec![]),
        ],
        false,
    )
}

#[test]
fn a_duplicate_publish_is_replayed_and_acknowledged_without_running() {
    let report = run_plan(&published_twice(), Variant::Correct, 0, true);
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert_eq!(charges(&report), ["ch_1"]);
    assert_eq!(deliveries(&report), [(0, 1, true, ACK), (1, 1, false, ACK)]);
    assert_eq!(report.exercised.get(Exercised::DuplicatePublish), 1);
    assert_eq!(report.exercised.get(Exercised::AckedReplay), 1);
    assert_eq!(
        (
            report.broker.messages,
            report.broker.deliveries,
            report.broker.acks
        ),
        (2, 2, 2)
    );
}

#[test]
fn a_consumer_that_acknowledges_before_the_record_is_caught() {
    let report = run_plan(&published_twice(), Variant::AckBeforeRecord, 0, true);
    // The same run: one charge, both acknowledged, but the first ack came as the handler
    // returned, before its complete reached the store.
    assert_eq!(charges(&report), ["ch_1"]);
    let caught: Vec<Rule> = report.violations.iter().map(|v| v.rule).collect();
    assert_eq!(caught, [Rule::AckAfterRecord], "{:?}", report.violations);
    assert!(
        report.violations[0]
            .detail
            .contains("before its effect was recorded"),
        "{:?}",
        report.violations
    );
    let trace = report.trace.unwrap();
    assert!(
        trace.contains("w0 acknowledges its delivery as its handler returns"),
        "{trace}"
    );
}

/// The ack of m0's first delivery is lost: after its 1 s ack-wait the broker delivers it
/// again, and the second delivery replays the recorded result and is acknowledged.
#[test]
fn a_lost_ack_is_delivered_again_after_the_ack_wait_and_replayed() {
    let lost = plan(
        vec![message(0, 0, 1_000, vec![ship(), ship()], vec![true])],
        false,
    );
    let report = run_plan(&lost, Variant::Correct, 0, true);
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert_eq!(charges(&report), ["ch_1"]);
    assert_eq!(
        deliveries(&report),
        [(0, 1, true, ACK_LOST), (0, 2, false, ACK)]
    );
    assert_eq!(report.exercised.get(Exercised::AckLost), 1);
    assert_eq!(report.exercised.get(Exercised::AckWaitRedelivery), 1);
    assert_eq!(report.exercised.get(Exercised::AckedReplay), 1);
    let trace = report.trace.unwrap();
    assert!(trace.contains("and it is LOST"), "{trace}");
    assert!(
        trace.contains("broker: the ack-wait of m0 delivery 1 runs out (ack-wait-redelivery)"),
        "{trace}"
    );
}

/// m0's handler takes 2.5 s (its 1 s lease renewed); the broker's ack-wait is 800 ms, so it
/// delivers m0 again while the first still runs, and again after that one's ack-wait. The
/// later deliveries find the key held and wait (the second past its 1 s wait deadline: in
/// progress, handed back with the core's delay); none of them runs the handler. The first
/// acknowledges when it is recorded; a later one replays it.
#[test]
fn a_slow_handler_past_its_ack_wait_never_runs_beside_its_redelivery() {
    let slow = ActionPlan {
        effect_at: 2_000,
        ..ActionPlan::charge(2_500)
    };
    let mut m0 = message(0, 0, 800, vec![slow, ship(), ship(), ship()], vec![]);
    m0.options = options(1_000);
    let report = run_plan(&plan(vec![m0], false), Variant::Correct, 0, true);
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert_eq!(charges(&report), ["ch_1"]);
    let deliveries = deliveries(&report);
    assert!(deliveries.len() >= 3, "{deliveries:?}");
    // Only the first ran the handler.
    let ran: Vec<u32> = deliveries.iter().filter(|d| d.2).map(|d| d.1).collect();
    assert_eq!(ran, [1], "{deliveries:?}");
    assert_eq!(deliveries[0].3, ACK);
    // The second waited past its deadline: in progress, handed back, never dead-lettered.
    assert!(
        matches!(
            deliveries[1].3,
            Some((Disposition::Redeliver { .. }, false))
        ),
        "{deliveries:?}"
    );
    assert!(report.exercised.get(Exercised::AckWaitWhileRunning) >= 2);
    assert!(report.exercised.get(Exercised::InFlight) >= 2);
    assert_eq!(report.exercised.get(Exercised::InProgress), 1);
    assert_eq!(report.broker.dead_letters.total(), 0);
}

/// m0's consumer charges at 100 ms and crashes at 150 ms, its key held until its 1 s lease
/// ends. After the 900 ms ack-wait the broker delivers m0 again; that delivery waits for
/// the held key, takes it over when the lease has ended, and runs the handler again: a
/// second charge, which the crash explains (`I7`). With the store's transaction the crashed
/// handler's writes never commit, and the message's effect happens once.
#[test]
fn a_consumer_that_crashes_mid_handler_is_delivered_again_after_the_ack_wait() {
    let crashing = ActionPlan {
        crash_at: Some(150),
        ..ship()
    };
    let crashed = |transactional| {
        plan(
            vec![message(0, 0, 900, vec![crashing, ship()], vec![])],
            transactional,
        )
    };
    let report = run_plan(&crashed(false), Variant::Correct, 0, true);
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert_eq!(charges(&report), ["ch_1", "ch_2"]);
    assert_eq!(report.broker.extra_messages.get(Cause::HolderCrashed), 1);
    assert_eq!(deliveries(&report), [(0, 1, true, None), (0, 2, true, ACK)]);
    assert_eq!(report.exercised.get(Exercised::AckWaitRedelivery), 1);
    assert_eq!(report.exercised.get(Exercised::LeaseTakeover), 1);

    let report = run_plan(&crashed(true), Variant::Correct, 0, true);
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert_eq!(charges(&report), ["tx_2"]);
    assert_eq!(report.transactional_effects, 1);
    assert_eq!(report.broker.extra_transactional_messages.total(), 0);
    assert_eq!(deliveries(&report), [(0, 1, true, None), (0, 2, true, ACK)]);
}
