//! The attempt machine's less travelled paths, driven against the real record machine by one
//! scriptable world: store faults per command (down, or applied with the reply lost), other
//! actors writing to the key at chosen instants, and actions of chosen length and result.
//! Ends with a property test over random fault schedules.

use std::time::Duration;

use idem_core::record::{Command, Completion, Record, Refusal, Reply, apply};
use idem_core::{
    ActionResult, Attempt, Body, Fingerprint, InFlightPolicy, Key, LeaseState, Operation, Options,
    Outcome, OwnerToken, Protection, ProtocolError, Recording, Step, StoreFailurePolicy,
    StoredResult, Timestamp,
};
use proptest::prelude::*;

/// What the store does with one command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// Applied, and the reply arrives.
    None,
    /// Not applied; the caller sees a failure.
    Down,
    /// Applied, but the reply is lost; the caller sees a failure.
    ReplyLost,
    /// Applied, and no reply ever comes: the attempt must give up at its own reply
    /// deadline (rule 12).
    Hang,
    /// Not applied: the key holds a value that is not a record.
    Corrupt,
}

type FaultFn = Box<dyn FnMut(&Command, u64) -> Fault>;
type Actor = Box<dyn FnMut(&mut Option<Record>, u64)>;

/// One attempt, one key, a clock in milliseconds, and everything else scripted.
struct World {
    now: u64,
    store: Option<Record>,
    fault: FaultFn,
    /// Other parties touching the key; called before every poll with the current time.
    actor: Actor,
    /// How long the action takes, and what it returns; `None` never finishes.
    action: Option<(u64, ActionResult)>,
    action_done_at: Option<u64>,
    /// Every command sent, by name, with its time.
    sent: Vec<(&'static str, u64)>,
    runs: u32,
    /// The reservation's state at every poll, with the poll's time.
    lease_seen: Vec<(u64, LeaseState)>,
    /// The key holds a value that is not a record.
    corrupt: bool,
}

impl World {
    fn new() -> Self {
        Self {
            now: 0,
            store: None,
            fault: Box::new(|_, _| Fault::None),
            actor: Box::new(|_, _| {}),
            action: Some((10, ActionResult::Succeeded(Body::new("ch_1")))),
            action_done_at: None,
            sent: Vec::new(),
            runs: 0,
            lease_seen: Vec::new(),
            corrupt: false,
        }
    }

    /// When the reservation was first seen in `state`.
    fn saw(&self, state: LeaseState) -> Option<u64> {
        self.lease_seen
            .iter()
            .find(|(_, seen)| *seen == state)
            .map(|(at, _)| *at)
    }

    /// When each command called `name` was sent.
    fn times(&self, name: &str) -> Vec<u64> {
        self.sent
            .iter()
            .filter(|(n, _)| *n == name)
            .map(|(_, at)| *at)
            .collect()
    }

    fn sent(&self, name: &str) -> usize {
        self.sent.iter().filter(|(n, _)| *n == name).count()
    }

