//! Every (state, command) pair of the record machine, each state built through the store
//! itself, each command followed by a read that shows what it left.

use std::time::Duration;

use idem_core::record::{Command, StoredResult};
use idem_core::{Key, Operation, Timestamp};

use super::{LONG, Names, Session, fingerprint, owner, value};
use crate::report::Divergence;
use crate::subject::Subject;

/// The lease or retention of a state that must have run out before its command is sent.
const SHORT: Duration = Duration::from_millis(120);

/// A state of one record, and the commands that build it from an absent key. Owner 1 and
/// fingerprint 1 always make it.
#[derive(Debug, Clone, Copy)]
enum State {
    Absent,
    Held,
    HeldPastLease,
    CompletedValue,
    CompletedNotStored,
    CompletedPanicked,
    CompletedPastRetention,
    Released,
}

const STATES: [State; 8] = [
    State::Absent,
    State::Held,
    State::HeldPastLease,
    State::CompletedValue,
    State::CompletedNotStored,
    State::CompletedPanicked,
    State::CompletedPastRetention,
    State::Released,
];

impl State {
    fn setup(self) -> Vec<Command> {
        let reserve = |lease| Command::Reserve {
            owner: owner(1),
            fingerprint: fingerprint(1),
            lease,
        };
        let complete = |result, retention| Command::Complete {
            owner: owner(1),
            fingerprint: fingerprint(1),
            result,
            retention,
        };
        match self {
            State::Absent => vec![],
            State::Held => vec![reserve(LONG)],
            State::HeldPastLease => vec![reserve(SHORT)],
            State::CompletedValue => vec![reserve(LONG), complete(value(b"first"), LONG)],
            State::CompletedNotStored => {
                vec![reserve(LONG), complete(StoredResult::NotStored, LONG)]
            }
            State::CompletedPanicked => vec![reserve(LONG), complete(StoredResult::Panicked, LONG)],
            State::CompletedPastRetention => {
                vec![reserve(LONG), complete(value(b"first"), SHORT)]
            }
            State::Released => vec![reserve(LONG), Command::Release { owner: owner(1) }],
        }
    }
}

/// The commands tried on every state: by the owner that built it (1) and another (2), with
/// the fingerprint it was built with (1) and another (2).
fn commands() -> Vec<Command> {
    let reserve = |who, fp| Command::Reserve {
        owner: owner(who),
        fingerprint: fingerprint(fp),
        lease: LONG,
    };
    let complete = |who, fp| Command::Complete {
        owner: owner(who),
        fingerprint: fingerprint(fp),
        result: value(b"second"),
        retention: LONG,
    };
    vec![
        reserve(1, 1),
        reserve(2, 1),
        reserve(1, 2),
        reserve(2, 2),
        complete(1, 1),
        complete(2, 1),
        complete(1, 2),
        complete(2, 2),
        Command::Renew {
            owner: owner(1),
            lease: LONG,
        },
        Command::Renew {
            owner: owner(2),
            lease: LONG,
        },
        Command::Release { owner: owner(1) },
        Command::Release { owner: owner(2) },
        Command::Read,
    ]
}

pub(crate) async fn run<S: Subject>(subject: &S) -> Result<String, Divergence> {
    let names = Names::new("transitions");
    let mut session = Session::new(subject);
    let commands = commands();
    let mut pairs: Vec<(State, (Operation, Key), Command)> = Vec::new();
    // Build every state first, then wait once for the short leases and retentions to end.
    let mut settled = Timestamp::ZERO;
    for (s, state) in STATES.iter().enumerate() {
        for (c, command) in commands.iter().enumerate() {
            let record = names.record(s * commands.len() + c);
            for step in state.setup() {
                let (_, timing) = session.send(&record, step).await?;
                settled = settled.max(timing.latest().saturating_add(SHORT));
            }
            pairs.push((*state, record, command.clone()));
        }
    }
    session
        .wait_until(settled.saturating_add(Duration::from_millis(1)))
        .await?;
    for (state, record, command) in &pairs {
        session
            .send(record, command.clone())
            .await
            .map_err(|d| in_state(d, *state))?;
        session
            .send(record, Command::Read)
            .await
            .map_err(|d| in_state(d, *state))?;
    }
    Ok(format!(
        "{} states x {} commands, each followed by a read",
        STATES.len(),
        commands.len()
    ))
}

fn in_state(mut divergence: Divergence, state: State) -> Divergence {
    divergence.detail = format!("in state {state:?}: {}", divergence.detail);
    divergence
}
