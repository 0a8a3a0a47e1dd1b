//! Without a broker: where a message's key comes from, and how the driver's answers become the
//! core's call ends (acknowledged only when recorded, `C1`).

use std::sync::Arc;

use idem::{Answer, Error, Provenance, Recording};
use idem_consumer::{CallEnd, DeadLetterReason, KeyFrom, Message, call_end};
use idem_core::{Fingerprint, Key};

fn message(id: Option<&str>, body: &[u8]) -> Message {
    Message {
        id: id.map(str::to_owned),
        body: body.to_vec(),
        delivery: 1,
    }
}

#[test]
fn a_message_is_keyed_by_its_id_or_a_function_and_fingerprinted_by_its_body() {
    let (key, fingerprint) = KeyFrom::MessageId
        .key(&message(Some("m-1"), b"ship 7"))
        .unwrap();
    assert_eq!(key, "m-1");
    assert_eq!(fingerprint, Fingerprint::of_bytes(b"ship 7"));
    // Another body under the same id: another fingerprint, so key reuse at the store.
    let (_, other) = KeyFrom::MessageId
        .key(&message(Some("m-1"), b"ship 8"))
        .unwrap();
    assert_ne!(other, fingerprint);
    for keyless in [message(None, b"x"), message(Some(""), b"x")] {
        assert_eq!(
            KeyFrom::MessageId.key(&keyless),
            Err(DeadLetterReason::NoKey)
        );
    }
    let from_body = KeyFrom::Function(Arc::new(|m: &Message| {
        std::str::from_utf8(&m.body)
            .ok()
            .and_then(|body| body.strip_prefix("order:"))
            .map(str::to_owned)
    }));
    assert_eq!(from_body.key(&message(None, b"order:42")).unwrap().0, "42");
    assert_eq!(
        from_body.key(&message(Some("m-1"), b"nothing")),
        Err(DeadLetterReason::NoKey)
    );
}

#[test]
fn only_an_answer_with_a_record_behind_it_is_recorded() {
    let answer = |provenance| -> Result<Answer<u8>, Error<&str>> {
        Ok(Answer {
            value: 1,
            provenance,
            waited: false,
        })
    };
    for provenance in [
        Provenance::Replayed,
        Provenance::Executed {
            lease_lost: false,
            recording: Recording::Stored,
        },
    ] {
        assert_eq!(call_end(&answer(provenance)), CallEnd::Recorded);
    }
    let end = |error: Error<&str>| call_end::<u8, &str>(&Err(error));
    assert_eq!(end(Error::ResultNotStored), CallEnd::Recorded);
    assert_eq!(end(Error::InProgress), CallEnd::InProgress);
    for retryable in [
        Error::Action("declined for now"),
        Error::RolledBack,
        Error::CommitUnknown,
        Error::RuntimeShutdown,
        Error::ShuttingDown,
        Error::Overloaded,
    ] {
        assert_eq!(end(retryable), CallEnd::Retryable);
    }
    assert_eq!(
        end(Error::InvalidKey(Key::new(" ").unwrap_err())),
        CallEnd::Refused(DeadLetterReason::InvalidKey)
    );
    assert_eq!(
        end(Error::KeyReuse {
            stored: Fingerprint::of_bytes(b"a"),
            given: Fingerprint::of_bytes(b"b"),
        }),
        CallEnd::Refused(DeadLetterReason::KeyReuse)
    );
    assert_eq!(
        end(Error::OutcomeUnknown),
        CallEnd::Refused(DeadLetterReason::OutcomeUnknown)
    );
    assert_eq!(
        end(Error::ActionUnknown("no reply from the carrier")),
        CallEnd::Refused(DeadLetterReason::OutcomeUnknown)
    );
}
