//! The judge itself, on histories written by hand: each rule it checks is broken once, in
//! the smallest history that breaks it, and the judge must name that rule; the histories
//! that keep the rules pass. This shows every check can fail, including the ones a broken
//! variant reaches rarely or never, and each rule for abnormal ends (panics, keys that hold
//! no record, dropped actions, abandoned attempts).

use std::time::Duration;

use idem_check::{
    ActionEnd, Answer, AttemptSpec, Cause, EventKind, History, KeySpec, MessageSpec, Provider,
    Received, Rule, judge,
};
use idem_core::record::{Command, Completion, Record, Refusal, Reply, Reservation, StoredResult};
use idem_core::{
    Abandonment, Body, DeadLetterReason, Disposition, DownstreamKey, Execution, Fence, Fingerprint,
    Key, Operation, Outcome, OwnerToken, Protection, Recording, Timestamp,
};

const A: usize = 0;
const B: usize = 1;
/// A third attempt, of another request (another fingerprint) under the same key.
const C: usize = 2;
/// Two more attempts of A's request.
const D: usize = 3;
const E: usize = 4;

fn fp(request: u8) -> Fingerprint {
    Fingerprint::of_bytes(&[request])
}

fn t(ms: u64) -> Timestamp {
    Timestamp::from_millis(ms)
}

fn owner(who: usize) -> OwnerToken {
    OwnerToken::from_u128(who as u128 + 1)
}

fn fp_of(who: usize) -> Fingerprint {
    fp(u8::from(who == C))
}

fn pending(who: usize, until: u64) -> Option<Record> {
    Some(Record::Pending {
        owner: owner(who),
        fingerprint: fp_of(who),
        lease_until: t(until),
        fence: None,
    })
}

fn value(id: &str) -> StoredResult {
    StoredResult::Value(Body::new(id))
}

fn completed_with(who: usize, result: StoredResult, until: u64) -> Option<Record> {
    Some(Record::Completed {
        owner: owner(who),
        fingerprint: fp_of(who),
        result,
        expires_at: t(until),
    })
}

fn completed(who: usize, id: &str) -> Option<Record> {
    completed_with(who, value(id), 60_000)
}

fn reserve(who: usize) -> Command {
    Command::Reserve {
        owner: owner(who),
        fingerprint: fp_of(who),
        lease: Duration::from_secs(1),
    }
}

fn complete_with(who: usize, result: StoredResult) -> Command {
    Command::Complete {
        owner: owner(who),
        fingerprint: fp_of(who),
        result,
        retention: Duration::from_secs(60),
    }
}

fn complete(who: usize, id: &str) -> Command {
    complete_with(who, value(id))
}

fn release(who: usize) -> Command {
    Command::Release { owner: owner(who) }
}

fn renew(who: usize, ms: u64) -> Command {
    Command::Renew {
        owner: owner(who),
        lease: Duration::from_millis(ms),
    }
}

