//! Checking the checker: each deliberately broken store (`idem_sim::variant`) is caught by
//! the check written for the bug it has, over a modest number of seeds.

use idem_sim::{Check, Config, Summary, Variant, explore};

fn explore_variant(variant: Variant, seeds: u64) -> Summary {
    let config = Config {
        variant,
        ..Config::default()
    };
    explore(0, seeds, &config, |_| {}).unwrap()
}

fn caught_by(summary: &Summary, check: Check) -> u64 {
    summary
        .by_check
        .iter()
        .find(|(c, _)| *c == check)
        .map_or(0, |(_, n)| *n)
}

#[test]
fn the_result_cache_charges_twice_without_a_cause() {
    let summary = explore_variant(Variant::ResultCache, 300);
    assert!(caught_by(&summary, Check::OneEffectPerKey) > 0, "{summary}");
    assert!(!summary.failing_seeds.is_empty());
    assert!(summary.to_string().contains("violations: "));
    assert!(!summary.to_string().ends_with("violations: 0"));
}

#[test]
fn complete_without_the_owner_check_is_caught() {
    let summary = explore_variant(Variant::CompleteWithoutOwnerCheck, 300);
    assert!(caught_by(&summary, Check::OwnerOnly) > 0, "{summary}");
    assert!(
        caught_by(&summary, Check::CompletedUnchanged) > 0,
        "{summary}"
    );
}

#[test]
fn release_without_the_owner_check_is_caught() {
    let summary = explore_variant(Variant::ReleaseWithoutOwnerCheck, 600);
    assert!(caught_by(&summary, Check::OwnerOnly) > 0, "{summary}");
}

#[test]
fn renew_without_the_owner_check_is_caught() {
    let summary = explore_variant(Variant::RenewWithoutOwnerCheck, 300);
    assert!(caught_by(&summary, Check::OwnerOnly) > 0, "{summary}");
}

#[test]
fn expiry_judged_by_a_skewed_caller_clock_is_caught() {
    let summary = explore_variant(Variant::CallerClockExpiry, 300);
    assert!(caught_by(&summary, Check::OneLiveHolder) > 0, "{summary}");
    assert!(caught_by(&summary, Check::OneEffectPerKey) > 0, "{summary}");
}

#[test]
fn the_correct_store_passes_the_same_seeds() {
    let summary = explore_variant(Variant::Correct, 600);
    assert!(summary.failing_seeds.is_empty(), "{summary}");
}

#[test]
fn variant_names_round_trip_and_unknown_names_are_refused() {
    for variant in Variant::ALL {
        assert_eq!(variant.name().parse::<Variant>(), Ok(variant));
    }
    let err = "no-such-bug".parse::<Variant>().unwrap_err();
    assert!(err.to_string().contains("result-cache"), "{err}");
}
