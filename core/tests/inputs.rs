//! Refusals of keys, operations and options, and the fingerprint's canonical form.

use std::time::Duration;

use idem_core::{
    Fingerprint, FingerprintError, Key, KeyError, Operation, OperationError, Options, OptionsError,
};

#[test]
fn keys_are_refused_not_rewritten() {
    assert_eq!(Key::new(""), Err(KeyError::Empty));
    assert_eq!(
        Key::new("a b"),
        Err(KeyError::InvalidCharacter {
            found: ' ',
            position: 1
        })
    );
    assert_eq!(
        Key::new("ab "),
        Err(KeyError::InvalidCharacter {
            found: ' ',
            position: 2
        })
    );
    assert_eq!(
        Key::new("a\n"),
        Err(KeyError::InvalidCharacter {
            found: '\n',
            position: 1
        })
    );
    assert_eq!(
        Key::new("ключ"),
        Err(KeyError::InvalidCharacter {
            found: 'к',
            position: 0
        })
    );
    // After visible ASCII, a character of several bytes: named whole, at its first byte.
    assert_eq!(
        Key::new("ab€c"),
        Err(KeyError::InvalidCharacter {
            found: '€',
            position: 2
        })
    );
    assert_eq!(
        Key::new("k".repeat(256)),
        Err(KeyError::TooLong { len: 256 })
    );
    assert_eq!(Key::new("k".repeat(255)).unwrap().as_str().len(), 255);
    assert_eq!(Key::new("!~").unwrap().as_str(), "!~");
}

#[test]
fn operations_are_validated() {
    assert_eq!(Operation::new(""), Err(OperationError::Empty));
    assert_eq!(
        Operation::new("pay charge"),
        Err(OperationError::InvalidCharacter {
            found: ' ',
            position: 3
        })
    );
    assert_eq!(
        Operation::new("café"),
        Err(OperationError::InvalidCharacter {
            found: 'é',
            position: 3
        })
    );
    assert_eq!(
        Operation::new("o".repeat(101)),
        Err(OperationError::TooLong { len: 101 })
    );
    assert!(Operation::new("payment.charge_v2-x").is_ok());
}

#[test]
fn options_refusals() {
    let b = Options::builder;
    assert_eq!(
        b().retention(Duration::from_secs(59)).build(),
        Err(OptionsError::RetentionTooShort {
            retention: Duration::from_secs(59)
        })
    );
    assert_eq!(
        b().lease(Duration::from_millis(999)).build(),
        Err(OptionsError::LeaseTooShort {
            lease: Duration::from_millis(999)
        })
    );
    assert!(matches!(
        b().lease(Duration::from_secs(60))
            .retention(Duration::from_secs(60))
            .build(),
        Err(OptionsError::LeaseNotBelowRetention { .. })
    ));
    assert!(matches!(
        b().renew_every(Duration::from_secs(30)).build(),
        Err(OptionsError::RenewNotWithinLease { .. })
    ));
    assert_eq!(
        b().wait_deadline(Duration::ZERO).build(),
        Err(OptionsError::WaitDeadlineZero)
    );
    assert_eq!(
        b().backoff_initial(Duration::ZERO).build(),
        Err(OptionsError::BackoffZero)
    );
    assert!(matches!(
        b().backoff_max(Duration::from_millis(1)).build(),
        Err(OptionsError::BackoffMaxBelowInitial { .. })
    ));
    assert!(matches!(
        b().max_body_bytes(usize::MAX).build(),
        Err(OptionsError::BodyLimitTooLarge { .. })
    ));
    assert!(matches!(
        b().store_retries(11).build(),
        Err(OptionsError::TooManyStoreRetries { .. })
    ));
    let ok = b().lease(Duration::from_secs(9)).build().unwrap();
    assert_eq!(ok.renew_every(), Duration::from_secs(3));
    assert_eq!(ok.retention(), Duration::from_secs(86_400));
}

#[test]
fn fingerprint_is_order_independent_and_type_sensitive() {
    let a = Fingerprint::builder()
        .field("order_id", "o-1")
        .field("amount", 100)
        .finish()
        .unwrap();
    let b = Fingerprint::builder()
        .field("amount", 100)
        .field("order_id", "o-1")
        .finish()
        .unwrap();
    assert_eq!(a, b);
    let c = Fingerprint::builder()
        .field("amount", 100.0)
        .field("order_id", "o-1")
        .finish()
        .unwrap();
    assert_ne!(a, c);
    let json = Fingerprint::builder()
        .field("b", serde_json::json!({"z": 1, "a": [true, null]}))
        .field("a", "x\n");
    assert_eq!(
        json.canonical_json().unwrap(),
        r#"{"a":"x\n","b":{"a":[true,null],"z":1}}"#
    );
    assert_eq!(a.to_string().len(), 64);
    assert_eq!(a.to_string().parse::<Fingerprint>().unwrap(), a);
    // SHA-256 of `{}`: fixed across platforms.
    assert_eq!(
        Fingerprint::builder().finish().unwrap().to_string(),
        "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
    );
    assert!(matches!(
        Fingerprint::builder().field("a", 1).field("a", 2).finish(),
        Err(FingerprintError::DuplicateField { .. })
    ));
}

#[test]
fn the_body_limit_stops_at_redis_largest_string() {
    let limit = 512 * 1024 * 1024;
    let ok = Options::builder().max_body_bytes(limit).build().unwrap();
    assert_eq!(ok.max_body_bytes(), limit);
    assert!(
        Options::builder()
            .max_body_bytes(limit + 1)
            .build()
            .is_err()
    );
}

#[test]
fn a_fingerprint_is_its_digest_bytes_shown_as_hex() {
    let fp = Fingerprint::of_bytes(b"abc");
    let hex: String = fp.to_bytes().iter().map(|b| format!("{b:02x}")).collect();
    // SHA-256("abc"), the standard's own test vector.
    assert_eq!(
        hex,
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    assert_eq!(fp.to_string(), hex);
    assert_eq!(format!("{fp:?}"), format!("Fingerprint({hex})"));
    assert_eq!(Fingerprint::from_bytes(fp.to_bytes()), fp);
    assert_eq!(hex.parse::<Fingerprint>().unwrap(), fp);
}

#[test]
fn a_tenant_scopes_an_operation_without_touching_keys() {
    let charge = idem_core::Operation::new("payment.charge").unwrap();
    let alice = charge.for_tenant("alice").unwrap();
    let bob = charge.for_tenant("bob").unwrap();
    assert_ne!(alice, bob);
    assert_eq!(
        alice,
        charge.for_tenant(b"alice").unwrap(),
        "the same tenant, the same scope"
    );
    assert!(alice.as_str().starts_with("payment.charge~t-"));
    assert_eq!(alice.as_str().len(), "payment.charge".len() + 35);
    // Any bytes identify a tenant; the scoped name is never one `Operation::new` accepts,
    // so an unscoped name cannot spell it.
    let odd = charge.for_tenant([0u8, 255, b':', b' ']).unwrap();
    assert!(idem_core::Operation::new(odd.as_str()).is_err());
    assert!(idem_core::Operation::new(alice.as_str().replace('~', ".")).is_ok());
    // The longest name that can be scoped, and one byte more.
    let longest = idem_core::Operation::new("a".repeat(65)).unwrap();
    assert_eq!(longest.for_tenant("t").unwrap().as_str().len(), 100);
    let over = idem_core::Operation::new("a".repeat(66)).unwrap();
    assert!(matches!(
        over.for_tenant("t"),
        Err(idem_core::OperationError::TooLong { len: 101 })
    ));
}
