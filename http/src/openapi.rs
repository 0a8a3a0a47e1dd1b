//! The layer's contract in an OpenAPI document (utoipa), with the `openapi` feature.
//!
//! A client of a route under [`IdempotencyLayer`] has to know three things the handler's own
//! description does not say: that it may send an `Idempotency-Key` (and whether it must),
//! which answers the layer makes itself instead of the handler, and how to tell a replayed
//! response from the first. [`IdempotencyDoc`] writes them into a [`utoipa`] document, for
//! the operations the layer protects:
//!
//! - **the `Idempotency-Key` header parameter** (`in: header`, a string), required or not as
//!   the layer is configured ([`IdempotencyLayerBuilder::require_key`]), described as what
//!   it is on the wire: a Structured Field String (RFC 9651) holding 1 to 255 visible ASCII
//!   characters, and what it guarantees: one run per key, every retry answered the first
//!   response;
//! - **the problem responses**, each `application/problem+json` with the RFC 9457 `Problem`
//!   schema (a component: `type`, `title`, `status` and `detail`, the members every idem
//!   problem carries), their descriptions listing the [`ProblemType`]s of that status:
//!   400 (the key is missing, malformed or invalid, or the body cannot be fingerprinted),
//!   409 with a `Retry-After` header (an identical request is still being processed), 413
//!   (the body is over the layer's limit), 422 (the key was used for another request), 500
//!   (the key's outcome is unknown or its record unreadable: never a second run), 503 with
//!   `Retry-After` (the store is down and the layer fails closed, the service is shutting
//!   down or overloaded, or a transaction was rolled back), and 403 when keys are scoped by
//!   tenant ([`IdempotencyLayerBuilder::tenant`]);
//! - **the replay header** (`Idempotent-Replayed: true` by default,
//!   [`IdempotencyLayerBuilder::replay_header`]) on every response the operation documents
//!   that the layer records and so replays: every `2XX`, `3XX` and `4XX` but 401, 407, 408
//!   and 429 ([`Disposition::of_status`]).
//!
//! The layer's settings come from the layer itself ([`IdempotencyDoc::for_layer`]), so the
//! document cannot say the key is optional while the service refuses a request without one;
//! a document for a handler that calls idem itself (through the `IdempotencyKey` extractor)
//! starts from [`IdempotencyDoc::new`].
//!
//! ```
//! use axum::{Router, routing::post};
//! use http::Method;
//! use idem::{Coordinator, MemoryStore, Options};
//! use idem_http::IdempotencyLayer;
//! use idem_http::openapi::IdempotencyDoc;
//! use utoipa::OpenApi;
//!
//! /// Charges a card once per Idempotency-Key.
//! #[utoipa::path(post, path = "/charges", responses((status = 201, description = "The charge")))]
//! async fn charge() {}
//!
//! #[derive(OpenApi)]
//! #[openapi(paths(charge))]
//! struct ApiDoc;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let layer = IdempotencyLayer::builder(Coordinator::new(MemoryStore::new(), Options::default()))
//!     .require_key(false)
//!     .build()?;
//! let app: Router = Router::new().route("/charges", post(charge).layer(layer.clone()));
//!
//! let mut document = ApiDoc::openapi();
//! IdempotencyDoc::for_layer(&layer)
//!     .operation(Method::POST, "/charges")
//!     .apply(&mut document)?;
//!
//! let charge = document.paths.get_path_item("/charges").and_then(|item| item.post.as_ref());
//! let responses = &charge.expect("the operation").responses.responses;
//! assert!(responses.contains_key("409") && responses.contains_key("422"));
//! # Ok(())
//! # }
//! ```
//!
//! # Operations not in the document
//!
//! [`IdempotencyDoc::apply`] checks every operation it is given before it changes anything:
//! an operation the document does not have, a method the layer does not cover, or a
//! response it would change that is a `$ref`, is an [`OpenApiError`], and the document is
//! left as it was. [`utoipa::Modify::modify`], which cannot return an error, does the same
//! and logs the error (`tracing`, level `error`) instead: use `apply` where a wrong name must
//! stop the program (in a test, or when the service starts).
//!
//! Applying twice changes nothing more: the header parameter, the problem content, the
//! headers and the schema are replaced by themselves.
//!
//! [`IdempotencyLayer`]: crate::IdempotencyLayer
//! [`IdempotencyLayerBuilder::require_key`]: crate::IdempotencyLayerBuilder::require_key
//! [`IdempotencyLayerBuilder::tenant`]: crate::IdempotencyLayerBuilder::tenant
//! [`IdempotencyLayerBuilder::replay_header`]: crate::IdempotencyLayerBuilder::replay_header