fn granted(who: usize, until: u64) -> Reply {
    Reply::Reserved(Reservation {
        owner: owner(who),
        lease_until: Some(t(until)),
        fence: None,
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

fn failed_open() -> Outcome {
    Outcome::Executed(Execution {
        protection: Protection::FailedOpen,
        record: Recording::Unknown,
        lease_lost: false,
    })
}

/// A history written event by event: key 0 (or the last of [`Story::with_keys`]),
/// attempts A, B, D and E of one request and C of another.
struct Story(History);

impl Story {
    fn new() -> Self {
        Self::with_keys(&[false])
    }

    /// Keys `0..corrupt.len()`, key `k` holding a value that is not a record when
    /// `corrupt[k]`; the attempts are on the last key.
    fn with_keys(corrupt: &[bool]) -> Self {
        let mut history = History::default();
        for (k, corrupt) in corrupt.iter().enumerate() {
            history.add_key(KeySpec {
                operation: "payment.charge".into(),
                key: format!("order-{k}"),
                filed: None,
                corrupt: *corrupt,
            });
        }
        for (who, label) in ["A", "B", "C", "D", "E"].into_iter().enumerate() {
            history.add_attempt(AttemptSpec {
                label: label.into(),
                key: corrupt.len() - 1,
                fingerprint: fp_of(who),
                owner: owner(who),
            });
        }
        Story(history)
    }

    fn event(mut self, at: u64, who: usize, kind: EventKind) -> Self {
        self.0.push(at, who, kind);
        self
    }

    /// `who` sends `command`, the store applies it, and `who` receives the reply.
    fn store(
        self,
        at: u64,
        who: usize,
        command: Command,
        before: Option<Record>,
        reply: Reply,
        after: Option<Record>,
    ) -> Self {
        self.event(at, who, EventKind::Sent(command.kind()))
            .event(
                at,
                who,
                EventKind::store(command, before, Answer::Reply(reply.clone()), after),
            )
            .event(at, who, EventKind::Received(Received::Reply(reply)))
    }

    /// The key holds a value that is not a record: the store says so, and `who` is told.
    fn corrupt(self, at: u64, who: usize, command: Command) -> Self {
        self.event(at, who, EventKind::Sent(command.kind()))
            .event(
                at,
                who,
                EventKind::store(command, None, Answer::Corrupt, None),
            )
            .event(at, who, EventKind::Received(Received::Corrupt))
    }

    /// `who` runs its action, under its reservation.
    fn run(self, at: u64, who: usize) -> Self {
        self.event(at, who, EventKind::Run { unprotected: false })
    }

    /// `who`'s action charges the card: `ch_N`, N counting every charge from one.
    fn charge(mut self, at: u64, who: usize) -> Self {
        self.0.charge(at, who);
        self
    }

    fn ended(self, at: u64, who: usize, end: ActionEnd) -> Self {
        self.event(at, who, EventKind::ActionEnded(end))
    }

    fn finish(self, at: u64, who: usize, outcome: Outcome) -> Self {
        self.event(at, who, EventKind::Finished(outcome))
    }

    /// `who` is granted the key at `at` over `before`.
    fn granted(self, at: u64, who: usize, before: Option<Record>) -> Self {
        self.store(
            at,
            who,
            reserve(who),
            before,
            granted(who, at + 1_000),
            pending(who, at + 1_000),
        )
    }

    /// `who` is granted the key at `at` over `before`, charges `id` (its number on the
    /// statement) and completes in time.
    fn executes(self, at: u64, who: usize, before: Option<Record>, id: &str) -> Self {
        self.granted(at, who, before)
            .run(at + 5, who)
            .charge(at + 10, who)
            .ended(at + 15, who, ActionEnd::Succeeded)
            .store(
                at + 20,
                who,
                complete(who, id),
                pending(who, at + 1_000),
                Reply::Completed(Completion::InTime),
                completed_with(who, value(id), at + 60_000),
            )
            .finish(at + 20, who, executed(false))
    }

    /// A holds the key, charges `ch_1` and completes in time.
    fn a_executes() -> Self {
        Story::new().executes(0, A, None, "ch_1")
    }

    /// `who` reserves over `before` and is replayed `result` from it.
    fn replayed(self, at: u64, who: usize, before: Option<Record>, result: StoredResult) -> Self {
        self.store(
            at,
            who,
            reserve(who),
            before.clone(),
            Reply::Replay {
                result: result.clone(),
                remaining: None,
            },
            before,
        )
        .finish(at, who, Outcome::Replayed { result })
    }

    /// A reserves, charges `ch_1`, panics, and completes the key "outcome unknown".
    fn a_panics() -> Self {
        Story::new()
            .granted(0, A, None)
            .run(5, A)
            .charge(10, A)
            .ended(10, A, ActionEnd::Panicked)
            .store(
                20,
                A,
                complete_with(A, StoredResult::Panicked),
                pending(A, 1_000),
                Reply::Completed(Completion::InTime),
                completed_with(A, StoredResult::Panicked, 60_000),
            )
            .finish(20, A, Outcome::Panicked(execution(false)))
    }

    /// A reserves, charges `ch_1`, and its caller goes away: the driver abandons the
    /// attempt, whose settlement leaves the key to its lease (until t+1000).
    fn a_is_dropped_mid_action() -> Self {
        Story::new()
            .granted(0, A, None)
            .run(5, A)
            .charge(10, A)
            .event(20, A, EventKind::Abandoned)
            .event(
                20,
                A,
                EventKind::Settled(Outcome::Abandoned(Abandonment::ActionDropped)),
            )
    }

    fn passes(self) {
        let verdict = judge(&self.0);
        assert!(
            verdict.violations.is_empty(),
            "{:?}\n{}",
            verdict.violations,
            self.0
        );
    }

    fn breaks(self, rule: Rule) {
        let verdict = judge(&self.0);
        assert!(
            verdict.breaks(rule),
            "expected {rule}, got {:?}\n{}",
            verdict.violations,
            self.0
        );
    }
}

#[test]
fn a_history_that_keeps_every_rule_passes() {
    Story::a_executes()
        .replayed(30, B, completed(A, "ch_1"), value("ch_1"))
        .passes();
}

#[test]
fn i1_a_grant_over_a_live_holder() {
    Story::new()
        .granted(0, A, None)
        .store(
            500,
            B,
            reserve(B),
            pending(A, 1_000),
            granted(B, 1_500),
            pending(B, 1_500),
        )
        .breaks(Rule::I1);
}

#[test]
fn i1_a_reservation_written_over_a_live_one_without_a_grant() {
    Story::new()
        .granted(0, A, None)
        .store(
            500,
            B,
            reserve(B),
            pending(A, 1_000),
            Reply::InFlight {
                lease_until: Some(t(1_000)),
            },
            pending(B, 1_500),
        )
        .breaks(Rule::I1);
}

#[test]
fn i2_a_release_by_another_owner() {
    Story::new()
        .granted(0, A, None)
        .store(500, B, release(B), pending(A, 1_000), Reply::Released, None)
        .breaks(Rule::I2);
}

#[test]
fn i2_another_owner_told_its_renewal_succeeded() {
    Story::new()
        .granted(0, A, None)
        .store(
            500,
            B,
            renew(B, 1_000),
            pending(A, 1_000),
            Reply::Renewed(Reservation {
                owner: owner(B),
                lease_until: Some(t(1_500)),
                fence: None,
            }),
            pending(A, 1_000),
        )
        .breaks(Rule::I2);
}

#[test]
fn i3_a_completed_record_overwritten() {
    Story::a_executes()
        .store(
            40,
            A,
            complete(A, "ch_1"),
            completed(A, "ch_1"),
            Reply::Completed(Completion::Repeated),
            completed_with(A, value("ch_1"), 70_000),
        )
        .breaks(Rule::I3);
}

#[test]
fn i4_a_replay_to_another_request() {
    Story::a_executes()
        .store(
            30,
            C,
            reserve(C),
            completed(A, "ch_1"),
            Reply::Replay {
                result: value("ch_1"),
                remaining: None,
            },
            completed(A, "ch_1"),
        )
        .breaks(Rule::I4);
}

#[test]
fn i4_another_request_told_in_flight() {
    Story::new()
        .granted(0, A, None)
        .store(
            30,
            C,
            reserve(C),
            pending(A, 1_000),
            Reply::InFlight {
                lease_until: Some(t(1_000)),
            },
            pending(A, 1_000),
        )
        .breaks(Rule::I4);
}

#[test]
fn i4_a_key_reuse_that_no_other_request_caused() {
    Story::new()
        .finish(
            0,
            B,
            Outcome::KeyReuse {
                stored: fp(7),
                given: fp(0),
            },
        )
        .breaks(Rule::I4);
}

#[test]
fn i4_and_i8_a_replayed_charge_of_another_request() {
    let story = Story::new().executes(0, C, None, "ch_1").replayed(
        30,
        A,
        completed(C, "ch_1"),
        value("ch_1"),
    );
    let verdict = judge(&story.0);
    assert!(verdict.breaks(Rule::I4), "{:?}", verdict.violations);
    assert!(verdict.breaks(Rule::I8), "{:?}", verdict.violations);
}

#[test]
fn i5_a_failure_recorded() {
    Story::new()
        .granted(0, A, None)
        .run(5, A)
        .ended(10, A, ActionEnd::Failed)
        .store(
            20,
            A,
            complete(A, "declined"),
            pending(A, 1_000),
            Reply::Completed(Completion::InTime),
            completed(A, "declined"),
        )
        .breaks(Rule::I5);
}

#[test]
fn i5_a_release_that_records_the_failure() {
    Story::new()
        .granted(0, A, None)
        .run(5, A)
        .ended(10, A, ActionEnd::Failed)
        .store(
            20,
            A,
            release(A),
            pending(A, 1_000),
            Reply::Released,
            completed(A, "error"),
        )
        .breaks(Rule::I5);
}

#[test]
fn i5_a_complete_that_carries_another_value_than_its_charge() {
    Story::new()
        .granted(0, A, None)
        .run(5, A)
        .charge(10, A)
        .ended(10, A, ActionEnd::Succeeded)
        .event(20, A, EventKind::Sent(complete(A, "ch_9").kind()))
        .event(
            20,
            A,
            EventKind::store(complete(A, "ch_9"), None, Answer::NotApplied, None),
        )
        .breaks(Rule::I5);
}

#[test]
fn i6_a_dead_holders_expired_lease_still_blocks() {
    Story::new()
        .granted(0, A, None)
        .run(5, A)
        .charge(10, A)
        .event(10, A, EventKind::Crashed)
        .store(
            1_500,
            B,
            reserve(B),
            pending(A, 1_000),
            Reply::InFlight {
                lease_until: Some(t(1_000)),
            },
            pending(A, 1_000),
        )
        .breaks(Rule::I6);
}

#[test]
fn i6_a_reservation_that_outlives_every_lease_its_holder_asked_for() {
    // A marker without a lease: live by its own end, but A asked for one second only.
    Story::new()
        .store(
            0,
            A,
            reserve(A),
            None,
            granted(A, u64::MAX),
            pending(A, u64::MAX),
        )
        .run(5, A)
        .charge(10, A)
        .event(10, A, EventKind::Crashed)
        .store(
            1_500,
            B,
            reserve(B),
            pending(A, u64::MAX),
            Reply::InFlight {
                lease_until: Some(t(u64::MAX)),
            },
            pending(A, u64::MAX),
        )
        .breaks(Rule::I6);
}

#[test]
fn i7_two_charges_nobody_explains() {
    Story::a_executes()
        .granted(30, B, None)
        .run(35, B)
        .charge(40, B)
        .finish(50, B, executed(false))
        .breaks(Rule::I7);
}

#[test]
fn i7_a_second_charge_explained_by_a_lost_lease_passes() {
    let story = Story::new()
        .granted(0, A, None)
        .run(5, A)
        .charge(10, A)
        .ended(1_290, A, ActionEnd::Succeeded)
        .executes(1_200, B, pending(A, 1_000), "ch_2")
        .store(
            1_300,
            A,
            complete(A, "ch_1"),
            completed(B, "ch_2"),
            Reply::Refused(Refusal::NotOwner),
            completed(B, "ch_2"),
        )
        .finish(1_300, A, executed(true));
    let verdict = judge(&story.0);
    assert!(verdict.violations.is_empty(), "{:?}", verdict.violations);
    assert_eq!(verdict.extra.get(Cause::LeaseExpired), 1);
    assert_eq!(verdict.extra.total(), 1);
}

/// A charges `ch_1`, loses its lease, B takes the key over and charges `ch_2`; each
/// request carries the downstream key `sends` gives its attempt.
fn lost_lease_sending(sends: impl Fn(usize) -> DownstreamKey, provider: Provider) -> History {
    let mut story = Story::new().granted(0, A, None).run(5, A);
    story.0.charge_sending(10, A, Some(sends(A)), None);
    story = story
        .ended(1_190, A, ActionEnd::Succeeded)
        .granted(1_200, B, pending(A, 1_000))
        .run(1_205, B);
    story.0.charge_sending(1_210, B, Some(sends(B)), None);
    story = story
        .ended(1_215, B, ActionEnd::Succeeded)
        .store(
            1_220,
            B,
            complete(B, "ch_2"),
            pending(B, 2_200),
            Reply::Completed(Completion::InTime),
            completed_with(B, value("ch_2"), 61_220),
        )
        .finish(1_220, B, executed(false))
        .store(
            1_300,
            A,
            complete(A, "ch_1"),
            completed_with(B, value("ch_2"), 61_220),
            Reply::Refused(Refusal::NotOwner),
            completed_with(B, value("ch_2"), 61_220),
        )
        .finish(1_300, A, executed(true));
    story.0.provider = provider;
    story.0
}

fn the_calls_key() -> DownstreamKey {
    DownstreamKey::derive(
        &Operation::new("payment.charge").unwrap(),
        &Key::new("order-0").unwrap(),
    )
}

#[test]
fn d1_a_takeover_that_sends_another_downstream_key() {
    let history = lost_lease_sending(
        |who| {
            if who == A {
                the_calls_key()
            } else {
                DownstreamKey::derive(
                    &Operation::new("payment.charge").unwrap(),
                    &Key::new(owner(who).to_string()).unwrap(),
                )
            }
        },
        Provider::Keyed,
    );
    let verdict = judge(&history);
    assert_eq!(
        verdict.rules().into_iter().collect::<Vec<_>>(),
        [Rule::DownstreamKeyStable],
        "{:?}",
        verdict.violations
    );
    // The keyed provider saw two keys: the lost lease's extra call is an extra effect there.
    assert_eq!(verdict.extra_at_provider.get(Cause::LeaseExpired), 1);
    assert_eq!(verdict.absorbed.total(), 0);
}

#[test]
fn d1_the_calls_key_on_every_attempt_passes_and_a_keyed_provider_absorbs_the_extra_call() {
    for (provider, at_provider, absorbed) in [(Provider::Plain, 1, 0), (Provider::Keyed, 0, 1)] {
        let verdict = judge(&lost_lease_sending(|_| the_calls_key(), provider));
        assert!(verdict.violations.is_empty(), "{:?}", verdict.violations);
        // `I7` counts the extra call at either provider.
        assert_eq!(verdict.extra.get(Cause::LeaseExpired), 1, "{provider}");
        assert_eq!(
            verdict.extra_at_provider.get(Cause::LeaseExpired),
            at_provider,
            "{provider}"
        );
        assert_eq!(
            verdict.absorbed.get(Cause::LeaseExpired),
            absorbed,
            "{provider}"
        );
    }
}

#[test]
fn i7_a_second_charge_after_the_retention_passes_in_a_new_life_of_the_record() {
    let expired = completed(A, "ch_1");
    let story = Story::a_executes()
        .replayed(30, B, completed(A, "ch_1"), value("ch_1"))
        .executes(70_000, D, expired, "ch_2")
        .replayed(
            70_100,
            E,
            completed_with(D, value("ch_2"), 130_000),
            value("ch_2"),
        );
    let verdict = judge(&story.0);
    assert!(verdict.violations.is_empty(), "{:?}", verdict.violations);
    assert_eq!(verdict.extra.get(Cause::RetentionExpired), 1);
}

#[test]
fn i7_report_a_lapse_hidden_behind_a_repeated_complete() {
    Story::new()
        .granted(0, A, None)
        .run(5, A)
        .charge(10, A)
        .ended(10, A, ActionEnd::Succeeded)
        .store(
            1_200,
            A,
            complete(A, "ch_1"),
            pending(A, 1_000),
            Reply::Completed(Completion::AfterLeaseExpiry),
            completed(A, "ch_1"),
        )
        .store(
            1_300,
            A,
            complete(A, "ch_1"),
            completed(A, "ch_1"),
            Reply::Completed(Completion::Repeated),
            completed(A, "ch_1"),
        )
        .finish(1_300, A, executed(false))
        .breaks(Rule::I7ReportedHonestly);
}

#[test]
fn i7_report_a_late_complete_answered_as_in_time() {
    Story::new()
        .granted(0, A, None)
        .run(5, A)
        .charge(10, A)
        .ended(10, A, ActionEnd::Succeeded)
        .store(
            1_200,
            A,
            complete(A, "ch_1"),
            pending(A, 1_000),
            Reply::Completed(Completion::InTime),
            completed(A, "ch_1"),
        )
        .finish(1_200, A, executed(false))
        .breaks(Rule::I7ReportedHonestly);
}

#[test]
fn i8_identical_requests_answered_differently() {
    Story::a_executes()
        .finish(
            30,
            B,
            Outcome::Replayed {
                result: value("ch_1x"),
            },
        )
        .breaks(Rule::I8);
}

#[test]
fn i8_a_replay_without_a_body_that_no_execution_explains() {
    Story::a_executes()
        .replayed(30, B, completed(A, "ch_1"), StoredResult::NotStored)
        .breaks(Rule::I8);
}

#[test]
fn i9_an_expired_completed_record_still_replayed() {
    Story::a_executes()
        .store(
            70_000,
            B,
            reserve(B),
            completed(A, "ch_1"),
            Reply::Replay {
                result: value("ch_1"),
                remaining: None,
            },
            completed(A, "ch_1"),
        )
        .breaks(Rule::I9);
}

#[test]
fn i10_a_renewal_shrinks_the_lease() {
    Story::new()
        .granted(0, A, None)
        .store(
            100,
            A,
            renew(A, 500),
            pending(A, 1_000),
            Reply::Renewed(Reservation {
                owner: owner(A),
                lease_until: Some(t(600)),
                fence: None,
            }),
            pending(A, 600),
        )
        .breaks(Rule::I10);
}

#[test]
fn i10_a_renewal_answered_short_of_the_lease() {
    Story::new()
        .granted(0, A, None)
        .store(
            100,
            A,
            renew(A, 500),
            pending(A, 1_000),
            Reply::Renewed(Reservation {
                owner: owner(A),
                lease_until: Some(t(600)),
                fence: None,
            }),
            pending(A, 1_000),
        )
        .breaks(Rule::I10);
}

#[test]
fn i11_a_repeated_reserve_moves_the_lease() {
    Story::new()
        .granted(0, A, None)
        .store(
            100,
            A,
            reserve(A),
            pending(A, 1_000),
            granted(A, 1_100),
            pending(A, 1_100),
        )
        .breaks(Rule::I11);
}

#[test]
fn i12_a_key_filed_under_another_name() {
    let mut story = Story::new();
    story.0.keys[0].filed = Some(("payment.charge".into(), "order".into()));
    story.granted(0, A, None).breaks(Rule::I12);
}

#[test]
fn liveness_a_caller_that_never_finishes() {
    Story::new()
        .event(0, A, EventKind::Stuck("no outcome".into()))
        .breaks(Rule::Liveness);
}

#[test]
fn lease_view_held_after_the_store_let_it_run_out() {
    Story::new()
        .granted(0, A, None)
        .run(5, A)
        .charge(10, A)
        .event(1_200, A, EventKind::LeaseView { until: 1_300 })
        .breaks(Rule::LeaseView);
}

#[test]
fn lease_view_held_longer_than_the_store_holds_it() {
    Story::new()
        .granted(0, A, None)
        .run(5, A)
        .event(500, A, EventKind::LeaseView { until: 1_500 })
        .breaks(Rule::LeaseView);
}

#[test]
fn a_lease_view_within_the_stores_lease_passes() {
    Story::a_executes()
        .event(10, A, EventKind::LeaseView { until: 1_000 })
        .passes();
}

#[test]
fn a_panic_completed_and_replayed_as_outcome_unknown_passes() {
    Story::a_panics()
        .replayed(
            30,
            B,
            completed_with(A, StoredResult::Panicked, 60_000),
            StoredResult::Panicked,
        )
        .passes();
}

#[test]
fn panic_a_panicked_actions_key_released_by_its_owner() {
    Story::new()
        .granted(0, A, None)
        .run(5, A)
        .charge(10, A)
        .ended(10, A, ActionEnd::Panicked)
        .store(20, A, release(A), pending(A, 1_000), Reply::Released, None)
        .finish(20, A, Outcome::ActionFailed { released: true })
        .breaks(Rule::PanicIsOutcomeUnknown);
}

#[test]
fn panic_recorded_as_a_value() {
    Story::new()
        .granted(0, A, None)
        .run(5, A)
        .charge(10, A)
        .ended(10, A, ActionEnd::Panicked)
        .store(
            20,
            A,
            complete(A, "ch_1"),
            pending(A, 1_000),
            Reply::Completed(Completion::InTime),
            completed(A, "ch_1"),
        )
        .finish(20, A, Outcome::Panicked(execution(false)))
        .breaks(Rule::PanicIsOutcomeUnknown);
}

#[test]
fn panic_recorded_as_a_result_not_stored() {
    Story::new()
        .granted(0, A, None)
        .run(5, A)
        .charge(10, A)
        .ended(10, A, ActionEnd::Panicked)
        .store(
            20,
            A,
            complete_with(A, StoredResult::Panicked),
            pending(A, 1_000),
            Reply::Completed(Completion::InTime),
            completed_with(A, StoredResult::NotStored, 60_000),
        )
        .finish(20, A, Outcome::Panicked(execution(false)))
        .breaks(Rule::PanicIsOutcomeUnknown);
}

#[test]
fn panic_a_replay_of_a_panicked_record_not_said_unknown() {
    Story::a_panics()
        .store(
            30,
            B,
            reserve(B),
            completed_with(A, StoredResult::Panicked, 60_000),
            Reply::Replay {
                result: StoredResult::Panicked,
                remaining: None,
            },
            completed_with(A, StoredResult::Panicked, 60_000),
        )
        .finish(
            30,
            B,
            Outcome::Replayed {
                result: StoredResult::NotStored,
            },
        )
        .breaks(Rule::PanicIsOutcomeUnknown);
}

#[test]
fn panic_outcome_unknown_replayed_from_an_action_that_did_not_panic() {
    Story::a_executes()
        .store(
            30,
            B,
            reserve(B),
            completed(A, "ch_1"),
            Reply::Replay {
                result: value("ch_1"),
                remaining: None,
            },
            completed(A, "ch_1"),
        )
        .finish(
            30,
            B,
            Outcome::Replayed {
                result: StoredResult::Panicked,
            },
        )
        .breaks(Rule::PanicIsOutcomeUnknown);
}

#[test]
fn panic_a_panicked_attempt_that_ends_otherwise() {
    Story::new()
        .granted(0, A, None)
        .run(5, A)
        .ended(10, A, ActionEnd::Panicked)
        .finish(20, A, Outcome::ActionFailed { released: false })
        .breaks(Rule::PanicIsOutcomeUnknown);
}

#[test]
fn a_corrupt_key_answered_corrupt_record_passes() {
    Story::with_keys(&[true])
        .corrupt(0, A, reserve(A))
        .finish(0, A, Outcome::CorruptRecord)
        .passes();
}

#[test]
fn a_corrupt_key_run_unanswered_fail_open_passes() {
    Story::with_keys(&[true])
        .event(0, A, EventKind::Sent(reserve(A).kind()))
        .event(0, A, EventKind::Received(Received::Failed))
        .event(5, A, EventKind::Run { unprotected: true })
        .charge(10, A)
        .ended(10, A, ActionEnd::Succeeded)
        .corrupt(20, A, complete(A, "ch_1"))
        .finish(
            20,
            A,
            Outcome::Executed(Execution {
                protection: Protection::FailedOpen,
                record: Recording::CorruptRecord,
                lease_lost: false,
            }),
        )
        .passes();
}

#[test]
fn corrupt_a_caller_told_so_runs_its_action() {
    Story::with_keys(&[true])
        .corrupt(0, A, reserve(A))
        .event(5, A, EventKind::Run { unprotected: true })
        .charge(10, A)
        .finish(10, A, failed_open())
        .breaks(Rule::CorruptRecordRunsNothing);
}

#[test]
fn corrupt_a_caller_told_so_at_its_reserve_ends_otherwise() {
    Story::with_keys(&[true])
        .corrupt(0, A, reserve(A))
        .finish(0, A, Outcome::StoreUnavailable)
        .breaks(Rule::CorruptRecordRunsNothing);
}

#[test]
fn corrupt_a_store_that_writes_over_the_value() {
    Story::with_keys(&[true])
        .granted(0, A, None)
        .breaks(Rule::CorruptRecordRunsNothing);
}

#[test]
fn corrupt_a_replay_under_a_key_that_holds_no_record() {
    Story::with_keys(&[true])
        .finish(
            0,
            A,
            Outcome::Replayed {
                result: value("ch_1"),
            },
        )
        .breaks(Rule::CorruptRecordRunsNothing);
}

#[test]
fn i7_a_dropped_action_taken_over_after_its_lease_passes() {
    let story = Story::a_is_dropped_mid_action().executes(1_200, B, pending(A, 1_000), "ch_2");
    let verdict = judge(&story.0);
    assert!(verdict.violations.is_empty(), "{:?}", verdict.violations);
    assert_eq!(verdict.extra.get(Cause::AbandonedMidAction), 1);
}

#[test]
fn i7_a_dropped_actions_key_handed_on_before_its_lease_ended() {
    Story::a_is_dropped_mid_action()
        .store(30, A, release(A), pending(A, 1_000), Reply::Released, None)
        .executes(500, B, None, "ch_2")
        .breaks(Rule::I7);
}

#[test]
fn dropped_action_a_release_of_its_key() {
    Story::a_is_dropped_mid_action()
        .store(30, A, release(A), pending(A, 1_000), Reply::Released, None)
        .breaks(Rule::DroppedActionKeepsKey);
}

#[test]
fn liveness_an_abandoned_attempt_that_never_settles() {
    Story::new()
        .granted(0, A, None)
        .event(10, A, EventKind::Abandoned)
        .breaks(Rule::Liveness);
}

#[test]
fn liveness_an_attempt_that_stops_without_an_outcome() {
    Story::new().granted(0, A, None).breaks(Rule::Liveness);
}

#[test]
fn liveness_a_dropped_action_settled_as_if_nothing_ran() {
    Story::new()
        .granted(0, A, None)
        .run(5, A)
        .event(10, A, EventKind::Abandoned)
        .event(
            10,
            A,
            EventKind::Settled(Outcome::Abandoned(Abandonment::Settled)),
        )
        .breaks(Rule::Liveness);
}

#[test]
fn liveness_an_attempt_ended_abandoned_that_nobody_abandoned() {
    Story::new()
        .finish(0, A, Outcome::Abandoned(Abandonment::Settled))
        .breaks(Rule::Liveness);
}

#[test]
fn an_attempt_abandoned_after_its_action_ended_settles_as_if_its_caller_stayed() {
    Story::new()
        .granted(0, A, None)
        .run(5, A)
        .charge(10, A)
        .ended(15, A, ActionEnd::Succeeded)
        .event(16, A, EventKind::Abandoned)
        .store(
            20,
            A,
            complete(A, "ch_1"),
            pending(A, 1_000),
            Reply::Completed(Completion::InTime),
            completed(A, "ch_1"),
        )
        .event(20, A, EventKind::Settled(executed(false)))
        .passes();
}

#[test]
fn driver_protocol_an_input_the_machine_refused() {
    Story::a_executes()
        .event(30, A, EventKind::Protocol("a reply nobody awaited".into()))
        .breaks(Rule::DriverProtocol);
}

/// `who`'s action is transactional: it writes `id` uncommitted at `at`.
fn transactional_writes(story: Story, at: u64, who: usize, id: &str) -> Story {
    story
        .event(0, who, EventKind::Transactional)
        .run(at, who)
        .event(at + 5, who, EventKind::Wrote { id: id.into() })
}

/// The store applies `who`'s complete of `id` over `before`, answering `reply`, and commits
/// the writes with it when `commit`.
fn transactional_complete(
    story: Story,
    at: u64,
    who: usize,
    id: &str,
    (before, reply, after): (Option<Record>, Reply, Option<Record>),
    commit: bool,
) -> Story {
    let mut story = story
        .event(
            at,
            who,
            EventKind::Sent(idem_core::record::CommandKind::Complete),
        )
        .event(
            at,
            who,
            EventKind::store(
                complete(who, id),
                before,
                Answer::Reply(reply.clone()),
                after,
            ),
        );
    if commit {
        story.0.commit(at, who, id.into());
    }
    story.event(at, who, EventKind::Received(Received::Reply(reply)))
}

/// A (transactional) writes `tx_1` and pauses past its lease; B takes the key over, writes
/// `tx_2` and commits; A's complete is refused and rolls back (`commit_anyway`: commits).
fn paused_transactional_holder(commit_anyway: bool, a_ends: Outcome) -> Story {
    let story = transactional_writes(Story::new().granted(0, A, None), 5, A, "tx_1").ended(
        1_290,
        A,
        ActionEnd::Succeeded,
    );
    let story = transactional_writes(story.granted(1_200, B, pending(A, 1_000)), 1_205, B, "tx_2")
        .ended(1_215, B, ActionEnd::Succeeded);
    let story = transactional_complete(
        story,
        1_220,
        B,
        "tx_2",
        (
            pending(B, 2_200),
            Reply::Completed(Completion::InTime),
            completed_with(B, value("tx_2"), 61_220),
        ),
        true,
    )
    .finish(1_220, B, executed(false));
    transactional_complete(
        story,
        1_300,
        A,
        "tx_1",
        (
            completed_with(B, value("tx_2"), 61_220),
            Reply::Refused(Refusal::NotOwner),
            completed_with(B, value("tx_2"), 61_220),
        ),
        commit_anyway,
    )
    .finish(1_300, A, a_ends)
}

#[test]
fn t1_a_paused_transactional_holder_taken_over_commits_nothing_and_passes() {
    let story = paused_transactional_holder(false, Outcome::RolledBack { released: true });
    let verdict = judge(&story.0);
    assert!(verdict.violations.is_empty(), "{:?}", verdict.violations);
    assert_eq!(story.0.statement.ids(), ["tx_2"]);
    assert_eq!(
        verdict.extra.total() + verdict.extra_transactional.total(),
        0
    );
}

#[test]
fn t1_a_refused_complete_that_commits_its_writes() {
    let story = paused_transactional_holder(true, Outcome::RolledBack { released: true });
    let verdict = judge(&story.0);
    assert_eq!(
        verdict.rules().into_iter().collect::<Vec<_>>(),
        [Rule::TransactionalEffectOnce],
        "{:?}",
        verdict.violations
    );
    // Its lease had run out: `I7` would have let that explain the second effect.
    assert_eq!(verdict.extra_transactional.get(Cause::LeaseExpired), 1);
    assert_eq!(verdict.extra.total(), 0);
}

#[test]
fn t1_a_transactional_holder_that_says_executed_of_writes_rolled_back() {
    paused_transactional_holder(false, executed(true)).breaks(Rule::TransactionalEffectOnce);
}

#[test]
fn t1_a_result_recorded_without_its_writes_committed() {
    let story = transactional_writes(Story::new().granted(0, A, None), 5, A, "tx_1").ended(
        15,
        A,
        ActionEnd::Succeeded,
    );
    transactional_complete(
        story,
        20,
        A,
        "tx_1",
        (
            pending(A, 1_000),
            Reply::Completed(Completion::InTime),
            completed_with(A, value("tx_1"), 60_020),
        ),
        false,
    )
    .finish(20, A, Outcome::RolledBack { released: true })
    .breaks(Rule::TransactionalEffectOnce);
}

#[test]
fn t1_a_second_commit_after_the_retention_passes() {
    let story = transactional_writes(Story::new().granted(0, A, None), 5, A, "tx_1").ended(
        15,
        A,
        ActionEnd::Succeeded,
    );
    let story = transactional_complete(
        story,
        20,
        A,
        "tx_1",
        (
            pending(A, 1_000),
            Reply::Completed(Completion::InTime),
            completed_with(A, value("tx_1"), 60_020),
        ),
        true,
    )
    .finish(20, A, executed(false));
    let expired = completed_with(A, value("tx_1"), 60_020);
    let story = transactional_writes(story.granted(70_000, D, expired), 70_005, D, "tx_2").ended(
        70_015,
        D,
        ActionEnd::Succeeded,
    );
    let story = transactional_complete(
        story,
        70_020,
        D,
        "tx_2",
        (
            pending(D, 71_000),
            Reply::Completed(Completion::InTime),
            completed_with(D, value("tx_2"), 130_020),
        ),
        true,
    )
    .finish(70_020, D, executed(false));
    let verdict = judge(&story.0);
    assert!(verdict.violations.is_empty(), "{:?}", verdict.violations);
    assert_eq!(verdict.extra_transactional.get(Cause::RetentionExpired), 1);
    assert_eq!(verdict.extra_transactional.total(), 1);
}

/// A reservation of `who` until `until` under `fence`.
fn fenced(who: usize, until: u64, fence: u64) -> Option<Record> {
    Some(Record::Pending {
        owner: owner(who),
        fingerprint: fp_of(who),
        lease_until: t(until),
        fence: Fence::new(fence),
    })
}

fn granted_under(who: usize, until: u64, fence: u64) -> Reply {
    Reply::Reserved(Reservation {
        owner: owner(who),
        lease_until: Some(t(until)),
        fence: Fence::new(fence),
    })
}

/// A is granted the key under fence `a`, is paused past its lease, B takes the key over under
/// fence `b` and charges `ch_1`; then A, resumed, charges `ch_2` with its own fence, late.
fn stale_holder(a: u64, b: u64, provider: Provider) -> History {
    holders(a, b, provider, false)
}

/// As [`stale_holder`], but A's request reaches the provider first, before it is paused: the
/// stale holder's write comes before its successor's.
fn holders(a: u64, b: u64, provider: Provider, stale_first: bool) -> History {
    // Charges are named in the order they reach the provider.
    let (a_charge, b_charge) = if stale_first {
        ("ch_1", "ch_2")
    } else {
        ("ch_2", "ch_1")
    };
    let mut story = Story::new()
        .store(
            0,
            A,
            reserve(A),
            None,
            granted_under(A, 1_000, a),
            fenced(A, 1_000, a),
        )
        .run(5, A);
    if stale_first {
        story.0.charge_sending(10, A, None, Fence::new(a));
    }
    story = story
        .store(
            1_200,
            B,
            reserve(B),
            fenced(A, 1_000, a),
            granted_under(B, 2_200, b),
            fenced(B, 2_200, b),
        )
        .run(1_205, B);
    story.0.charge_sending(1_210, B, None, Fence::new(b));
    story = story.ended(1_215, B, ActionEnd::Succeeded).store(
        1_220,
        B,
        complete(B, b_charge),
        fenced(B, 2_200, b),
        Reply::Completed(Completion::InTime),
        completed_with(B, value(b_charge), 61_220),
    );
    story = story.finish(1_220, B, executed(false));
    if !stale_first {
        story.0.charge_sending(1_250, A, None, Fence::new(a));
    }
    story = story
        .ended(1_260, A, ActionEnd::Succeeded)
        .store(
            1_300,
            A,
            complete(A, a_charge),
            completed_with(B, value(b_charge), 61_220),
            Reply::Refused(Refusal::NotOwner),
            completed_with(B, value(b_charge), 61_220),
        )
        .finish(1_300, A, executed(true));
    story.0.provider = provider;
    story.0
}

#[test]
fn f1_a_takeover_fenced_above_its_predecessor_passes_and_its_stale_write_is_refused() {
    let verdict = judge(&stale_holder(5, 6, Provider::Fenced));
    assert!(verdict.violations.is_empty(), "{:?}", verdict.violations);
    // `I7` counts the stale holder's extra call; the fenced provider refused it.
    assert_eq!(verdict.extra.get(Cause::LeaseExpired), 1);
    assert_eq!(verdict.extra_at_provider.total(), 0);
    assert_eq!(verdict.absorbed.get(Cause::LeaseExpired), 1);
    assert_eq!(verdict.stale_at_provider, 0);
    // Without fences at the provider, the stale write lands after its successor's.
    let plain = judge(&stale_holder(5, 6, Provider::Plain));
    assert!(plain.violations.is_empty(), "{:?}", plain.violations);
    assert_eq!(plain.stale_at_provider, 1);
}

#[test]
fn f1_a_stale_write_that_came_first_is_replaced_by_its_successors() {
    // A paused after its request: the fenced provider applies it, then B's, under a higher
    // fence, replaces it. The key holds one effect; `I7` still counts A's extra call.
    let verdict = judge(&holders(5, 6, Provider::Fenced, true));
    assert!(verdict.violations.is_empty(), "{:?}", verdict.violations);
    assert_eq!(verdict.extra.get(Cause::LeaseExpired), 1);
    assert_eq!(verdict.extra_at_provider.total(), 0);
    assert_eq!(verdict.absorbed.get(Cause::LeaseExpired), 1);
    assert_eq!(verdict.stale_at_provider, 0);
    // Nothing stale here for a plain provider either, but two effects: a second charge.
    let plain = judge(&holders(5, 6, Provider::Plain, true));
    assert!(plain.violations.is_empty(), "{:?}", plain.violations);
    assert_eq!(plain.stale_at_provider, 0);
    assert_eq!(plain.extra_at_provider.get(Cause::LeaseExpired), 1);
}

#[test]
fn f1_a_takeover_under_its_predecessors_fence_is_caught() {
    for b in [5, 4] {
        let verdict = judge(&stale_holder(5, b, Provider::Fenced));
        assert_eq!(
            verdict.rules().into_iter().collect::<Vec<_>>(),
            [Rule::FenceIncreasing],
            "{:?}",
            verdict.violations
        );
        // The provider cannot tell the stale holder from its successor: the late write lands.
        assert_eq!(verdict.stale_at_provider, 1, "fence {b}");
    }
}

impl Story {
    /// A message on key 0, published once: attempts deliver it from here on.
    fn message() -> Self {
        let mut story = Story::new();
        story.0.add_message(MessageSpec {
            label: "m0".into(),
            key: 0,
        });
        story
    }

    /// `who` runs delivery `n` of message m0.
    fn delivers(self, at: u64, who: usize, n: u32) -> Self {
        self.event(
            at,
            who,
            EventKind::Delivered {
                message: 0,
                delivery: n,
            },
        )
    }

    /// The consumer tells the broker `disposition` for `who`'s delivery, and it arrives.
    fn disposes(self, at: u64, who: usize, disposition: Disposition) -> Self {
        self.event(
            at,
            who,
            EventKind::Disposed {
                disposition,
                lost: false,
            },
        )
    }
}

/// `C1`: acknowledged once the complete is applied, or as a replay, passes; acknowledged
/// when the action returned, before its complete, breaks the rule.
#[test]
fn a_delivery_acknowledged_before_its_record_breaks_c1() {
    Story::message()
        .delivers(0, A, 1)
        .executes(0, A, None, "ch_1")
        .disposes(21, A, Disposition::Ack)
        .delivers(30, B, 2)
        .replayed(30, B, completed(A, "ch_1"), value("ch_1"))
        .disposes(31, B, Disposition::Ack)
        .passes();
    Story::message()
        .delivers(0, A, 1)
        .granted(0, A, None)
        .run(5, A)
        .charge(10, A)
        .ended(15, A, ActionEnd::Succeeded)
        .disposes(15, A, Disposition::Ack)
        .store(
            20,
            A,
            complete(A, "ch_1"),
            pending(A, 1_000),
            Reply::Completed(Completion::InTime),
            completed(A, "ch_1"),
        )
        .finish(20, A, executed(false))
        .breaks(Rule::AckAfterRecord);
}

/// `C1`: an execution whose complete's outcome is unknown is acknowledged (its effect
/// happened); a failure acknowledged is a message whose effect never happened.
#[test]
fn an_acknowledged_failure_breaks_c1_and_an_unknown_complete_does_not() {
    Story::message()
        .delivers(0, A, 1)
        .granted(0, A, None)
        .run(5, A)
        .charge(10, A)
        .ended(15, A, ActionEnd::Succeeded)
        .finish(
            300,
            A,
            Outcome::Executed(Execution {
                protection: Protection::Reserved,
                record: Recording::Unknown,
                lease_lost: false,
            }),
        )
        .disposes(300, A, Disposition::Ack)
        .passes();
    let verdict = judge(
        &Story::message()
            .delivers(0, A, 1)
            .granted(0, A, None)
            .run(5, A)
            .ended(15, A, ActionEnd::Failed)
            .store(20, A, release(A), pending(A, 1_000), Reply::Released, None)
            .finish(20, A, Outcome::ActionFailed { released: true })
            .disposes(20, A, Disposition::Ack)
            .0,
    );
    let c1: Vec<_> = verdict
        .violations
        .iter()
        .filter(|v| v.rule == Rule::AckAfterRecord)
        .collect();
    assert_eq!(c1.len(), 2, "{:?}", verdict.violations);
    assert!(c1[1].detail.contains("never happened"), "{c1:?}");
}

/// Liveness: a message the broker still holds at the end, its last delivery handed back
/// or its ack lost, is reported; dead-lettered, it is settled.
#[test]
fn a_message_neither_acknowledged_nor_dead_lettered_is_reported() {
    let failed = || {
        Story::message()
            .delivers(0, A, 1)
            .granted(0, A, None)
            .run(5, A)
            .ended(15, A, ActionEnd::Failed)
            .store(20, A, release(A), pending(A, 1_000), Reply::Released, None)
            .finish(20, A, Outcome::ActionFailed { released: true })
    };
    failed()
        .disposes(
            20,
            A,
            Disposition::Redeliver {
                after: Duration::from_millis(100),
            },
        )
        .breaks(Rule::Liveness);
    failed()
        .disposes(20, A, Disposition::DeadLetter(DeadLetterReason::Exhausted))
        .passes();
    Story::message()
        .delivers(0, A, 1)
        .executes(0, A, None, "ch_1")
        .event(
            21,
            A,
            EventKind::Disposed {
                disposition: Disposition::Ack,
                lost: true,
            },
        )
        .breaks(Rule::Liveness);
}

/// Names read as the formatting machinery would write them, at every number of digits, and
/// a charge's id is `ch_N` from one.
#[test]
fn names_are_the_prefix_and_the_number() {
    for n in [0, 7, 10, 99, 100, 12_345, usize::MAX] {
        assert_eq!(idem_check::numbered("w", n), format!("w{n}"));
        assert_eq!(idem_check::numbered("ch_", n), format!("ch_{n}"));
    }
    let mut statement = idem_check::Statement::<usize>::default();
    assert_eq!(statement.charge(0, None, 5).id, "ch_1");
    assert_eq!(statement.charge(0, None, 6).id, "ch_2");
}
