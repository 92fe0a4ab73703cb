//! The OpenAPI 3.1 document of the HTTP face (`GET /v1/openapi.json`),
//! derived from [`ROUTES`] and from the `baton.v1` file descriptors: every
//! message and enum becomes a schema in the proto3 JSON mapping
//! (lowerCamelCase names, 64-bit integers as strings, enums as names,
//! Timestamps and Durations as strings), so the document, the routes and
//! the gRPC API describe one API.

use std::sync::OnceLock;

use prost::Message as _;
use prost_types::{
    DescriptorProto, EnumDescriptorProto, FileDescriptorSet,
    field_descriptor_proto::{Label, Type},
};
use serde_json::{Map, Value, json};

use super::routes::{ROUTES, Route};

/// The document, built once.
pub fn document() -> &'static Value {
    static DOC: OnceLock<Value> = OnceLock::new();
    DOC.get_or_init(build)
}

fn build() -> Value {
    let mut schemas = Map::new();
    if let Ok(set) = FileDescriptorSet::decode(baton_proto::FILE_DESCRIPTOR_SET) {
        for file in set.file.iter().filter(|f| f.package() == "baton.v1") {
            for m in &file.message_type {
                message_schemas(&mut schemas, "baton.v1", m);
            }
            for e in &file.enum_type {
                schemas.insert(format!("baton.v1.{}", e.name()), enum_schema(e));
            }
        }
    }
    schemas.insert(
        "Error".into(),
        json!({
            "type": "object",
            "description": "An error: the gRPC code's name, a message that names the field, and the field.",
            "properties": {
                "code": {"type": "string", "example": "INVALID_ARGUMENT"},
                "message": {"type": "string"},
                "field": {"type": "string"}
            },
            "required": ["code", "message"]
        }),
    );
    schemas.insert(
        "Started".into(),
        json!({
            "type": "object",
            "description": "A run started detached.",
            "properties": {"runId": {"type": "string"}, "traceId": {"type": "string"}},
            "required": ["runId", "traceId"]
        }),
    );
    let mut paths = Map::new();
    for route in ROUTES {
        let item = paths
            .entry(route.path.to_owned())
            .or_insert_with(|| Value::Object(Map::new()));
        item[route.method.to_ascii_lowercase()] = operation(route);
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Baton orchestrator HTTP API",
            "version": "v1",
            "description": "The baton.v1 Orchestrator API over HTTP/JSON (the proto3 JSON mapping of the same messages) with Server-Sent Events for run events."
        },
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "description": "An API key from the orchestrator's auth.api_keys_file (none needed when it is unset)."}}
        },
        "security": [{"bearer": []}, {}],
        "paths": paths
    })
}

fn reference(message: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{message}")})
}

fn operation(route: &Route) -> Value {
    let mut parameters: Vec<Value> = route
        .path
        .split('{')
        .skip(1)
        .filter_map(|s| s.split_once('}').map(|(name, _)| name))
        .map(|name| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}}))
        .collect();
    let query = |name: &str, schema: Value, description: &str| json!({"name": name, "in": "query", "required": false, "schema": schema, "description": description});
    match route.rpc {
        super::routes::Rpc::ListRuns => {
            parameters.push(query(
                "status",
                reference("baton.v1.RunStatus"),
                "only runs in this status",
            ));
            parameters.push(query(
                "waiting",
                json!({"type": "boolean"}),
                "only runs waiting for a person (an approval or an input request)",
            ));
            parameters.push(query(
                "page_size",
                json!({"type": "integer", "minimum": 0}),
                "most runs in the page (0: 100; at most 1000)",
            ));
            parameters.push(query(
                "page_token",
                json!({"type": "string"}),
                "the previous page's nextPageToken",
            ));
        }
        super::routes::Rpc::WatchRun => {
            parameters.push(query(
                "after_seq",
                json!({"type": "integer", "minimum": 0}),
                "events after this seq (else Last-Event-ID, else 0)",
            ));
            parameters.push(query(
                "max_depth",
                json!({"type": "integer", "minimum": 0}),
                "only events at most this deep",
            ));
            parameters.push(query(
                "context_prefixes",
                json!({"type": "array", "items": {"type": "string"}}),
                "only events in these contexts or below",
            ));
            parameters.push(query(
                "kinds",
                json!({"type": "array", "items": reference("baton.v1.EventKind")}),
                "only these kinds",
            ));
        }
        _ => {}
    }
    let error = json!({"description": "an error", "content": {"application/json": {"schema": reference("Error")}}});
    let ok = if route.stream {
        let mut content = Map::new();
        content.insert(
            "text/event-stream".into(),
            json!({"schema": {"type": "string", "description": format!("Server-Sent Events: `id:` the seq, `event:` the payload's kind (`textDelta`), `data:` a {} as JSON", route.answer)}}),
        );
        if route.body.is_some() {
            content.insert(
                "application/json".into(),
                json!({"schema": reference("Started")}),
            );
        }
        json!({"description": "the run's events (Accept: text/event-stream), or the run started detached", "content": content})
    } else {
        json!({"description": "OK", "content": {"application/json": {"schema": reference(route.answer)}}})
    };
    let mut op = json!({
        "operationId": format!("{:?}", route.rpc),
        "summary": route.summary,
        "parameters": parameters,
        "responses": {"200": ok, "default": error}
    });
    if let Some(body) = route.body {
        op["requestBody"] = json!({"required": route.method == "POST" && !matches!(route.rpc, super::routes::Rpc::CancelRun), "content": {"application/json": {"schema": reference(body)}}});
    }
    op
}