use std::fmt::Write as _;

use http::header::HeaderName;
use http::{Method, StatusCode};
use thiserror::Error;
use utoipa::Modify;
use utoipa::openapi::path::{Operation, Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::{
    Components, Content, Header, ObjectBuilder, OpenApi, PathItem, Ref, RefOr, Required, Response,
    Schema, SchemaFormat, Type,
};

use crate::disposition::Disposition;
use crate::header::{BareToken, IDEMPOTENCY_KEY};
use crate::layer::{IDEMPOTENT_REPLAYED, IdempotencyLayer};
use crate::problem::{PROBLEM_JSON, ProblemType, RetryAfter};

/// The name of the RFC 9457 problem schema in the document's components, by default.
pub const PROBLEM_SCHEMA: &str = "Problem";

/// The header parameter's name as documents spell it.
const KEY_PARAMETER: &str = "Idempotency-Key";
/// An example key on the wire: a Structured Field String.
const KEY_EXAMPLE: &str = "\"8e03978e-40d5-43e8-bc93-6894a57f9324\"";

/// Why [`IdempotencyDoc::apply`] left a document unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum OpenApiError {
    /// No operation was named: there is nothing to describe.
    #[error("no operation was named for the idempotency description")]
    NoOperations,
    /// The document has no such operation (the path is the document's template, such as
    /// `/charges/{id}`, and is compared exactly).
    #[error("the document has no operation {method} {path}")]
    OperationMissing {
        /// The method named.
        method: Method,
        /// The path named.
        path: String,
    },
    /// The layer does not cover the method: a request with it passes the layer untouched,
    /// so the operation has none of the layer's answers.
    #[error("the layer does not cover {method} (named for {path}): it passes through unprotected")]
    MethodNotCovered {
        /// The method named.
        method: Method,
        /// The path named.
        path: String,
    },
    /// A response of the operation that would be changed is a `$ref` to a shared response:
    /// changing it would change every operation that refers to it.
    #[error(
        "the {status} response of {method} {path} is a reference ($ref); write it inline to \
         have the layer's answers added to it"
    )]
    ResponseReference {
        /// The method of the operation.
        method: Method,
        /// The path of the operation.
        path: String,
        /// The response's status key (`"400"`, `"2XX"`).
        status: String,
    },
    /// The document's components already hold another schema under the problem schema's
    /// name; name idem's with [`IdempotencyDoc::problem_schema_name`].
    #[error(
        "the document already has a schema named {0} that is not the problem schema; \
         choose another name for it"
    )]
    SchemaTaken(String),
}

/// Describes the `Idempotency-Key` contract of the operations an [`IdempotencyLayer`]
/// protects in an OpenAPI document; see the [module docs](self).
///
/// A [`utoipa::Modify`]: build it from the layer ([`for_layer`](Self::for_layer)) or from
/// the layer's defaults ([`new`](Self::new)), name the operations, and
/// [`apply`](Self::apply) it to the document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyDoc {
    methods: Vec<Method>,
    key_required: bool,
    bare: BareToken,
    tenant: bool,
    replay_header: HeaderName,
    retry_after: Option<RetryAfter>,
    problem_schema: String,
    operations: Vec<(Method, String)>,
}

impl Default for IdempotencyDoc {
    fn default() -> Self {
        Self::new()
    }
}

impl IdempotencyDoc {
    /// The description of a layer with every default ([`IdempotencyLayer::builder`]):
    /// methods `POST` and `PATCH`, the key required, bare tokens accepted, no tenant scope,
    /// `Idempotent-Replayed`, and `Retry-After` described without its value. No operation
    /// yet.
    pub fn new() -> Self {
        Self {
            methods: vec![Method::POST, Method::PATCH],
            key_required: true,
            bare: BareToken::default(),
            tenant: false,
            replay_header: IDEMPOTENT_REPLAYED,
            retry_after: None,
            problem_schema: PROBLEM_SCHEMA.to_owned(),
            operations: Vec::new(),
        }
    }

