//! loom must find every known bug it can see: each broken store or driver variant of
//! `idem_check`'s catalogue is model checked on the smallest scenario that exposes it, and
//! the test asserts that a counterexample is found and which rule it breaks. The same
//! scenarios pass on the correct store and driver, so what is caught is the bug, not the
//! scenario.

use idem_tests::{Rule, Scenario, Variant, loom_check};

const BOUND: usize = 2;

fn finds(variant: Variant, expected: &[Rule]) -> String {
    let scenario = Scenario::exposing(variant).expect("model options are valid");
    let checked = loom_check(&scenario, BOUND, None);
    let Some(counterexample) = checked.counterexample else {
        panic!(
            "loom ran {} schedules of {} and found nothing (failure: {:?})",
            checked.schedules,
            variant.name(),
            checked.failure
        );
    };
    println!(
        "{}: counterexample after {} schedules, breaking {:?}\n{counterexample}",
        variant.name(),
        checked.schedules,
        counterexample.rules()
    );
    assert!(
        expected.iter().any(|rule| counterexample.breaks(*rule)),
        "{}: expected one of {expected:?}, got {counterexample}",
        variant.name()
    );
    counterexample.to_string()
}

#[test]
fn loom_finds_result_cache() {
    // A store that never reserves: a caller that believes it holds the key is caught at
    // once (the double charge of two overlapping callers is then one schedule away).
    let story = finds(
        Variant::ResultCache,
        &[Rule::I7, Rule::LeaseView, Rule::I7ReportedHonestly],
    );
    // The explanation shows the grant with nothing written.
    assert!(
        story.contains("-> Reserved(c0.0 until t+1000) | absent => absent"),
        "{story}"
    );
}

#[test]
fn loom_finds_complete_without_owner_check() {
    finds(Variant::CompleteWithoutOwnerCheck, &[Rule::I2]);
}

#[test]
fn loom_finds_release_without_owner_check() {
    finds(Variant::ReleaseWithoutOwnerCheck, &[Rule::I2]);
}

#[test]
fn loom_finds_renew_without_owner_check() {
    finds(
        Variant::RenewWithoutOwnerCheck,
        &[Rule::I2, Rule::LeaseView],
    );
}

#[test]
fn loom_finds_caller_clock_expiry() {
    finds(Variant::CallerClockExpiry, &[Rule::I1]);
}

#[test]
fn loom_finds_cached_failure() {
    finds(Variant::CachedFailure, &[Rule::I5]);
}

#[test]
fn loom_finds_key_only_lookup() {
    finds(Variant::KeyOnlyLookup, &[Rule::I4]);
}

#[test]
fn loom_finds_late_complete_in_time() {
    finds(Variant::LateCompleteInTime, &[Rule::I7ReportedHonestly]);
}

#[test]
fn loom_finds_pending_without_lease() {
    finds(Variant::PendingWithoutLease, &[Rule::I6]);
}

#[test]
fn loom_finds_reserve_forgets_owner() {
    finds(Variant::ReserveForgetsOwner, &[Rule::I11]);
}

#[test]
fn loom_finds_corrupt_read_as_absent() {
    finds(
        Variant::CorruptReadAsAbsent,
        &[Rule::CorruptRecordRunsNothing],
    );
}

#[test]
fn loom_finds_grants_every_reserve() {
    finds(Variant::GrantsEveryReserve, &[Rule::I7, Rule::LeaseView]);
}

#[test]
fn loom_finds_ignores_renewals() {
    finds(Variant::IgnoresRenewals, &[Rule::LeaseView]);
}

#[test]
fn loom_finds_panic_as_not_stored() {
    finds(Variant::PanicAsNotStored, &[Rule::PanicIsOutcomeUnknown]);
}

#[test]
fn loom_exposing_scenarios_pass_on_the_correct_store() {
    // Every variant, store and driver bugs alike: the driver bugs' scenarios (a holder that
    // goes away mid-action, a panic, a corrupt key) are the correct driver's abnormal ends.
    for variant in Variant::broken().filter(|v| Scenario::can_expose(*v)) {
        let mut scenario = Scenario::exposing(variant).expect("model options are valid");
        scenario.variant = Variant::Correct;
        let checked = loom_check(&scenario, BOUND, None);
        println!(
            "the {} scenario on the correct store: {} schedules",
            variant.name(),
            checked.schedules
        );
        assert!(
            checked.passed(),
            "the {} scenario fails on the correct store: {:?} {:?}",
            variant.name(),
            checked.counterexample.map(|c| c.to_string()),
            checked.failure
        );
    }
}

#[test]
fn loom_finds_release_on_abandon() {
    let story = finds(Variant::ReleaseOnAbandon, &[Rule::I7]);
    // The story names the cause: the abandoned holder's key was handed on before its lease
    // ended.
    assert!(story.contains("ABANDONED"), "{story}");
    assert!(story.contains("before c0.0's lease ended"), "{story}");
}

#[test]
fn loom_finds_panic_releases() {
    let story = finds(Variant::PanicReleases, &[Rule::PanicIsOutcomeUnknown]);
    assert!(story.contains("PANICKED"), "{story}");
}

#[test]
fn loom_finds_corrupt_fails_open() {
    let story = finds(Variant::CorruptFailsOpen, &[Rule::CorruptRecordRunsNothing]);
    assert!(story.contains("CORRUPT"), "{story}");
}

/// Every variant of the catalogue that a scenario here can show, one added later included,
/// is found on its exposing scenario (by some rule; the tests above name the rules).
#[test]
fn loom_finds_every_variant_it_can_expose() {
    for variant in Variant::broken().filter(|v| Scenario::can_expose(*v)) {
        let scenario = Scenario::exposing(variant).expect("model options are valid");
        let checked = loom_check(&scenario, BOUND, None);
        assert!(
            checked.counterexample.is_some(),
            "loom ran {} schedules of {} and found nothing (failure: {:?})",
            checked.schedules,
            variant.name(),
            checked.failure
        );
    }
}

#[test]
fn loom_finds_fence_reused_after_takeover() {
    finds(Variant::FenceReusedAfterTakeover, &[Rule::FenceIncreasing]);
}
