//! The judge itself, on histories written by hand: each rule it checks is broken once, in
//! the smallest history that breaks it, and the judge must name that rule; the history that
//! keeps the rules passes. This shows every check can fail, including the ones no broken
//! store variant reaches (`I4`, `I5`, `I6`, `I9`, `I10`, `I11`, the lease view, liveness).

use std::time::Duration;

use idem_core::record::{Command, Completion, Record, Refusal, Reply, Reservation};
use idem_core::{Body, Execution, Fingerprint, Outcome, Protection, Recording, Timestamp};
use idem_tests::{Answer, AttemptId, Delivery, Event, EventKind, History, Invariant, check_run};

const A: AttemptId = AttemptId {
    caller: 0,
    attempt: 0,
};
const B: AttemptId = AttemptId {
    caller: 1,
    attempt: 0,
};

fn fp(request: u8) -> Fingerprint {
    Fingerprint::of_bytes(&[request])
}

fn t(ms: u64) -> Timestamp {
    Timestamp::from_millis(ms)
}

fn pending(who: AttemptId, until: u64) -> Option<Record> {
    Some(Record::Pending {
        owner: who.owner(),
        fingerprint: fp(0),
        lease_until: t(until),
    })
}

fn completed(who: AttemptId, body: &str) -> Option<Record> {
    Some(Record::Completed {
        owner: who.owner(),
        fingerprint: fp(0),
        result: idem_core::StoredResult::Value(Body::new(body)),
        expires_at: t(60_000),
    })
}

fn reserve(who: AttemptId) -> Command {
    Command::Reserve {
        owner: who.owner(),
        fingerprint: fp(0),
        lease: Duration::from_secs(1),
    }
}

fn complete(who: AttemptId, body: &str) -> Command {
    Command::Complete {
        owner: who.owner(),
        fingerprint: fp(0),
        result: idem_core::StoredResult::Value(Body::new(body)),
        retention: Duration::from_secs(60),
    }
}

fn granted(who: AttemptId, until: u64) -> Reply {
    Reply::Reserved(Reservation {
        owner: who.owner(),
        lease_until: Some(t(until)),
    })
}

fn executed(lease_lost: bool) -> Outcome {
    Outcome::Executed(Execution {
        protection: Protection::Reserved,
        record: Recording::Stored,
        lease_lost,
    })
}

/// A history written event by event.
#[derive(Default)]
struct Story(History);

impl Story {
    fn event(mut self, at: u64, who: AttemptId, kind: EventKind) -> Self {
        self.0.events.push(Event {
            at,
            who,
            key: 0,
            fingerprint: fp(0),
            kind,
        });
        self
    }

    fn store(
        self,
        at: u64,
        who: AttemptId,
        command: Command,
        before: Option<Record>,
        reply: Reply,
        after: Option<Record>,
    ) -> Self {
        self.event(
            at,
            who,
            EventKind::Store {
                command,
                before,
                answer: Answer::Reply(reply),
                after,
                delivery: Delivery::Normal,
            },
        )
    }

    fn charge(self, at: u64, who: AttemptId, body: &str) -> Self {
        self.event(
            at,
            who,
            EventKind::Charged {
                body: body.as_bytes().to_vec(),
            },
        )
    }

    fn finish(self, at: u64, who: AttemptId, outcome: Outcome) -> Self {
        self.event(at, who, EventKind::Finished(outcome))
    }

    /// A holds the key, charges "a" and completes in time.
    fn a_executes() -> Self {
        Story::default()
            .store(0, A, reserve(A), None, granted(A, 1_000), pending(A, 1_000))
            .charge(10, A, "a")
            .store(
                20,
                A,
                complete(A, "a"),
                pending(A, 1_000),
                Reply::Completed(Completion::InTime),
                completed(A, "a"),
            )
            .finish(20, A, executed(false))
    }

    fn breaks(self, invariant: Invariant) {
        match check_run(&self.0) {
            Ok(()) => panic!("the judge let {invariant} pass:\n{}", self.0),
            Err(counterexample) => assert!(
                counterexample.breaks(invariant),
                "expected {invariant}, got {counterexample}"
            ),
        }
    }
}

#[test]
fn a_history_that_keeps_every_rule_passes() {
    let story = Story::a_executes()
        .store(
            30,
            B,
            reserve(B),
            completed(A, "a"),
            Reply::Replay {
                result: idem_core::StoredResult::Value(Body::new("a")),
            },
            completed(A, "a"),
        )
        .finish(
            30,
            B,
            Outcome::Replayed {
                result: idem_core::StoredResult::Value(Body::new("a")),
            },
        );
    if let Err(counterexample) = check_run(&story.0) {
        panic!("{counterexample}");
    }
}

#[test]
fn i1_a_grant_over_a_live_holder() {
    Story::default()
        .store(0, A, reserve(A), None, granted(A, 1_000), pending(A, 1_000))
        .store(
            500,
            B,
            reserve(B),
            pending(A, 1_000),
            granted(B, 1_500),
            pending(B, 1_500),
        )
        .breaks(Invariant::I1);
}

#[test]
fn i2_a_release_by_another_owner() {
    Story::default()
        .store(0, A, reserve(A), None, granted(A, 1_000), pending(A, 1_000))
        .store(
            500,
            B,
            Command::Release { owner: B.owner() },
            pending(A, 1_000),
            Reply::Released,
            None,
        )
        .breaks(Invariant::I2);
}

#[test]
fn i3_a_completed_record_overwritten() {
    Story::a_executes()
        .store(
            40,
            A,
            complete(A, "a2"),
            completed(A, "a"),
            Reply::Completed(Completion::Repeated),
            completed(A, "a2"),
        )
        .breaks(Invariant::I3);
}