    /// The description of `layer` as it is configured: its methods, whether it requires the
    /// key, how it reads a bare token, whether it scopes keys by tenant, its replay header,
    /// and its `Retry-After` values. No operation yet: a layer does not know the routes it
    /// is put on.
    pub fn for_layer<S>(layer: &IdempotencyLayer<S>) -> Self {
        layer.describe()
    }

    /// The methods the layer covers (default `POST`, `PATCH`): naming an operation of
    /// another method is [`OpenApiError::MethodNotCovered`].
    #[must_use]
    pub fn methods(mut self, methods: impl IntoIterator<Item = Method>) -> Self {
        self.methods = methods.into_iter().collect();
        self
    }

    /// Whether the layer requires the key (default `true`): the parameter's `required`.
    /// Without it, a request with no key runs unprotected, and a request with one is
    /// protected.
    #[must_use]
    pub fn require_key(mut self, required: bool) -> Self {
        self.key_required = required;
        self
    }

    /// How the layer reads an unquoted key (default [`BareToken::Accept`]), for the
    /// parameter's description.
    #[must_use]
    pub fn bare_token(mut self, bare: BareToken) -> Self {
        self.bare = bare;
        self
    }

    /// Whether the layer scopes keys by tenant (default `false`): if so, the 403 it answers
    /// a request without a tenant is documented.
    #[must_use]
    pub fn tenant_scoped(mut self, scoped: bool) -> Self {
        self.tenant = scoped;
        self
    }

    /// The header a replay carries (default `Idempotent-Replayed`).
    #[must_use]
    pub fn replay_header(mut self, name: HeaderName) -> Self {
        self.replay_header = name;
        self
    }

    /// The `Retry-After` values the layer answers with (computed from the coordinator's
    /// options, [`RetryAfter::from_options`]), written into the headers' descriptions.
    #[must_use]
    pub fn retry_after(mut self, retry_after: RetryAfter) -> Self {
        self.retry_after = Some(retry_after);
        self
    }

    /// The name of the problem schema in the document's components (default
    /// [`PROBLEM_SCHEMA`], `Problem`), for a document that has a schema of its own by that
    /// name.
    #[must_use]
    pub fn problem_schema_name(mut self, name: impl Into<String>) -> Self {
        self.problem_schema = name.into();
        self
    }

    /// An operation the layer protects: its method and its path as the document writes it
    /// (`/charges`, `/orders/{id}`). Naming one twice is naming it once.
    #[must_use]
    pub fn operation(mut self, method: Method, path: impl Into<String>) -> Self {
        let operation = (method, path.into());
        if !self.operations.contains(&operation) {
            self.operations.push(operation);
        }
        self
    }

    /// Several operations, as [`operation`](Self::operation).
    #[must_use]
    pub fn operations<P: Into<String>>(
        self,
        operations: impl IntoIterator<Item = (Method, P)>,
    ) -> Self {
        operations
            .into_iter()
            .fold(self, |doc, (method, path)| doc.operation(method, path))
    }

    /// The RFC 9457 problem schema: an object with `type` (a URI, a [`ProblemType::uri`]),
    /// `title`, `status` and `detail`, all four present in every problem idem-http answers.
    /// Other members are allowed, as RFC 9457 lets a problem carry extensions. For a
    /// service's own problem responses, refer to it by the name it has in the document.
    pub fn problem_schema() -> Schema {
        let string = |description: &str| {
            ObjectBuilder::new()
                .schema_type(Type::String)
                .description(Some(description))
        };
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .title(Some("Problem"))
            .description(Some(
                "A problem details object (RFC 9457): why the request was refused, and \
                 whether retrying it with the same Idempotency-Key can succeed.",
            ))
            .property(
                "type",
                string(
                    "The problem type's URI, which identifies it; it points to the \
                     type's documentation.",
                )
                .format(Some(SchemaFormat::Custom("uri".to_owned()))),
            )
            .required("type")
            .property(
                "title",
                string("A short summary of the problem type, the same for every occurrence."),
            )
            .required("title")
            .property(
                "status",
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .format(Some(SchemaFormat::KnownFormat(
                        utoipa::openapi::KnownFormat::Int32,
                    )))
                    .minimum(Some(100))
                    .maximum(Some(599))
                    .description(Some("The HTTP status code of the response.")),
            )
            .required("status")
            .property(
                "detail",
                string("What is wrong with this request, and what to do about it."),
            )
            .required("detail")
            .build()
            .into()
    }

