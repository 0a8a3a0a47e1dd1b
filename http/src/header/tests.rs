use super::*;

fn strict(value: &[u8]) -> Result<String, KeyHeaderError> {
    parse_key(value, BareToken::Refuse).map(|key| key.as_str().to_owned())
}

fn malformed(value: &[u8]) -> Malformed {
    match strict(value) {
        Err(KeyHeaderError::Malformed { reason, .. }) => reason,
        other => panic!("{:?} parsed as {other:?}", String::from_utf8_lossy(value)),
    }
}

#[test]
fn strings_are_unquoted_and_unescaped() {
    assert_eq!(strict(br#""abc""#).unwrap(), "abc");
    assert_eq!(strict(br#""a\"b\\c""#).unwrap(), r#"a"b\c"#);
    assert_eq!(strict(br#"  "abc"  "#).unwrap(), "abc");
    let uuid = br#""8e03978e-40d5-43e8-bc93-6894a57f9324""#;
    assert_eq!(
        strict(uuid).unwrap(),
        "8e03978e-40d5-43e8-bc93-6894a57f9324"
    );
}

#[test]
fn parameters_of_every_kind_are_parsed_and_ignored() {
    for value in [
        r#""k";a"#,
        r#""k";a=1;b=-2.5"#,
        r#""k"; a=?1;b=tok/en:x"#,
        r#""k";a="s \" s";b=:aGk=:"#,
        r#""k";a=@1700000000;b=%"caf%c3%a9";*c=*"#,
    ] {
        assert_eq!(strict(value.as_bytes()).unwrap(), "k", "{value}");
    }
}

#[test]
fn everything_else_is_malformed() {
    assert_eq!(malformed(b"abc"), Malformed::Unquoted);
    assert_eq!(malformed(b""), Malformed::Unquoted);
    assert_eq!(malformed(b"'abc'"), Malformed::Unquoted);
    assert_eq!(malformed(br#""abc"#), Malformed::Unterminated);
    assert_eq!(malformed(br#""abc\"#), Malformed::Unterminated);
    assert_eq!(malformed(br#""a\bc""#), Malformed::Escape);
    assert_eq!(malformed(b"\"a\tb\""), Malformed::Character);
    assert_eq!(malformed(b"\"a\x7fb\""), Malformed::Character);
    assert_eq!(malformed("\"caf\u{e9}\"".as_bytes()), Malformed::Character);
    assert_eq!(malformed(br#""a" "b""#), Malformed::TrailingCharacters);
    assert_eq!(malformed(br#""a", "b""#), Malformed::TrailingCharacters);
    assert_eq!(malformed(br#""a"x"#), Malformed::TrailingCharacters);
    assert_eq!(malformed(b"\"a\"\t"), Malformed::TrailingCharacters);
    for parameter in [
        ";",
        ";A=1",
        ";a=",
        ";a=1.2345",
        ";a=1234567890123.1",
        ";a=1234567890123456",
        ";a=?2",
        ";a=:abc",
        ";a=%\"%C3\"",
        ";a=(1)",
        ";1a",
    ] {
        let value = format!("\"k\"{parameter}");
        assert_eq!(malformed(value.as_bytes()), Malformed::Parameter, "{value}");
    }
}

#[test]
fn a_string_that_is_no_valid_key_is_refused_as_a_key() {
    assert_eq!(
        strict(br#""""#),
        Err(KeyHeaderError::InvalidKey(KeyError::Empty))
    );
    assert!(matches!(
        strict(br#""a b""#),
        Err(KeyHeaderError::InvalidKey(KeyError::InvalidCharacter {
            found: ' ',
            ..
        }))
    ));
    let long = format!("\"{}\"", "k".repeat(256));
    assert_eq!(
        strict(long.as_bytes()),
        Err(KeyHeaderError::InvalidKey(KeyError::TooLong { len: 256 }))
    );
    let longest = format!("\"{}\"", "k".repeat(255));
    assert_eq!(strict(longest.as_bytes()).unwrap().len(), 255);
}

#[test]
fn bare_tokens_are_taken_verbatim_by_default_and_refused_when_strict() {
    assert_eq!(BareToken::default(), BareToken::Accept);
    let accept = |value: &[u8]| parse_key(value, BareToken::default());
    let uuid = "8e03978e-40d5-43e8-bc93-6894a57f9324";
    assert_eq!(
        accept(uuid.as_bytes()).unwrap(),
        accept(format!("\"{uuid}\"").as_bytes()).unwrap(),
        "a bare and a quoted key are one key"
    );
    assert_eq!(accept(br#"a"b"#).unwrap(), accept(br#""a\"b""#).unwrap());
    assert_eq!(malformed(uuid.as_bytes()), Malformed::Unquoted);
    assert_eq!(accept(b"abc").unwrap().as_str(), "abc");
    assert_eq!(accept(br#""abc""#).unwrap().as_str(), "abc");
    assert_eq!(accept(b"a;b=1").unwrap().as_str(), "a;b=1");
    assert!(matches!(
        accept(br#""abc"#),
        Err(KeyHeaderError::Malformed { .. })
    ));
    assert!(matches!(accept(b"a b"), Err(KeyHeaderError::InvalidKey(_))));
    assert!(matches!(
        accept(b""),
        Err(KeyHeaderError::InvalidKey(KeyError::Empty))
    ));
    assert!(matches!(
        accept(b"caf\xc3\xa9"),
        Err(KeyHeaderError::InvalidKey(_))
    ));
    assert!(matches!(
        accept(b"a\xff"),
        Err(KeyHeaderError::Malformed { .. })
    ));
}

#[test]
fn a_repeated_header_is_refused() {
    let mut headers = HeaderMap::new();
    assert_eq!(key_from_headers(&headers, BareToken::Refuse), Ok(None));
    headers.append(IDEMPOTENCY_KEY, "\"a\"".parse().unwrap());
    assert_eq!(
        key_from_headers(&headers, BareToken::Refuse)
            .unwrap()
            .unwrap()
            .as_str(),
        "a"
    );
    headers.append(IDEMPOTENCY_KEY, "\"a\"".parse().unwrap());
    assert!(matches!(
        key_from_headers(&headers, BareToken::Refuse),
        Err(KeyHeaderError::Malformed {
            reason: Malformed::Repeated,
            ..
        })
    ));
}
