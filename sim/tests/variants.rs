//! Checking the checker: each deliberately broken store or driver of `idem_check`'s
//! catalogue (`idem_sim::Variant`) is caught by the judge's rule written for the bug it has,
//! over a modest number of seeds.

use idem_sim::{Config, FaultKind, Faults, Provider, Rule, Shape, Summary, Variant, explore};

fn explore_variant(variant: Variant, seeds: u64) -> Summary {
    let config = Config {
        variant,
        ..Config::default()
    };
    explore(0, seeds, &config, |_| {}).unwrap()
}

fn caught_by(summary: &Summary, rule: Rule) -> u64 {
    summary
        .by_rule
        .iter()
        .find(|(r, _)| *r == rule)
        .map_or(0, |(_, n)| *n)
}

#[test]
fn the_result_cache_charges_twice_without_a_cause() {
    let summary = explore_variant(Variant::ResultCache, 300);
    assert!(caught_by(&summary, Rule::I7) > 0, "{summary}");
    // It never reserves, so a holder's view of its lease is never backed by the store.
    assert!(caught_by(&summary, Rule::LeaseView) > 0, "{summary}");
    assert!(!summary.failing_seeds.is_empty());
    assert!(summary.to_string().contains("violations: "));
    assert!(!summary.to_string().ends_with("violations: 0"));
}

#[test]
fn complete_without_the_owner_check_is_caught() {
    let summary = explore_variant(Variant::CompleteWithoutOwnerCheck, 300);
    assert!(caught_by(&summary, Rule::I2) > 0, "{summary}");
    assert!(caught_by(&summary, Rule::I3) > 0, "{summary}");
}

#[test]
fn release_without_the_owner_check_is_caught() {
    let summary = explore_variant(Variant::ReleaseWithoutOwnerCheck, 600);
    assert!(caught_by(&summary, Rule::I2) > 0, "{summary}");
}

#[test]
fn renew_without_the_owner_check_is_caught() {
    let summary = explore_variant(Variant::RenewWithoutOwnerCheck, 2_000);
    assert!(caught_by(&summary, Rule::I2) > 0, "{summary}");
    // A stale holder's renewal can cut the live holder's longer lease short.
    assert!(caught_by(&summary, Rule::I10) > 0, "{summary}");
    // Renewing another's completed record moves its expiry.
    assert!(caught_by(&summary, Rule::I3) > 0, "{summary}");
}

#[test]
fn expiry_judged_by_a_skewed_caller_clock_is_caught() {
    let summary = explore_variant(Variant::CallerClockExpiry, 300);
    // A caller whose clock runs ahead takes over a live reservation; one whose clock runs
    // behind is answered from an expired record.
    assert!(caught_by(&summary, Rule::I1) > 0, "{summary}");
    assert!(caught_by(&summary, Rule::I9) > 0, "{summary}");
    // With every clock in agreement the same store is correct: the bug is the skew.
    let config = Config {
        variant: Variant::CallerClockExpiry,
        shape: Shape {
            faults: Faults::all().without(FaultKind::Skew),
            ..Shape::default()
        },
        ..Config::default()
    };
    let unskewed = explore(0, 300, &config, |_| {}).unwrap();
    assert!(unskewed.failing_seeds.is_empty(), "{unskewed}");
}

#[test]
fn a_cached_failure_is_caught() {
    let summary = explore_variant(Variant::CachedFailure, 300);
    assert!(caught_by(&summary, Rule::I5) > 0, "{summary}");
    assert!(caught_by(&summary, Rule::I8) > 0, "{summary}");
}

#[test]
fn a_lookup_by_key_alone_is_caught() {
    let summary = explore_variant(Variant::KeyOnlyLookup, 300);
    assert!(caught_by(&summary, Rule::I4) > 0, "{summary}");
    assert!(caught_by(&summary, Rule::I8) > 0, "{summary}");
}

#[test]
fn a_late_complete_answered_as_in_time_is_caught() {
    let summary = explore_variant(Variant::LateCompleteInTime, 600);
    assert!(
        caught_by(&summary, Rule::I7ReportedHonestly) > 0,
        "{summary}"
    );
}

#[test]
fn a_pending_marker_without_a_lease_is_caught() {
    let summary = explore_variant(Variant::PendingWithoutLease, 300);
    assert!(caught_by(&summary, Rule::I6) > 0, "{summary}");
}

#[test]
fn a_reserve_that_forgets_its_owner_is_caught() {
    let summary = explore_variant(Variant::ReserveForgetsOwner, 300);
    assert!(caught_by(&summary, Rule::I11) > 0, "{summary}");
}

