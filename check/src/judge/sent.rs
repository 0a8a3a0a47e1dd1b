//! What a command may carry, whether or not the store applied it: the key a reserve files
//! (`I12`), a release after a panic or a dropped action (rule 11), and what a complete
//! records (`I5`, rule 11).

use idem_core::record::{Command, StoredResult};

use super::{Rule, Run, Violation};
use crate::history::{ActionEnd, Event};

/// What a command may carry, whether or not the store applied it: `I12` for a reserve's
/// key; rule 11 for a release after a panic or a dropped action; and `I5` and rule 11 for
/// what a complete records.
pub(super) fn command_sent(
    run: &Run<'_>,
    index: usize,
    event: &Event,
    command: &Command,
    found: &mut Vec<Violation>,
) {
    let who = event.who;
    let Some(facts) = run.facts.get(who) else {
        return;
    };
    let label = run.label(who);
    match command {
        Command::Reserve { .. } => {
            let key = run.history.attempts[who].key;
            if let Some(spec) = run.history.keys.get(key)
                && let Some((operation, filed)) = &spec.filed
            {
                found.push(run.violation(
                    Rule::I12,
                    Some(index),
                    format!(
                        "{label}'s key {} {} ({} characters) is filed as {operation:?} {} ({} characters)",
                        spec.operation,
                        spec.key,
                        spec.key.len(),
                        filed,
                        filed.len()
                    ),
                ));
            }
        }
        Command::Release { .. } => {
            if run.panicked(who) {
                found.push(run.violation(
                    Rule::PanicIsOutcomeUnknown,
                    Some(index),
                    format!(
                        "{label}'s action panicked (its effect may have happened), and it sent a release of the key"
                    ),
                ));
            }
            // A transactional action dropped mid-run took its writes with it (`T1`).
            if facts.dropped && !facts.transactional && facts.abandoned.is_some_and(|at| at < index)
            {
                found.push(run.violation(
                    Rule::DroppedActionKeepsKey,
                    Some(index),
                    format!(
                        "{label}'s action was dropped while it ran (its effect may have happened), and it sent a release of the key"
                    ),
                ));
            }
        }
        Command::Complete { result, .. } => {
            let ended = facts.ended.map(|(_, end)| end);
            let charge = run.effect_id(who);
            let (rule, fine) = match result {
                StoredResult::Panicked => (
                    Rule::PanicIsOutcomeUnknown,
                    ended == Some(ActionEnd::Panicked),
                ),
                _ if ended == Some(ActionEnd::Panicked) => (Rule::PanicIsOutcomeUnknown, false),
                StoredResult::Value(body) => (
                    Rule::I5,
                    ended == Some(ActionEnd::Succeeded)
                        && charge.is_some_and(|id| id.as_bytes() == body.as_bytes()),
                ),
                StoredResult::NotStored => (
                    Rule::I5,
                    ended == Some(ActionEnd::Unrecordable) && charge.is_some(),
                ),
            };
            if !fine {
                found.push(run.violation(
                    rule,
                    Some(index),
                    format!(
                        "{label} records {result:?} after its action ended {ended:?} with charge {:?}",
                        charge
                    ),
                ));
            }
        }
        Command::Renew { .. } | Command::Read => {}
    }
}
