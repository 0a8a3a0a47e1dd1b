//! loom must find every known bug it can see: each broken store or driver variant (kept in
//! the harness, never in the library) is explored on the smallest scenario that exposes it,
//! and the test asserts that a counterexample is found and which invariant it breaks. The
//! same scenarios pass on the correct store and driver, so what is caught is the bug, not
//! the scenario.

use idem_tests::{Invariant, Scenario, Variant, loom_explore};

const BOUND: usize = 2;

fn finds(variant: Variant, expected: &[Invariant]) -> String {
    let scenario = Scenario::exposing(variant).expect("model options are valid");
    let exploration = loom_explore(&scenario, BOUND, None);
    let Some(counterexample) = exploration.counterexample else {
        panic!(
            "loom explored {} schedules of {variant:?} and found nothing (failure: {:?})",
            exploration.schedules, exploration.failure
        );
    };
    println!(
        "{variant:?}: counterexample after {} schedules, breaking {:?}\n{counterexample}",
        exploration.schedules,
        counterexample.invariants()
    );
    assert!(
        expected
            .iter()
            .any(|invariant| counterexample.breaks(*invariant)),
        "{variant:?}: expected one of {expected:?}, got {counterexample}"
    );
    counterexample.to_string()
}

#[test]
fn loom_finds_result_cache_double_charge() {
    let story = finds(Variant::ResultCache, &[Invariant::I7]);
    // The explanation shows the card statement's two lines and both callers' outcomes.
    assert_eq!(story.matches("CHARGED").count(), 2, "{story}");
    assert_eq!(story.matches("outcome Executed").count(), 2, "{story}");
}

#[test]
fn loom_finds_complete_without_owner_check() {
    finds(Variant::CompleteWithoutOwnerCheck, &[Invariant::I2]);
}

#[test]
fn loom_finds_release_without_owner_check() {
    finds(Variant::ReleaseWithoutOwnerCheck, &[Invariant::I2]);
}

#[test]
fn loom_finds_renew_without_owner_check() {
    finds(
        Variant::RenewWithoutOwnerCheck,
        &[Invariant::I2, Invariant::LeaseView],
    );
}

#[test]
fn loom_finds_skewed_clock_expiry() {
    finds(Variant::SkewedClock, &[Invariant::I1]);
}

#[test]
fn loom_exposing_scenarios_pass_on_the_correct_store() {
    // Every variant, store and driver bugs alike: the driver bugs' scenarios (a holder that
    // goes away mid-action, a panic, a corrupt key) are the correct driver's abnormal ends.
    for variant in Variant::BROKEN {
        let mut scenario = Scenario::exposing(variant).expect("model options are valid");
        scenario.variant = Variant::Correct;
        let exploration = loom_explore(&scenario, BOUND, None);
        println!(
            "the {variant:?} scenario on the correct store: {} schedules",
            exploration.schedules
        );
        assert!(
            exploration.passed(),
            "the {variant:?} scenario fails on the correct store: {:?} {:?}",
            exploration.counterexample.map(|c| c.to_string()),
            exploration.failure
        );
    }
}

#[test]
fn loom_finds_release_on_abandon() {
    let story = finds(Variant::ReleaseOnAbandon, &[Invariant::I7]);
    // The story names the cause: the abandoned holder's key was handed on before its lease
    // ended.
    assert!(story.contains("ABANDONED"), "{story}");
    assert!(story.contains("before c0.0's lease ended"), "{story}");
}

#[test]
fn loom_finds_panic_releases() {
    let story = finds(Variant::PanicReleases, &[Invariant::Panic]);
    assert!(story.contains("PANICKED"), "{story}");
}

#[test]
fn loom_finds_corrupt_fails_open() {
    let story = finds(Variant::CorruptFailsOpen, &[Invariant::Corrupt]);
    assert!(story.contains("CORRUPT"), "{story}");
}
