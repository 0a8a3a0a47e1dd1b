//! shuttle: many randomized schedules of five or six callers on two keys, with client
//! retries, slow actions that renew, crashes, failing and panicking actions, callers that
//! go away mid-action or mid-reserve, fingerprint mismatches, lost replies, hung commands,
//! an unreachable store, a key holding a corrupt value and skewed caller clocks, all drawn
//! from shuttle's own random source. Both the random and the PCT scheduler run ten thousand
//! schedules; each run is judged against MODEL.md's invariants and the rules for abnormal
//! ends, and must reach every path `Coverage` counts. Every known bug, of a store or of a
//! driver, must be found.

use shuttle::FailurePersistence;

use idem_tests::{Invariant, Scenario, ShuttleSchedules, Variant, shuttle_explore};

const SCHEDULES: usize = 10_000;

fn random_scenario(variant: Variant) -> impl Fn() -> Scenario + Send + Sync + 'static {
    move || Scenario::random(variant).expect("model options are valid")
}

fn passes(name: &str, schedules: ShuttleSchedules) {
    let exploration = shuttle_explore(
        random_scenario(Variant::Correct),
        schedules,
        FailurePersistence::Print,
        None,
    );
    println!(
        "{name}: {} schedules ({schedules:?})",
        exploration.schedules
    );
    if let Some(counterexample) = &exploration.counterexample {
        panic!("{name}: {counterexample}");
    }
    if let Some(failure) = &exploration.failure {
        panic!("{name}: {failure}");
    }
    assert_eq!(
        exploration.schedules, SCHEDULES,
        "{name}: not every schedule ran"
    );
    println!("{name}: {}", exploration.coverage);
    let missing = exploration.coverage.missing();
    assert!(missing.is_empty(), "{name}: no run reached {missing:?}");
}

#[test]
fn shuttle_random_callers_on_two_keys() {
    passes(
        "shuttle_random_callers_on_two_keys",
        ShuttleSchedules::Random {
            seed: 0x1de3,
            iterations: SCHEDULES,
        },
    );
}

#[test]
fn shuttle_pct_callers_on_two_keys() {
    passes(
        "shuttle_pct_callers_on_two_keys",
        ShuttleSchedules::Pct {
            seed: 0x1de4,
            iterations: SCHEDULES,
            depth: 3,
        },
    );
}

fn finds(variant: Variant, expected: &[Invariant]) {
    for schedules in [
        ShuttleSchedules::Random {
            seed: 7,
            iterations: SCHEDULES,
        },
        ShuttleSchedules::Pct {
            seed: 7,
            iterations: SCHEDULES,
            depth: 3,
        },
    ] {
        let exploration = shuttle_explore(
            random_scenario(variant),
            schedules,
            // Print, as the passing tests do: shuttle keeps the first run's choice for the
            // whole process, and a failing correct run must print its schedule.
            FailurePersistence::Print,
            None,
        );
        let Some(counterexample) = &exploration.counterexample else {
            panic!(
                "{schedules:?} ran {} schedules of {variant:?} and found nothing (failure: {:?})",
                exploration.schedules, exploration.failure
            );
        };
        println!(
            "{variant:?}: {schedules:?} found {:?} after {} schedules",
            counterexample.invariants(),
            exploration.schedules
        );
        assert!(
            expected
                .iter()
                .any(|invariant| counterexample.breaks(*invariant)),
            "{variant:?}: expected one of {expected:?}, got {counterexample}"
        );
    }
}

#[test]
fn shuttle_finds_result_cache_double_charge() {
    finds(Variant::ResultCache, &[Invariant::I7]);
}

#[test]
fn shuttle_finds_complete_without_owner_check() {
    finds(
        Variant::CompleteWithoutOwnerCheck,
        &[Invariant::I2, Invariant::I3],
    );
}

#[test]
fn shuttle_finds_release_without_owner_check() {
    finds(
        Variant::ReleaseWithoutOwnerCheck,
        &[Invariant::I2, Invariant::I3],
    );
}

#[test]
fn shuttle_finds_renew_without_owner_check() {
    finds(
        Variant::RenewWithoutOwnerCheck,
        &[Invariant::I2, Invariant::LeaseView],
    );
}

#[test]
fn shuttle_finds_skewed_clock_expiry() {
    finds(
        Variant::SkewedClock,
        // A lease the sender's slow clock cut short shows as a held lease the store let go.
        &[
            Invariant::I1,
            Invariant::I6,
            Invariant::I9,
            Invariant::LeaseView,
        ],
    );
}

#[test]
fn shuttle_finds_release_on_abandon() {
    finds(Variant::ReleaseOnAbandon, &[Invariant::I7]);
}

#[test]
fn shuttle_finds_panic_releases() {
    finds(Variant::PanicReleases, &[Invariant::Panic]);
}

#[test]
fn shuttle_finds_corrupt_fails_open() {
    finds(Variant::CorruptFailsOpen, &[Invariant::Corrupt]);
}
