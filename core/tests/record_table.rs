//! Cells of the record machine's transition table (MODEL.md, "Transitions").

use std::time::Duration;

use idem_core::record::{Command, Completion, Record, Refusal, Reply, Write, apply};
use idem_core::{Body, Fingerprint, OwnerToken, StoredResult, Timestamp};

const LEASE: Duration = Duration::from_secs(30);
const RETENTION: Duration = Duration::from_secs(3600);

fn fp(n: u8) -> Fingerprint {
    Fingerprint::of_bytes(&[n])
}
fn t(ms: u64) -> Timestamp {
    Timestamp::from_millis(ms)
}
fn me() -> OwnerToken {
    OwnerToken::from_u128(1)
}
fn other() -> OwnerToken {
    OwnerToken::from_u128(2)
}
fn pending(owner: OwnerToken, until: u64) -> Record {
    Record::Pending {
        owner,
        fingerprint: fp(1),
        lease_until: t(until),
        fence: None,
    }
}
fn completed(owner: OwnerToken, until: u64) -> Record {
    Record::Completed {
        owner,
        fingerprint: fp(1),
        result: StoredResult::Value(Body::new("ch_1")),
        expires_at: t(until),
    }
}
fn reserve(owner: OwnerToken, f: u8) -> Command {
    Command::Reserve {
        owner,
        fingerprint: fp(f),
        lease: LEASE,
    }
}
fn complete(owner: OwnerToken) -> Command {
    Command::Complete {
        owner,
        fingerprint: fp(1),
        result: StoredResult::Value(Body::new("ch_2")),
        retention: RETENTION,
    }
}

#[test]
fn reserve_absent_grants_a_lease_from_store_now() {
    let tr = apply(None, reserve(me(), 1), t(1000));
    assert_eq!(tr.write, Write::Put(pending(me(), 31_000)));
    assert!(
        matches!(tr.reply, Reply::Reserved(r) if r.lease_until == Some(t(31_000)) && r.owner == me())
    );
}

#[test]
fn reserve_by_holder_is_idempotent() {
    let rec = pending(me(), 5000);
    let tr = apply(Some(&rec), reserve(me(), 1), t(1000));
    assert_eq!(tr.write, Write::Unchanged);
    assert!(matches!(tr.reply, Reply::Reserved(r) if r.lease_until == Some(t(5000))));
}

#[test]
fn reserve_by_other_sees_in_flight() {
    let rec = pending(me(), 5000);
    let tr = apply(Some(&rec), reserve(other(), 1), t(1000));
    assert_eq!(tr.write, Write::Unchanged);
    assert_eq!(
        tr.reply,
        Reply::InFlight {
            lease_until: Some(t(5000))
        }
    );
}

#[test]
fn reserve_with_other_fingerprint_is_key_reuse_pending_or_completed() {
    for rec in [pending(me(), 5000), completed(me(), 5000)] {
        let tr = apply(Some(&rec), reserve(other(), 2), t(1000));
        assert_eq!(tr.reply, Reply::KeyReuse { stored: fp(1) });
        assert_eq!(tr.write, Write::Unchanged);
    }
}

#[test]
fn reserve_completed_replays() {
    let rec = completed(me(), 5000);
    let tr = apply(Some(&rec), reserve(other(), 1), t(1000));
    assert_eq!(
        tr.reply,
        Reply::Replay {
            result: StoredResult::Value(Body::new("ch_1")),
            // The store says how long the record has left at its `now`.
            remaining: Some(Duration::from_millis(4000)),
        }
    );
}

#[test]
fn expired_pending_is_taken_over() {
    let rec = pending(me(), 5000);
    let tr = apply(Some(&rec), reserve(other(), 2), t(5000));
    assert!(matches!(tr.reply, Reply::Reserved(r) if r.owner == other()));
}

#[test]
fn complete_by_owner_in_time_and_repeated() {
    let mut state = Some(pending(me(), 5000));
    let r = apply(state.as_ref(), complete(me()), t(1000)).apply_to(&mut state);
    assert_eq!(r, Reply::Completed(Completion::InTime));
    let r = apply(state.as_ref(), complete(me()), t(2000)).apply_to(&mut state);
    assert_eq!(r, Reply::Completed(Completion::Repeated));
    assert!(
        matches!(&state, Some(Record::Completed { result: StoredResult::Value(b), expires_at, .. })
        if b.as_bytes() == b"ch_2" && *expires_at == t(3_601_000))
    );
}

#[test]
fn complete_after_expiry_records_the_result() {
    let rec = pending(me(), 5000);
    let tr = apply(Some(&rec), complete(me()), t(6000));
    assert_eq!(tr.reply, Reply::Completed(Completion::AfterLeaseExpiry));
    assert!(matches!(tr.write, Write::Put(Record::Completed { .. })));
}

