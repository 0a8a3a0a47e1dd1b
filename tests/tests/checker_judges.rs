//! The judge itself, on histories written by hand: each rule it checks is broken once, in
//! the smallest history that breaks it, and the judge must name that rule; the histories
//! that keep the rules pass. This shows every check can fail, including the ones no broken
//! store variant reaches (`I4`, `I5`, `I6`, `I9`, `I10`, `I11`, the lease view, liveness),
//! and each rule for abnormal ends (panics, corrupt records, abandoned attempts).

use std::time::Duration;

use idem_core::record::{Command, Completion, Record, Refusal, Reply, Reservation, StoredResult};
use idem_core::{
    Abandonment, Body, Execution, Fingerprint, Outcome, Protection, Recording, Timestamp,
};
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

fn execution(lease_lost: bool) -> Execution {
    Execution {
        protection: Protection::Reserved,
        record: Recording::Stored,
        lease_lost,
    }
}

fn executed(lease_lost: bool) -> Outcome {
    Outcome::Executed(execution(lease_lost))
}

fn completed_with(who: AttemptId, result: StoredResult) -> Option<Record> {
    Some(Record::Completed {
        owner: who.owner(),
        fingerprint: fp(0),
        result,
        expires_at: t(60_000),
    })
}

fn complete_with(who: AttemptId, result: StoredResult) -> Command {
    Command::Complete {
        owner: who.owner(),
        fingerprint: fp(0),
        result,
        retention: Duration::from_secs(60),
    }
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

    /// The key holds a corrupt value: the store says so, delivered, and changes nothing.
    fn corrupt(self, at: u64, who: AttemptId, command: Command) -> Self {
        self.event(
            at,
            who,
            EventKind::Store {
                command,
                before: None,
                answer: Answer::Corrupt,
                after: None,
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

    /// A reserves, charges "a", panics, and completes the key "outcome unknown".
    fn a_panics() -> Self {
        Story::default()
            .store(0, A, reserve(A), None, granted(A, 1_000), pending(A, 1_000))
            .charge(10, A, "a")
            .event(10, A, EventKind::Panicked)
            .store(
                20,
                A,
                complete_with(A, StoredResult::Panicked),
                pending(A, 1_000),
                Reply::Completed(Completion::InTime),
                completed_with(A, StoredResult::Panicked),
            )
            .finish(20, A, Outcome::Panicked(execution(false)))
    }

    /// A reserves, charges "a", and its caller goes away: the driver abandons the attempt,
    /// whose settlement leaves the key to its lease (until t+1000).
    fn a_is_dropped_mid_action() -> Self {
        Story::default()
            .store(0, A, reserve(A), None, granted(A, 1_000), pending(A, 1_000))
            .charge(10, A, "a")
            .event(20, A, EventKind::Abandoned)
            .event(
                20,
                A,
                EventKind::Settled(Outcome::Abandoned(Abandonment::ActionDropped)),
            )
    }

    /// B reserves at `at`, over `before`, charges "b" and completes in time.
    fn b_executes(self, at: u64, before: Option<Record>) -> Self {
        self.store(
            at,
            B,
            reserve(B),
            before,
            granted(B, at + 1_000),
            pending(B, at + 1_000),
        )
        .charge(at + 10, B, "b")
        .store(
            at + 20,
            B,
            complete(B, "b"),
            pending(B, at + 1_000),
            Reply::Completed(Completion::InTime),
            completed(B, "b"),
        )
        .finish(at + 20, B, executed(false))
    }

    fn passes(self) {
        if let Err(counterexample) = check_run(&self.0) {
            panic!("{counterexample}");
        }
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

#[test]
fn a_panic_completed_and_replayed_as_outcome_unknown_passes() {
    Story::a_panics()
        .store(
            30,
            B,
            reserve(B),
            completed_with(A, StoredResult::Panicked),
            Reply::Replay {
                result: StoredResult::Panicked,
            },
            completed_with(A, StoredResult::Panicked),
        )
        .finish(
            30,
            B,
            Outcome::Replayed {
                result: StoredResult::Panicked,
            },
        )
        .passes();
}

#[test]
fn panic_a_panicked_actions_key_released_by_its_owner() {
    Story::default()
        .store(0, A, reserve(A), None, granted(A, 1_000), pending(A, 1_000))
        .charge(10, A, "a")
        .event(10, A, EventKind::Panicked)
        .store(
            20,
            A,
            Command::Release { owner: A.owner() },
            pending(A, 1_000),
            Reply::Released,
            None,
        )
        .finish(20, A, Outcome::ActionFailed { released: true })
        .breaks(Invariant::Panic);
}

#[test]
fn panic_recorded_as_a_value() {
    Story::default()
        .store(0, A, reserve(A), None, granted(A, 1_000), pending(A, 1_000))
        .charge(10, A, "a")
        .event(10, A, EventKind::Panicked)
        .store(
            20,
            A,
            complete(A, "a"),
            pending(A, 1_000),
            Reply::Completed(Completion::InTime),
            completed(A, "a"),
        )
        .finish(20, A, Outcome::Panicked(execution(false)))
        .breaks(Invariant::Panic);
}

#[test]
fn panic_a_replay_of_a_panicked_record_not_said_unknown() {
    Story::a_panics()
        .store(
            30,
            B,
            reserve(B),
            completed_with(A, StoredResult::Panicked),
            Reply::Replay {
                result: StoredResult::Panicked,
            },
            completed_with(A, StoredResult::Panicked),
        )
        .finish(
            30,
            B,
            Outcome::Replayed {
                result: StoredResult::NotStored,
            },
        )
        .breaks(Invariant::Panic);
}

#[test]
fn panic_outcome_unknown_replayed_from_an_action_that_did_not_panic() {
    Story::a_executes()
        .store(
            30,
            B,
            reserve(B),
            completed(A, "a"),
            Reply::Replay {
                result: StoredResult::Value(Body::new("a")),
            },
            completed(A, "a"),
        )
        .finish(
            30,
            B,
            Outcome::Replayed {
                result: StoredResult::Panicked,
            },
        )
        .breaks(Invariant::Panic);
}

#[test]
fn a_corrupt_key_answered_corrupt_record_passes() {
    Story::default()
        .corrupt(0, A, reserve(A))
        .finish(0, A, Outcome::CorruptRecord)
        .passes();
}

#[test]
fn corrupt_a_caller_told_so_runs_its_action() {
    Story::default()
        .corrupt(0, A, reserve(A))
        .charge(10, A, "a")
        .finish(
            10,
            A,
            Outcome::Executed(Execution {
                protection: Protection::FailedOpen,
                record: Recording::Unknown,
                lease_lost: false,
            }),
        )
        .breaks(Invariant::Corrupt);
}

#[test]
fn corrupt_a_caller_told_so_at_its_reserve_ends_otherwise() {
    Story::default()
        .corrupt(0, A, reserve(A))
        .finish(0, A, Outcome::StoreUnavailable)
        .breaks(Invariant::Corrupt);
}

#[test]
fn i7_a_dropped_action_taken_over_after_its_lease_passes() {
    Story::a_is_dropped_mid_action()
        .b_executes(1_200, pending(A, 1_000))
        .passes();
}

#[test]
fn i7_a_dropped_actions_key_handed_on_before_its_lease_ended() {
    Story::a_is_dropped_mid_action()
        .store(
            30,
            A,
            Command::Release { owner: A.owner() },
            pending(A, 1_000),
            Reply::Released,
            None,
        )
        .b_executes(500, None)
        .breaks(Invariant::I7);
}

#[test]
fn liveness_an_abandoned_attempt_that_never_settles() {
    Story::default()
        .store(0, A, reserve(A), None, granted(A, 1_000), pending(A, 1_000))
        .event(10, A, EventKind::Abandoned)
        .breaks(Invariant::Liveness);
}

#[test]
fn liveness_an_attempt_that_stops_without_an_outcome() {
    Story::default()
        .store(0, A, reserve(A), None, granted(A, 1_000), pending(A, 1_000))
        .breaks(Invariant::Liveness);
}
