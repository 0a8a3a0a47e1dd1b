//! The catalogue itself: one name per variant, and every broken store variant is broken, on
//! its own ([`Variant::apply`]) and where it can be played in front of a real store
//! ([`Variant::in_front`]): on some record and command it answers or writes otherwise than
//! the record machine. (Each checker shows it catches them: the simulation, loom and
//! shuttle, the driver's tests and the Redis tests.)

use std::time::Duration;

use idem_check::{InFront, TRUNCATED_KEY_LEN, Variant};
use idem_core::record::{
    Command, Record, Reply, StoredResult, Transition, Write, apply, apply_fenced,
};
use idem_core::{Body, Fence, Fingerprint, OwnerToken, Timestamp};

fn owner(n: u128) -> OwnerToken {
    OwnerToken::from_u128(n)
}

fn fp(n: u8) -> Fingerprint {
    Fingerprint::of_bytes(&[n])
}

/// The fence a store that hands them out grants next, in these tests.
fn next_fence() -> Fence {
    Fence::new(8).expect("a fence")
}

/// Records a key can hold: none, a reservation of owner 1 (unfenced, and under fence 7), its
/// completed result.
fn states() -> Vec<Option<Record>> {
    vec![
        None,
        Some(Record::Pending {
            owner: owner(1),
            fingerprint: fp(0),
            lease_until: Timestamp::from_millis(1_000),
            fence: None,
        }),
        Some(Record::Pending {
            owner: owner(1),
            fingerprint: fp(0),
            lease_until: Timestamp::from_millis(1_000),
            fence: Fence::new(7),
        }),
        Some(Record::Completed {
            owner: owner(1),
            fingerprint: fp(0),
            result: StoredResult::Value(Body::new("ch_1")),
            expires_at: Timestamp::from_millis(60_000),
        }),
    ]
}

/// Commands of owners 1 and 2, for requests 0 and 1.
fn commands() -> Vec<Command> {
    let mut commands = Vec::new();
    for n in [1, 2] {
        for request in [0, 1] {
            commands.push(Command::Reserve {
                owner: owner(n),
                fingerprint: fp(request),
                lease: Duration::from_secs(1),
            });
        }
        for result in [
            StoredResult::Value(Body::new("ch_2")),
            StoredResult::Panicked,
        ] {
            commands.push(Command::Complete {
                owner: owner(n),
                fingerprint: fp(0),
                result,
                retention: Duration::from_secs(60),
            });
        }
        commands.push(Command::Renew {
            owner: owner(n),
            lease: Duration::from_millis(300),
        });
        commands.push(Command::Release { owner: owner(n) });
    }
    commands
}

/// The store clock's readings the grid is judged at: inside the lease, and past it.
const NOWS: [u64; 2] = [500, 2_000];

/// The variants whose bug is in the store's own step (not in where it files keys, what it
/// makes of a value that is not a record, whose clock it reads, or the driver).
fn store_step_variants() -> impl Iterator<Item = Variant> {
    Variant::broken().filter(|v| {
        !v.is_driver()
            && !matches!(
                v,
                Variant::TruncatedKeys
                    | Variant::IgnoresOperation
                    | Variant::CorruptReadAsAbsent
                    | Variant::CallerClockExpiry
                    | Variant::CommitWithoutOwnerCheck
            )
    })
}

#[test]
fn only_caller_clock_expiry_reads_the_callers_clock() {
    for variant in Variant::ALL {
        assert_eq!(
            variant.judges_by_caller_clock(),
            variant == Variant::CallerClockExpiry,
            "{}",
            variant.name()
        );
    }
}

#[test]
fn names_are_one_per_variant_and_round_trip() {
    let mut names: Vec<&str> = Variant::ALL.iter().map(|v| v.name()).collect();
    for variant in Variant::ALL {
        assert_eq!(variant.name().parse::<Variant>(), Ok(variant));
    }
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), Variant::ALL.len());
    let err = "no-such-bug".parse::<Variant>().unwrap_err();
    assert!(err.to_string().contains("result-cache"), "{err}");
    assert_eq!(Variant::broken().count(), Variant::ALL.len() - 1);
}

#[test]
fn the_correct_variant_is_the_record_machine() {
    for state in states() {
        for command in commands() {
            for now in NOWS {
                let now = Timestamp::from_millis(now);
                assert_eq!(
                    Variant::Correct.apply(state.as_ref(), command.clone(), now),
                    apply(state.as_ref(), command.clone(), now)
                );
                assert_eq!(
                    Variant::Correct.apply_fenced(state.as_ref(), command.clone(), now, next_fence),
                    apply_fenced(state.as_ref(), command.clone(), now, next_fence)
                );
                assert_eq!(
                    Variant::Correct.in_front(state.as_ref(), command.clone()),
                    Some(InFront::Forward(command.clone()))
                );
            }
        }
    }
}

#[test]
fn every_store_variant_departs_from_the_record_machine() {
    for variant in store_step_variants() {
        let departs = states().iter().any(|state| {
            commands().iter().any(|command| {
                NOWS.iter().any(|&now| {
                    let now = Timestamp::from_millis(now);
                    variant.apply(state.as_ref(), command.clone(), now)
                        != apply(state.as_ref(), command.clone(), now)
                        || variant.apply_fenced(state.as_ref(), command.clone(), now, next_fence)
                            != apply_fenced(state.as_ref(), command.clone(), now, next_fence)
                })
            })
        });
        assert!(departs, "{} behaves as the record machine", variant.name());
    }
}