#[test]
fn non_owner_changes_nothing() {
    for rec in [pending(me(), 5000), completed(me(), 5000)] {
        for cmd in [
            complete(other()),
            Command::Renew {
                owner: other(),
                lease: LEASE,
            },
            Command::Release { owner: other() },
        ] {
            let tr = apply(Some(&rec), cmd, t(1000));
            assert_eq!(tr.reply, Reply::Refused(Refusal::NotOwner));
            assert_eq!(tr.write, Write::Unchanged);
        }
    }
}

#[test]
fn renew_and_release_on_absent_say_lease_lost() {
    for cmd in [
        Command::Renew {
            owner: me(),
            lease: LEASE,
        },
        Command::Release { owner: me() },
    ] {
        let tr = apply(Some(&pending(me(), 5000)), cmd, t(5000));
        assert_eq!(tr.reply, Reply::Refused(Refusal::LeaseLost));
        assert_eq!(tr.write, Write::Delete);
    }
}

#[test]
fn renew_extends_and_never_shortens() {
    let rec = pending(me(), 50_000);
    let tr = apply(
        Some(&rec),
        Command::Renew {
            owner: me(),
            lease: LEASE,
        },
        t(1000),
    );
    assert!(matches!(tr.reply, Reply::Renewed(r) if r.lease_until == Some(t(50_000))));
    let tr = apply(
        Some(&rec),
        Command::Renew {
            owner: me(),
            lease: LEASE,
        },
        t(40_000),
    );
    assert!(matches!(tr.reply, Reply::Renewed(r) if r.lease_until == Some(t(70_000))));
}

#[test]
fn completed_is_never_released_or_renewed() {
    let rec = completed(me(), 5000);
    for cmd in [
        Command::Renew {
            owner: me(),
            lease: LEASE,
        },
        Command::Release { owner: me() },
    ] {
        let tr = apply(Some(&rec), cmd, t(1000));
        assert_eq!(tr.reply, Reply::Refused(Refusal::AlreadyCompleted));
        assert_eq!(tr.write, Write::Unchanged);
    }
}

#[test]
fn release_by_owner_deletes() {
    let tr = apply(
        Some(&pending(me(), 5000)),
        Command::Release { owner: me() },
        t(1000),
    );
    assert_eq!(tr.reply, Reply::Released);
    assert_eq!(tr.write, Write::Delete);
}

#[test]
fn read_shows_the_live_record_and_never_writes_one() {
    for rec in [pending(me(), 5000), completed(me(), 5000)] {
        let tr = apply(Some(&rec), Command::Read, t(4999));
        assert_eq!(tr.reply, Reply::Read(Some(rec.clone())));
        assert_eq!(tr.write, Write::Unchanged);
        // I9: at its expiry instant the record reads as absent, and the store forgets it.
        let tr = apply(Some(&rec), Command::Read, t(5000));
        assert_eq!(tr.reply, Reply::Read(None));
        assert_eq!(tr.write, Write::Delete);
    }
    let tr = apply(None, Command::Read, t(0));
    assert_eq!(tr.reply, Reply::Read(None));
    assert_eq!(tr.write, Write::Unchanged);
}

#[test]
fn expired_completion_frees_the_key_for_any_request() {
    // Retention is over: the key is free, even for another fingerprint.
    let tr = apply(Some(&completed(me(), 5000)), reserve(other(), 2), t(5000));
    assert!(matches!(tr.reply, Reply::Reserved(r) if r.owner == other()));
    assert_eq!(
        tr.write,
        Write::Put(Record::Pending {
            owner: other(),
            fingerprint: fp(2),
            lease_until: t(35_000),
            fence: None,
        })
    );
}

#[test]
fn the_holder_itself_is_refused_under_another_fingerprint() {
    let tr = apply(Some(&pending(me(), 5000)), reserve(me(), 2), t(1000));
    assert_eq!(tr.reply, Reply::KeyReuse { stored: fp(1) });
    assert_eq!(tr.write, Write::Unchanged);
}

#[test]
fn complete_on_a_never_reserved_key_records_the_callers_fingerprint() {
    let command = Command::Complete {
        owner: me(),
        fingerprint: fp(7),
        result: StoredResult::NotStored,
        retention: RETENTION,
    };
    let tr = apply(None, command, t(10));
    assert_eq!(tr.reply, Reply::Completed(Completion::AfterLeaseExpiry));
    assert_eq!(
        tr.write,
        Write::Put(Record::Completed {
            owner: me(),
            fingerprint: fp(7),
            result: StoredResult::NotStored,
            expires_at: t(3_600_010)
        })
    );
}
