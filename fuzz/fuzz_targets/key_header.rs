//! The `Idempotency-Key` header parser on any bytes, under both bare-token rules: it never
//! panics; a key it reads is a valid key that reads back the same once written as a quoted
//! String; a refusal is rendered as a problem+json body that is valid JSON.

#![no_main]

use idem_core::Key;
use idem_http::Problem;
use idem_http::header::{BareToken, parse_key};
use libfuzzer_sys::fuzz_target;

/// `key` as an RFC 9651 String: quoted, `"` and `\` escaped.
fn quoted(key: &Key) -> Vec<u8> {
    let mut out = vec![b'"'];
    for byte in key.as_str().bytes() {
        if byte == b'"' || byte == b'\\' {
            out.push(b'\\');
        }
        out.push(byte);
    }
    out.push(b'"');
    out
}

fuzz_target!(|value: &[u8]| {
    for bare in [BareToken::Refuse, BareToken::Accept] {
        match parse_key(value, bare) {
            Ok(key) => {
                // What was read is a key idem takes as it is (I12: never rewritten).
                assert_eq!(Key::new(key.as_str()).as_ref(), Ok(&key));
                // Written back as a String, it reads as the same key under either rule.
                let written = quoted(&key);
                assert_eq!(parse_key(&written, BareToken::Refuse).as_ref(), Ok(&key));
                // A value is read as a String when its first byte past leading spaces is `"`.
                let string = value.iter().find(|byte| **byte != b' ') == Some(&b'"');
                if !string {
                    // Otherwise it is a bare token (accepted only under `Accept`), and the
                    // key is the token verbatim.
                    assert_eq!(bare, BareToken::Accept);
                    assert_eq!(key.as_str().as_bytes(), value);
                }
            }
            Err(error) => {
                let problem = Problem::from_key_error(&error);
                let body: serde_json::Value =
                    serde_json::from_slice(&problem.body()).expect("a problem body is JSON");
                assert_eq!(body["status"], u64::from(problem.status().as_u16()));
                assert_eq!(body["detail"], problem.detail());
            }
        }
    }
});