    fn run(&mut self, attempt: &mut Attempt) -> Outcome {
        for _ in 0..100_000 {
            (self.actor)(&mut self.store, self.now);
            let now = Timestamp::from_millis(self.now);
            if self.action_done_at.is_some_and(|at| at <= self.now) {
                self.action_done_at = None;
                let (_, result) = self.action.clone().expect("an action that finishes");
                attempt.handle_action_result(result, now).unwrap();
            }
            self.lease_seen.push((self.now, attempt.lease(now)));
            match attempt.poll(now) {
                Step::Send { command, .. } => {
                    self.sent.push((command.name(), self.now));
                    let fault = (self.fault)(&command, self.now);
                    if fault == Fault::Corrupt || self.corrupt {
                        // Something else wrote a value that is not a record over the key;
                        // from now on every command finds it and changes nothing.
                        self.corrupt = true;
                        self.store = None;
                        attempt.handle_corrupt_record(now).unwrap();
                        continue;
                    }
                    if fault != Fault::Down {
                        let reply = apply(self.store.as_ref(), command, now);
                        let reply = reply.apply_to(&mut self.store);
                        if fault == Fault::None {
                            attempt.handle_reply(reply, now).unwrap();
                            continue;
                        }
                        if fault == Fault::Hang {
                            assert!(attempt.awaiting_reply());
                            continue;
                        }
                    }
                    attempt.handle_store_error(now).unwrap();
                }
                Step::Run => {
                    self.runs += 1;
                    self.action_done_at = self.action.as_ref().map(|(ms, _)| self.now + ms);
                }
                Step::Wait { until } => {
                    let wake = [until.map(Timestamp::as_millis), self.action_done_at]
                        .into_iter()
                        .flatten()
                        .min()
                        .expect("the attempt waits for nothing that will come");
                    assert!(wake >= self.now, "woken in the past");
                    self.now = wake.max(self.now);
                }
                Step::Done(outcome) => return outcome,
            }
        }
        panic!("the attempt did not finish");
    }
}

fn fp(n: u8) -> Fingerprint {
    Fingerprint::of_bytes(&[n])
}

fn attempt_with(owner: u128, options: Options, seed: u64) -> Attempt {
    Attempt::new(
        Operation::new("payment.charge").unwrap(),
        Key::new("order-1").unwrap(),
        fp(1),
        OwnerToken::from_u128(owner),
        seed,
        options,
        Timestamp::ZERO,
    )
}

fn attempt(options: Options) -> Attempt {
    attempt_with(1, options, 7)
}

fn short_lease() -> Options {
    Options::builder()
        .lease(Duration::from_secs(1))
        .build()
        .unwrap()
}

fn someone_else(lease_until: u64) -> Record {
    Record::Pending {
        owner: OwnerToken::from_u128(99),
        fingerprint: fp(1),
        lease_until: Timestamp::from_millis(lease_until),
        fence: None,
    }
}

fn executed(outcome: &Outcome) -> idem_core::Execution {
    match outcome {
        Outcome::Executed(execution) => *execution,
        other => panic!("expected an execution, got {other:?}"),
    }
}

#[test]
fn a_refused_renewal_marks_the_lease_lost() {
    let mut world = World::new();
    // The holder's action outlives its lease; at 700 ms another owner holds the key (the
    // holder was paused past its lease and the key was taken over).
    world.action = Some((2_000, ActionResult::Succeeded(Body::new("ch_1"))));
    let mut taken = false;
    world.actor = Box::new(move |store, now| {
        if now >= 700 && !taken {
            taken = true;
            *store = Some(someone_else(60_000));
        }
    });
    let outcome = world.run(&mut attempt(short_lease()));
    let execution = executed(&outcome);
    assert!(execution.lease_lost);
    assert_eq!(execution.record, Recording::Refused(Refusal::NotOwner));
    // I2: the other holder's record is untouched by the stale holder's renew and complete.
    assert_eq!(world.store, Some(someone_else(60_000)));
    assert!(world.saw(LeaseState::Held).is_some());
    assert!(world.saw(LeaseState::Lost).is_some());
    // Once refused, the holder stops renewing.
    let renewals_after = world
        .sent
        .iter()
        .filter(|(n, at)| *n == "renew" && *at > 1_000)
        .count();
    assert_eq!(renewals_after, 0, "{:?}", world.sent);
}

#[test]
fn unconfirmed_lease_is_reported_while_renewals_fail() {
    let mut world = World::new();
    world.action = Some((3_000, ActionResult::Succeeded(Body::new("ch_1"))));
    world.fault = Box::new(|command, _| match command {
        Command::Renew { .. } => Fault::Down,
        _ => Fault::None,
    });
    let outcome = world.run(&mut attempt(short_lease()));
    // The machine wakes at the instant the confirmed lease (1 s from the reserve, less 1%
    // and 5 ms) runs out, so a driver can tell the action at once, not at the next renewal.
    assert_eq!(world.saw(LeaseState::Unconfirmed), Some(985));
    // Nobody took the key, so the late complete records the result and says the lease ran out.
    let execution = executed(&outcome);
    assert_eq!(execution.record, Recording::Stored);
    assert!(execution.lease_lost);
    // Failed renewals are retried with backoff, never faster than the initial backoff.
    let renew_times: Vec<u64> = world
        .sent
        .iter()
        .filter(|(n, _)| *n == "renew")
        .map(|(_, at)| *at)
        .collect();
    assert!(renew_times.len() >= 3, "{renew_times:?}");
    assert!(renew_times.windows(2).all(|w| w[1] - w[0] >= 10));
}

#[test]
fn a_reserve_whose_reply_was_lost_is_retried_with_the_same_token() {
    let mut world = World::new();
    let mut first = true;
    world.fault = Box::new(move |command, _| match command {
        Command::Reserve { .. } if first => {
            first = false;
            Fault::ReplyLost
        }
        _ => Fault::None,
    });
    let outcome = world.run(&mut attempt(Options::default()));
    // I11: the retried reserve finds its own reservation and the action runs once.
    assert_eq!(executed(&outcome).record, Recording::Stored);
    assert_eq!(world.sent("reserve"), 2);
    assert_eq!(world.runs, 1);
}

#[test]
fn a_complete_whose_reply_was_lost_is_retried_and_recognised() {
    let mut world = World::new();
    let mut first = true;
    world.fault = Box::new(move |command, _| match command {
        Command::Complete { .. } if first => {
            first = false;
            Fault::ReplyLost
        }
        _ => Fault::None,
    });
    let outcome = world.run(&mut attempt(Options::default()));
    assert_eq!(world.sent("complete"), 2);
    let execution = executed(&outcome);
    assert_eq!(execution.record, Recording::Stored);
    assert!(!execution.lease_lost);
    // The retry was answered `Repeated`: the record is the first complete's, unchanged.
    let reply = apply(
        world.store.as_ref(),
        Command::Complete {
            owner: OwnerToken::from_u128(1),
            fingerprint: fp(1),
            result: StoredResult::NotStored,
            retention: Duration::from_secs(60),
        },
        Timestamp::from_millis(world.now),
    );
    assert_eq!(reply.reply, Reply::Completed(Completion::Repeated));
}

#[test]
fn a_complete_that_fails_every_retry_is_reported_unknown() {
    let options = Options::builder().store_retries(3).build().unwrap();
    let mut world = World::new();
    world.fault = Box::new(|command, _| match command {
        Command::Complete { .. } => Fault::Down,
        _ => Fault::None,
    });
    let outcome = world.run(&mut attempt(options));
    assert_eq!(executed(&outcome).record, Recording::Unknown);
    assert_eq!(world.sent("complete"), 4, "one try and three retries");
    // Retries back off: each waits at least half the initial backoff (10 ms).
    let times = world.times("complete");
    assert!(times.windows(2).all(|w| w[1] >= w[0] + 5), "{times:?}");
    assert_eq!(world.runs, 1);
}

#[test]
fn a_release_is_retried_and_its_failure_reported() {
    for (downs, released) in [(1, true), (u32::MAX, false)] {
        let mut world = World::new();
        world.action = Some((10, ActionResult::Failed));
        let mut left = downs;
        world.fault = Box::new(move |command, _| match command {
            Command::Release { .. } if left > 0 => {
                left -= 1;
                Fault::Down
            }
            _ => Fault::None,
        });
        let outcome = world.run(&mut attempt(Options::default()));
        assert_eq!(outcome, Outcome::ActionFailed { released });
        // I5/I6: released, the key is free; unreleased, it frees itself when the lease ends.
        let live = world
            .store
            .clone()
            .filter(|r| !r.is_expired(Timestamp::from_millis(world.now)));
        assert_eq!(live.is_none(), released, "{:?}", world.store);
        if !released {
            assert_eq!(world.sent("release"), 3);
            let times = world.times("release");
            assert!(times.windows(2).all(|w| w[1] >= w[0] + 5), "{times:?}");
            let lease_end = world.store.as_ref().map(Record::expires_at).unwrap();
            assert!(lease_end <= Timestamp::from_millis(30_000 + 10));
        }
    }
}

#[test]
fn a_waiter_takes_over_a_dead_holders_key_when_its_lease_ends() {
    let mut world = World::new();
    // The holder reserved at 0 with a 1 s lease and crashed.
    world.store = Some(someone_else(1_000));
    let outcome = world.run(&mut attempt(Options::default()));
    assert_eq!(executed(&outcome).record, Recording::Stored);
    assert_eq!(world.runs, 1);
    // I6: the key was free within one lease, and the waiter noticed within one backoff.
    let reserved_at = world
        .sent
        .iter()
        .filter(|(n, _)| *n == "reserve")
        .map(|(_, at)| *at)
        .max()
        .unwrap();
    assert!((1_000..=1_500).contains(&reserved_at), "{reserved_at}");
}

#[test]
fn a_waiter_replays_a_completion_and_runs_after_a_release() {
    for completes in [true, false] {
        let mut world = World::new();
        world.store = Some(someone_else(60_000));
        world.actor = Box::new(move |store, now| {
            if now >= 300 && matches!(store, Some(Record::Pending { .. })) {
                let holder = OwnerToken::from_u128(99);
                let command = if completes {
                    Command::Complete {
                        owner: holder,
                        fingerprint: fp(1),
                        result: StoredResult::Value(Body::new("ch_0")),
                        retention: Duration::from_secs(60),
                    }
                } else {
                    Command::Release { owner: holder }
                };
                let _ = apply(store.as_ref(), command, Timestamp::from_millis(now)).apply_to(store);
            }
        });
        let outcome = world.run(&mut attempt(Options::default()));
        if completes {
            assert_eq!(
                outcome,
                Outcome::Replayed {
                    result: StoredResult::Value(Body::new("ch_0"))
                }
            );
            assert_eq!(world.runs, 0);
        } else {
            assert_eq!(executed(&outcome).record, Recording::Stored);
            assert_eq!(world.runs, 1);
        }
    }
}

#[test]
fn a_waiter_sends_a_bounded_number_of_reserves() {
    let options = Options::builder()
        .wait_deadline(Duration::from_secs(10))
        .build()
        .unwrap();
    let mut world = World::new();
    world.store = Some(someone_else(u64::MAX));
    let outcome = world.run(&mut attempt(options.clone()));
    assert_eq!(outcome, Outcome::InProgress);
    // Backoff doubles from 10 ms to 500 ms, each delay at least half its nominal value:
    // after the first few polls, at most one every 250 ms.
    let reserves = world.sent("reserve");
    assert!(reserves <= 10_000 / 250 + 8, "{reserves} reserves");
    assert!(reserves >= 10_000 / 500, "{reserves} reserves");
    // The last poll happens at the deadline itself.
    assert_eq!(world.sent.last().unwrap().1, 10_000);
}

#[test]
fn backoff_jitter_comes_from_the_seed_alone() {
    let times = |seed| {
        let mut world = World::new();
        world.store = Some(someone_else(u64::MAX));
        let options = Options::builder()
            .wait_deadline(Duration::from_secs(3))
            .build()
            .unwrap();
        world.run(&mut attempt_with(1, options, seed));
        world.sent
    };
    assert_eq!(times(1), times(1));
    assert_ne!(times(1), times(2));
}

#[test]
fn inputs_that_were_not_awaited_are_protocol_errors() {
    let now = Timestamp::ZERO;
    let mut a = attempt(Options::default());
    assert_eq!(
        a.handle_reply(Reply::Released, now),
        Err(ProtocolError::NoCommandOutstanding)
    );
    assert_eq!(
        a.handle_store_error(now),
        Err(ProtocolError::NoCommandOutstanding)
    );
    let done = ActionResult::Succeeded(Body::new("x"));
    assert_eq!(
        a.handle_action_result(done.clone(), now),
        Err(ProtocolError::ActionNotRunning)
    );
    let Step::Send { command, .. } = a.poll(now) else {
        panic!("first step is a reserve")
    };
    let mut store = None;
    let reply = apply(None, command, now).apply_to(&mut store);
    a.handle_reply(reply, now).unwrap();
    // Reserved, but the action has not been handed out yet.
    assert_eq!(
        a.handle_action_result(done.clone(), now),
        Err(ProtocolError::ActionNotRunning)
    );
    assert_eq!(a.poll(now), Step::Run);
    a.handle_action_result(done.clone(), now).unwrap();
    assert_eq!(
        a.handle_action_result(done, now),
        Err(ProtocolError::ActionNotRunning)
    );
}

#[test]
fn a_reply_that_answers_another_command_is_a_store_failure() {
    let mut a = attempt(Options::default());
    let now = Timestamp::ZERO;
    assert!(matches!(
        a.poll(now),
        Step::Send {
            command: Command::Reserve { .. },
            ..
        }
    ));
    // A buggy store answers a reserve with `Released`: the reserve is retried, not trusted.
    a.handle_reply(Reply::Released, now).unwrap();
    assert!(matches!(a.poll(now), Step::Wait { until: Some(_) }));
    // A reservation for another owner is not ours either.
    let mut a = attempt(Options::default());
    let Step::Send { .. } = a.poll(now) else {
        panic!()
    };
    let foreign = idem_core::Reservation {
        owner: OwnerToken::from_u128(2),
        lease_until: Some(Timestamp::from_millis(30_000)),
        fence: None,
    };
    a.handle_reply(Reply::Reserved(foreign), now).unwrap();
    assert_ne!(a.poll(now), Step::Run);
}

/// One random fault schedule, action and policy.
#[derive(Debug, Clone)]
struct Scenario {
    faults: Vec<Fault>,
    action_ms: u64,
    /// 0 succeeds, 1 fails, 2 panics.
    ends: u8,
    fail_closed: bool,
    raise: bool,
    holder: Option<u64>,
}

fn scenario() -> impl Strategy<Value = Scenario> {
    let fault = prop_oneof![
        12 => Just(Fault::None),
        4 => Just(Fault::Down),
        2 => Just(Fault::ReplyLost),
        2 => Just(Fault::Hang),
        1 => Just(Fault::Corrupt),
    ];
    (
        proptest::collection::vec(fault, 0..40),
        1u64..5_000,
        0u8..3,
        any::<bool>(),
        any::<bool>(),
        proptest::option::of(1u64..3_000),
    )
        .prop_map(
            |(faults, action_ms, ends, fail_closed, raise, holder)| Scenario {
                faults,
                action_ms,
                ends,
                fail_closed,
                raise,
                holder,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    /// Whatever the store does, the attempt ends; it runs the action at most once; its
    /// outcome matches what happened; and what it reports as stored is in the store.
    #[test]
    fn every_fault_schedule_ends_in_an_honest_outcome(s in scenario()) {
        let options = Options::builder()
            .lease(Duration::from_secs(1))
            .wait_deadline(Duration::from_secs(2))
            .on_store_failure(if s.fail_closed { StoreFailurePolicy::FailClosed } else { StoreFailurePolicy::FailOpen })
            .in_flight(if s.raise { InFlightPolicy::Raise } else { InFlightPolicy::Wait })
            .build()
            .unwrap();
        let mut world = World::new();
        if let Some(until) = s.holder {
            world.store = Some(someone_else(until));
        }
        let body = Body::new("ch_1");
        let result = match s.ends {
            0 => ActionResult::Succeeded(body.clone()),
            1 => ActionResult::Failed,
            _ => ActionResult::Panicked,
        };
        let corrupt_seen = s.faults.contains(&Fault::Corrupt);
        world.action = Some((s.action_ms, result));
        let mut faults = s.faults.clone().into_iter();
        world.fault = Box::new(move |_, _| faults.next().unwrap_or(Fault::None));
        let outcome = world.run(&mut attempt(options));
        let end = Timestamp::from_millis(world.now);
        let live = world.store.clone().filter(|r| !r.is_expired(end));
        match &outcome {
            Outcome::Executed(e) | Outcome::Panicked(e) => {
                let panicked = matches!(outcome, Outcome::Panicked(_));
                prop_assert_eq!(world.runs, 1);
                prop_assert_eq!(s.ends, if panicked { 2 } else { 0 });
                prop_assert!(e.protection == Protection::Reserved || !s.fail_closed);
                if e.record == Recording::Stored {
                    let expected = if panicked { StoredResult::Panicked } else { StoredResult::Value(body.clone()) };
                    let stored = matches!(&live, Some(Record::Completed { result, .. }) if *result == expected);
                    prop_assert!(stored, "reported stored, store holds {:?}", live);
                }
                if e.record == Recording::CorruptRecord {
                    prop_assert!(corrupt_seen);
                }
            }
            Outcome::ActionFailed { released } => {
                prop_assert_eq!(world.runs, 1);
                prop_assert_eq!(s.ends, 1);
                // I5: nothing of ours is recorded; released means no live reservation of ours.
                let ours = live.as_ref().is_some_and(|r| r.owner() == OwnerToken::from_u128(1));
                prop_assert!(!(ours && *released), "released but still holding: {:?}", live);
                let recorded = matches!(live, Some(Record::Completed { ref owner, .. }) if *owner == OwnerToken::from_u128(1));
                prop_assert!(!recorded, "a failure was recorded: {:?}", live);
            }
            Outcome::StoreUnavailable => {
                prop_assert!(s.fail_closed);
                prop_assert_eq!(world.runs, 0);
            }
            Outcome::InProgress => {
                prop_assert!(s.holder.is_some());
                prop_assert_eq!(world.runs, 0);
            }
            Outcome::CorruptRecord => {
                // Rule 11: a corrupt record runs nothing, whatever the failure policy.
                prop_assert!(corrupt_seen);
                prop_assert_eq!(world.runs, 0);
            }
            Outcome::Replayed { .. }
            | Outcome::KeyReuse { .. }
            | Outcome::Abandoned(_)
            | Outcome::RolledBack { .. }
            | Outcome::CommitUnknown => {
                prop_assert!(false, "nothing completed or reused the key: {:?}", outcome);
            }
        }
    }
}

#[test]
fn a_failed_open_result_is_recorded_once_the_store_is_back() {
    let mut world = World::new();
    // The store is down for every reserve; it is back by the time the action ends.
    world.fault = Box::new(|command, _| match command {
        Command::Reserve { .. } => Fault::Down,
        _ => Fault::None,
    });
    let outcome = world.run(&mut attempt(Options::default()));
    let execution = executed(&outcome);
    assert_eq!(execution.protection, Protection::FailedOpen);
    assert_eq!(execution.record, Recording::Stored);
    // Nothing was reserved, so nothing was lost: the outcome says fail-open, not lease lost.
    assert!(!execution.lease_lost);
    assert_eq!(world.sent("reserve"), 3);
    assert_eq!(world.runs, 1);
    assert!(matches!(world.store, Some(Record::Completed { .. })));
}

#[test]
fn accessors_report_what_the_attempt_was_made_with() {
    let options = Options::builder().store_retries(4).build().unwrap();
    let mut a = attempt(options.clone());
    assert_eq!(a.options(), &options);
    assert_eq!(a.owner(), OwnerToken::from_u128(1));
    assert_eq!(a.fingerprint(), fp(1));
    assert_eq!(a.key().as_str(), "order-1");
    assert_eq!(a.operation().as_str(), "payment.charge");
    assert!(!a.is_done());
    World::new().run(&mut a);
    assert!(a.is_done());
}

#[test]
fn an_unprotected_action_has_no_lease_to_report() {
    let mut world = World::new();
    world.action = Some((500, ActionResult::Succeeded(Body::new("ch_1"))));
    world.fault = Box::new(|_, _| Fault::Down);
    let outcome = world.run(&mut attempt(Options::default()));
    assert_eq!(executed(&outcome).protection, Protection::FailedOpen);
    assert!(world.lease_seen.iter().all(|(_, s)| *s != LeaseState::Held));
    assert_eq!(world.sent("renew"), 0);
}
