//! Regressions found by the seeded simulation (`idem-sim`), one test per finding, each
//! named for what must hold and citing the seed that found it.

use std::time::Duration;

use idem_core::record::apply;
use idem_core::{
    ActionResult, Attempt, Body, Fingerprint, Key, Operation, Options, Outcome, OwnerToken, Record,
    Recording, Reply, Step, Timestamp,
};

fn at(ms: u64) -> Timestamp {
    Timestamp::from_millis(ms)
}

/// Found by `idem-sim replay --seed 191` (default shape): a holder paused past its 1 s
/// lease; its renewal was refused and its late complete was applied (`AfterLeaseExpiry`),
/// but both replies were lost and the complete had no retries left. The outcome said
/// `Recording::Unknown` with `lease_lost: false`, although the attempt's own confirmed lease
/// had ended long before it gave up: a lapse (and so a second effect by another caller) could
/// not be ruled out, exactly as for a repeated complete (`I7`).
#[test]
fn an_unknown_complete_after_the_confirmed_lease_end_reports_lease_lost() {
    let options = Options::builder()
        .lease(Duration::from_secs(1))
        .store_retries(0)
        .build()
        .unwrap();
    let mut store: Option<Record> = None;
    let mut attempt = Attempt::new(
        Operation::new("payment.charge").unwrap(),
        Key::new("order-1").unwrap(),
        Fingerprint::of_bytes(b"amount=100"),
        OwnerToken::from_u128(6),
        6,
        options,
        at(0),
    );
    let Step::Send {
        command: reserve, ..
    } = attempt.poll(at(0))
    else {
        panic!("expected a reserve");
    };
    let reply = apply(store.as_ref(), reserve, at(0)).apply_to(&mut store);
    assert!(matches!(reply, Reply::Reserved(_)));
    attempt.handle_reply(reply, at(5)).unwrap();
    assert_eq!(attempt.poll(at(5)), Step::Run);
    // The holder pauses; the action ends long after the lease.
    attempt
        .handle_action_result(ActionResult::Succeeded(Body::new("ch_4")), at(2_000))
        .unwrap();
    let Step::Send {
        command: complete, ..
    } = attempt.poll(at(2_000))
    else {
        panic!("expected a complete");
    };
    // The store records it late, but the reply is lost and no retry is left.
    let reply = apply(store.as_ref(), complete, at(2_002)).apply_to(&mut store);
    assert!(matches!(reply, Reply::Completed(_)));
    attempt.handle_store_error(at(2_100)).unwrap();
    let Step::Done(Outcome::Executed(execution)) = attempt.poll(at(2_100)) else {
        panic!("expected an executed outcome");
    };
    assert_eq!(execution.record, Recording::Unknown);
    assert!(execution.lease_lost, "{execution:?}");
}

/// The other side of the rule above: an unknown complete sent while the lease was still
/// confirmed does not claim a lapse.
#[test]
fn an_unknown_complete_within_the_confirmed_lease_does_not_claim_a_lapse() {
    let options = Options::builder().store_retries(0).build().unwrap();
    let mut attempt = Attempt::new(
        Operation::new("payment.charge").unwrap(),
        Key::new("order-1").unwrap(),
        Fingerprint::of_bytes(b"amount=100"),
        OwnerToken::from_u128(7),
        7,
        options,
        at(0),
    );
    let Step::Send {
        command: reserve, ..
    } = attempt.poll(at(0))
    else {
        panic!("expected a reserve");
    };
    let reply = apply(None, reserve, at(0)).reply;
    attempt.handle_reply(reply, at(5)).unwrap();
    assert_eq!(attempt.poll(at(5)), Step::Run);
    attempt
        .handle_action_result(ActionResult::Succeeded(Body::new("ch_1")), at(300))
        .unwrap();
    assert!(matches!(attempt.poll(at(300)), Step::Send { .. }));
    attempt.handle_store_error(at(400)).unwrap();
    let Step::Done(Outcome::Executed(execution)) = attempt.poll(at(400)) else {
        panic!("expected an executed outcome");
    };
    assert_eq!(execution.record, Recording::Unknown);
    assert!(!execution.lease_lost, "{execution:?}");
}

/// Found by `idem-sim explore` with transactional keys (seed 116 of the default shape): the
/// caller of an attached transactional attempt went away while its complete was out. The
/// settlement read the record at once; the read overtook the complete and saw the attempt's
/// own reservation ("not committed"), so it released; then the complete landed and
/// committed. The outcome said `RolledBack` of writes that had committed. The read must wait
/// until the dropped complete can no longer land, its reply deadline, as after a lost reply.
#[test]
fn an_abandoned_transactional_complete_is_read_only_after_its_reply_deadline() {
    let options = Options::builder()
        .lease(Duration::from_secs(1))
        .build()
        .unwrap();
    let mut store: Option<Record> = None;
    let mut attempt = Attempt::new(
        Operation::new("order.create").unwrap(),
        Key::new("order-1").unwrap(),
        Fingerprint::of_bytes(b"amount=100"),
        OwnerToken::from_u128(13),
        13,
        options,
        at(0),
    )
    .in_transaction();
    let Step::Send {
        command: reserve, ..
    } = attempt.poll(at(0))
    else {
        panic!("expected a reserve");
    };
    let reply = apply(store.as_ref(), reserve, at(0)).apply_to(&mut store);
    attempt.handle_reply(reply, at(2)).unwrap();
    assert_eq!(attempt.poll(at(2)), Step::Run);
    attempt
        .handle_action_result(ActionResult::Succeeded(Body::new("tx_6")), at(100))
        .unwrap();
    let Step::Send {
        command: complete,
        reply_by,
    } = attempt.poll(at(100))
    else {
        panic!("expected the complete");
    };
    // The caller goes away 2 ms later, the complete still on its way.
    attempt.abandon(at(102));
    let Step::Wait { until: Some(until) } = attempt.poll(at(102)) else {
        panic!("the read must wait for the complete's reply deadline");
    };
    assert_eq!(until, reply_by);
    // The complete lands and commits meanwhile.
    let reply = apply(store.as_ref(), complete, at(117)).apply_to(&mut store);
    assert!(idem_core::record::commits(&reply));
    let Step::Send { command: read, .. } = attempt.poll(reply_by) else {
        panic!("expected the read at the deadline");
    };
    assert_eq!(read, idem_core::Command::Read);
    let reply = apply(store.as_ref(), read, reply_by).apply_to(&mut store);
    attempt.handle_reply(reply, reply_by).unwrap();
    assert!(
        matches!(attempt.poll(reply_by), Step::Done(Outcome::Executed(_))),
        "the read sees the commit"
    );
}