    /// Describes the named operations in `openapi`: the header parameter, the problem
    /// responses, the replay header and the problem schema (see the [module docs](self)).
    ///
    /// Every operation is checked first, and on an error nothing is changed. A parameter
    /// `Idempotency-Key` (in the header, inline or a local `$ref`) the operation already has
    /// is replaced; a response it already documents for one of the layer's statuses keeps
    /// its content and gains the `application/problem+json` content and headers.
    pub fn apply(&self, openapi: &mut OpenApi) -> Result<(), OpenApiError> {
        if self.operations.is_empty() {
            return Err(OpenApiError::NoOperations);
        }
        let problem = RefOr::T(Self::problem_schema());
        if let Some(existing) = openapi
            .components
            .as_ref()
            .and_then(|components| components.schemas.get(&self.problem_schema))
            && *existing != problem
        {
            return Err(OpenApiError::SchemaTaken(self.problem_schema.clone()));
        }
        let statuses = self.problem_statuses();
        for (method, path) in &self.operations {
            if !self.methods.contains(method) {
                return Err(OpenApiError::MethodNotCovered {
                    method: method.clone(),
                    path: path.clone(),
                });
            }
            let operation = openapi
                .paths
                .paths
                .get(path)
                .and_then(|item| operation_of(item, method))
                .ok_or_else(|| OpenApiError::OperationMissing {
                    method: method.clone(),
                    path: path.clone(),
                })?;
            for (status, response) in &operation.responses.responses {
                let ours = statuses.iter().any(|(code, _)| code == status);
                if ours && matches!(response, RefOr::Ref(_)) {
                    return Err(OpenApiError::ResponseReference {
                        method: method.clone(),
                        path: path.clone(),
                        status: status.clone(),
                    });
                }
            }
        }

        let parameters = openapi
            .components
            .as_ref()
            .map(|components| components.parameters.clone())
            .unwrap_or_default();
        for (method, path) in &self.operations {
            let Some(operation) = openapi
                .paths
                .paths
                .get_mut(path)
                .and_then(|item| operation_of_mut(item, method))
            else {
                continue;
            };
            self.describe_operation(operation, &statuses, &parameters);
        }
        openapi
            .components
            .get_or_insert_with(Components::new)
            .schemas
            .insert(self.problem_schema.clone(), problem);
        Ok(())
    }

    /// The statuses the layer answers with a problem, and the problem types of each.
    fn problem_statuses(&self) -> Vec<(String, Vec<ProblemType>)> {
        let mut statuses: Vec<(String, Vec<ProblemType>)> = Vec::new();
        for kind in ProblemType::ALL {
            let possible = match kind {
                ProblemType::KeyMissing => self.key_required,
                ProblemType::TenantMissing => self.tenant,
                _ => true,
            };
            if !possible {
                continue;
            }
            let status = kind.status().as_u16().to_string();
            match statuses.iter_mut().find(|(code, _)| *code == status) {
                Some((_, kinds)) => kinds.push(kind),
                None => statuses.push((status, vec![kind])),
            }
        }
        statuses
    }

    fn describe_operation(
        &self,
        operation: &mut Operation,
        statuses: &[(String, Vec<ProblemType>)],
        parameters: &std::collections::BTreeMap<String, RefOr<Parameter>>,
    ) {
        let parameter_list = operation.parameters.get_or_insert_with(Vec::new);
        parameter_list.retain(|parameter| !is_key_parameter(parameter, parameters));
        parameter_list.push(RefOr::T(self.key_parameter()));

        // The responses the operation documents itself (not those an earlier apply added)
        // that the layer records, and so replays.
        let replay = self.replay_header_object();
        for (status, response) in &mut operation.responses.responses {
            let RefOr::T(response) = response else {
                continue;
            };
            let added = statuses.iter().any(|(code, kinds)| {
                code == status
                    && response
                        .content
                        .keys()
                        .all(|content| content == PROBLEM_JSON)
                    && response.description == self.response_description(status, kinds)
            });
            if replayed(status) && !added {
                response
                    .headers
                    .insert(self.replay_header_name(), RefOr::T(replay.clone()));
            }
        }

        for (status, kinds) in statuses {
            let description = self.response_description(status, kinds);
            let entry = operation
                .responses
                .responses
                .entry(status.clone())
                .or_insert_with(|| RefOr::T(Response::new(description.clone())));
            let RefOr::T(response) = entry else {
                continue;
            };
            if response.description.is_empty() {
                response.description = description;
            } else if !response.description.contains(&description) {
                response.description = format!("{}\n\n{description}", response.description);
            }
            response.content.insert(
                PROBLEM_JSON.to_owned(),
                RefOr::T(Content::new(Some(Ref::from_schema_name(
                    self.problem_schema.clone(),
                )))),
            );
            if let Some(header) = self.retry_after_header(kinds) {
                response
                    .headers
                    .insert("Retry-After".to_owned(), RefOr::T(header));
            }
        }
    }

