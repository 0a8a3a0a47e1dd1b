//! The `openapi` feature: `IdempotencyDoc` writes the layer's contract into a utoipa
//! document (the `Idempotency-Key` parameter, the problem responses with the RFC 9457
//! schema, `Retry-After`, the replay header), from the layer's own settings; a wrong name
//! is a typed error that leaves the document as it was; and the documents pass a real
//! OpenAPI validator (`openapi-spec-validator`), which is shown to reject a broken one.
//! `openapi_served` fetches the payments example's document over HTTP.

#[path = "support/openapi.rs"]
mod validator;

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use axum::routing::post;
use http_body_util::BodyExt;
use idem::{Coordinator, MemoryStore, Options};
use idem_http::openapi::{IdempotencyDoc, OpenApiError, PROBLEM_SCHEMA};
use idem_http::{IdempotencyLayer, PROBLEM_JSON};
use serde_json::{Value, json};
use tower::ServiceExt;
use utoipa::Modify;
use utoipa::openapi::path::{OperationBuilder, ParameterBuilder, ParameterIn};
use utoipa::openapi::{
    ContentBuilder, HttpMethod, InfoBuilder, ObjectBuilder, OpenApi, OpenApiBuilder, PathItem,
    PathsBuilder, Ref, Required, ResponseBuilder, Type,
};

/// The four problem statuses every protected operation has.
const PROBLEMS: [&str; 4] = ["400", "409", "422", "503"];

fn layer(options: Options) -> idem_http::IdempotencyLayerBuilder<MemoryStore> {
    IdempotencyLayer::builder(Coordinator::new(MemoryStore::new(), options))
}

/// A hand-built document, as a service writes it: `POST /charges` answering 201 with a
/// JSON charge (and a `Location`), 402 for a declined card, and `GET /charges` listing them.
fn document() -> OpenApi {
    let json = || {
        ContentBuilder::new()
            .schema(Some(ObjectBuilder::new().schema_type(Type::Object)))
            .build()
    };
    let create = OperationBuilder::new()
        .operation_id(Some("create_charge"))
        .response(
            "201",
            ResponseBuilder::new()
                .description("The charge.")
                .content("application/json", json()),
        )
        .response(
            "402",
            ResponseBuilder::new()
                .description("Declined.")
                .content("application/json", json()),
        );
    let list = OperationBuilder::new()
        .operation_id(Some("list_charges"))
        .response("200", ResponseBuilder::new().description("The charges."));
    let mut charges = PathItem::new(HttpMethod::Post, create);
    charges.merge_operations(PathItem::new(HttpMethod::Get, list));
    OpenApiBuilder::new()
        .info(InfoBuilder::new().title("charges").version("1"))
        .paths(PathsBuilder::new().path("/charges", charges))
        .build()
}

/// The document with the layer's description of `POST /charges`, as JSON.
fn described(doc: IdempotencyDoc) -> Value {
    let mut openapi = document();
    doc.operation(Method::POST, "/charges")
        .apply(&mut openapi)
        .expect("POST /charges is described");
    serde_json::to_value(&openapi).expect("the document is JSON")
}

fn charge(document: &Value) -> &Value {
    &document["paths"]["/charges"]["post"]
}

