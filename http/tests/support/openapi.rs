//! The OpenAPI validator the `openapi` tests run: `openapi-spec-validator` (PyPI), at the path
//! in `IDEM_OPENAPI_VALIDATOR`, by default the virtual environment `.ci/run` installs it in.
//!
//! If it is not there, the tests that need it fail saying so and how to install it: a silent
//! skip would pass a document nothing checked.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The variable that names the validator's executable.
pub const VALIDATOR_VAR: &str = "IDEM_OPENAPI_VALIDATOR";

/// Where `.ci/run` installs it.
pub const DEFAULT_VALIDATOR: &str = "/opt/idem-venv/bin/openapi-spec-validator";

/// The validator's executable; panics, saying how to install it, when it is missing.
pub fn validator() -> PathBuf {
    let path = std::env::var_os(VALIDATOR_VAR)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_VALIDATOR));
    assert!(
        path.is_file(),
        "the OpenAPI validator {} is missing, so the OpenAPI document cannot be validated: \
         install it with `python3 -m venv /opt/idem-venv && /opt/idem-venv/bin/pip install \
         openapi-spec-validator` (as .ci/run does), or set {VALIDATOR_VAR} to an \
         openapi-spec-validator executable",
        path.display()
    );
    path
}

/// Runs the validator on `document` (JSON): `Ok` when it accepts it, else its report.
pub fn validate(document: &str) -> Result<(), String> {
    static FILES: AtomicUsize = AtomicUsize::new(0);
    let validator = validator();
    let file = std::env::temp_dir().join(format!(
        "idem-openapi-{}-{}.json",
        std::process::id(),
        FILES.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&file, document).expect("write the document to a temporary file");
    let output = Command::new(&validator).arg(&file).output();
    let _ = std::fs::remove_file(&file);
    let output = output.unwrap_or_else(|error| {
        panic!("the validator {} did not run: {error}", validator.display())
    });
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}
