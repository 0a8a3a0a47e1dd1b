//! The record machine against a separately written reference model, over random sequences of
//! commands with time moving (MODEL.md, "Transitions"; I1, I2, I3, I4, I9, I10, I11).
//!
//! The reference model below is written from MODEL.md's table, not from `record.rs`: it keeps
//! the key's state as one flat enum, forgets an expired record before anything else, and
//! answers each (command, state) cell in one match arm. After every step the test compares the
//! two machines' replies and live states, and checks the invariants against the history of
//! replies seen so far.

use std::time::Duration;

use idem_core::record::{Command, Completion, Record, Refusal, Reply, apply};
use idem_core::{Body, Fingerprint, OwnerToken, StoredResult, Timestamp};
use proptest::prelude::*;

/// The reference model's view of one key.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Model {
    Free,
    Held {
        owner: u8,
        fp: u8,
        until: u64,
    },
    Done {
        owner: u8,
        fp: u8,
        body: Option<u8>,
        until: u64,
    },
}

/// The reference model's replies, named as in MODEL.md's table.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    Reserved {
        owner: u8,
        until: u64,
    },
    InFlight {
        until: u64,
    },
    /// The body, and how long the record has left (its `until` minus `now`).
    Replay {
        body: Option<u8>,
        left: u64,
    },
    KeyReuse {
        stored: u8,
    },
    Completed(Completion),
    Renewed {
        owner: u8,
        until: u64,
    },
    Released,
    Refused(Refusal),
    Read(Model),
}

#[derive(Debug, Clone)]
enum Op {
    Reserve {
        owner: u8,
        fp: u8,
        lease: u64,
    },
    Complete {
        owner: u8,
        fp: u8,
        body: Option<u8>,
        retention: u64,
    },
    Renew {
        owner: u8,
        lease: u64,
    },
    Release {
        owner: u8,
    },
    Read,
}

impl Model {
    fn live(self, now: u64) -> Model {
        match self {
            Model::Held { until, .. } | Model::Done { until, .. } if until <= now => Model::Free,
            other => other,
        }
    }

    fn step(self, op: &Op, now: u64) -> (Answer, Model) {
        use Answer as A;
        let state = self.live(now);
        match (op, state.clone()) {
            (&Op::Reserve { owner, fp, lease }, Model::Free) => {
                let until = now + lease;
                (
                    A::Reserved { owner, until },
                    Model::Held { owner, fp, until },
                )
            }
            (&Op::Reserve { fp, .. }, Model::Held { fp: held, .. })
            | (&Op::Reserve { fp, .. }, Model::Done { fp: held, .. })
                if fp != held =>
            {
                (A::KeyReuse { stored: held }, state)
            }
            (
                &Op::Reserve { owner, .. },
                Model::Held {
                    owner: o, until, ..
                },
            ) if o == owner => (A::Reserved { owner, until }, state),
            (Op::Reserve { .. }, Model::Held { until, .. }) => (A::InFlight { until }, state),
            (Op::Reserve { .. }, Model::Done { body, until, .. }) => (
                A::Replay {
                    body,
                    left: until - now,
                },
                state,
            ),

            (
                &Op::Complete {
                    owner,
                    fp,
                    body,
                    retention,
                },
                Model::Free,
            ) => (
                A::Completed(Completion::AfterLeaseExpiry),
                Model::Done {
                    owner,
                    fp,
                    body,
                    until: now + retention,
                },
            ),
            (
                &Op::Complete {
                    owner,
                    body,
                    retention,
                    ..
                },
                Model::Held { owner: o, fp, .. },
            ) if o == owner => (
                A::Completed(Completion::InTime),
                Model::Done {
                    owner,
                    fp,
                    body,
                    until: now + retention,
                },
            ),
            (&Op::Complete { owner, .. }, Model::Done { owner: o, .. }) if o == owner => {
                (A::Completed(Completion::Repeated), state)
            }

            (
                &Op::Renew { owner, lease },
                Model::Held {
                    owner: o,
                    fp,
                    until,
                },
            ) if o == owner => {
                let until = until.max(now + lease);
                (
                    A::Renewed { owner, until },
                    Model::Held { owner, fp, until },
                )
            }
            (&Op::Release { owner }, Model::Held { owner: o, .. }) if o == owner => {
                (A::Released, Model::Free)
            }
            (Op::Renew { .. } | Op::Release { .. }, Model::Free) => {
                (A::Refused(Refusal::LeaseLost), state)
            }
            (&Op::Renew { owner, .. } | &Op::Release { owner }, Model::Done { owner: o, .. })
                if o == owner =>
            {
                (A::Refused(Refusal::AlreadyCompleted), state)
            }
            // Every remaining complete, renew or release names another owner's live record.
            (Op::Complete { .. } | Op::Renew { .. } | Op::Release { .. }, _) => {
                (A::Refused(Refusal::NotOwner), state)
            }
            (Op::Read, _) => (A::Read(state.clone()), state),
        }
    }
}

