//! Change notices ([`Store::changed`], [`Store::watch`]), for a store that sends them: a
//! waiter told "in flight" is woken when the holder completes or releases, whether its watch
//! was registered before its reserve (`watch`) or after the reply (`changed`), and also when
//! the change lands between the call and the future's first poll (no lost wake-up).
//!
//! Spurious wake-ups are allowed by the contract; the check counts the watches that resolved
//! before any change and says so, so a store whose notices always fire at once shows.

use std::future::Future;
use std::time::Duration;

use idem::Store;
use idem_core::record::{Command, Reply};

use super::{LONG, Names, Session, fingerprint, owner, value};
use crate::report::Divergence;
use crate::subject::Subject;

/// How long a woken waiter may take to hear of the change.
const WAKE_WITHIN: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Copy)]
enum Watch {
    /// `watch` before the waiter's reserve.
    Before,
    /// `changed` after the "in flight" reply, polled while the change happens.
    After,
    /// `changed` after the reply, first polled only once the change has landed.
    NotYetPolled,
}

#[derive(Debug, Clone, Copy)]
enum Ending {
    Complete,
    Release,
}

/// `Ok(None)`: the subject says its store sends no notices.
pub(crate) async fn run<S: Subject>(subject: &S) -> Result<Option<String>, Divergence> {
    if !subject.notifies() {
        return Ok(None);
    }
    let names = Names::new("notices");
    let mut session = Session::new(subject);
    let mut early = 0;
    let mut n = 0;
    for watch in [Watch::Before, Watch::After, Watch::NotYetPolled] {
        for ending in [Ending::Complete, Ending::Release] {
            let record = names.record(n);
            n += 1;
            if wake(&mut session, &record, watch, ending).await? {
                early += 1;
            }
        }
    }
    Ok(Some(format!(
        "{n} waiters (watch before the reserve, changed after it, a change before the first \
         poll; by a complete and a release) woken within {WAKE_WITHIN:?}; {early} resolved \
         before the change"
    )))
}

/// One waiter on a held key, woken by `ending`; answers whether its watch resolved before
/// the change.
async fn wake<S: Subject>(
    session: &mut Session<'_, S>,
    record: &(idem_core::Operation, idem_core::Key),
    watch: Watch,
    ending: Ending,
) -> Result<bool, Divergence> {
    let subject: &S = session.subject;
    let store = subject.store();
    let (operation, key) = record;
    let reserve = |who| Command::Reserve {
        owner: owner(who),
        fingerprint: fingerprint(1),
        lease: LONG,
    };
    session.send(record, reserve(1)).await?;
    let registered = matches!(watch, Watch::Before).then(|| store.watch(operation, key));
    let (reply, _) = session.send(record, reserve(2)).await?;
    if !matches!(reply, Reply::InFlight { .. }) {
        return Err(session.divergence_of(
            operation,
            key,
            format!("a second caller on a held key was answered {reply:?}, not in flight"),
        ));
    }
    let end = match ending {
        Ending::Complete => Command::Complete {
            owner: owner(1),
            fingerprint: fingerprint(1),
            result: value(b"done"),
            retention: LONG,
        },
        Ending::Release => Command::Release { owner: owner(1) },
    };
    let mut waiter: std::pin::Pin<Box<dyn Future<Output = ()> + Send + '_>> = match registered {
        Some(future) => Box::pin(future),
        None => Box::pin(store.changed(operation, key)),
    };
    let early = match watch {
        // Not polled until the change has landed: the watch must have started at the call.
        Watch::NotYetPolled => false,
        Watch::Before | Watch::After => {
            tokio::time::timeout(Duration::from_millis(30), waiter.as_mut())
                .await
                .is_ok()
        }
    };
    session.send(record, end).await?;
    if early {
        return Ok(true);
    }
    if tokio::time::timeout(WAKE_WITHIN, waiter).await.is_err() {
        return Err(session.divergence_of(
            operation,
            key,
            format!(
                "{watch:?}: a waiter told \"in flight\" was not woken within {WAKE_WITHIN:?} of \
                 the holder's {ending:?}"
            ),
        ));
    }
    Ok(false)
}
