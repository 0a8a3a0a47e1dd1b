//! The small value types' own promises: how they convert, print and parse, and the exact
//! edges of the option rules. Stores, logs and the Redis codec rely on each of these.

use std::time::Duration;

use idem_core::{Body, Options, OwnerToken, Refusal, Timestamp};

#[test]
fn an_owner_token_converts_prints_and_parses_losslessly() {
    let bits = 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210_u128;
    let token = OwnerToken::from_u128(bits);
    assert_eq!(token.as_u128(), bits);
    assert_eq!(token.to_bytes(), bits.to_be_bytes());
    assert_eq!(OwnerToken::from_bytes(token.to_bytes()), token);
    let text = "0123456789abcdeffedcba9876543210";
    assert_eq!(token.to_string(), text);
    assert_eq!(format!("{token:?}"), format!("OwnerToken({text})"));
    assert_eq!(text.parse::<OwnerToken>(), Ok(token));
    for bad in [
        "0123456789abcdeffedcba987654321",   // 31 digits
        "0123456789abcdeffedcba98765432100", // 33 digits
        "0123456789ABCDEFFEDCBA9876543210",  // upper case
        "0123456789abcdeffedcba987654321g",  // not hex
        "+123456789abcdeffedcba9876543210",  // a sign from_str_radix would take
    ] {
        assert!(bad.parse::<OwnerToken>().is_err(), "{bad} was accepted");
    }
}

/// Tokens are kept as two halves: they still order, compare and round-trip as the 128-bit
/// values they were made from, at the halves' edges too.
#[test]
fn owner_tokens_order_as_their_128_bit_values() {
    let values = [
        0u128,
        1,
        u128::from(u64::MAX),
        u128::from(u64::MAX) + 1,
        1 << 127,
        (1 << 127) | u128::from(u64::MAX),
        u128::MAX - 1,
        u128::MAX,
    ];
    for a in values {
        let token = OwnerToken::from_u128(a);
        assert_eq!(token.as_u128(), a);
        assert_eq!(token.to_string().parse::<OwnerToken>(), Ok(token));
        for b in values {
            assert_eq!(
                token.cmp(&OwnerToken::from_u128(b)),
                a.cmp(&b),
                "{a:x} against {b:x}"
            );
        }
    }
    // Nothing in a token asks for more than a word's alignment (records and commands that
    // hold one are allocated on an allocator's plain path).
    assert_eq!(
        std::mem::align_of::<OwnerToken>(),
        std::mem::align_of::<u64>()
    );
}

#[test]
fn a_body_keeps_its_bytes_and_prints_short_text_only() {
    let body = Body::new(&b"\"ch_1\""[..]);
    assert_eq!(body.len(), 6);
    assert!(!body.is_empty());
    assert!(Body::new(Vec::new()).is_empty());
    assert_eq!(body.clone().into_bytes(), b"\"ch_1\"".to_vec());
    // A clone shares the bytes; bodies compare and hash by their bytes, shared or not.
    let copy = body.clone();
    assert!(std::ptr::eq(copy.as_bytes(), body.as_bytes()));
    let apart = Body::new(&b"\"ch_1\""[..]);
    assert!(!std::ptr::eq(apart.as_bytes(), body.as_bytes()));
    assert_eq!(apart, body);
    assert_ne!(Body::new("ch_2"), body);
    assert_eq!(format!("{body:?}"), r#"Body("\"ch_1\"")"#);
    let long = Body::new("x".repeat(65));
    assert_eq!(format!("{long:?}"), "Body(65 bytes)");
    let edge = Body::new("x".repeat(64));
    assert_eq!(format!("{edge:?}"), format!("Body({:?})", "x".repeat(64)));
    assert_eq!(
        format!("{:?}", Body::new(vec![0xff, 0xfe])),
        "Body(2 bytes)"
    );
}

#[test]
fn timestamps_count_milliseconds_and_print_as_offsets() {
    let t = Timestamp::from_millis(1_500);
    assert_eq!(
        t.saturating_duration_since(Timestamp::from_millis(500)),
        Duration::from_secs(1)
    );
    assert_eq!(
        Timestamp::from_millis(500).saturating_duration_since(t),
        Duration::ZERO
    );
    assert_eq!(t.to_string(), "t+1500ms");
    assert_eq!(format!("{t:?}"), "t+1500ms");
}

#[test]
fn refusals_say_why_in_words() {
    assert_eq!(Refusal::NotOwner.to_string(), "another owner holds the key");
    assert_eq!(Refusal::LeaseLost.to_string(), "the lease ran out");
    assert_eq!(
        Refusal::AlreadyCompleted.to_string(),
        "the key is already completed"
    );
}

#[test]
fn option_rules_hold_exactly_at_their_edges() {
    let ms = Duration::from_millis;
    // Backoff: the cap may equal the first delay, not be below it.
    assert!(
        Options::builder()
            .backoff_initial(ms(50))
            .backoff_max(ms(50))
            .build()
            .is_ok()
    );
    assert!(
        Options::builder()
            .backoff_initial(ms(50))
            .backoff_max(ms(49))
            .build()
            .is_err()
    );
    // Store retries: up to ten.
    assert_eq!(
        Options::builder()
            .store_retries(10)
            .build()
            .unwrap()
            .store_retries(),
        10
    );
    assert!(Options::builder().store_retries(11).build().is_err());
    // Reply timeout: above zero and below the renewal interval (10 s by default); unset, it
    // is 500 ms, or half a shorter renewal interval.
    let reply = |t| Options::builder().reply_timeout(t).build();
    assert_eq!(reply(ms(9_999)).unwrap().reply_timeout(), ms(9_999));
    assert_eq!(
        reply(ms(10_000)),
        Err(idem_core::OptionsError::ReplyTimeoutNotWithinRenewal {
            reply_timeout: ms(10_000),
            renew_every: ms(10_000)
        })
    );
    assert!(reply(Duration::ZERO).is_err());
    assert_eq!(Options::default().reply_timeout(), ms(500));
    let short = Options::builder()
        .lease(Duration::from_secs(1))
        .renew_every(ms(600))
        .build()
        .unwrap();
    assert_eq!(short.reply_timeout(), ms(300));
    // The builder starts from the defaults, and the policy accessors say what was set.
    assert_eq!(Options::builder().build().unwrap(), Options::default());
    let raise = Options::builder()
        .in_flight(idem_core::InFlightPolicy::Raise)
        .build()
        .unwrap();
    assert_eq!(raise.in_flight(), idem_core::InFlightPolicy::Raise);
    assert_eq!(
        Options::default().in_flight(),
        idem_core::InFlightPolicy::Wait
    );
}

#[test]
fn a_stored_result_holds_a_value_only_when_one_was_stored() {
    use idem_core::StoredResult;
    let body = Body::new("ch_1");
    assert_eq!(StoredResult::Value(body.clone()).value(), Some(&body));
    assert_eq!(StoredResult::NotStored.value(), None);
    assert_eq!(StoredResult::Panicked.value(), None);
}

#[test]
fn a_command_kind_prints_as_its_name() {
    use idem_core::CommandKind;
    let printed: Vec<String> = CommandKind::ALL.iter().map(ToString::to_string).collect();
    assert_eq!(printed, ["reserve", "complete", "renew", "release", "read"]);
    for kind in CommandKind::ALL {
        assert_eq!(kind.to_string(), kind.name());
    }
}
