//! An MCP server's elicitation as a Baton question, and a person's answer
//! as the elicitation's result. What was decided:
//!
//! - the question's prompt is the server's message; `schema_json` carries
//!   the requested schema; a single property's suggested values are the
//!   options (its `enum`/`oneOf` values, `yes`/`no` for a boolean), with
//!   `decline` after them (faces that hold a person to the options, like
//!   the CLI, must let them decline); a property's `default` is named in
//!   the prompt; a schema of several properties adds a line to the prompt
//!   saying to answer with a JSON object;
//! - the answer `decline` (or an empty answer) declines, `cancel` cancels
//!   (unless it is one of the options); a JSON object fills the properties
//!   it names; any other text is the value of the schema's single property
//!   (or of its single required one), as the property's type (a number, a
//!   boolean from yes/no/true/false);
//! - no answer (the deadline passed, the run cannot ask) cancels.

use rmcp::model::{ElicitRequestParams, ElicitResult, ElicitationAction};
use serde_json::{Map, Value, json};

use super::tool::{Question, ToolCtx};

/// The answer that declines an elicitation.
pub const DECLINE: &str = "decline";
/// The answer that cancels an elicitation.
pub const CANCEL: &str = "cancel";

/// The schema's properties, in order, and the names of the required ones.
fn properties(schema: &Value) -> (Vec<(String, Value)>, Vec<String>) {
    let props = schema["properties"]
        .as_object()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    let required = schema["required"]
        .as_array()
        .map(|r| {
            r.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    (props, required)
}

/// The property a plain-text answer fills: the only one, or the only
/// required one.
fn single(schema: &Value) -> Option<(String, Value)> {
    let (props, required) = properties(schema);
    if props.len() == 1 {
        return props.into_iter().next();
    }
    match required.as_slice() {
        [one] => props.into_iter().find(|(k, _)| k == one),
        _ => None,
    }
}

/// The suggested values of one property.
fn suggested(prop: &Value) -> Vec<String> {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let listed = strings(&prop["enum"]);
    if !listed.is_empty() {
        return listed;
    }
    for key in ["oneOf", "anyOf"] {
        let consts: Vec<String> = prop[key]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["const"].as_str().map(str::to_owned))
            .collect();
        if !consts.is_empty() {
            return consts;
        }
    }
    let items = strings(&prop["items"]["enum"]);
    if !items.is_empty() {
        return items;
    }
    if prop["type"] == "boolean" {
        return vec!["yes".into(), "no".into()];
    }
    Vec::new()
}

/// A property's default, as text.
fn default_of(prop: &Value) -> Option<String> {
    match &prop["default"] {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

/// A property's short description for the prompt: `name (type)`.
fn described(name: &str, prop: &Value) -> String {
    let kind = prop["type"].as_str().unwrap_or("value");
    let options = suggested(prop);
    if options.is_empty() || kind == "boolean" {
        format!("{name} ({kind})")
    } else {
        format!("{name} ({})", options.join("|"))
    }
}

/// The question an elicitation asks; `None` for a URL elicitation (Baton
/// declares form elicitation only).
pub fn question(params: &ElicitRequestParams) -> Option<Question> {
    let ElicitRequestParams::FormElicitationParams {
        message,
        requested_schema,
        ..
    } = params
    else {
        return None;
    };
    let schema = serde_json::to_value(requested_schema).unwrap_or_else(|_| json!({}));
    let (props, _) = properties(&schema);
    let (prompt, options) = match single(&schema) {
        Some((_, prop)) if props.len() == 1 => {
            let mut options = suggested(&prop);
            if !options.is_empty() && !options.iter().any(|o| o.eq_ignore_ascii_case(DECLINE)) {
                options.push(DECLINE.into());
            }
            let prompt = match default_of(&prop) {
                Some(d) => format!("{message} (default: {d})"),
                None => message.clone(),
            };
            (prompt, options)
        }
        _ => {
            let fields: Vec<String> = props.iter().map(|(k, p)| described(k, p)).collect();
            (
                format!(
                    "{message}\n(answer with a JSON object of {}; \"{DECLINE}\" declines)",
                    fields.join(", ")
                ),
                Vec::new(),
            )
        }
    };
    Some(Question {
        prompt,
        options,
        schema_json: schema.to_string(),
    })
}

/// A text answer as a value of the type `prop` asks for (left as text when
/// it is not one: the server says what is wrong).
fn typed(prop: &Value, text: &str) -> Value {
    let t = text.trim();
    match prop["type"].as_str() {
        Some("integer") => t.parse::<i64>().map_or_else(|_| json!(text), Value::from),
        Some("number") => t.parse::<f64>().map_or_else(|_| json!(text), Value::from),
        Some("boolean") => match t.to_ascii_lowercase().as_str() {
            "yes" | "y" | "true" | "1" => json!(true),
            "no" | "n" | "false" | "0" => json!(false),
            _ => json!(text),
        },
        Some("array") => match serde_json::from_str::<Value>(t) {
            Ok(v @ Value::Array(_)) => v,
            _ => json!(
                t.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .collect::<Vec<_>>()
            ),
        },
        _ => json!(text),
    }
}

/// The elicitation's result for the person's `answer` to the question
/// asked for `params` (an error: there is none).
pub fn result(params: &ElicitRequestParams, answer: Result<String, String>) -> ElicitResult {
    let Ok(text) = answer else {
        return ElicitResult::new(ElicitationAction::Cancel);
    };
    let ElicitRequestParams::FormElicitationParams {
        requested_schema, ..
    } = params
    else {
        return ElicitResult::new(ElicitationAction::Decline);
    };
    let schema = serde_json::to_value(requested_schema).unwrap_or_else(|_| json!({}));
    let one = single(&schema);
    let word = text.trim().to_ascii_lowercase();
    let offered = one
        .as_ref()
        .is_some_and(|(_, p)| suggested(p).iter().any(|o| o.eq_ignore_ascii_case(&word)));
    if !offered {
        if word.is_empty() || word == DECLINE {
            return ElicitResult::new(ElicitationAction::Decline);
        }
        if word == CANCEL {
            return ElicitResult::new(ElicitationAction::Cancel);
        }
    }
    let (props, _) = properties(&schema);
    if let Ok(Value::Object(given)) = serde_json::from_str::<Value>(text.trim()) {
        let mut content = Map::new();
        for (k, v) in given {
            let v = match (&v, props.iter().find(|(name, _)| *name == k)) {
                (Value::String(s), Some((_, prop))) => typed(prop, s),
                _ => v,
            };
            content.insert(k, v);
        }
        return ElicitResult::new(ElicitationAction::Accept).with_content(Value::Object(content));
    }
    match one {
        Some((name, prop)) => ElicitResult::new(ElicitationAction::Accept)
            .with_content(json!({ name: typed(&prop, &text) })),
        // Several properties, and text that is not an object of them.
        None => ElicitResult::new(ElicitationAction::Decline),
    }
}

/// Asks a person the question of `params` in the call of `ctx`, and sends
/// the elicitation's result to `reply`.
pub async fn ask(
    ctx: &ToolCtx<'_>,
    params: ElicitRequestParams,
    reply: tokio::sync::oneshot::Sender<ElicitResult>,
) {
    let answer = match question(&params) {
        Some(q) => ctx.ask(q).await,
        None => Err("only form elicitation is supported".into()),
    };
    let _ = reply.send(result(&params, answer));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(schema: Value) -> ElicitRequestParams {
        serde_json::from_value(json!({
            "mode": "form", "message": "Which city?", "requestedSchema": schema
        }))
        .expect("params")
    }

    fn answered(p: &ElicitRequestParams, text: &str) -> Value {
        serde_json::to_value(result(p, Ok(text.into()))).expect("json")
    }

    #[test]
    fn one_property_takes_the_answer_as_its_value_and_offers_its_enum() {
        let p = params(json!({"type": "object", "properties": {
            "city": {"type": "string", "enum": ["Paris", "Lisbon"]}}, "required": ["city"]}));
        let q = question(&p).expect("form");
        assert_eq!(q.prompt, "Which city?");
        assert_eq!(q.options, ["Paris", "Lisbon", "decline"]);
        assert!(q.schema_json.contains("Lisbon"));
        assert_eq!(
            answered(&p, "Lisbon"),
            json!({"action": "accept", "content": {"city": "Lisbon"}})
        );
        assert_eq!(answered(&p, "decline"), json!({"action": "decline"}));
        assert_eq!(answered(&p, ""), json!({"action": "decline"}));
        assert_eq!(answered(&p, " Cancel "), json!({"action": "cancel"}));
        assert_eq!(
            serde_json::to_value(result(&p, Err("no input".into()))).expect("json"),
            json!({"action": "cancel"})
        );
    }

    #[test]
    fn typed_properties_and_a_json_object_for_several() {
        let p = params(json!({"type": "object", "properties": {
            "n": {"type": "integer"}}}));
        assert_eq!(answered(&p, "42")["content"], json!({"n": 42}));
        let p = params(json!({"type": "object", "properties": {
            "ok": {"type": "boolean"}}}));
        assert_eq!(
            question(&p).expect("form").options,
            ["yes", "no", "decline"]
        );
        assert_eq!(answered(&p, "yes")["content"], json!({"ok": true}));
        let p = params(json!({"type": "object", "properties": {
            "name": {"type": "string"}, "age": {"type": "integer"}}, "required": ["name", "age"]}));
        let q = question(&p).expect("form");
        assert!(q.prompt.contains("JSON object of"), "{}", q.prompt);
        assert_eq!(
            answered(&p, r#"{"name": "Ada", "age": "36"}"#)["content"],
            json!({"name": "Ada", "age": 36})
        );
        assert_eq!(answered(&p, "Ada"), json!({"action": "decline"}));
        // "decline" as one of the server's options is an answer.
        let p = params(json!({"type": "object", "properties": {
            "choice": {"type": "string", "enum": ["accept", "decline"]}}}));
        assert_eq!(question(&p).expect("form").options, ["accept", "decline"]);
        assert_eq!(
            answered(&p, "decline")["content"],
            json!({"choice": "decline"})
        );
    }
}