fn fp(n: u8) -> Fingerprint {
    Fingerprint::of_bytes(&[n])
}
fn body(n: u8) -> Body {
    Body::new(format!("ch_{n}"))
}
/// The model's result: `None` not stored, `Some(0)` a panic, `Some(n)` the value `ch_n`.
fn stored(b: Option<u8>) -> StoredResult {
    match b {
        None => StoredResult::NotStored,
        Some(0) => StoredResult::Panicked,
        Some(n) => StoredResult::Value(body(n)),
    }
}
fn owner(n: u8) -> OwnerToken {
    OwnerToken::from_u128(u128::from(n))
}

fn to_command(op: &Op) -> Command {
    match *op {
        Op::Reserve {
            owner: o,
            fp: f,
            lease,
        } => Command::Reserve {
            owner: owner(o),
            fingerprint: fp(f),
            lease: Duration::from_millis(lease),
        },
        Op::Complete {
            owner: o,
            fp: f,
            body: b,
            retention,
        } => Command::Complete {
            owner: owner(o),
            fingerprint: fp(f),
            result: stored(b),
            retention: Duration::from_millis(retention),
        },
        Op::Renew { owner: o, lease } => Command::Renew {
            owner: owner(o),
            lease: Duration::from_millis(lease),
        },
        Op::Release { owner: o } => Command::Release { owner: owner(o) },
        Op::Read => Command::Read,
    }
}

/// Maps a reference state onto the core's record, for comparison.
fn to_record(model: &Model) -> Option<Record> {
    match *model {
        Model::Free => None,
        Model::Held {
            owner: o,
            fp: f,
            until,
        } => Some(Record::Pending {
            owner: owner(o),
            fingerprint: fp(f),
            lease_until: Timestamp::from_millis(until),
            fence: None,
        }),
        Model::Done {
            owner: o,
            fp: f,
            body: b,
            until,
        } => Some(Record::Completed {
            owner: owner(o),
            fingerprint: fp(f),
            result: stored(b),
            expires_at: Timestamp::from_millis(until),
        }),
    }
}

fn to_reply(answer: &Answer) -> Reply {
    use idem_core::Reservation;
    let at = Timestamp::from_millis;
    match answer {
        Answer::Reserved { owner: o, until } => Reply::Reserved(Reservation {
            owner: owner(*o),
            lease_until: Some(at(*until)),
            fence: None,
        }),
        Answer::InFlight { until } => Reply::InFlight {
            lease_until: Some(at(*until)),
        },
        Answer::Replay { body: b, left } => Reply::Replay {
            result: stored(*b),
            remaining: Some(std::time::Duration::from_millis(*left)),
        },
        Answer::KeyReuse { stored } => Reply::KeyReuse {
            stored: fp(*stored),
        },
        Answer::Completed(c) => Reply::Completed(*c),
        Answer::Renewed { owner: o, until } => Reply::Renewed(Reservation {
            owner: owner(*o),
            lease_until: Some(at(*until)),
            fence: None,
        }),
        Answer::Released => Reply::Released,
        Answer::Refused(r) => Reply::Refused(*r),
        Answer::Read(m) => Reply::Read(to_record(m)),
    }
}

fn op() -> impl Strategy<Value = Op> {
    // Three owners and two fingerprints make every cell of the table reachable; leases and
    // retentions are short against the time steps so expiry happens often.
    let who = 1u8..=3;
    let which = 1u8..=2;
    prop_oneof![
        3 => (who.clone(), which.clone(), 1u64..=400).prop_map(|(owner, fp, lease)| Op::Reserve { owner, fp, lease }),
        2 => (who.clone(), which, proptest::option::of(0u8..=9), 1u64..=900)
            .prop_map(|(owner, fp, body, retention)| Op::Complete { owner, fp, body, retention }),
        1 => (who.clone(), 1u64..=400).prop_map(|(owner, lease)| Op::Renew { owner, lease }),
        1 => who.prop_map(|owner| Op::Release { owner }),
        1 => Just(Op::Read),
    ]
}

/// A time step: often zero (commands at the same instant), often exactly onto a boundary
/// the test cannot know in advance, so a spread of small and large steps.
fn tick() -> impl Strategy<Value = u64> {
    prop_oneof![3 => Just(0u64), 4 => 1u64..=150, 1 => 150u64..=1_000]
}

/// What the replies so far promise about the key; checked after every step.
#[derive(Debug, Default)]
struct History {
    /// The holder granted by the last `Reserved`/`Renewed`, with its request's fingerprint
    /// and lease end, until it completes or releases.
    holder: Option<(u8, u8, u64)>,
    /// The completed record, and when it expires.
    done: Option<(u8, u8, Option<u8>, u64)>,
}

