//! problem+json rendering (RFC 9457) of any problem type, any detail and any Retry-After:
//! never a panic, always one JSON object with `type`, `title`, `status` and `detail`, the
//! detail byte for byte, the status the response's, and a Retry-After header of digits.

#![no_main]

use idem_http::{Problem, ProblemType};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (u8, Option<u64>, String)| {
    let (kind, retry_after, detail) = input;
    let kind = ProblemType::ALL[usize::from(kind) % ProblemType::ALL.len()];
    let mut problem = Problem::new(kind, detail.clone());
    if let Some(seconds) = retry_after {
        problem = problem.with_retry_after(seconds);
    }
    let body: serde_json::Value =
        serde_json::from_slice(&problem.body()).expect("a problem body is JSON");
    let object = body.as_object().expect("a problem body is an object");
    assert_eq!(object.len(), 4);
    assert_eq!(body["type"], kind.uri());
    assert_eq!(body["title"], kind.title());
    assert_eq!(body["status"], u64::from(kind.status().as_u16()));
    assert_eq!(body["detail"], detail);
    let response = problem.to_response::<Vec<u8>>();
    assert_eq!(response.status(), kind.status());
    assert_eq!(
        response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some(idem_http::PROBLEM_JSON)
    );
    if let Some(seconds) = retry_after {
        let header = response
            .headers()
            .get("retry-after")
            .expect("a Retry-After was asked for");
        assert_eq!(header.to_str().ok(), Some(seconds.to_string().as_str()));
    }
});
