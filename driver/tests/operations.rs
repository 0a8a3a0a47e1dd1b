//! Operation handles, tenants, codecs and `AnyStore`: what a service's first embedding needs
//! so that handlers need no type annotations, one handler type serves any store, and two
//! tenants' keys never meet.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Charge, Provider, ProviderTimeout, fingerprint};
use idem::{
    AnyStore, BoxError, Codec, Coordinator, Error, MemoryStore, OperationError, Options, Provenance,
};

#[tokio::test(start_paused = true)]
async fn a_handle_fixes_the_types_so_actions_need_no_annotations() {
    let payments = common::coordinator(Options::default());
    let charges = payments
        .operation::<Charge, ProviderTimeout>("payment.charge")
        .unwrap();
    assert_eq!(charges.name().as_str(), "payment.charge");
    // No `Ok::<_, E>`: the handle knows both types.
    let first = charges
        .execute("k", fingerprint("o", 1), |claim| async move {
            Ok(Charge {
                id: format!("ch_{}", claim.key()),
                amount: 1,
            })
        })
        .await
        .unwrap();
    let again = charges
        .execute_with_provenance("k", fingerprint("o", 1), |_claim| async {
            Err(ProviderTimeout)
        })
        .await
        .unwrap();
    assert_eq!(again.value, first);
    assert_eq!(again.provenance, Provenance::Replayed);
}

#[tokio::test(start_paused = true)]
async fn a_misspelt_operation_fails_when_the_handle_is_made_not_on_a_call() {
    let payments = common::coordinator(Options::default());
    let refused = payments.operation::<u32, ProviderTimeout>("payment charge");
    assert!(matches!(
        refused,
        Err(OperationError::InvalidCharacter { found: ' ', .. })
    ));
    assert_eq!(payments.metrics().invalid_input, 1);
}

#[tokio::test(start_paused = true)]
async fn two_tenants_sending_one_key_get_two_records_and_two_charges() {
    let payments = common::coordinator(Options::default());
    let charges = payments
        .operation::<Charge, ProviderTimeout>("payment.charge")
        .unwrap();
    let provider = Arc::new(Provider::default());
    let mut ids = Vec::new();
    for tenant in ["alice", "bob", "alice"] {
        let provider = Arc::clone(&provider);
        let scoped = charges.for_tenant(tenant).unwrap();
        let charge = scoped
            .execute("same-key", fingerprint("o", 1), move |claim| async move {
                provider.charge_for(claim, "o", 1, Duration::ZERO).await
            })
            .await
            .unwrap();
        ids.push(charge.id);
    }
    assert_eq!(ids, ["ch_1", "ch_2", "ch_1"]);
    assert_eq!(provider.charges().len(), 2);
    // The key is stored as sent; the scope is in the operation.
    let alice = charges.for_tenant("alice").unwrap();
    let record = common::read_under(&**payments.store(), alice.name(), "same-key").await;
    assert!(record.is_some());
}

/// A codec that stores a `u32` as four big-endian bytes.
#[derive(Debug, Clone, Copy)]
struct BigEndian;

impl Codec<u32> for BigEndian {
    fn encode(&self, value: &u32) -> Result<Vec<u8>, BoxError> {
        Ok(value.to_be_bytes().to_vec())
    }

    fn decode(&self, bytes: &[u8]) -> Result<u32, BoxError> {
        Ok(u32::from_be_bytes(bytes.try_into()?))
    }
}

#[tokio::test(start_paused = true)]
async fn a_codec_decides_the_stored_bytes_and_a_mismatch_is_a_decode_error() {
    let payments = common::coordinator(Options::default());
    let counts = payments
        .operation::<u32, ProviderTimeout>("count.add")
        .unwrap()
        .with_codec(BigEndian);
    let value = counts
        .execute("k", fingerprint("o", 1), |_claim| async { Ok(0x0102_0304) })
        .await
        .unwrap();
    assert_eq!(value, 0x0102_0304);
    let record = common::read(&**payments.store(), "count.add", "k").await;
    let Some(idem_core::Record::Completed {
        result: idem::StoredResult::Value(body),
        ..
    }) = record
    else {
        panic!("expected a completed record, got {record:?}")
    };
    assert_eq!(body.as_bytes(), [1, 2, 3, 4]);
    // The same record read as JSON does not decode: a typed error, never a second run.
    let as_json = payments
        .operation::<String, ProviderTimeout>("count.add")
        .unwrap();
    let error = as_json
        .execute("k", fingerprint("o", 1), |_claim| async {
            Ok("ran".into())
        })
        .await
        .unwrap_err();
    assert!(matches!(error, Error::Decode(_)), "{error:?}");
    assert_eq!(payments.metrics().decode_failed, 1);
}

