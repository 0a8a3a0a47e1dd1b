//! Stored results at the sizes a store promises: the largest it says it keeps, and an empty
//! one, come back byte for byte, through a replay and a read.

use idem_core::Body;
use idem_core::record::{Command, StoredResult};

use super::{LONG, Names, Session, fingerprint, owner};
use crate::report::Divergence;
use crate::subject::Subject;

/// Bytes that no text encoding passes through unchanged by accident: every value from 0 to
/// 255, NUL and invalid UTF-8 included, in an order that repeats only every 251 bytes.
fn body(len: usize) -> Body {
    Body::new(
        (0..len)
            .map(|i| u8::try_from((i * 7 + i / 251) % 256).unwrap_or(0))
            .collect::<Vec<u8>>(),
    )
}

pub(crate) async fn run<S: Subject>(subject: &S) -> Result<String, Divergence> {
    let names = Names::new("sizes");
    let mut session = Session::new(subject);
    let largest = subject.max_body();
    for (n, len) in [0, 1, 255, 256, largest].into_iter().enumerate() {
        let record = names.record(n);
        session
            .send(
                &record,
                Command::Reserve {
                    owner: owner(1),
                    fingerprint: fingerprint(1),
                    lease: LONG,
                },
            )
            .await?;
        session
            .send(
                &record,
                Command::Complete {
                    owner: owner(1),
                    fingerprint: fingerprint(1),
                    result: StoredResult::Value(body(len)),
                    retention: LONG,
                },
            )
            .await?;
        // The judge compares the replayed and read bodies with the one stored, byte for byte.
        session
            .send(
                &record,
                Command::Reserve {
                    owner: owner(2),
                    fingerprint: fingerprint(1),
                    lease: LONG,
                },
            )
            .await?;
        session.send(&record, Command::Read).await?;
    }
    Ok(format!(
        "results of 0, 1, 255, 256 and {largest} bytes replayed and read byte for byte"
    ))
}