impl History {
    fn check(&mut self, op: &Op, answer: &Answer, now: u64) -> Result<(), TestCaseError> {
        if let Some((.., until)) = self.holder
            && until <= now
        {
            self.holder = None;
        }
        if let Some((.., until)) = self.done
            && until <= now
        {
            self.done = None;
        }
        match (op, answer) {
            (&Op::Reserve { fp, .. }, Answer::Reserved { owner, until }) => {
                // I1: a second live holder is never granted; I11: the holder gets its own back.
                if let Some((held, held_fp, held_until)) = self.holder {
                    prop_assert_eq!(held, *owner, "I1: two live holders at {}", now);
                    prop_assert_eq!(held_fp, fp, "I4: reserved under another fingerprint");
                    prop_assert_eq!(held_until, *until, "I11: reserve retried by its owner");
                }
                prop_assert!(
                    self.done.is_none(),
                    "I3: completed record taken over at {}",
                    now
                );
                self.holder = Some((*owner, fp, *until));
            }
            (_, Answer::Renewed { owner, until }) => {
                let (held, held_fp, held_until) = self.holder.expect("renewed without a holder");
                prop_assert_eq!(held, *owner, "I2: renewed by a non-owner");
                prop_assert!(*until >= held_until, "I10: lease shrank");
                self.holder = Some((*owner, held_fp, *until));
            }
            (
                &Op::Complete {
                    owner,
                    fp,
                    body,
                    retention,
                },
                Answer::Completed(c),
            ) => {
                if let Some((held, ..)) = self.holder {
                    prop_assert_eq!(held, owner, "I2: completed by a non-owner");
                }
                match c {
                    Completion::Repeated => {
                        let (o, ..) = self.done.expect("repeated without a record");
                        prop_assert_eq!(o, owner, "I2: repeated by a non-owner");
                    }
                    Completion::InTime | Completion::AfterLeaseExpiry => {
                        prop_assert!(self.done.is_none(), "I3: completed record rewritten");
                        // The pending record's fingerprint is kept; a late complete (no live
                        // holder) records the complete's own.
                        let kept_fp = self.holder.map_or(fp, |(_, held_fp, _)| held_fp);
                        self.done = Some((owner, kept_fp, body, now + retention));
                    }
                }
                self.holder = None;
            }
            (&Op::Release { owner }, Answer::Released) => {
                let (held, ..) = self.holder.expect("released without a holder");
                prop_assert_eq!(held, owner, "I2: released by a non-owner");
                self.holder = None;
            }
            (&Op::Reserve { fp, .. }, Answer::Replay { body, .. }) => {
                let (_, done_fp, done_body, _) = self.done.expect("replay without a record");
                prop_assert_eq!(done_fp, fp, "I4: replayed another request's result");
                prop_assert_eq!(done_body, *body, "I3: replayed body changed");
            }
            _ => {}
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn record_machine_matches_reference_model(
        steps in proptest::collection::vec((tick(), op()), 1..60),
    ) {
        let mut now = 1_000u64;
        let mut stored: Option<Record> = None;
        let mut model = Model::Free;
        let mut history = History::default();
        for (i, (dt, op)) in steps.iter().enumerate() {
            now += dt;
            let at = Timestamp::from_millis(now);
            let reply = apply(stored.as_ref(), to_command(op), at).apply_to(&mut stored);
            let (answer, next) = model.step(op, now);
            model = next;
            prop_assert_eq!(&reply, &to_reply(&answer), "step {}: {:?} at {}", i, op, now);
            // I9: what the store keeps, once expired records are forgotten, is the model.
            let live = stored.clone().filter(|r| !r.is_expired(at));
            prop_assert_eq!(live, to_record(&model.clone().live(now)), "state after step {}", i);
            history.check(op, &answer, now)?;
        }
    }
}

/// The model itself is checked on the cells the test above leans on, so a wrong model
/// cannot agree with a wrong machine unnoticed.
#[test]
fn reference_model_cells() {
    let held = Model::Held {
        owner: 1,
        fp: 1,
        until: 500,
    };
    let (a, _) = held.clone().step(
        &Op::Reserve {
            owner: 2,
            fp: 1,
            lease: 100,
        },
        100,
    );
    assert_eq!(a, Answer::InFlight { until: 500 });
    let (a, _) = held.clone().step(
        &Op::Reserve {
            owner: 2,
            fp: 2,
            lease: 100,
        },
        100,
    );
    assert_eq!(a, Answer::KeyReuse { stored: 1 });
    let (a, s) = held.clone().step(
        &Op::Reserve {
            owner: 2,
            fp: 2,
            lease: 100,
        },
        500,
    );
    assert_eq!(
        a,
        Answer::Reserved {
            owner: 2,
            until: 600
        }
    );
    assert_eq!(
        s,
        Model::Held {
            owner: 2,
            fp: 2,
            until: 600
        }
    );
    let (a, _) = held.clone().step(&Op::Release { owner: 2 }, 100);
    assert_eq!(a, Answer::Refused(Refusal::NotOwner));
    let (a, _) = held.clone().step(
        &Op::Renew {
            owner: 1,
            lease: 10,
        },
        100,
    );
    assert_eq!(
        a,
        Answer::Renewed {
            owner: 1,
            until: 500
        }
    );
    let (a, s) = held.step(
        &Op::Complete {
            owner: 1,
            fp: 2,
            body: None,
            retention: 100,
        },
        100,
    );
    assert_eq!(a, Answer::Completed(Completion::InTime));
    // The pending record's fingerprint is kept, not the complete's.
    assert_eq!(
        s,
        Model::Done {
            owner: 1,
            fp: 1,
            body: None,
            until: 200
        }
    );
}
