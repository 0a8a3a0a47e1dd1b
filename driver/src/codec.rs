//! How a call's value is kept in the store: encoded to bytes when its action succeeds, and
//! decoded when an identical request replays it.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::store::BoxError;

/// Encodes a call's value for the store and decodes a stored one.
///
/// [`Json`] is the default. A codec must decode what it encoded, byte for byte the same value,
/// for as long as records it wrote are retained: a service that changes the shape of its
/// values should change the operation's name (or keep decoding the old shape), since a replay
/// whose bytes no longer decode is answered [`Error::Decode`](crate::Error::Decode).
pub trait Codec<T>: Send + Sync + 'static {
    /// The bytes stored for `value`. An error completes the record without a body (the
    /// effect happened; rule 9): identical requests are answered "result not stored".
    fn encode(&self, value: &T) -> Result<Vec<u8>, BoxError>;

    /// The value stored as `bytes`.
    fn decode(&self, bytes: &[u8]) -> Result<T, BoxError>;
}

/// Values stored as JSON (`serde_json`): the default codec.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Json;

impl<T: Serialize + DeserializeOwned> Codec<T> for Json {
    fn encode(&self, value: &T) -> Result<Vec<u8>, BoxError> {
        Ok(serde_json::to_vec(value)?)
    }

    fn decode(&self, bytes: &[u8]) -> Result<T, BoxError> {
        Ok(serde_json::from_slice(bytes)?)
    }
}