fn message_schemas(out: &mut Map<String, Value>, scope: &str, m: &DescriptorProto) {
    let name = format!("{scope}.{}", m.name());
    if m.options.as_ref().is_some_and(|o| o.map_entry()) {
        return;
    }
    for nested in &m.nested_type {
        message_schemas(out, &name, nested);
    }
    for e in &m.enum_type {
        out.insert(format!("{name}.{}", e.name()), enum_schema(e));
    }
    let mut properties = Map::new();
    for f in &m.field {
        let map_entry = (f.r#type() == Type::Message)
            .then(|| {
                m.nested_type.iter().find(|n| {
                    n.options.as_ref().is_some_and(|o| o.map_entry())
                        && f.type_name().ends_with(&format!(".{}", n.name()))
                })
            })
            .flatten();
        let schema = match map_entry {
            Some(entry) => json!({
                "type": "object",
                "additionalProperties": entry.field.get(1).map(field_type).unwrap_or(json!({}))
            }),
            None if f.label() == Label::Repeated => {
                json!({"type": "array", "items": field_type(f)})
            }
            None => field_type(f),
        };
        properties.insert(f.json_name().to_owned(), schema);
    }
    out.insert(name, json!({"type": "object", "properties": properties}));
}

fn field_type(f: &prost_types::FieldDescriptorProto) -> Value {
    match f.r#type() {
        Type::Double | Type::Float => json!({"type": "number"}),
        Type::Int64 | Type::Sint64 | Type::Sfixed64 => json!({"type": "string", "format": "int64"}),
        Type::Uint64 | Type::Fixed64 => json!({"type": "string", "format": "uint64"}),
        Type::Int32 | Type::Sint32 | Type::Sfixed32 | Type::Uint32 | Type::Fixed32 => {
            json!({"type": "integer", "format": "int32"})
        }
        Type::Bool => json!({"type": "boolean"}),
        Type::String => json!({"type": "string"}),
        Type::Bytes => json!({"type": "string", "contentEncoding": "base64"}),
        Type::Enum | Type::Message => match f.type_name().trim_start_matches('.') {
            "google.protobuf.Timestamp" => json!({"type": "string", "format": "date-time"}),
            "google.protobuf.Duration" => {
                json!({"type": "string", "pattern": "^-?[0-9]+(\\.[0-9]{1,9})?s$"})
            }
            other => reference(other),
        },
        Type::Group => json!({}),
    }
}

fn enum_schema(e: &EnumDescriptorProto) -> Value {
    let names: Vec<&str> = e.value.iter().map(|v| v.name()).collect();
    json!({"type": "string", "enum": names})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_and_every_message_it_names_is_in_the_document() {
        let doc = document();
        for route in ROUTES {
            let op = &doc["paths"][route.path][route.method.to_ascii_lowercase()];
            assert!(op.is_object(), "{} {}", route.method, route.path);
            for message in route.body.iter().chain([&route.answer]) {
                assert!(
                    doc["components"]["schemas"][*message].is_object(),
                    "{message}"
                );
            }
        }
        let event = &doc["components"]["schemas"]["baton.v1.RunEvent"]["properties"];
        assert_eq!(event["seq"]["type"], "string", "uint64 as a string");
        assert_eq!(event["contextId"]["type"], "string");
        assert_eq!(event["time"]["format"], "date-time");
        assert_eq!(
            doc["components"]["schemas"]["baton.v1.RunAgentRequest"]["properties"]["initialSlots"],
            Value::Null,
            "only its own fields"
        );
    }
}
