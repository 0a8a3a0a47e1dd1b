//! A message consumer's dispositions (MODEL.md `C1`, "Consumers"): a delivery is
//! acknowledged only once its message's effect is recorded, and every message the broker
//! holds is acknowledged or dead-lettered by the end of the run.
//!
//! Judged from the outside, at each acknowledgement, on what happened before it: the store
//! applied a complete of the delivery's attempt (its result, a result without a body, or
//! "outcome unknown" recorded), or answered its reserve with a replay, or its attempt ended
//! executed (its complete's outcome unknown, refused after its lease lapsed, or never sent
//! because it failed open: the effect happened beyond the record's reach, and `I7` reports
//! it; delivering the message again would only run it again). And an acknowledged message's
//! key has an effect on the statement by then. A consumer that acknowledges when the action
//! returns, before its complete is applied, breaks the first; one that acknowledges a
//! failure breaks both.

use idem_core::record::{CommandKind, Reply, StoredResult};
use idem_core::{Disposition, Outcome};

use super::{Rule, Run, Violation};
use crate::history::EventKind;

pub(super) fn judge(run: &Run<'_>, found: &mut Vec<Violation>) {
    let history = run.history;
    if history.messages.is_empty() {
        return;
    }
    // Per attempt: the message it delivers, where the store applied its complete, where
    // its reserve was answered with a replay of a result, and where it ended executed.
    let n = history.attempts.len();
    let mut message_of: Vec<Option<usize>> = vec![None; n];
    let mut completed: Vec<Option<usize>> = vec![None; n];
    let mut replayed: Vec<Option<usize>> = vec![None; n];
    let mut executed: Vec<Option<usize>> = vec![None; n];
    // Per message: where the broker took its acknowledgement or dead-lettering.
    let mut settled: Vec<Option<usize>> = vec![None; history.messages.len()];
    let mut stuck = false;
    for &index in &run.notable {
        let event = &history.events[index];
        let who = event.who;
        if who >= n {
            continue;
        }
        match &event.kind {
            EventKind::Delivered { message, .. } => message_of[who] = Some(*message),
            EventKind::Store(step) => match step.answer.reply() {
                Some(Reply::Completed(_)) if step.command.kind() == CommandKind::Complete => {
                    completed[who].get_or_insert(index);
                }
                Some(Reply::Replay { result, .. }) if *result != StoredResult::Panicked => {
                    replayed[who].get_or_insert(index);
                }
                _ => {}
            },
            EventKind::Finished(Outcome::Executed(_)) => {
                executed[who].get_or_insert(index);
            }
            EventKind::Stuck(_) => stuck = true,
            EventKind::Disposed { disposition, lost } => {
                let message = message_of[who];
                if !lost
                    && !matches!(disposition, Disposition::Redeliver { .. })
                    && let Some(slot) = message.and_then(|m| settled.get_mut(m))
                {
                    slot.get_or_insert(index);
                }
                if *disposition != Disposition::Ack {
                    continue;
                }
                let label = run.label(who);
                let message = message
                    .and_then(|m| history.messages.get(m))
                    .map_or("?", |m| m.label.as_str());
                let recorded = completed[who].or(replayed[who]).or(executed[who]);
                if recorded.is_none() {
                    found.push(run.violation(
                        Rule::AckAfterRecord,
                        Some(index),
                        format!(
                            "{label} acknowledged message {message} before its effect was recorded: the store applied no complete of {label}'s, answered it no replay, and it had not ended executed"
                        ),
                    ));
                }
                let key = history.attempts[who].key;
                let effect = history
                    .statement
                    .lines()
                    .iter()
                    .any(|line| line.key == key && line.at <= event.at);
                if !effect {
                    found.push(run.violation(
                        Rule::AckAfterRecord,
                        Some(index),
                        format!(
                            "{label} acknowledged message {message}, whose effect never happened (nothing on the statement under key {key})"
                        ),
                    ));
                }
            }
            _ => {}
        }
    }
    // Liveness: a message the broker still holds at the end was lost to its consumers. A
    // run that got stuck is already reported.
    if stuck {
        return;
    }
    for (message, settled) in settled.iter().enumerate() {
        if settled.is_none() {
            let label = history.messages[message].label.as_str();
            found.push(run.violation(
                Rule::Liveness,
                None,
                format!(
                    "message {label} was neither acknowledged nor dead-lettered by the end of the run"
                ),
            ));
        }
    }
}
