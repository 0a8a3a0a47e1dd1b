//! A value the store did not write: every command answers [`StoreError::Corrupt`], and the
//! value is still there afterwards, for a person to look at (never overwritten silently).

use idem::{Store, StoreError};
use idem_core::record::{Command, StoredResult};

use super::{LONG, Names, fingerprint, owner};
use crate::report::Divergence;
use crate::subject::Subject;

/// `Ok(None)`: the subject cannot plant such a value.
pub(crate) async fn run<S: Subject>(subject: &S) -> Result<Option<String>, Divergence> {
    let names = Names::new("corrupt");
    let (operation, key) = names.record(0);
    let planted = subject
        .plant_corrupt(&operation, &key)
        .await
        .map_err(|error| Divergence {
            detail: format!("the subject could not plant a corrupt value: {error}"),
            history: vec![],
        })?;
    if !planted {
        return Ok(None);
    }
    let commands = [
        Command::Read,
        Command::Reserve {
            owner: owner(1),
            fingerprint: fingerprint(1),
            lease: LONG,
        },
        Command::Complete {
            owner: owner(1),
            fingerprint: fingerprint(1),
            result: StoredResult::NotStored,
            retention: LONG,
        },
        Command::Renew {
            owner: owner(1),
            lease: LONG,
        },
        Command::Release { owner: owner(1) },
        // Still there, still refused, after every command.
        Command::Read,
    ];
    let mut history = Vec::new();
    for command in commands {
        let reply = subject
            .store()
            .apply(&operation, &key, command.clone())
            .await;
        history.push(format!(
            "{operation}/{key} {} -> {reply:?}",
            crate::judge::describe_command(&command)
        ));
        if !matches!(reply, Err(StoreError::Corrupt { .. })) {
            return Err(Divergence {
                detail: format!(
                    "a value the store did not write was answered {reply:?} to {}, not Corrupt",
                    command.name()
                ),
                history,
            });
        }
    }
    Ok(Some(format!(
        "{} commands on a planted value, each answered Corrupt, the value left in place",
        history.len()
    )))
}