#[test]
fn i4_a_replay_to_another_request() {
    let mut story = Story::a_executes();
    story.0.events.push(Event {
        at: 30,
        who: B,
        key: 0,
        fingerprint: fp(1),
        kind: EventKind::Store {
            command: reserve(B),
            before: completed(A, "a"),
            answer: Answer::Reply(Reply::Replay {
                result: idem_core::StoredResult::Value(Body::new("a")),
            }),
            after: completed(A, "a"),
            delivery: Delivery::Normal,
        },
    });
    story.breaks(Invariant::I4);
}

#[test]
fn i5_a_failure_recorded() {
    Story::default()
        .store(0, A, reserve(A), None, granted(A, 1_000), pending(A, 1_000))
        .event(10, A, EventKind::Declined)
        .store(
            20,
            A,
            complete(A, "declined"),
            pending(A, 1_000),
            Reply::Completed(Completion::InTime),
            completed(A, "declined"),
        )
        .breaks(Invariant::I5);
}

#[test]
fn i6_a_dead_holders_expired_lease_still_blocks() {
    Story::default()
        .store(0, A, reserve(A), None, granted(A, 1_000), pending(A, 1_000))
        .charge(10, A, "a")
        .event(10, A, EventKind::Crashed)
        .store(
            1_500,
            B,
            reserve(B),
            pending(A, 1_000),
            Reply::InFlight {
                lease_until: t(1_000),
            },
            pending(A, 1_000),
        )
        .breaks(Invariant::I6);
}

#[test]
fn i7_two_charges_nobody_explains() {
    Story::a_executes()
        .store(
            30,
            B,
            reserve(B),
            None,
            granted(B, 1_030),
            pending(B, 1_030),
        )
        .charge(40, B, "b")
        .finish(50, B, executed(false))
        .breaks(Invariant::I7);
}

#[test]
fn i7_a_second_charge_explained_by_a_lost_lease_passes() {
    let story = Story::default()
        .store(0, A, reserve(A), None, granted(A, 1_000), pending(A, 1_000))
        .charge(10, A, "a")
        .store(
            1_200,
            B,
            reserve(B),
            pending(A, 1_000),
            granted(B, 2_200),
            pending(B, 2_200),
        )
        .charge(1_210, B, "b")
        .store(
            1_220,
            B,
            complete(B, "b"),
            pending(B, 2_200),
            Reply::Completed(Completion::InTime),
            completed(B, "b"),
        )
        .finish(1_220, B, executed(false))
        .store(
            1_300,
            A,
            complete(A, "a"),
            completed(B, "b"),
            Reply::Refused(Refusal::NotOwner),
            completed(B, "b"),
        )
        .finish(1_300, A, executed(true));
    if let Err(counterexample) = check_run(&story.0) {
        panic!("{counterexample}");
    }
}

#[test]
fn i7_report_a_lapse_hidden_behind_a_repeated_complete() {
    Story::default()
        .store(0, A, reserve(A), None, granted(A, 1_000), pending(A, 1_000))
        .charge(10, A, "a")
        .store(
            1_200,
            A,
            complete(A, "a"),
            pending(A, 1_000),
            Reply::Completed(Completion::AfterLeaseExpiry),
            completed(A, "a"),
        )
        .store(
            1_300,
            A,
            complete(A, "a"),
            completed(A, "a"),
            Reply::Completed(Completion::Repeated),
            completed(A, "a"),
        )
        .finish(1_300, A, executed(false))
        .breaks(Invariant::I7Report);
}

#[test]
fn i8_identical_requests_answered_differently() {
    Story::a_executes()
        .finish(
            30,
            B,
            Outcome::Replayed {
                result: idem_core::StoredResult::Value(Body::new("b")),
            },
        )
        .breaks(Invariant::I8);
}

#[test]
fn i9_an_expired_completed_record_still_replayed() {
    Story::a_executes()
        .store(
            70_000,
            B,
            reserve(B),
            completed(A, "a"),
            Reply::Replay {
                result: idem_core::StoredResult::Value(Body::new("a")),
            },
            completed(A, "a"),
        )
        .breaks(Invariant::I9);
}

#[test]
fn i10_a_renewal_shrinks_the_lease() {
    Story::default()
        .store(0, A, reserve(A), None, granted(A, 1_000), pending(A, 1_000))
        .store(
            100,
            A,
            Command::Renew {
                owner: A.owner(),
                lease: Duration::from_millis(500),
            },
            pending(A, 1_000),
            granted(A, 600),
            pending(A, 600),
        )
        .breaks(Invariant::I10);
}

#[test]
fn i11_a_repeated_reserve_moves_the_lease() {
    Story::default()
        .store(0, A, reserve(A), None, granted(A, 1_000), pending(A, 1_000))
        .store(
            100,
            A,
            reserve(A),
            pending(A, 1_000),
            granted(A, 1_100),
            pending(A, 1_100),
        )
        .breaks(Invariant::I11);
}

#[test]
fn liveness_a_caller_that_never_finishes() {
    Story::default()
        .event(0, A, EventKind::Stuck("no outcome".into()))
        .breaks(Invariant::Liveness);
}

#[test]
fn lease_view_held_after_the_store_let_it_run_out() {
    Story::default()
        .store(0, A, reserve(A), None, granted(A, 1_000), pending(A, 1_000))
        .charge(10, A, "a")
        .event(1_200, A, EventKind::BelievedHeld { held_at: 1_200 })
        .breaks(Invariant::LeaseView);
}