    /// The `Idempotency-Key` header parameter.
    fn key_parameter(&self) -> Parameter {
        let mut description = String::from(
            "Names this request, so that it is safe to retry: the first request with a key \
             is processed once, and every retry with the same key and the same request is \
             answered that first response, even while the first is still being processed, \
             instead of being processed again. A Structured Field String (RFC 9651): 1 to \
             255 visible ASCII characters in double quotes, never trimmed, such as \
             `\"8e03978e-40d5-43e8-bc93-6894a57f9324\"`; use a new one (a UUID) for each new \
             request, and the same one for its retries.",
        );
        description.push_str(match self.bare {
            BareToken::Accept => {
                " An unquoted key is taken verbatim: `abc` and `\"abc\"` are the same key."
            }
            BareToken::Refuse => " An unquoted key is refused (400).",
        });
        description.push_str(if self.key_required {
            " Required: a request without it is refused (400) and nothing is processed."
        } else {
            " Optional: a request without it is processed as it comes, unprotected, and a \
             retry of it may be processed again."
        });
        ParameterBuilder::new()
            .name(KEY_PARAMETER)
            .parameter_in(ParameterIn::Header)
            .required(if self.key_required {
                Required::True
            } else {
                Required::False
            })
            .description(Some(description))
            .schema(Some(
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .min_length(Some(1)),
            ))
            .example(Some(serde_json::Value::from(KEY_EXAMPLE)))
            .build()
    }

    /// The replay header's name as documents spell it (`Idempotent-Replayed`).
    fn replay_header_name(&self) -> String {
        if self.replay_header == IDEMPOTENT_REPLAYED {
            "Idempotent-Replayed".to_owned()
        } else {
            self.replay_header.as_str().to_owned()
        }
    }

    fn replay_header_object(&self) -> Header {
        let mut header = Header::new(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some(["true"])),
        );
        header.description = Some(
            "Present, set to `true`, when this response is not the request's own but the \
             recorded response of the first request with this Idempotency-Key: the request \
             was not processed again. A replay repeats the first response's status, body and \
             stored headers."
                .to_owned(),
        );
        header
    }

    /// `Retry-After`, for the statuses whose problems carry it.
    fn retry_after_header(&self, kinds: &[ProblemType]) -> Option<Header> {
        let (seconds, why) = if kinds.contains(&ProblemType::InProgress) {
            (
                self.retry_after.map(|retry| retry.in_progress),
                "how long the service itself pauses between two looks at a key in use",
            )
        } else if kinds.contains(&ProblemType::StoreUnavailable) {
            (
                self.retry_after.map(|retry| retry.unavailable),
                "how long one request spends trying the idempotency store",
            )
        } else {
            return None;
        };
        let mut description = format!(
            "Seconds to wait before retrying with the same Idempotency-Key ({why}), at least 1"
        );
        if let Some(seconds) = seconds {
            let _ = write!(description, "; {seconds} with this service's settings");
        }
        description.push('.');
        let mut header = Header::new(
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .minimum(Some(1)),
        );
        header.description = Some(description);
        Some(header)
    }

    /// What a status means when the layer answers it, and the problem types it carries.
    fn response_description(&self, status: &str, kinds: &[ProblemType]) -> String {
        let summary = match status {
            "400" => {
                "The Idempotency-Key is missing (where it is required), malformed or not a \
                 valid key, or the request body could not be read or fingerprinted. Nothing \
                 was processed; fix the request before retrying it."
            }
            "403" => {
                "The service scopes keys by tenant and could not tell this request's tenant. \
                 Nothing was processed."
            }
            "409" => {
                "An identical request with this Idempotency-Key is still being processed. \
                 This request was not processed; retry it after `Retry-After` seconds with \
                 the same key to get the first request's response."
            }
            "413" => "The request body is over the service's limit. Nothing was processed.",
            "422" => {
                "This Idempotency-Key was already used for a different request (another \
                 method, target or body), which is still being processed or done. This \
                 request was not processed; send a new request with a new key."
            }
            "500" => {
                "The outcome of an identical request with this Idempotency-Key is unknown \
                 (it ended abnormally) or was not stored, or the key's record cannot be read. \
                 The request is not processed again under this key, and a retry gets the \
                 same answer."
            }
            "503" => {
                "The service could not process the request now: its idempotency store is \
                 unavailable, it is shutting down or overloaded, or the request's writes \
                 were rolled back. Retry after `Retry-After` seconds with the same \
                 Idempotency-Key: the request is processed once, or its recorded response is \
                 returned."
            }
            _ => "An answer of the idempotency layer.",
        };
        let mut description = format!("{summary} (`application/problem+json`, `type`:");
        for (i, kind) in kinds.iter().enumerate() {
            let separator = if i == 0 { " " } else { ", " };
            let _ = write!(description, "{separator}[{kind}]({})", kind.uri());
        }
        description.push_str(".)");
        description
    }
}

