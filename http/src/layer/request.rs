//! What the layer reads from a request: its operation name (from the route, or fixed, and
//! scoped by tenant), its body within the limit, and its fingerprint.

use bytes::Bytes;
use http::header;
use http::request::Parts;
use http_body::Body;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use idem::{BoxError, Fingerprint, Operation, Store};

use super::{Config, Fingerprinting, MAX_OPERATION_LEN, Naming, SCOPABLE};
use crate::problem::{Problem, ProblemType};
use crate::telemetry::Route;

impl<S: Store> Config<S> {
    /// The request's operation: the fixed name, or one made from the method and route;
    /// scoped by tenant when the service gave a tenant function.
    pub(super) fn operation(&self, parts: &Parts, route: &Route) -> Result<Operation, Problem> {
        let operation = match &self.naming {
            Naming::Fixed(operation) => operation.clone(),
            Naming::Route => {
                let max = if self.tenant.is_some() {
                    SCOPABLE
                } else {
                    MAX_OPERATION_LEN
                };
                route.operation(max).map_err(|_| {
                    Problem::new(ProblemType::Internal, "The route could not be named.")
                })?
            }
        };
        let Some(tenant) = &self.tenant else {
            return Ok(operation);
        };
        match tenant(parts, &operation) {
            Some(Ok(scoped)) => Ok(scoped),
            Some(Err(_)) => Err(Problem::new(
                ProblemType::Internal,
                "The operation could not be scoped by tenant.",
            )),
            None => Err(Problem::new(
                ProblemType::TenantMissing,
                "The service could not tell which tenant this request is made for, so its key cannot be scoped; nothing was processed.",
            )),
        }
    }

    /// The request body, read to its end within the limit.
    pub(super) async fn read_body<B>(&self, parts: &Parts, body: B) -> Result<Bytes, Problem>
    where
        B: Body<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        let too_large = || {
            Problem::new(
                ProblemType::BodyTooLarge,
                format!(
                    "The request body is over {} bytes; nothing was processed.",
                    self.max_request_bytes
                ),
            )
        };
        let declared = parts
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.parse::<u64>().ok());
        if declared.is_some_and(|len| len > self.max_request_bytes as u64) {
            return Err(too_large());
        }
        match Limited::new(body, self.max_request_bytes).collect().await {
            Ok(collected) => Ok(collected.to_bytes()),
            Err(error) if error.is::<LengthLimitError>() => Err(too_large()),
            Err(_) => Err(Problem::new(
                ProblemType::BodyUnreadable,
                "The request body could not be read to its end; nothing was processed.",
            )),
        }
    }

    /// The request's fingerprint, as configured.
    pub(super) fn fingerprint(&self, parts: &Parts, body: &Bytes) -> Result<Fingerprint, Problem> {
        let unavailable =
            |detail: String| Problem::new(ProblemType::FingerprintUnavailable, detail);
        let target = parts
            .uri
            .path_and_query()
            .map_or("/", |target| target.as_str());
        let builder = || {
            Fingerprint::builder()
                .field("method", parts.method.as_str())
                .field("target", target)
        };
        let builder = match &self.fingerprint {
            Fingerprinting::Request => return Ok(request_fingerprint(parts, target, body)),
            Fingerprinting::JsonFields(fields) => {
                let json: serde_json::Value = serde_json::from_slice(body).map_err(|error| {
                    unavailable(format!("The request body is not JSON: {error}."))
                })?;
                let named: serde_json::Map<String, serde_json::Value> = fields
                    .iter()
                    .map(|name| {
                        let value = if name.starts_with('/') {
                            json.pointer(name)
                        } else {
                            json.get(name)
                        };
                        (
                            name.clone(),
                            value.cloned().unwrap_or(serde_json::Value::Null),
                        )
                    })
                    .collect();
                builder().field("fields", named)
            }
            Fingerprinting::Custom(fingerprint) => {
                return fingerprint(parts, body).map_err(unavailable);
            }
        };
        builder
            .finish()
            .map_err(|error| unavailable(format!("The request's fingerprint failed: {error}.")))
    }
}

/// The default fingerprint: a SHA-256 over a label, the method, the path and query, and the
/// body's bytes, each but the body preceded by its length (so no two requests share the
/// input): one pass over the body, no copy of it.
fn request_fingerprint(parts: &Parts, target: &str, body: &[u8]) -> Fingerprint {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    hasher.update(b"idem-http request 1\0");
    for field in [parts.method.as_str(), target] {
        hasher.update((field.len() as u64).to_be_bytes());
        hasher.update(field.as_bytes());
    }
    hasher.update(body);
    Fingerprint::from_bytes(hasher.finalize().into())
}

#[cfg(test)]
mod tests {
    use http::{Method, Request};

    use super::*;

    fn fingerprint(method: Method, target: &str, body: &[u8]) -> Fingerprint {
        let (parts, ()) = Request::builder()
            .method(method)
            .uri(target)
            .body(())
            .unwrap()
            .into_parts();
        request_fingerprint(&parts, target, body)
    }

    #[test]
    fn the_request_fingerprint_tells_every_part_apart() {
        let base = fingerprint(Method::POST, "/a", b"bc");
        assert_eq!(base, fingerprint(Method::POST, "/a", b"bc"));
        assert_ne!(base, fingerprint(Method::PATCH, "/a", b"bc"));
        assert_ne!(base, fingerprint(Method::POST, "/a?x=1", b"bc"));
        assert_ne!(base, fingerprint(Method::POST, "/a", b"bd"));
        // Moving bytes across a boundary changes it: lengths frame each part.
        assert_ne!(base, fingerprint(Method::POST, "/ab", b"c"));
        assert_ne!(base, fingerprint(Method::POST, "/a", b""));
    }
}
