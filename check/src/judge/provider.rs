//! The provider's side (MODEL.md `D1`): every request an action sends carries the downstream
//! key of its (operation, key), and the run's [`Provider`](crate::Provider) model decides
//! which requests are effects there.
//!
//! `I7` is judged on every request that reached the provider (`effects`): it is idem's rule,
//! and a provider that deduplicates must not hide a bug of idem's. Here the same requests
//! are counted as the provider sees them: the extra effects it made, and the extra calls it
//! absorbed (answered with an earlier effect, refused as stale, or replaced by a newer
//! holder's write), each by its cause.

use idem_core::DownstreamKey;

use super::effects::causes;
use super::{Cause, Rule, Run, Verdict};
use crate::Charge;

pub(super) fn judge(run: &Run<'_>, verdict: &mut Verdict) {
    downstream_keys(run, verdict);
    let provider = run.history.provider;
    for requests in run.charges.iter() {
        // A key with effects that commit with the record is `T1`'s: they are writes in the
        // store's database, not requests to a provider.
        if requests.len() < 2 || super::transaction::has_commits(run, requests) {
            continue;
        }
        // The extra calls, each under its cause, as `I7` counts them; those the provider
        // made effects of, counted the same way; the difference it absorbed.
        let mut absorbed: Vec<Cause> = causes(run, requests)
            .into_iter()
            .take(requests.len() - 1)
            .collect();
        verdict.stale_at_provider += stale(run, &provider.applied(requests));
        let effects = provider.effects(requests);
        let extra_effects = causes(run, &effects)
            .into_iter()
            .take(effects.len().saturating_sub(1));
        // Each extra effect takes its cause's place among the absorbed; where the provider
        // kept another call than `I7`'s count names (the fenced one keeps the newest
        // holder's write, so its extras are the runs that failed open), it takes another's,
        // so the extra effects and the absorbed always add up to `I7`'s extra calls.
        for cause in extra_effects {
            verdict.extra_at_provider.add(cause);
            match absorbed.iter().position(|c| *c == cause) {
                Some(i) => {
                    absorbed.swap_remove(i);
                }
                None => {
                    absorbed.pop();
                }
            }
        }
        for cause in absorbed {
            verdict.absorbed.add(cause);
        }
    }
}

/// How many of the requests a provider `applied` to a key were made by a holder whose grant
/// is older than the grant of a holder whose request it applied before: the writes a fence
/// refuses. The
/// grants' order is the store's (when it wrote each reservation), not the fences', so a
/// store that hands out fences out of order is seen here too. A run that failed open is
/// nobody's holder, even when the store granted its lost reserve: it carries no fence, and
/// its effect is fail-open's extra one (`I7`).
fn stale(run: &Run<'_>, applied: &[&Charge<usize>]) -> u64 {
    let mut newest: Option<u64> = None;
    let mut stale = 0;
    for write in applied {
        let Some(granted) = write
            .by
            .and_then(|who| run.facts.get(who))
            .filter(|facts| !facts.unprotected)
            .and_then(|facts| facts.run_grant)
        else {
            continue;
        };
        if newest.is_some_and(|newest| granted < newest) {
            stale += 1;
        }
        newest = newest.max(Some(granted));
    }
    stale
}

/// `D1`: a request that carries a downstream key carries its (operation, key)'s.
fn downstream_keys(run: &Run<'_>, verdict: &mut Verdict) {
    // Each key's downstream key, derived once per key.
    let mut derived: Vec<Option<Option<DownstreamKey>>> = vec![None; run.history.keys.len()];
    for (line, request) in run.history.statement.lines().iter().enumerate() {
        let Some(sent) = request.downstream else {
            continue;
        };
        let (Some(spec), Some(slot)) = (
            run.history.keys.get(request.key),
            derived.get_mut(request.key),
        ) else {
            continue;
        };
        let Some(expected) = *slot.get_or_insert_with(|| spec.downstream_key()) else {
            continue;
        };
        if sent != expected {
            let event = request
                .by
                .and_then(|who| run.facts[who].charge)
                .filter(|(_, charged)| *charged == line)
                .map(|(event, _)| event);
            let by = request.by.map_or("nobody known", |who| run.label(who));
            let detail = format!(
                "{} by {by} under key {} ({} {}) carried the downstream key {sent}, not its \
                 call's {expected}: a provider that deduplicates by it sees another call",
                request.id, request.key, spec.operation, spec.key
            );
            verdict
                .violations
                .push(run.violation(Rule::DownstreamKeyStable, event, detail));
        }
    }
}
