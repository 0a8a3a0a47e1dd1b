//! Random command sequences, with time moving, judged step for step; the first failing
//! sequence is shrunk (steps dropped while it still fails) to a short history.
//!
//! Sequences come from a seeded generator, so a failure is reproduced by its seed
//! ([`Config::seed`](crate::Config::seed)). Leases and retentions of a few milliseconds, with
//! sleeps between steps, make expiry happen often; three owners and two fingerprints on four
//! records (two keys under two operations) make every reply of the machine common.

use std::time::Duration;

use idem_core::Body;
use idem_core::record::{Command, StoredResult};

use super::{Names, Session, fingerprint, owner};
use crate::Config;
use crate::report::Divergence;
use crate::subject::Subject;

/// Shrinking stops after this many reruns; what it has then is reported.
const SHRINK_RUNS: usize = 150;

#[derive(Debug, Clone)]
enum Step {
    /// A command on record `slot` (0..4).
    Send { slot: usize, command: Command },
    /// Let the store's clock move, in milliseconds.
    Sleep(u64),
}

/// SplitMix64: small, seedable, and the same sequence on every platform.
struct Draw(u64);

impl Draw {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn ms(&mut self, max: u64) -> Duration {
        Duration::from_millis(self.below(max))
    }
}

fn command(draw: &mut Draw) -> Command {
    let who = owner(u128::from(draw.below(3)) + 1);
    let fp = fingerprint(u8::try_from(draw.below(2)).unwrap_or(0));
    match draw.below(9) {
        0..=2 => Command::Reserve {
            owner: who,
            fingerprint: fp,
            lease: draw.ms(40),
        },
        3 | 4 => {
            let result = match draw.below(6) {
                0 => StoredResult::NotStored,
                1 => StoredResult::Panicked,
                _ => {
                    let len = usize::try_from(draw.below(8)).unwrap_or(0);
                    let bytes: Vec<u8> = (0..len).map(|_| draw.next().to_le_bytes()[0]).collect();
                    StoredResult::Value(Body::new(bytes))
                }
            };
            Command::Complete {
                owner: who,
                fingerprint: fp,
                result,
                retention: draw.ms(80),
            }
        }
        5 | 6 => Command::Renew {
            owner: who,
            lease: draw.ms(40),
        },
        7 => Command::Release { owner: who },
        _ => Command::Read,
    }
}

fn case(draw: &mut Draw, steps: usize) -> Vec<Step> {
    let len = usize::try_from(draw.below(steps.max(1) as u64)).unwrap_or(0) + 1;
    (0..len)
        .map(|_| {
            if draw.below(5) == 0 {
                Step::Sleep(draw.below(25))
            } else {
                Step::Send {
                    slot: usize::try_from(draw.below(4)).unwrap_or(0),
                    command: command(draw),
                }
            }
        })
        .collect()
}

/// Runs one sequence on fresh records.
async fn run_case<S: Subject>(subject: &S, steps: &[Step]) -> Result<(), Divergence> {
    let names = Names::new("differential");
    let records: Vec<_> = (0..4)
        .map(|slot| {
            let operation = if slot < 2 {
                super::OPERATION
            } else {
                "conformance.other"
            };
            names.under(operation, slot % 2)
        })
        .collect();
    let mut session = Session::new(subject);
    for step in steps {
        match step {
            Step::Sleep(ms) => tokio::time::sleep(Duration::from_millis(*ms)).await,
            Step::Send { slot, command } => {
                session.send(&records[*slot], command.clone()).await?;
            }
        }
    }
    Ok(())
}

pub(crate) async fn run<S: Subject>(subject: &S, config: &Config) -> Result<String, Divergence> {
    let mut draw = Draw(config.seed);
    let mut sent = 0;
    for n in 0..config.cases {
        let steps = case(&mut draw, config.steps);
        sent += steps.len();
        if let Err(first) = run_case(subject, &steps).await {
            let (steps, divergence) = shrink(subject, steps, first).await;
            let mut divergence = divergence;
            divergence.detail = format!(
                "case {n} of seed {:#x}, shrunk to {} step(s): {}",
                config.seed,
                steps.len(),
                divergence.detail
            );
            return Err(divergence);
        }
    }
    Ok(format!(
        "{} random sequences, {sent} steps, seed {:#x}",
        config.cases, config.seed
    ))
}

/// Drops steps, one at a time from the end, while the sequence still fails; answers the
/// shortest failing sequence found and its divergence.
async fn shrink<S: Subject>(
    subject: &S,
    mut steps: Vec<Step>,
    mut divergence: Divergence,
) -> (Vec<Step>, Divergence) {
    let mut runs = 0;
    let mut i = steps.len();
    while i > 0 && runs < SHRINK_RUNS {
        i -= 1;
        let mut shorter = steps.clone();
        shorter.remove(i);
        runs += 1;
        if let Err(found) = run_case(subject, &shorter).await {
            steps = shorter;
            divergence = found;
            i = i.min(steps.len());
        }
    }
    (steps, divergence)
}