/// The operation's `Idempotency-Key` parameters.
fn key_parameters(operation: &Value) -> Vec<&Value> {
    operation["parameters"]
        .as_array()
        .map(|parameters| {
            parameters
                .iter()
                .filter(|parameter| parameter["name"] == "Idempotency-Key")
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn the_key_is_a_header_string_parameter_required_as_the_layer_is_configured() {
    let required = described(IdempotencyDoc::for_layer(
        &layer(Options::default()).build().unwrap(),
    ));
    let optional = described(IdempotencyDoc::for_layer(
        &layer(Options::default())
            .require_key(false)
            .build()
            .unwrap(),
    ));
    for (document, expected) in [(&required, true), (&optional, false)] {
        let parameters = key_parameters(charge(document));
        assert_eq!(parameters.len(), 1, "{parameters:?}");
        let parameter = parameters[0];
        assert_eq!(parameter["in"], "header");
        assert_eq!(parameter["required"], expected);
        assert_eq!(parameter["schema"]["type"], "string");
        let description = parameter["description"].as_str().unwrap();
        assert!(
            description.contains("Structured Field String"),
            "{description}"
        );
    }
    // The switch changes `required` and what the description promises, nothing else of it.
    assert!(
        key_parameters(charge(&optional))[0]["description"]
            .as_str()
            .unwrap()
            .contains("Optional")
    );
    // Without a required key there is no `KeyMissing` to answer.
    let missing = |document: &Value| {
        charge(document)["responses"]["400"]["description"]
            .as_str()
            .unwrap()
            .contains("KeyMissing")
    };
    assert!(missing(&required));
    assert!(!missing(&optional));
    // An operation not named is left alone.
    assert!(key_parameters(&required["paths"]["/charges"]["get"]).is_empty());
    // `new` starts from the layer's defaults, and `require_key` is its switch.
    assert_eq!(
        key_parameters(charge(&described(IdempotencyDoc::new())))[0]["required"],
        true
    );
    assert_eq!(
        key_parameters(charge(&described(IdempotencyDoc::new().require_key(false))))[0]["required"],
        false
    );
}

#[test]
fn every_problem_status_is_problem_json_with_the_problem_schema() {
    let document = described(IdempotencyDoc::new());
    let responses = &charge(&document)["responses"];
    for status in PROBLEMS.into_iter().chain(["413", "500"]) {
        let response = &responses[status];
        assert_eq!(
            response["content"][PROBLEM_JSON]["schema"]["$ref"],
            format!("#/components/schemas/{PROBLEM_SCHEMA}"),
            "{status}: {response}"
        );
        assert!(
            !response["description"].as_str().unwrap().is_empty(),
            "{status}"
        );
    }
    // 403 only where keys are scoped by tenant.
    assert!(responses.get("403").is_none());
    let scoped = described(IdempotencyDoc::new().tenant_scoped(true));
    assert!(charge(&scoped)["responses"]["403"]["content"][PROBLEM_JSON].is_object());

    let problem = &document["components"]["schemas"][PROBLEM_SCHEMA];
    assert_eq!(problem["type"], "object");
    assert_eq!(
        problem["required"],
        json!(["type", "title", "status", "detail"])
    );
    assert_eq!(problem["properties"]["type"]["type"], "string");
    assert_eq!(problem["properties"]["type"]["format"], "uri");
    assert_eq!(problem["properties"]["title"]["type"], "string");
    assert_eq!(problem["properties"]["status"]["type"], "integer");
    assert_eq!(problem["properties"]["detail"]["type"], "string");
}

#[tokio::test]
async fn the_problem_schema_has_the_members_a_real_problem_carries() {
    let app = Router::new().route(
        "/charges",
        post(|| async { StatusCode::CREATED }).layer(layer(Options::default()).build().unwrap()),
    );
    // No key: the layer answers 400 itself.
    let response = app
        .oneshot(Request::post("/charges").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert_eq!(response.headers()[header::CONTENT_TYPE], PROBLEM_JSON);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let body: Value = serde_json::from_slice(&body).unwrap();
    let members: Vec<&str> = body
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();

    let schema = serde_json::to_value(IdempotencyDoc::problem_schema()).unwrap();
    let mut properties: Vec<&str> = schema["properties"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let mut members = members;
    members.sort_unstable();
    properties.sort_unstable();
    assert_eq!(members, properties);
    assert!(body["status"].is_u64());
    assert!(body["type"].as_str().unwrap().starts_with("https://"));
}

#[test]
fn retry_after_is_on_409_and_503_with_the_layers_values() {
    let options = Options::builder()
        .backoff_max(Duration::from_millis(2_500))
        .store_retries(4)
        .reply_timeout(Duration::from_millis(700))
        .build()
        .unwrap();
    let document = described(IdempotencyDoc::for_layer(&layer(options).build().unwrap()));
    let responses = &charge(&document)["responses"];
    for (status, seconds) in [("409", 3), ("503", 4)] {
        let retry_after = &responses[status]["headers"]["Retry-After"];
        assert_eq!(retry_after["schema"]["type"], "integer", "{status}");
        assert_eq!(retry_after["schema"]["minimum"], 1, "{status}");
        let description = retry_after["description"].as_str().unwrap();
        assert!(
            description.contains(&format!("{seconds} with this service's settings")),
            "{status}: {description}"
        );
    }
    for status in ["400", "413", "422", "500"] {
        assert!(
            responses[status]["headers"].get("Retry-After").is_none(),
            "{status}"
        );
    }
}

#[test]
fn the_replay_header_is_on_the_responses_a_replay_repeats() {
    let document = described(IdempotencyDoc::new());
    let responses = &charge(&document)["responses"];
    let replayed = &responses["201"]["headers"]["Idempotent-Replayed"];
    assert_eq!(replayed["schema"]["type"], "string");
    assert_eq!(replayed["schema"]["enum"], json!(["true"]));
    // A declined card's 402 is recorded and replayed too.
    assert!(responses["402"]["headers"]["Idempotent-Replayed"].is_object());
    // The layer's own problems are never replayed.
    for status in PROBLEMS.into_iter().chain(["413", "500"]) {
        assert!(
            responses[status]["headers"]
                .get("Idempotent-Replayed")
                .is_none(),
            "{status}"
        );
    }
    // The layer's own name for it.
    let renamed = layer(Options::default())
        .replay_header(header::HeaderName::from_static("x-replayed"))
        .build()
        .unwrap();
    let document = described(IdempotencyDoc::for_layer(&renamed));
    let headers = &charge(&document)["responses"]["201"]["headers"];
    assert!(headers["x-replayed"].is_object());
    assert!(headers.get("Idempotent-Replayed").is_none());
}

#[test]
fn a_response_the_operation_documents_keeps_its_content() {
    let mut openapi = document();
    let own_400 = ResponseBuilder::new()
        .description("The currency is not a three-letter code.")
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(ObjectBuilder::new().schema_type(Type::Object)))
                .build(),
        )
        .build();
    let post = openapi
        .paths
        .paths
        .get_mut("/charges")
        .unwrap()
        .post
        .as_mut()
        .unwrap();
    post.responses
        .responses
        .insert("400".to_owned(), own_400.into());
    // A parameter of that name already there (any case) is replaced, not doubled.
    post.parameters = Some(vec![
        ParameterBuilder::new()
            .name("idempotency-key")
            .parameter_in(ParameterIn::Header)
            .required(Required::False)
            .build()
            .into(),
    ]);
    IdempotencyDoc::new()
        .operation(Method::POST, "/charges")
        .apply(&mut openapi)
        .unwrap();
    let document = serde_json::to_value(&openapi).unwrap();
    let operation = charge(&document);
    let response = &operation["responses"]["400"];
    assert!(response["content"]["application/json"].is_object());
    assert!(response["content"][PROBLEM_JSON].is_object());
    let description = response["description"].as_str().unwrap();
    assert!(description.starts_with("The currency is not a three-letter code."));
    assert!(description.contains("KeyMalformed"), "{description}");
    // The handler's own 400 is recorded, and replayed.
    assert!(response["headers"]["Idempotent-Replayed"].is_object());
    assert_eq!(operation["parameters"].as_array().unwrap().len(), 1);
    assert_eq!(key_parameters(operation)[0]["required"], true);
}

#[test]
fn applying_twice_is_applying_once() {
    let doc = IdempotencyDoc::new().operation(Method::POST, "/charges");
    let mut once = document();
    doc.apply(&mut once).unwrap();
    let mut twice = once.clone();
    doc.apply(&mut twice).unwrap();
    assert_eq!(
        serde_json::to_value(&once).unwrap(),
        serde_json::to_value(&twice).unwrap()
    );
}

#[test]
fn a_wrong_name_is_a_typed_error_and_changes_nothing() {
    let untouched = serde_json::to_value(document()).unwrap();
    let attempt = |doc: IdempotencyDoc| {
        let mut openapi = document();
        let outcome = doc.apply(&mut openapi);
        assert_eq!(serde_json::to_value(&openapi).unwrap(), untouched);
        // `Modify` logs the same error and leaves the document as it was.
        doc.modify(&mut openapi);
        assert_eq!(serde_json::to_value(&openapi).unwrap(), untouched);
        outcome.expect_err("refused")
    };
    // The good operation is named first: nothing of it is applied either.
    let error = attempt(
        IdempotencyDoc::new()
            .operation(Method::POST, "/charges")
            .operation(Method::POST, "/refunds"),
    );
    assert_eq!(
        error,
        OpenApiError::OperationMissing {
            method: Method::POST,
            path: "/refunds".to_owned()
        }
    );
    assert_eq!(
        error.to_string(),
        "the document has no operation POST /refunds"
    );
    // The document has GET /charges, but the layer does not cover GET.
    assert_eq!(
        attempt(IdempotencyDoc::new().operation(Method::GET, "/charges")),
        OpenApiError::MethodNotCovered {
            method: Method::GET,
            path: "/charges".to_owned()
        }
    );
    assert_eq!(attempt(IdempotencyDoc::new()), OpenApiError::NoOperations);
    // A layer covering PUT: POST /charges is not one of its.
    let put_only = layer(Options::default())
        .methods([Method::PUT])
        .build()
        .unwrap();
    assert!(matches!(
        attempt(IdempotencyDoc::for_layer(&put_only).operation(Method::POST, "/charges")),
        OpenApiError::MethodNotCovered { .. }
    ));

    // A shared response (`$ref`) the layer would add to.
    let mut openapi = document();
    openapi
        .paths
        .paths
        .get_mut("/charges")
        .unwrap()
        .post
        .as_mut()
        .unwrap()
        .responses
        .responses
        .insert("409".to_owned(), Ref::from_response_name("Conflict").into());
    let before = serde_json::to_value(&openapi).unwrap();
    let error = IdempotencyDoc::new()
        .operation(Method::POST, "/charges")
        .apply(&mut openapi)
        .unwrap_err();
    assert!(
        matches!(&error, OpenApiError::ResponseReference { status, .. } if status == "409"),
        "{error}"
    );
    assert_eq!(serde_json::to_value(&openapi).unwrap(), before);

    // Another schema under the problem schema's name, and the way around it.
    let mut openapi = document();
    openapi.components = Some(
        utoipa::openapi::ComponentsBuilder::new()
            .schema(
                PROBLEM_SCHEMA,
                ObjectBuilder::new().schema_type(Type::String),
            )
            .build(),
    );
    let doc = IdempotencyDoc::new().operation(Method::POST, "/charges");
    assert_eq!(
        doc.apply(&mut openapi),
        Err(OpenApiError::SchemaTaken(PROBLEM_SCHEMA.to_owned()))
    );
    doc.problem_schema_name("IdemProblem")
        .apply(&mut openapi)
        .unwrap();
    let document = serde_json::to_value(&openapi).unwrap();
    assert_eq!(
        charge(&document)["responses"]["422"]["content"][PROBLEM_JSON]["schema"]["$ref"],
        "#/components/schemas/IdemProblem"
    );
    assert_eq!(
        document["components"]["schemas"][PROBLEM_SCHEMA]["type"],
        "string"
    );
}

#[test]
fn the_described_documents_pass_the_validator() {
    for doc in [
        IdempotencyDoc::new(),
        IdempotencyDoc::new().require_key(false).tenant_scoped(true),
    ] {
        let document = described(doc);
        if let Err(report) = validator::validate(&document.to_string()) {
            panic!("the validator refused the document: {report}\n{document:#}");
        }
    }
}

#[test]
fn the_validator_rejects_a_broken_document() {
    let mut document = described(IdempotencyDoc::new());
    validator::validate(&document.to_string()).expect("the document as made is valid");
    // The same document with its key parameter missing `in`.
    let parameter = document["paths"]["/charges"]["post"]["parameters"][0]
        .as_object_mut()
        .unwrap();
    assert_eq!(parameter["name"], "Idempotency-Key");
    parameter.remove("in");
    let report = validator::validate(&document.to_string())
        .expect_err("a parameter without `in` is refused");
    assert!(report.contains("in"), "{report}");
    // And a problem response without its description.
    let mut document = described(IdempotencyDoc::new());
    document["paths"]["/charges"]["post"]["responses"]["409"]
        .as_object_mut()
        .unwrap()
        .remove("description");
    validator::validate(&document.to_string())
        .expect_err("a response without a description is refused");
}
