//! What the downstream key buys (MODEL.md `D1`): the same runs judged at a provider without
//! idempotency and at one that deduplicates by the downstream key. idem's own rules hold at
//! both (`I7` is judged on every request that reached the provider); at the plain provider
//! every extra call is an extra effect, each with its cause, and at the keyed one none is:
//! the lease lost, the holder crashed or paused, the fail-open run, the retry after the
//! record expired all send the key the first call sent, and the provider answers them with
//! its first effect.
//!
//! And what the fence buys (MODEL.md `F1`): at a provider that keeps one value per key and
//! refuses a fence below the highest it has applied, no holder's write lands after a newer
//! holder's, where the plain provider takes such stale writes, and each newer holder's write
//! replaces the one before, so only the runs that failed open, which carry no fence, are
//! extra effects there.

use idem_sim::{Cause, Config, Provider, Summary, explore};

const SEEDS: u64 = 1_000;

fn at(provider: Provider) -> Summary {
    let config = Config {
        provider,
        ..Config::default()
    };
    explore(0, SEEDS, &config, |_| {}).unwrap()
}

#[test]
fn a_provider_that_deduplicates_by_the_downstream_key_makes_no_extra_effect() {
    let plain = at(Provider::Plain);
    let keyed = at(Provider::Keyed);
    for summary in [&plain, &keyed] {
        assert!(summary.failing_seeds.is_empty(), "{summary}");
    }
    // The same runs: the provider model changes what counts as an effect, not the run.
    assert_eq!(plain.requests, keyed.requests);
    assert_eq!(plain.extra, keyed.extra);

    // At the plain provider every extra call is an extra effect, with its cause; the
    // causes the downstream key is for all occur in these seeds.
    assert_eq!(plain.extra_at_provider, plain.extra, "{plain}");
    assert_eq!(plain.absorbed.total(), 0, "{plain}");
    for cause in [
        Cause::LeaseExpired,
        Cause::HolderCrashed,
        Cause::FailOpen,
        Cause::RetentionExpired,
    ] {
        assert!(
            plain.extra.get(cause) > 0,
            "no {} in {SEEDS} seeds: {plain}",
            cause.name()
        );
    }

    // At the keyed one, none: every extra call was absorbed, under the cause that made it.
    assert_eq!(keyed.extra_at_provider.total(), 0, "{keyed}");
    assert_eq!(keyed.absorbed, keyed.extra, "{keyed}");
}

#[test]
fn the_provider_is_named_on_the_command_line() {
    for provider in Provider::ALL {
        assert_eq!(provider.name().parse::<Provider>(), Ok(provider));
    }
    let err = "lenient".parse::<Provider>().unwrap_err();
    assert!(err.to_string().contains("keyed"), "{err}");
}

#[test]
fn a_provider_that_honours_fences_takes_no_stale_write_and_keeps_one_effect_per_holder() {
    let plain = at(Provider::Plain);
    let fenced = at(Provider::Fenced);
    assert!(fenced.failing_seeds.is_empty(), "{fenced}");
    assert_eq!(plain.requests, fenced.requests);
    assert_eq!(plain.extra, fenced.extra);
    // Stale writes happen: a holder paused past its lease, or cut off, whose request lands
    // after the request of the holder that took its key over.
    assert!(plain.stale_at_provider > 0, "{plain}");
    // The fenced provider refuses each of them; every other write of a holder replaces the
    // one before, so no holder's extra call is an extra effect, whatever lost it the key.
    assert_eq!(fenced.stale_at_provider, 0, "{fenced}");
    for cause in [
        Cause::LeaseExpired,
        Cause::HolderCrashed,
        Cause::RetentionExpired,
    ] {
        assert!(plain.extra_at_provider.get(cause) > 0, "{plain}");
        assert_eq!(fenced.extra_at_provider.get(cause), 0, "{fenced}");
    }
    // A run that failed open carries no fence: the provider cannot order its write against
    // the holders', and it stays an extra effect, as at the plain provider.
    assert!(
        fenced.extra_at_provider.get(Cause::FailOpen) > 0,
        "{fenced}"
    );
    assert_eq!(
        fenced.extra_at_provider.get(Cause::FailOpen),
        fenced.extra_at_provider.total(),
        "{fenced}"
    );
    assert_eq!(
        fenced.extra_at_provider.total() + fenced.absorbed.total(),
        fenced.extra.total(),
        "{fenced}"
    );
}