#[test]
fn keys_shortened_by_the_store_are_caught() {
    let summary = explore_variant(Variant::TruncatedKeys, 300);
    assert!(caught_by(&summary, Rule::I12) > 0, "{summary}");
    // Two keys that share their first 250 characters share a record: one request is
    // refused for another's.
    assert!(caught_by(&summary, Rule::I4) > 0, "{summary}");
}

#[test]
fn a_store_that_reads_a_value_that_is_not_a_record_as_absent_is_caught() {
    let summary = explore_variant(Variant::CorruptReadAsAbsent, 300);
    assert!(
        caught_by(&summary, Rule::CorruptRecordRunsNothing) > 0,
        "{summary}"
    );
}

#[test]
fn a_driver_that_releases_the_key_of_a_dropped_action_is_caught() {
    let summary = explore_variant(Variant::ReleaseOnAbandon, 600);
    // Its attempts end `Abandoned(ActionDropped)`, a cause of one extra charge, but the
    // retry got the key before the dropped holder's lease ended: the cause does not hold.
    assert!(caught_by(&summary, Rule::I7) > 0, "{summary}");
    assert!(
        caught_by(&summary, Rule::DroppedActionKeepsKey) > 0,
        "{summary}"
    );
}

#[test]
fn a_driver_that_feeds_a_panic_as_a_failure_is_caught() {
    let summary = explore_variant(Variant::PanicReleases, 600);
    assert!(
        caught_by(&summary, Rule::PanicIsOutcomeUnknown) > 0,
        "{summary}"
    );
    // The key is released, and a retry runs an action that may have had its effect.
    assert!(caught_by(&summary, Rule::I7) > 0, "{summary}");
}

#[test]
fn a_driver_that_fails_open_on_a_corrupt_record_is_caught() {
    let summary = explore_variant(Variant::CorruptFailsOpen, 300);
    assert!(
        caught_by(&summary, Rule::CorruptRecordRunsNothing) > 0,
        "{summary}"
    );
    assert_eq!(summary.by_rule.len(), 1, "{summary}");
}

#[test]
fn a_store_that_grants_every_reserve_is_caught() {
    let summary = explore_variant(Variant::GrantsEveryReserve, 300);
    assert!(caught_by(&summary, Rule::I1) > 0, "{summary}");
    assert!(caught_by(&summary, Rule::LeaseView) > 0, "{summary}");
}

#[test]
fn a_store_that_ignores_renewals_is_caught() {
    let summary = explore_variant(Variant::IgnoresRenewals, 300);
    // The holder believes its lease extended; the store lets it run out.
    assert!(caught_by(&summary, Rule::LeaseView) > 0, "{summary}");
}

#[test]
fn a_store_that_ignores_the_operation_is_caught() {
    let summary = explore_variant(Variant::IgnoresOperation, 300);
    assert!(caught_by(&summary, Rule::I12) > 0, "{summary}");
    // One key under two operations shares a record: one request is refused for another's.
    assert!(caught_by(&summary, Rule::I4) > 0, "{summary}");
}

#[test]
fn a_store_that_records_a_panic_as_a_result_not_stored_is_caught() {
    let summary = explore_variant(Variant::PanicAsNotStored, 300);
    assert!(
        caught_by(&summary, Rule::PanicIsOutcomeUnknown) > 0,
        "{summary}"
    );
}

#[test]
fn a_transaction_committed_without_the_owner_check_is_caught() {
    let summary = explore_variant(Variant::CommitWithoutOwnerCheck, 300);
    // A holder whose key was taken over commits its writes although its complete was
    // refused: a second effect, explained by no more than a lost lease.
    assert!(
        caught_by(&summary, Rule::TransactionalEffectOnce) > 0,
        "{summary}"
    );
    assert!(summary.transactional_lease_loss() > 0, "{summary}");
    // Nothing else is wrong with the store: every record it keeps is the record machine's.
    assert_eq!(summary.by_rule.len(), 1, "{summary}");
}

#[test]
fn a_driver_that_reads_an_absent_commit_as_rolled_back_is_caught() {
    let summary = explore_variant(Variant::AbsentCommitRolledBack, 300);
    // A commit whose reply was lost inserts its record, invisible to the read that follows;
    // the broken driver takes "no record" for "rolled back", and then the commit lands.
    assert!(
        caught_by(&summary, Rule::TransactionalEffectOnce) > 0,
        "{summary}"
    );
    // Nothing else is wrong: no effect twice, only a false "nothing happened".
    assert_eq!(summary.by_rule.len(), 1, "{summary}");
    assert_eq!(summary.transactional_lease_loss(), 0, "{summary}");
}

