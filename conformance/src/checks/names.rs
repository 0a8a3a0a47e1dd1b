//! Names compared byte for byte (`I12`): keys that differ only in case, or by a character
//! that SQL's `LIKE` or a case-insensitive collation treats as another, are separate records;
//! so is one key under two operations; the longest key is kept whole.

use idem_core::record::Command;
use idem_core::{Key, Operation};

use super::{LONG, Names, OPERATION, Session, fingerprint, owner};
use crate::report::Divergence;
use crate::subject::Subject;

pub(crate) async fn run<S: Subject>(subject: &S) -> Result<String, Divergence> {
    let base = Names::new("names");
    let (_, stem) = base.record(0);
    let stem = stem.as_str().to_owned();
    let mut keys: Vec<String> = ["A", "a", "a_b", "a%b", "axb", "a\\b", "a'b", "a\"b", "a.b"]
        .iter()
        .map(|suffix| format!("{stem}-{suffix}"))
        .collect();
    // The longest key there is, and the same key one byte shorter.
    let longest = format!(
        "{stem}-{}",
        "z".repeat(idem_core::key::MAX_KEY_LEN - stem.len() - 1)
    );
    keys.push(longest.clone());
    keys.push(longest[..longest.len() - 1].to_owned());
    let mut records = Vec::new();
    for operation in [OPERATION, "conformance.other"] {
        for key in &keys {
            let operation = Operation::new(operation).map_err(invalid)?;
            let key = Key::new(key).map_err(invalid)?;
            records.push((operation, key));
        }
    }
    let mut session = Session::new(subject);
    // Each record gets its own owner and fingerprint: a store that took two names for one
    // record answers the second reserve "in flight" or "key reuse", and the judge, which
    // follows each name on its own, sees it.
    for (n, record) in records.iter().enumerate() {
        let n = u8::try_from(n).map_err(invalid)?;
        session
            .send(
                record,
                Command::Reserve {
                    owner: owner(u128::from(n) + 1),
                    fingerprint: fingerprint(n),
                    lease: LONG,
                },
            )
            .await?;
    }
    for record in &records {
        session.send(record, Command::Read).await?;
    }
    Ok(format!(
        "{} names (case, SQL wildcards, quotes, the longest key, two operations) kept apart",
        records.len()
    ))
}

fn invalid(error: impl std::fmt::Display) -> Divergence {
    Divergence {
        detail: format!("the kit built an invalid name: {error}"),
        history: vec![],
    }
}
