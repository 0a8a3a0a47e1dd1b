//! A tenant's scope cannot be spelled (MODEL.md, I12 and "Scope"): no name that
//! `Operation::new` accepts, whoever gives it (a service, a route made into a name), equals
//! an operation scoped by `Operation::for_tenant`, and scoped names tell their operation and
//! tenant apart.

use idem_core::key::{MAX_OPERATION_LEN, TENANT_SCOPE};
use idem_core::{Operation, OperationError};
use proptest::prelude::*;

/// Names in the operation alphabet, and around it.
fn base() -> impl Strategy<Value = Operation> {
    "[A-Za-z0-9._-]{1,65}".prop_map(|name| Operation::new(name).unwrap())
}

/// What a client can put into a name: any text, the old scope marker, the new one, and the
/// exact spelling of a scoped name.
fn spelling(scoped: &Operation) -> impl Strategy<Value = String> + use<> {
    let (base, hash) = scoped
        .as_str()
        .split_once(TENANT_SCOPE)
        .map(|(base, hash)| (base.to_owned(), hash.to_owned()))
        .unwrap();
    prop_oneof![
        ".{0,110}",
        "[A-Za-z0-9._~-]{1,100}",
        Just(scoped.as_str().to_owned()),
        Just(format!("{base}.t-{hash}")),
        Just(format!("{base}_t-{hash}")),
        Just(format!("{base}-t-{hash}")),
        Just(format!("{base}_7Et-{hash}")),
    ]
}

proptest! {
    #[test]
    fn no_name_operation_new_accepts_equals_a_scoped_one(
        (scoped, attempt) in (base(), proptest::collection::vec(any::<u8>(), 0..40))
            .prop_map(|(base, tenant)| base.for_tenant(tenant).unwrap())
            .prop_flat_map(|scoped| (Just(scoped.clone()), spelling(&scoped)))
    ) {
        if let Ok(spelled) = Operation::new(&attempt) {
            prop_assert_ne!(&spelled, &scoped);
            prop_assert!(!spelled.as_str().contains('~'));
        }
        let refused = matches!(
            Operation::new(scoped.as_str()),
            Err(OperationError::InvalidCharacter { found: '~', .. })
        );
        prop_assert!(refused, "{} was accepted by Operation::new", scoped);
    }

    #[test]
    fn a_scoped_name_splits_back_into_its_operation_and_tenant_hash(
        base in base(),
        other in base(),
        tenant in proptest::collection::vec(any::<u8>(), 0..40),
        other_tenant in proptest::collection::vec(any::<u8>(), 0..40),
    ) {
        let scoped = base.for_tenant(&tenant).unwrap();
        let (name, hash) = scoped.as_str().split_once(TENANT_SCOPE).unwrap();
        prop_assert_eq!(name, base.as_str());
        prop_assert_eq!(hash.len(), 32);
        prop_assert!(hash.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        prop_assert_eq!(scoped.as_str().len(), base.as_str().len() + 35);
        // Another operation or another tenant, another scope.
        if other != base {
            prop_assert_ne!(other.for_tenant(&tenant).unwrap(), scoped.clone());
        }
        if other_tenant != tenant {
            prop_assert_ne!(base.for_tenant(&other_tenant).unwrap(), scoped);
        }
    }
}

/// A tool that reads records back from a store gets the very operation the service used:
/// the scoped name round-trips through `from_stored`, a plain one too, and a stored name
/// that no service could have made is refused.
#[test]
fn stored_names_read_back_as_the_operations_that_wrote_them() {
    let charge = Operation::new("payment.charge").unwrap();
    let scoped = charge.for_tenant("acct-7").unwrap();
    let back = Operation::from_stored(scoped.as_str()).unwrap();
    assert_eq!(back, scoped);
    let (base, scope) = back.tenant_scope();
    assert_eq!(base, "payment.charge");
    assert_eq!(scope.map(str::len), Some(32));
    assert_eq!(Operation::from_stored("payment.charge").unwrap(), charge);
    assert_eq!(charge.tenant_scope(), ("payment.charge", None));

    let digits = &scoped.as_str()["payment.charge~t-".len()..];
    for refused in [
        format!("payment.charge~t-{}", &digits[..31]),
        format!("payment.charge~t-{}0", digits),
        format!("payment.charge~t-{}", digits.to_uppercase()),
        format!("pay ment~t-{digits}"),
        format!("~t-{digits}"),
        format!("payment.charge~t-{digits}~t-{digits}"),
    ] {
        assert!(
            Operation::from_stored(&refused).is_err(),
            "{refused:?} accepted"
        );
    }
}

/// A stored scoped name is held to the operation's length limit, exactly: at the limit it is
/// the operation a service made, past it no service could have made it; and a bad digit in
/// the scope is named where it stands.
#[test]
fn stored_names_meet_the_length_limit_and_bad_digits_are_placed() {
    let scope = "0123456789abcdef0123456789abcdef";
    let at_limit = format!("{}~t-{scope}", "a".repeat(MAX_OPERATION_LEN - 35));
    assert_eq!(at_limit.len(), MAX_OPERATION_LEN);
    assert_eq!(
        Operation::from_stored(&at_limit).unwrap().as_str(),
        at_limit
    );
    let past = format!("{}~t-{scope}", "a".repeat(MAX_OPERATION_LEN - 30));
    assert_eq!(
        Operation::from_stored(&past),
        Err(OperationError::TooLong { len: past.len() })
    );
    let bad = "charge~t-0123456789Xbcdef0123456789abcdef";
    assert_eq!(
        Operation::from_stored(bad),
        Err(OperationError::InvalidCharacter {
            found: 'X',
            position: "charge~t-0123456789".len(),
        })
    );
}