/// What the store answers and writes when `variant` is played in front of the record
/// machine.
fn played_in_front(
    variant: Variant,
    state: Option<&Record>,
    command: Command,
    now: Timestamp,
) -> Option<Transition> {
    let live = state.filter(|r| !r.is_expired(now));
    Some(match variant.in_front(live, command)? {
        InFront::Forward(command) => apply(state, command, now),
        InFront::Answer(reply) => Transition {
            reply,
            write: Write::Unchanged,
        },
        InFront::ForwardThenAnswer(command, reply) => Transition {
            reply,
            ..apply(state, command, now)
        },
    })
}

#[test]
fn every_variant_played_in_front_of_a_store_departs_from_it() {
    let mut played = Vec::new();
    for variant in store_step_variants() {
        let mut departs = false;
        let mut playable = false;
        for state in states() {
            for command in commands() {
                for now in NOWS {
                    let now = Timestamp::from_millis(now);
                    if let Some(transition) =
                        played_in_front(variant, state.as_ref(), command.clone(), now)
                    {
                        playable = true;
                        departs |= transition != apply(state.as_ref(), command.clone(), now);
                    }
                }
            }
        }
        if playable {
            assert!(departs, "{} in front behaves as the store", variant.name());
            played.push(variant);
        }
    }
    assert_eq!(
        played,
        [
            Variant::ResultCache,
            Variant::CompleteWithoutOwnerCheck,
            Variant::ReleaseWithoutOwnerCheck,
            Variant::RenewWithoutOwnerCheck,
            Variant::KeyOnlyLookup,
            Variant::GrantsEveryReserve,
            Variant::IgnoresRenewals,
            Variant::PanicAsNotStored,
        ]
    );
}

#[test]
fn only_the_key_variants_file_keys_otherwise() {
    let long = "k".repeat(TRUNCATED_KEY_LEN + 5);
    for variant in Variant::ALL {
        let filed = variant.files_as("op", &long);
        match variant {
            Variant::TruncatedKeys => assert_eq!(filed, ("op", &long[..TRUNCATED_KEY_LEN])),
            Variant::IgnoresOperation => assert_eq!(filed, ("", long.as_str())),
            _ => assert_eq!(filed, ("op", long.as_str())),
        }
    }
}

#[test]
fn only_corrupt_read_as_absent_answers_for_a_value_that_is_not_a_record() {
    let reserve = Command::Reserve {
        owner: owner(1),
        fingerprint: fp(0),
        lease: Duration::from_secs(1),
    };
    for variant in Variant::ALL {
        let answered = variant.apply_to_garbage(reserve.clone(), Timestamp::from_millis(0));
        assert_eq!(
            answered.is_some(),
            variant == Variant::CorruptReadAsAbsent,
            "{}",
            variant.name()
        );
        if let Some(transition) = answered {
            assert!(matches!(transition.reply, Reply::Reserved(_)));
        }
    }
}

#[test]
fn the_driver_variants_are_the_drivers() {
    let drivers: Vec<Variant> = Variant::ALL.into_iter().filter(|v| v.is_driver()).collect();
    assert_eq!(
        drivers,
        [
            Variant::ReleaseOnAbandon,
            Variant::PanicReleases,
            Variant::CorruptFailsOpen,
            Variant::AbsentCommitRolledBack,
            Variant::DownstreamKeyPerAttempt,
            Variant::AckBeforeRecord
        ]
    );
    assert!(Variant::AckBeforeRecord.acks_before_record());
    assert!(Variant::ReleaseOnAbandon.releases_on_abandon());
    assert!(Variant::PanicReleases.feeds_panic_as_failure());
    assert!(Variant::CorruptFailsOpen.feeds_corrupt_as_store_error());
    for variant in drivers {
        // A driver's bug is in what the driver feeds or sends, not in a store.
        assert_eq!(
            variant.in_front(None, Command::Read),
            None,
            "{}",
            variant.name()
        );
    }
}

#[test]
fn only_the_transactional_store_variant_commits_what_was_not_recorded() {
    let refused = Reply::Refused(idem_core::record::Refusal::NotOwner);
    let recorded = Reply::Completed(idem_core::Completion::InTime);
    for variant in Variant::ALL {
        assert!(variant.commits(&recorded), "{}", variant.name());
        assert_eq!(
            variant.commits(&refused),
            variant == Variant::CommitWithoutOwnerCheck,
            "{}",
            variant.name()
        );
    }
}

#[test]
fn only_the_absent_commit_driver_takes_a_read_without_its_record_for_its_reservation() {
    let (own, other) = (owner(1), owner(2));
    let now = Timestamp::from_millis(500);
    let ours = states()[1].clone();
    let others = Some(Record::Pending {
        owner: other,
        fingerprint: fp(0),
        lease_until: Timestamp::from_millis(1_000),
        fence: None,
    });
    let own_reservation = Some(Record::Pending {
        owner: own,
        fingerprint: fp(0),
        lease_until: now,
        fence: None,
    });
    for variant in Variant::ALL {
        let fed = |read: Option<Record>| variant.fed_commit_read(read, own, fp(0), now);
        // A read of the attempt's own record is fed as it is, by every driver.
        assert_eq!(fed(ours.clone()), ours, "{}", variant.name());
        assert_eq!(fed(states()[2].clone()), states()[2], "{}", variant.name());
        if variant == Variant::AbsentCommitRolledBack {
            assert!(variant.is_driver());
            assert_eq!(fed(None), own_reservation);
            assert_eq!(fed(others.clone()), own_reservation);
        } else {
            assert_eq!(fed(None), None, "{}", variant.name());
            assert_eq!(fed(others.clone()), others, "{}", variant.name());
        }
    }
}
