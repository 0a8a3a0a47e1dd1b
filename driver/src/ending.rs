//! [`Ending`]: how an action says it ended, when it can tell a failure that did nothing from
//! one whose effect is unknown.

/// How an action ended, for [`OperationHandle::execute_with_ending`] and
/// [`OperationHandle::execute_in_transaction_with_ending`].
///
/// An action that returns `Result<T, E>` says two things: it succeeded (recorded and
/// replayed), or it failed and nothing happened (the key is released and a retry runs it
/// again, `I5`). Some actions know a third: they failed *after* their effect may have begun
/// (a provider call that timed out mid-flight; an HTTP handler whose response was made by a
/// timeout or a panic catcher that cut it off). Releasing the key then would let the retry
/// make a second effect, the result cache's bug in another form; so an `Unknown` ending is
/// recorded as "outcome unknown", exactly as a panic is (rule 11): an identical retry gets
/// [`Error::OutcomeUnknown`](crate::Error::OutcomeUnknown), never a second run.
///
/// [`OperationHandle::execute_with_ending`]: crate::OperationHandle::execute_with_ending
/// [`OperationHandle::execute_in_transaction_with_ending`]: crate::OperationHandle::execute_in_transaction_with_ending
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending<T, E> {
    /// The action succeeded: its value is recorded and replayed (`I3`, `I8`).
    Succeeded(T),
    /// The action failed before any effect: the key is released (`I5`), and the caller gets
    /// [`Error::Action`](crate::Error::Action).
    Failed(E),
    /// The action failed, and whether its effect happened is unknown: the key is recorded
    /// as "outcome unknown" and never released (rule 11), and the caller gets
    /// [`Error::ActionUnknown`](crate::Error::ActionUnknown). In a transactional call the
    /// action's writes roll back, so nothing happened: the key is released as for
    /// [`Failed`](Self::Failed).
    Unknown(E),
}

impl<T, E> From<Result<T, E>> for Ending<T, E> {
    /// `Ok` succeeded, `Err` failed before any effect.
    fn from(result: Result<T, E>) -> Self {
        match result {
            Ok(value) => Ending::Succeeded(value),
            Err(error) => Ending::Failed(error),
        }
    }
}

impl<T, E> Ending<T, E> {
    /// The same ending with its value mapped.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Ending<U, E> {
        match self {
            Ending::Succeeded(value) => Ending::Succeeded(f(value)),
            Ending::Failed(error) => Ending::Failed(error),
            Ending::Unknown(error) => Ending::Unknown(error),
        }
    }
}