/// One handler, written once against `Coordinator<AnyStore>`.
async fn handler(payments: &Coordinator<AnyStore>) -> Result<u32, Error<ProviderTimeout>> {
    payments
        .execute("payment.charge", "k", fingerprint("o", 1), |_claim| async {
            Ok::<_, ProviderTimeout>(9)
        })
        .await
}

#[tokio::test(start_paused = true)]
async fn any_store_lets_one_handler_serve_a_store_chosen_at_run_time() {
    for flaky in [false, true] {
        let store = if flaky {
            AnyStore::new(common::FlakyStore::new(MemoryStore::new()).fault(
                idem_core::record::CommandKind::Reserve,
                0..1,
                common::Fault::Fail,
            ))
        } else {
            AnyStore::new(MemoryStore::new())
        };
        assert!(format!("{store:?}").contains(if flaky { "FlakyStore" } else { "MemoryStore" }));
        let payments = Coordinator::new(store, Options::default());
        assert_eq!(handler(&payments).await.unwrap(), 9);
        assert_eq!(handler(&payments).await.unwrap(), 9);
        let counted = payments.metrics();
        assert_eq!((counted.executed, counted.replayed), (1, 1));
        assert_eq!(counted.store_errors.reserve, u64::from(flaky));
    }
}

#[tokio::test(start_paused = true)]
async fn any_store_passes_change_notices_through() {
    // A waiter behind AnyStore is woken by the holder's complete, long before its backoff.
    let options = Options::builder()
        .backoff_initial(Duration::from_secs(5))
        .backoff_max(Duration::from_secs(5))
        .wait_deadline(Duration::from_secs(60))
        .build()
        .unwrap();
    let payments = Coordinator::new(AnyStore::new(MemoryStore::new()), options);
    let holder = common::spawn_call(
        &payments,
        "k",
        fingerprint("o", 1),
        Duration::from_millis(100),
        Ok(1),
    );
    tokio::time::sleep(Duration::from_millis(10)).await;
    let started = tokio::time::Instant::now();
    let waited = payments
        .execute("payment.charge", "k", fingerprint("o", 1), |_claim| async {
            Ok::<u32, ProviderTimeout>(2)
        })
        .await
        .unwrap();
    assert_eq!(waited, 1);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    holder.await.unwrap().unwrap();
}

/// A value that is not a serde type: only a codec knows its bytes.
#[derive(Debug, Clone, PartialEq)]
struct Reply(Vec<u8>);

#[derive(Debug, Clone)]
struct Raw;

impl Codec<Reply> for Raw {
    fn encode(&self, value: &Reply) -> Result<Vec<u8>, BoxError> {
        Ok(value.0.clone())
    }

    fn decode(&self, bytes: &[u8]) -> Result<Reply, BoxError> {
        Ok(Reply(bytes.to_vec()))
    }
}

#[tokio::test(start_paused = true)]
async fn a_handle_made_with_a_codec_carries_values_that_are_not_serde_types() {
    let payments = common::coordinator(Options::default());
    let replies = payments
        .operation_with_codec::<Reply, ProviderTimeout, _>("http.reply", Raw)
        .unwrap();
    let first = replies
        .execute("k", fingerprint("o", 1), |_claim| async {
            Ok(Reply(b"\x00raw\xff".to_vec()))
        })
        .await
        .unwrap();
    let again = replies
        .execute_with_provenance("k", fingerprint("o", 1), |_claim| async {
            Err(ProviderTimeout)
        })
        .await
        .unwrap();
    assert_eq!(
        (again.value, again.provenance),
        (first, Provenance::Replayed)
    );
    // The name is validated as `operation` validates it.
    let refused = payments.operation_with_codec::<Reply, ProviderTimeout, _>("http reply", Raw);
    assert!(matches!(
        refused,
        Err(OperationError::InvalidCharacter { .. })
    ));
}
