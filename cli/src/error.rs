//! Why a command failed, and the exit code it ends with.

use idem::admin::AdminError;
use thiserror::Error;

/// Why the tool could not do what it was asked.
#[derive(Debug, Error)]
pub enum CliError {
    /// The command line or an input is not valid (no store named, a bad key).
    #[error("{0}")]
    Input(String),
    /// The store could not be reached.
    #[error("{0}")]
    Connect(String),
    /// The store failed during the command.
    #[error(transparent)]
    Admin(#[from] AdminError),
    /// Writing the output or reading the answer to a prompt failed.
    #[error("terminal: {0}")]
    Io(#[from] std::io::Error),
}

impl From<idem::StoreError> for CliError {
    fn from(error: idem::StoreError) -> Self {
        CliError::Admin(AdminError::Store(error))
    }
}

/// The process's exit codes: 0 done, 1 failed (nothing known changed unless the message
/// says so), 2 refused or found unhealthy (nothing changed).
pub mod exit {
    /// Done.
    pub const OK: u8 = 0;
    /// An error: bad input, a store that failed or could not be reached.
    pub const FAILED: u8 = 1;
    /// Refused (a live lease, an unconfirmed prompt) or a failed health check.
    pub const REFUSED: u8 = 2;
}
