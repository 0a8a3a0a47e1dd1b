//! [`ResponseCodec`]: a captured response stored as its status, its allow-listed headers
//! and its body, and read back.
//!
//! # The stored bytes
//!
//! ```text
//! u8      format version (1)
//! u16     status (big-endian)
//! u16     number of headers
//! per header:
//!   u8    name length, then the lowercase name
//!   u32   value length, then the value bytes
//! ...     the body, to the end
//! ```
//!
//! A 201 with `content-type: application/json`, `location: /charges/ch_1` and a 40-byte
//! body takes 97 bytes. Everything is checked when it is read back: a version, status, name
//! or value that is not valid, or lengths that overrun, is a decode error (answered 500
//! [`StoredResponseUnreadable`](crate::ProblemType::StoredResponseUnreadable)), never a
//! panic.

use std::sync::Arc;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, Response, StatusCode};
use idem::{BoxError, Codec};

use super::{Captured, CapturedBody};

/// The format version written first.
const VERSION: u8 = 1;

/// Stores a response as status, allow-listed headers and body; see the
/// [module docs](self#the-stored-bytes).
#[derive(Debug, Clone)]
pub(crate) struct ResponseCodec {
    stored_headers: Arc<[HeaderName]>,
}

impl ResponseCodec {
    pub(crate) fn new(stored_headers: Arc<[HeaderName]>) -> Self {
        Self { stored_headers }
    }

    /// The stored headers of `headers`, in the allow-list's order, each value once per time
    /// the response carries it.
    fn stored<'a>(
        &'a self,
        headers: &'a HeaderMap,
    ) -> impl Iterator<Item = (&'a HeaderName, &'a HeaderValue)> + 'a {
        self.stored_headers
            .iter()
            .flat_map(move |name| headers.get_all(name).iter().map(move |value| (name, value)))
    }

    /// What a response with this head takes when stored, besides its body: the version,
    /// the status, the header count and each stored header with its lengths. The store
    /// bounds the whole (`Options::max_body_bytes`), so a body is stored only within that
    /// bound less this.
    pub(crate) fn overhead(&self, head: &http::response::Parts) -> usize {
        5 + self
            .stored(&head.headers)
            .map(|(name, value)| 5 + name.as_str().len() + value.len())
            .sum::<usize>()
    }
}

impl<B: Send + 'static> Codec<Captured<B>> for ResponseCodec {
    fn encode(&self, value: &Captured<B>) -> Result<Vec<u8>, BoxError> {
        let data = match &value.body {
            CapturedBody::Complete { data, .. } => data,
            CapturedBody::Overflow { .. } => {
                return Err("the response body is over the limit".into());
            }
            CapturedBody::Failed { .. } => return Err("the response body failed".into()),
        };
        let headers = &value.parts.headers;
        let count =
            u16::try_from(self.stored(headers).count()).map_err(|_| "too many headers to store")?;
        let mut out = Vec::with_capacity(self.overhead(&value.parts) + data.len());
        out.push(VERSION);
        out.extend_from_slice(&value.parts.status.as_u16().to_be_bytes());
        out.extend_from_slice(&count.to_be_bytes());
        for (name, value) in self.stored(headers) {
            let name_len = u8::try_from(name.as_str().len()).map_err(|_| "header name too long")?;
            let value_len = u32::try_from(value.len()).map_err(|_| "header value too long")?;
            out.push(name_len);
            out.extend_from_slice(name.as_str().as_bytes());
            out.extend_from_slice(&value_len.to_be_bytes());
            out.extend_from_slice(value.as_bytes());
        }
        out.extend_from_slice(data);
        Ok(out)
    }

    fn decode(&self, bytes: &[u8]) -> Result<Captured<B>, BoxError> {
        let mut input = Reader { bytes };
        let version = input.take(1)?[0];
        if version != VERSION {
            return Err(format!("unknown stored response format {version}").into());
        }
        let status = StatusCode::from_u16(input.u16()?)?;
        let count = input.u16()?;
        let mut headers = HeaderMap::with_capacity(usize::from(count));
        for _ in 0..count {
            let name_len = usize::from(input.take(1)?[0]);
            let name = HeaderName::from_bytes(input.take(name_len)?)?;
            let value_len = usize::try_from(input.u32()?)?;
            let value = HeaderValue::from_bytes(input.take(value_len)?)?;
            headers.append(name, value);
        }
        let mut response = Response::new(());
        *response.status_mut() = status;
        *response.headers_mut() = headers;
        let (parts, ()) = response.into_parts();
        Ok(Captured {
            parts,
            body: CapturedBody::Complete {
                data: Bytes::copy_from_slice(input.bytes),
                trailers: None,
            },
        })
    }
}

/// Reads the stored bytes, refusing any overrun.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], BoxError> {
        if self.bytes.len() < n {
            return Err("the stored response is truncated".into());
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn u16(&mut self) -> Result<u16, BoxError> {
        let bytes = self.take(2)?;
        Ok(u16::from_be_bytes([bytes[0], bytes[1]]))
    }

    fn u32(&mut self) -> Result<u32, BoxError> {
        let bytes = self.take(4)?;
        Ok(u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    }
}