/// A consumer that acknowledges a delivery when its handler returns, before the complete
/// that records it: caught by `C1` at the ack itself, and nothing else of it is wrong (its
/// store and its calls are the correct ones). The correct consumer passes the same seeds.
#[test]
fn a_consumer_that_acknowledges_before_the_record_is_caught() {
    let summary = explore_variant(Variant::AckBeforeRecord, 300);
    assert!(caught_by(&summary, Rule::AckAfterRecord) > 0, "{summary}");
    assert_eq!(summary.by_rule.len(), 1, "{summary}");
    // Among them, acks of messages whose effect had not happened (a transactional
    // handler's writes, not yet committed) and acks whose complete never came.
    let details: Vec<&str> = summary
        .violations
        .iter()
        .map(|(_, v)| v.detail.as_str())
        .collect();
    assert!(
        details
            .iter()
            .any(|d| d.contains("before its effect was recorded")),
        "{summary}"
    );
    let correct = explore_variant(Variant::Correct, 300);
    assert!(correct.failing_seeds.is_empty(), "{correct}");
    assert!(correct.broker.acks > 0, "{correct}");
    // Without the broker there is no consumer to be wrong.
    let config = Config {
        variant: Variant::AckBeforeRecord,
        shape: Shape {
            faults: Faults::all().without(FaultKind::Broker),
            ..Shape::default()
        },
        ..Config::default()
    };
    let no_broker = explore(0, 300, &config, |_| {}).unwrap();
    assert!(no_broker.failing_seeds.is_empty(), "{no_broker}");
}

#[test]
fn the_correct_store_passes_the_same_seeds() {
    let summary = explore_variant(Variant::Correct, 600);
    assert!(summary.failing_seeds.is_empty(), "{summary}");
}

/// Every variant of the catalogue, one added later included, is caught by some rule.
#[test]
fn every_broken_variant_is_caught() {
    for variant in Variant::broken() {
        let summary = explore_variant(variant, 300);
        assert!(
            !summary.failing_seeds.is_empty(),
            "{} passes 300 seeds:\n{summary}",
            variant.name()
        );
    }
}

#[test]
fn the_command_line_names_the_catalogues_variants() {
    // `--variant NAME` parses `idem_check`'s names, drivers and stores alike.
    for variant in Variant::ALL {
        assert_eq!(variant.name().parse::<Variant>(), Ok(variant));
    }
    let err = "no-such-bug".parse::<Variant>().unwrap_err();
    assert!(err.to_string().contains("release-on-abandon"), "{err}");
}

/// A downstream key derived per attempt is caught by `D1` on the requests themselves, and
/// at a provider that deduplicates by it, the extra calls it should have absorbed come back
/// as extra effects.
#[test]
fn a_downstream_key_that_changes_between_attempts_is_caught() {
    let broken = Config {
        variant: Variant::DownstreamKeyPerAttempt,
        provider: Provider::Keyed,
        ..Config::default()
    };
    let summary = explore(0, 300, &broken, |_| {}).unwrap();
    assert!(
        caught_by(&summary, Rule::DownstreamKeyStable) > 0,
        "{summary}"
    );
    assert!(summary.extra_at_provider.total() > 0, "{summary}");
    let correct = explore(
        0,
        300,
        &Config {
            provider: Provider::Keyed,
            ..Config::default()
        },
        |_| {},
    )
    .unwrap();
    assert!(correct.failing_seeds.is_empty(), "{correct}");
    assert_eq!(correct.extra_at_provider.total(), 0, "{correct}");
}

#[test]
fn a_fence_reused_after_a_takeover_is_caught() {
    // The store hands the holder that takes a key over the fence of the holder it took it
    // from: F1 is broken at that grant, and at a provider that honours fences the stale
    // holder's request, which carries the same fence, lands after its successor's.
    let broken = Config {
        variant: Variant::FenceReusedAfterTakeover,
        provider: Provider::Fenced,
        ..Config::default()
    };
    let summary = explore(0, 3_000, &broken, |_| {}).unwrap();
    assert!(caught_by(&summary, Rule::FenceIncreasing) > 0, "{summary}");
    assert!(summary.stale_at_provider > 0, "{summary}");
    let correct = explore(
        0,
        3_000,
        &Config {
            provider: Provider::Fenced,
            ..Config::default()
        },
        |_| {},
    )
    .unwrap();
    assert!(correct.failing_seeds.is_empty(), "{correct}");
    assert_eq!(correct.stale_at_provider, 0, "{correct}");
}
