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
        headers: Vec::new(),
    }
}

fn with_headers(body: &[u8], headers: &[(&str, &str)]) -> Message {
    Message {
        headers: headers
            .iter()
            .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
            .collect(),
        ..message(Some("m-1"), body)
    }
}

#[test]
fn chosen_headers_join_the_body_in_the_fingerprint_and_others_do_not() {
    let chosen = ["amount".to_owned(), "currency".to_owned()];
    let base = with_headers(
        b"ship",
        &[("amount", "100"), ("currency", "EUR"), ("trace", "a")],
    );
    let fingerprint = base.fingerprint(&chosen);
    // Without chosen headers the fingerprint is the body's, as before headers were chosen.
    assert_eq!(base.fingerprint(&[]), Fingerprint::of_bytes(b"ship"));
    assert_ne!(fingerprint, base.fingerprint(&[]));
    // A header not chosen changes nothing, nor does the order of headers or of names.
    let retraced = with_headers(
        b"ship",
        &[("trace", "b"), ("currency", "EUR"), ("amount", "100")],
    );
    assert_eq!(retraced.fingerprint(&chosen), fingerprint);
    let reversed = ["currency".to_owned(), "amount".to_owned()];
    assert_eq!(base.fingerprint(&reversed), fingerprint);
    // A chosen header's other value, its absence, an empty value, a second value, and another
    // body are all other fingerprints, each unlike the rest.
    let others = [
        with_headers(b"ship", &[("amount", "101"), ("currency", "EUR")]),
        with_headers(b"ship", &[("currency", "EUR")]),
        with_headers(b"ship", &[("amount", ""), ("currency", "EUR")]),
        with_headers(
            b"ship",
            &[("amount", "100"), ("amount", "100"), ("currency", "EUR")],
        ),
        with_headers(b"ship!", &[("amount", "100"), ("currency", "EUR")]),
        // The value's bytes moved between the body and a header.
        with_headers(b"ship1", &[("amount", "00"), ("currency", "EUR")]),
    ];
    let mut seen = vec![fingerprint];
    for other in &others {
        let print = other.fingerprint(&chosen);
        assert!(!seen.contains(&print), "{other:?}");
        seen.push(print);
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