impl Modify for IdempotencyDoc {
    /// [`apply`](IdempotencyDoc::apply), with its error logged (`tracing`, level `error`)
    /// instead of returned: on an error the document is left as it was.
    fn modify(&self, openapi: &mut OpenApi) {
        if let Err(error) = self.apply(openapi) {
            tracing::error!(%error, "the idempotency description was not added to the OpenAPI document");
        }
    }
}

/// Whether the layer records, and so replays, a response of this status (a status key of
/// the document: `"201"`, `"2XX"`, `"default"`) under the default disposition.
fn replayed(status: &str) -> bool {
    match status.as_bytes() {
        [b'2' | b'3' | b'4', b'X' | b'x', b'X' | b'x'] => true,
        _ => status
            .parse::<u16>()
            .ok()
            .and_then(|code| StatusCode::from_u16(code).ok())
            .is_some_and(|code| {
                !code.is_informational() && Disposition::of_status(code) == Disposition::Record
            }),
    }
}

/// Whether `parameter` (inline, or a `$ref` to the document's components) is the
/// `Idempotency-Key` header.
fn is_key_parameter(
    parameter: &RefOr<Parameter>,
    components: &std::collections::BTreeMap<String, RefOr<Parameter>>,
) -> bool {
    let parameter = match parameter {
        RefOr::T(parameter) => parameter,
        RefOr::Ref(reference) => {
            let target = reference
                .ref_location
                .strip_prefix("#/components/parameters/")
                .and_then(|name| components.get(name));
            match target {
                Some(RefOr::T(parameter)) => parameter,
                _ => return false,
            }
        }
    };
    parameter.parameter_in == ParameterIn::Header
        && parameter
            .name
            .eq_ignore_ascii_case(IDEMPOTENCY_KEY.as_str())
}

/// The operation of `method` in a path item.
fn operation_of<'a>(item: &'a PathItem, method: &Method) -> Option<&'a Operation> {
    match *method {
        Method::GET => item.get.as_ref(),
        Method::PUT => item.put.as_ref(),
        Method::POST => item.post.as_ref(),
        Method::DELETE => item.delete.as_ref(),
        Method::OPTIONS => item.options.as_ref(),
        Method::HEAD => item.head.as_ref(),
        Method::PATCH => item.patch.as_ref(),
        Method::TRACE => item.trace.as_ref(),
        _ if method.as_str() == "QUERY" => item.query.as_ref(),
        _ => item.additional_operations.get(method.as_str()),
    }
}

/// The operation of `method` in a path item, to change.
fn operation_of_mut<'a>(item: &'a mut PathItem, method: &Method) -> Option<&'a mut Operation> {
    match *method {
        Method::GET => item.get.as_mut(),
        Method::PUT => item.put.as_mut(),
        Method::POST => item.post.as_mut(),
        Method::DELETE => item.delete.as_mut(),
        Method::OPTIONS => item.options.as_mut(),
        Method::HEAD => item.head.as_mut(),
        Method::PATCH => item.patch.as_mut(),
        Method::TRACE => item.trace.as_mut(),
        _ if method.as_str() == "QUERY" => item.query.as_mut(),
        _ => item.additional_operations.get_mut(method.as_str()),
    }
}
