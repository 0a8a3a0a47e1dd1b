//! shuttle: many randomized schedules of five or six callers on two keys, with client
//! retries, slow actions that renew, crashes, failing and panicking actions, callers that
//! go away mid-action or mid-reserve, fingerprint mismatches, lost replies, hung commands,
//! an unreachable store, a key holding a corrupt value and skewed caller clocks, all drawn
//! from shuttle's own random source. Both the random and the PCT scheduler run ten thousand
//! schedules; each run is judged against MODEL.md's invariants and the rules for abnormal
//! ends, and must reach every path `Coverage` counts. Every known bug of `idem_check`'s
//! catalogue that these scenarios can show, of a store or of a driver, must be found.

use shuttle::FailurePersistence;

use idem_tests::{Rule, Scenario, ShuttleSchedules, Variant, shuttle_check};

const SCHEDULES: usize = 10_000;

fn random_scenario(variant: Variant) -> impl Fn() -> Scenario + Send + Sync + 'static {
    move || Scenario::random(variant).expect("model options are valid")
}

fn passes(name: &str, schedules: ShuttleSchedules) {
    let checked = shuttle_check(
        random_scenario(Variant::Correct),
        schedules,
        FailurePersistence::Print,
        None,
    );
    println!("{name}: {} schedules ({schedules:?})", checked.schedules);
    if let Some(counterexample) = &checked.counterexample {
        panic!("{name}: {counterexample}");
    }
    if let Some(failure) = &checked.failure {
        panic!("{name}: {failure}");
    }
    assert_eq!(
        checked.schedules, SCHEDULES,
        "{name}: not every schedule ran"
    );
    println!("{name}: {}", checked.coverage);
    let missing = checked.coverage.missing();
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

fn finds(variant: Variant, expected: &[Rule]) {
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
        let checked = shuttle_check(
            random_scenario(variant),
            schedules,
            // Print, as the passing tests do: shuttle keeps the first run's choice for the
            // whole process, and a failing correct run must print its schedule.
            FailurePersistence::Print,
            None,
        );
        let name = variant.name();
        let Some(counterexample) = &checked.counterexample else {
            panic!(
                "{schedules:?} ran {} schedules of {name} and found nothing (failure: {:?})",
                checked.schedules, checked.failure
            );
        };
        println!(
            "{name}: {schedules:?} found {:?} after {} schedules",
            counterexample.rules(),
            checked.schedules
        );
        assert!(
            expected.iter().any(|rule| counterexample.breaks(*rule)),
            "{name}: expected one of {expected:?}, got {counterexample}"
        );
    }
}

#[test]
fn shuttle_finds_result_cache() {
    finds(
        Variant::ResultCache,
        &[Rule::I7, Rule::LeaseView, Rule::I7ReportedHonestly],
    );
}

#[test]
fn shuttle_finds_complete_without_owner_check() {
    finds(Variant::CompleteWithoutOwnerCheck, &[Rule::I2, Rule::I3]);
}

#[test]
fn shuttle_finds_release_without_owner_check() {
    finds(Variant::ReleaseWithoutOwnerCheck, &[Rule::I2, Rule::I3]);
}

#[test]
fn shuttle_finds_renew_without_owner_check() {
    finds(
        Variant::RenewWithoutOwnerCheck,
        &[Rule::I2, Rule::LeaseView],
    );
}

#[test]
fn shuttle_finds_caller_clock_expiry() {
    finds(
        Variant::CallerClockExpiry,
        // A lease the sender's slow clock cut short shows as a held lease the store let go.
        &[Rule::I1, Rule::I6, Rule::I9, Rule::LeaseView],
    );
}

#[test]
fn shuttle_finds_release_on_abandon() {
    finds(
        Variant::ReleaseOnAbandon,
        &[Rule::I7, Rule::DroppedActionKeepsKey],
    );
}

#[test]
fn shuttle_finds_panic_releases() {
    finds(Variant::PanicReleases, &[Rule::PanicIsOutcomeUnknown]);
}

#[test]
fn shuttle_finds_corrupt_fails_open() {
    finds(Variant::CorruptFailsOpen, &[Rule::CorruptRecordRunsNothing]);
}

#[test]
fn shuttle_finds_cached_failure() {
    finds(Variant::CachedFailure, &[Rule::I5, Rule::I8]);
}

#[test]
fn shuttle_finds_key_only_lookup() {
    finds(Variant::KeyOnlyLookup, &[Rule::I4]);
}

#[test]
fn shuttle_finds_late_complete_in_time() {
    finds(Variant::LateCompleteInTime, &[Rule::I7ReportedHonestly]);
}

#[test]
fn shuttle_finds_pending_without_lease() {
    finds(Variant::PendingWithoutLease, &[Rule::I6]);
}

#[test]
fn shuttle_finds_reserve_forgets_owner() {
    finds(Variant::ReserveForgetsOwner, &[Rule::I11]);
}

#[test]
fn shuttle_finds_corrupt_read_as_absent() {
    finds(
        Variant::CorruptReadAsAbsent,
        &[Rule::CorruptRecordRunsNothing],
    );
}

#[test]
fn shuttle_finds_grants_every_reserve() {
    finds(
        Variant::GrantsEveryReserve,
        &[Rule::I1, Rule::I7, Rule::LeaseView],
    );
}

#[test]
fn shuttle_finds_ignores_renewals() {
    finds(
        Variant::IgnoresRenewals,
        &[Rule::LeaseView, Rule::I6, Rule::I2],
    );
}

#[test]
fn shuttle_finds_panic_as_not_stored() {
    finds(Variant::PanicAsNotStored, &[Rule::PanicIsOutcomeUnknown]);
}

#[test]
fn shuttle_finds_fence_reused_after_takeover() {
    finds(Variant::FenceReusedAfterTakeover, &[Rule::FenceIncreasing]);
}
