//! Passing a call's fence on to an HTTP provider (MODEL.md `F1`): the `Fencing-Token` header.
//!
//! No standard names a header for a fencing token; idem sends it as `Fencing-Token`, the
//! fence's decimal digits, beside the downstream key as the provider's `Idempotency-Key`
//! (`D1`). A provider that honours it keeps, per resource (the downstream key will do), the
//! highest fence it has applied, refuses a request whose fence is below it (`409`, and no
//! `Retry-After`: retrying cannot help a stale holder), and applies the others, a fence equal
//! to the highest being the same holder's request again. [`fencing_token`] is what a handler
//! sends; [`FencingToken::from_headers`] what such a provider reads. `examples/provider.rs`
//! is one.

use http::{HeaderMap, HeaderName, HeaderValue};
use idem::Fence;

/// The header that carries a fence to a provider: `Fencing-Token`.
pub const FENCING_TOKEN: HeaderName = HeaderName::from_static("fencing-token");

/// The header value for `fence`: its decimal digits.
///
/// ```
/// use idem::Fence;
///
/// let fence = Fence::new(17).unwrap();
/// assert_eq!(idem_http::fencing_token(fence), "17");
/// ```
pub fn fencing_token(fence: Fence) -> HeaderValue {
    HeaderValue::from(fence.get())
}

/// The fence a request carries in its `Fencing-Token`, for a provider that honours fences.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FencingToken(pub Fence);

/// A `Fencing-Token` header that is not one fence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FencingTokenError {
    /// The header was sent more than once.
    #[error("the Fencing-Token header is sent {0} times; send it once")]
    Repeated(usize),
    /// The value is not a fence: decimal digits, from 1 to 2^63 - 1.
    #[error("the Fencing-Token header is not a fence: {0}")]
    Invalid(#[from] idem::ParseFenceError),
}

impl FencingToken {
    /// The request's fence: `None` without the header, an error for a value that is not one
    /// fence.
    pub fn from_headers(headers: &HeaderMap) -> Result<Option<Self>, FencingTokenError> {
        let mut values = headers.get_all(FENCING_TOKEN).iter();
        let Some(value) = values.next() else {
            return Ok(None);
        };
        let more = values.count();
        if more > 0 {
            return Err(FencingTokenError::Repeated(more + 1));
        }
        let text = value
            .to_str()
            .map_err(|_| FencingTokenError::Invalid(idem::ParseFenceError::NotDigits))?;
        Ok(Some(Self(text.parse()?)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(values: &[&str]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for value in values {
            map.append(FENCING_TOKEN, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn a_fence_travels_as_its_digits_and_back() {
        for n in [1, 42, i64::MAX as u64] {
            let fence = Fence::new(n).unwrap();
            let sent = headers(&[fencing_token(fence).to_str().unwrap()]);
            assert_eq!(
                FencingToken::from_headers(&sent),
                Ok(Some(FencingToken(fence)))
            );
        }
        assert_eq!(FencingToken::from_headers(&HeaderMap::new()), Ok(None));
    }

    #[test]
    fn a_header_that_is_not_one_fence_is_refused() {
        assert_eq!(
            FencingToken::from_headers(&headers(&["1", "2"])),
            Err(FencingTokenError::Repeated(2))
        );
        for bad in ["", "0", "-1", "+1", "1.5", "abc", "9223372036854775808"] {
            assert!(
                matches!(
                    FencingToken::from_headers(&headers(&[bad])),
                    Err(FencingTokenError::Invalid(_))
                ),
                "{bad:?}"
            );
        }
        let mut opaque = HeaderMap::new();
        opaque.insert(FENCING_TOKEN, HeaderValue::from_bytes(b"\xff").unwrap());
        assert!(FencingToken::from_headers(&opaque).is_err());
    }
}
