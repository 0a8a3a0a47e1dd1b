//! The core's own cost: one record transition, one whole attempt against an in-memory record,
//! and a fingerprint. Baseline in the same run: a `HashMap` insert of the same key, the least
//! a store could do per command.
//!
//! `cargo bench -p idem-core --bench core`

use std::collections::HashMap;
use std::hint::black_box;
use std::time::Duration;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use idem_core::record::{Command, Record, apply};
use idem_core::{
    ActionResult, Attempt, Body, Fingerprint, Key, Operation, Options, Outcome, OwnerToken, Step,
    Timestamp,
};

fn reserve(owner: u128, fingerprint: Fingerprint) -> Command {
    Command::Reserve {
        owner: OwnerToken::from_u128(owner),
        fingerprint,
        lease: Duration::from_secs(30),
    }
}

/// One attempt from reserve to complete (or replay) against `record`.
fn run_attempt(record: &mut Option<Record>, owner: u128, fingerprint: Fingerprint) -> Outcome {
    let now = Timestamp::from_millis(1_000);
    let mut attempt = Attempt::new(
        Operation::new("payment.charge").unwrap(),
        Key::new("order-1").unwrap(),
        fingerprint,
        OwnerToken::from_u128(owner),
        owner as u64,
        Options::default(),
        now,
    );
    loop {
        match attempt.poll(now) {
            Step::Send { command, .. } => {
                let reply = apply(record.as_ref(), command, now).apply_to(record);
                attempt.handle_reply(reply, now).unwrap();
            }
            Step::Run => attempt
                .handle_action_result(ActionResult::Succeeded(Body::new("ch_1")), now)
                .unwrap(),
            Step::Wait { .. } => unreachable!("nothing to wait for"),
            Step::Done(outcome) => return outcome,
        }
    }
}

fn benches(c: &mut Criterion) {
    let fp = Fingerprint::of_bytes(b"order-1 100");
    let now = Timestamp::from_millis(1_000);

    let mut group = c.benchmark_group("record");
    group.bench_function("baseline_hashmap_insert", |b| {
        let mut map = HashMap::new();
        b.iter(|| map.insert(black_box("payment.charge:order-1"), black_box(1u64)));
    });
    group.bench_function("reserve_absent", |b| {
        b.iter(|| apply(black_box(None), reserve(1, fp), now));
    });
    let mut completed = None;
    run_attempt(&mut completed, 1, fp);
    group.bench_function("reserve_completed_replay", |b| {
        b.iter(|| apply(black_box(completed.as_ref()), reserve(2, fp), now));
    });
    group.finish();

    let mut group = c.benchmark_group("attempt");
    group.bench_function("fresh_call", |b| {
        b.iter_batched(
            || None,
            |mut r| run_attempt(&mut r, 1, fp),
            BatchSize::SmallInput,
        );
    });
    group.bench_function("replay", |b| {
        b.iter_batched(
            || completed.clone(),
            |mut r| run_attempt(&mut r, 2, fp),
            BatchSize::SmallInput,
        );
    });
    group.finish();

    c.bench_function("fingerprint/three_fields", |b| {
        b.iter(|| {
            Fingerprint::builder()
                .field("order_id", black_box("o-1"))
                .field("amount", black_box(100))
                .field("currency", black_box("EUR"))
                .finish()
                .unwrap()
        });
    });
}

criterion_group!(core, benches);
criterion_main!(core);
