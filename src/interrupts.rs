//! A2A input waits as AG-UI interrupts, and AG-UI resume answers as A2A messages.
//!
//! One place owns every interrupt kind: how its envelope becomes an AG-UI `Interrupt` (reason,
//! message, `responseSchema`, metadata) and how a resolved payload becomes the answer the kernel
//! understands (a permission data part, or the answer text for questions and selections).

use crate::a2a::incoming;
use crate::error::{Error, Lang, Msg};
use crate::input::ResumeStatus;
use serde_json::{json, Map, Value};

/// Envelope fields kept in the state file (the reference's whitelist: display and correlation
/// fields only, never conversation text).
const PERSISTED_FIELDS: &[&str] = &[
    "schemaVersion",
    "kind",
    "requestTaskId",
    "contextId",
    "inputId",
    "toolUseId",
    "toolName",
    "title",
    "purpose",
    "effect",
    "target",
    "isReadOnly",
    "prompt",
    "safeSummary",
    "options",
    "language",
    "deploymentSummary",
    "scope",
    "subPipelineId",
    "operation",
    "displayParameters",
    "allowFreeText",
    "freeTextPrompt",
    "required",
    "selector",
];

/// The required inputs of one A2A item's `metadata.iac_code`: `input` plus every
/// `pendingPermissions[]` item, de-duplicated by `inputId`, reduced to the persisted fields.
pub(crate) fn inputs_of(iac: &Value) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    let single = iac.get(incoming::INPUT).into_iter();
    let listed = iac
        .get(incoming::PENDING_PERMISSIONS)
        .and_then(Value::as_array)
        .into_iter()
        .flatten();
    for item in single.chain(listed) {
        if item.get("required") != Some(&Value::Bool(true)) {
            continue;
        }
        let Some(id) = item.get("inputId").and_then(Value::as_str) else {
            continue;
        };
        if out.iter().any(|v| v["inputId"] == id) {
            continue;
        }
        let mut kept = Map::new();
        for key in PERSISTED_FIELDS {
            if let Some(v) = item.get(*key) {
                kept.insert(key.to_string(), v.clone());
            }
        }
        out.push(Value::Object(kept));
    }
    out
}

/// Whether an input is a concurrent side wait of a pipeline (several may be pending at once).
pub(crate) fn is_sideband(input: &Value) -> bool {
    input.get("scope").and_then(Value::as_str) == Some("candidate")
        || input.get("subPipelineId").and_then(Value::as_str).is_some()
}

/// An input's `kind`, read once. Each kind has its own schema and answer; `Other` (a kind this
/// adapter does not know, e.g. the kernel's `input_required`) is answered like a question, as the
/// reference does, but is a case of its own so that adding a kind is a compile-time checklist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Permission,
    Question,
    OptionSelection,
    DeploymentConfirmation,
    CloudResourceSelection,
    Other,
}

impl Kind {
    pub(crate) fn of(input: &Value) -> Kind {
        match input.get("kind").and_then(Value::as_str).unwrap_or("") {
            "permission" => Kind::Permission,
            "ask_user_question" => Kind::Question,
            "candidate_selection" => Kind::OptionSelection,
            "deployment_confirmation" => Kind::DeploymentConfirmation,
            "cloud_resource_selection" => Kind::CloudResourceSelection,
            _ => Kind::Other,
        }
    }

    /// The wire name (`None` for a kind this adapter does not know).
    pub(crate) fn as_str(self) -> Option<&'static str> {
        match self {
            Kind::Permission => Some("permission"),
            Kind::Question => Some("ask_user_question"),
            Kind::OptionSelection => Some("candidate_selection"),
            Kind::DeploymentConfirmation => Some("deployment_confirmation"),
            Kind::CloudResourceSelection => Some("cloud_resource_selection"),
            Kind::Other => None,
        }
    }
}

fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// Options normalised to `{id, title}`; duplicate ids get `-2`, `-3` suffixes.
pub(crate) fn standard_options(input: &Value) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let raw = input.get("options").and_then(Value::as_array);
    for (i, option) in raw.into_iter().flatten().enumerate() {
        let scalar = |v: &Value| match v {
            Value::String(s) if !s.is_empty() => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        };
        let id = option
            .get("id")
            .and_then(scalar)
            .or_else(|| option.get("candidate_index").and_then(scalar))
            .or_else(|| scalar(option))
            .unwrap_or_else(|| i.to_string());
        let title = ["label", "name", "title"]
            .iter()
            .find_map(|k| str_of(option, k))
            .map(String::from)
            .unwrap_or_else(|| id.clone());
        let mut unique = id.clone();
        let mut n = 2;
        while out.iter().any(|(o, _)| *o == unique) {
            unique = format!("{id}-{n}");
            n += 1;
        }
        out.push((unique, title));
    }
    out
}

/// The JSON Schema a resolved payload must satisfy.
pub(crate) fn response_schema(input: &Value) -> Value {
    let options = standard_options(input);
    match Kind::of(input) {
        Kind::Permission => json!({
            "type": "object",
            "properties": {"decision": {"type": "string", "enum": ["allow_once", "deny"]}},
            "required": ["decision"],
            "additionalProperties": false
        }),
        Kind::CloudResourceSelection => json!({"oneOf": [
            {"type": "object", "properties": {"value": {"type": "string", "minLength": 1}, "label": {"type": "string"}},
             "required": ["value"], "additionalProperties": false},
            free_text_branch()
        ]}),
        Kind::DeploymentConfirmation => {
            let raw = input
                .get("options")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let overrides = json!({"type": "object"});
            let mut branches: Vec<Value> = options
                .iter()
                .map(|(id, title)| {
                    json!({"type": "object",
                    "properties": {"selectedId": option_property(id, title), "parameter_overrides": overrides},
                    "required": ["selectedId"], "additionalProperties": false})
                })
                .collect();
            let mut actions: Vec<&str> = raw
                .iter()
                .filter_map(|o| o.get("action").and_then(Value::as_str))
                .collect();
            actions.dedup();
            branches.push(json!({"type": "object",
                "properties": {"action": {"type": "string", "enum": actions}, "parameter_overrides": overrides},
                "required": ["action"], "additionalProperties": false}));
            json!({ "oneOf": branches })
        }
        Kind::Question | Kind::OptionSelection | Kind::Other => {
            let mut branches: Vec<Value> = options
                .iter()
                .map(|(id, title)| {
                    json!({"type": "object",
                    "properties": {"selectedId": option_property(id, title)},
                    "required": ["selectedId"], "additionalProperties": false})
                })
                .collect();
            let free = input.get("allowFreeText") == Some(&Value::Bool(true));
            if free || branches.is_empty() {
                branches.push(free_text_branch());
            }
            json!({ "oneOf": branches })
        }
    }
}

/// One option as the `selectedId` property of its `oneOf` branch, labelled there as the reference
/// labels it (`iac_code/agui/events.py`, `_selection_schema`): a console that draws the options
/// from the schema reads the property's `title`.
fn option_property(id: &str, title: &str) -> Value {
    json!({"type": "string", "const": id, "title": title})
}

fn free_text_branch() -> Value {
    json!({"type": "object", "properties": {"freeText": {"type": "string", "minLength": 1}},
           "required": ["freeText"], "additionalProperties": false})
}

/// Checks a deployment confirmation envelope: every option needs a unique non-empty `id` of at most
/// 200 characters and an `action` among confirm/adjust/reselect/cancel.
pub(crate) fn check_envelope(input: &Value) -> Result<(), Error> {
    if Kind::of(input) != Kind::DeploymentConfirmation {
        return Ok(());
    }
    let options = input
        .get("options")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut seen = Vec::new();
    for o in &options {
        let id = o.get("id").and_then(Value::as_str).unwrap_or("");
        let action = o.get("action").and_then(Value::as_str).unwrap_or("");
        let ok_action = matches!(action, "confirm" | "adjust" | "reselect" | "cancel");
        if id.is_empty() || id.chars().count() > 200 || seen.contains(&id) || !ok_action {
            return Err(Msg::DeploymentOptionInvalid.err());
        }
        seen.push(id);
    }
    Ok(())
}

/// The AG-UI `Interrupt` for a pending input.
pub(crate) fn to_interrupt(input: &Value, expires_at: &str, lang: Lang) -> Value {
    let options = standard_options(input);
    let is_permission = Kind::of(input) == Kind::Permission;
    let message = if is_permission {
        str_of(input, "prompt")
            .or_else(|| str_of(input, "title"))
            .map(String::from)
            .unwrap_or_else(|| Msg::PermissionRequired.render(lang, &[]))
    } else {
        let mut m = str_of(input, "prompt")
            .or_else(|| str_of(input, "title"))
            .unwrap_or("")
            .to_string();
        for (id, title) in &options {
            if !m.is_empty() {
                m.push('\n');
            }
            m.push_str(&format!("- {id}: {title}"));
        }
        m
    };
    let mut metadata = input.as_object().cloned().unwrap_or_default();
    metadata.insert("schemaVersion".into(), json!(1));
    metadata.insert(
        "standardOptions".into(),
        options
            .iter()
            .map(|(id, title)| json!({"id": id, "title": title}))
            .collect(),
    );
    let mut interrupt = json!({
        "id": input.get("inputId").cloned().unwrap_or(Value::Null),
        "reason": if is_permission { "tool_call" } else { "input_required" },
        "message": message,
        "responseSchema": response_schema(input),
        "expiresAt": expires_at,
        "metadata": metadata,
    });
    if let Some(tool) = str_of(input, "toolUseId") {
        interrupt["toolCallId"] = json!(tool);
    }
    interrupt
}

/// What to send the kernel for one answered interrupt.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Answer {
    /// Parts of a `ROLE_USER` message on the waiting task (plus optional `metadata.iac_code` keys).
    Message {
        parts: Vec<Value>,
        extra_metadata: Option<Value>,
    },
    /// A cancelled question or selection: the execution is cancelled (as the reference does).
    CancelExecution,
}

/// Validates a resume entry against its interrupt and builds the kernel answer.
pub(crate) fn answer(
    input: &Value,
    status: ResumeStatus,
    payload: Option<&Value>,
) -> Result<Answer, Error> {
    let is_permission = Kind::of(input) == Kind::Permission;
    let cancelled = status == ResumeStatus::Cancelled;
    if cancelled && !is_permission {
        return Ok(Answer::CancelExecution);
    }
    let deny = json!({"decision": "deny"});
    let payload = if cancelled { Some(&deny) } else { payload };
    let Some(payload) = payload else {
        return Err(Msg::PayloadMissing.err());
    };
    let schema = response_schema(input);
    let validator =
        jsonschema::validator_for(&schema).map_err(|_| Msg::ResponseSchemaInvalid.err())?;
    if let Some(first) = validator.iter_errors(payload).next() {
        // The schema error names the failing location, never the payload's values.
        let at = first.instance_path.to_string();
        let at = if at.is_empty() { "/".to_string() } else { at };
        return Err(Msg::PayloadMismatch.with(&[&at]));
    }
    if is_permission {
        let data = json!({
            "schemaVersion": 1,
            "kind": Kind::Permission.as_str(),
            "requestTaskId": input.get("requestTaskId").cloned().unwrap_or(Value::Null),
            "inputId": input.get("inputId").cloned().unwrap_or(Value::Null),
            "toolUseId": input.get("toolUseId").cloned().unwrap_or(Value::Null),
            "decision": payload["decision"],
        });
        return Ok(Answer::Message {
            parts: vec![json!({"data": data, "mediaType": "application/json"})],
            extra_metadata: None,
        });
    }
    let text = answer_text(input, payload);
    if text.trim().is_empty() {
        return Err(Msg::NoAnswer.err());
    }
    // The kernel reads a resource selection from `metadata.iac_code.inputResponse`, with exactly
    // these fields (`iac_code/a2a/resource_selector.py`, `parse_resource_selection_response`).
    let extra_metadata = (Kind::of(input) == Kind::CloudResourceSelection
        && payload.get("value").is_some())
    .then(|| {
        let mut r = json!({
            "schemaVersion": 1, "kind": Kind::CloudResourceSelection.as_str(), "status": "selected",
            "requestTaskId": input.get("requestTaskId"), "contextId": input.get("contextId"),
            "inputId": input.get("inputId"), "toolUseId": input.get("toolUseId"),
            "selectorId": input.pointer("/selector/id"), "value": payload["value"],
        });
        if let Some(label) = payload.get("label") {
            r["label"] = label.clone();
        }
        json!({ "inputResponse": r })
    });
    Ok(Answer::Message {
        parts: vec![json!({ "text": text })],
        extra_metadata,
    })
}

/// The answer text the kernel matches: free text as is, a selected option by its label.
fn answer_text(input: &Value, payload: &Value) -> String {
    if let Some(text) = str_of(payload, "freeText").or_else(|| str_of(payload, "free_text")) {
        return text.to_string();
    }
    let kind = Kind::of(input);
    if kind == Kind::CloudResourceSelection {
        return str_of(payload, "label")
            .or_else(|| str_of(payload, "value"))
            .unwrap_or("")
            .to_string();
    }
    let selected = str_of(payload, "selectedId").or_else(|| str_of(payload, "selected_id"));
    let option = selected.and_then(|id| {
        let index = standard_options(input).iter().position(|(o, _)| o == id)?;
        input.get("options")?.as_array()?.get(index).cloned()
    });
    // The kernel's own encoding (`iac_code/pipeline/engine/ui_contract.py`,
    // `encode_deployment_confirmation`): `{"action", "parameter_overrides"?}` as JSON text, which
    // `parse_deployment_confirmation` reads back (actions confirm/adjust/reselect/cancel) in
    // `pipeline_runner.py`; free text goes as it is, which the kernel hands to the LLM.
    if kind == Kind::DeploymentConfirmation {
        let action = option
            .as_ref()
            .and_then(|o| str_of(o, "action").map(String::from))
            .or_else(|| str_of(payload, "action").map(String::from))
            .unwrap_or_default();
        let mut v = json!({ "action": action });
        if let Some(o) = payload.get("parameter_overrides") {
            v["parameter_overrides"] = o.clone();
        }
        return v.to_string();
    }
    match (option, selected) {
        (Some(o), Some(id)) => ["label", "name"]
            .iter()
            .find_map(|k| str_of(&o, k))
            .unwrap_or(id)
            .to_string(),
        (None, Some(id)) => id.to_string(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Code;

    fn permission() -> Value {
        json!({"kind": "permission", "schemaVersion": 1.0, "requestTaskId": "task-1", "contextId": "ctx",
               "inputId": "permission-1", "toolUseId": "call_1", "toolName": "write_file",
               "prompt": "Change a workspace file Allow once?", "title": "Change a workspace file",
               "required": true, "options": [{"id": "allow_once", "label": "Allow once"}, {"id": "deny", "label": "Deny"}]})
    }

    fn question() -> Value {
        json!({"kind": "ask_user_question", "inputId": "ask-1", "requestTaskId": "task-1", "required": true,
               "prompt": "Which region?", "allowFreeText": true,
               "options": [{"id": "a", "label": "Hangzhou"}, {"id": "a", "label": "Beijing"}]})
    }

    #[test]
    fn inputs_need_required_true_and_are_deduplicated() {
        let iac = json!({"input": permission(), "pendingPermissions": [permission(), {"inputId": "x", "required": false}]});
        assert_eq!(inputs_of(&iac).len(), 1);
    }

    #[test]
    fn permission_interrupt_matches_the_reference_shape() {
        let i = to_interrupt(&permission(), "2026-01-01T00:00:00Z", Lang::En);
        assert_eq!(i["id"], "permission-1");
        assert_eq!(i["reason"], "tool_call");
        assert_eq!(i["toolCallId"], "call_1");
        assert_eq!(i["message"], "Change a workspace file Allow once?");
        assert_eq!(i["metadata"]["schemaVersion"], 1);
        assert_eq!(
            i["metadata"]["standardOptions"][1],
            json!({"id": "deny", "title": "Deny"})
        );
        assert_eq!(
            i["responseSchema"]["properties"]["decision"]["enum"],
            json!(["allow_once", "deny"])
        );
    }

    #[test]
    fn the_permission_fallback_text_follows_the_request_language() {
        let mut bare = permission();
        bare.as_object_mut()
            .unwrap()
            .retain(|k, _| k != "prompt" && k != "title");
        let text = |lang| to_interrupt(&bare, "t", lang)["message"].clone();
        assert_eq!(text(Lang::En), "Permission required");
        assert_eq!(text(Lang::Fr), "Autorisation requise");
        assert_eq!(text(Lang::Zh), "需要授权");
    }

    #[test]
    fn questions_list_options_and_dedupe_ids() {
        let i = to_interrupt(&question(), "t", Lang::En);
        assert_eq!(i["reason"], "input_required");
        assert_eq!(i["message"], "Which region?\n- a: Hangzhou\n- a-2: Beijing");
        assert_eq!(i["responseSchema"]["oneOf"].as_array().unwrap().len(), 3);
    }

    #[test]
    fn permission_answers_are_strict_data_parts() {
        let a = answer(
            &permission(),
            ResumeStatus::Resolved,
            Some(&json!({"decision": "allow_once"})),
        )
        .unwrap();
        let Answer::Message { parts, .. } = a else {
            panic!()
        };
        assert_eq!(parts[0]["data"]["decision"], "allow_once");
        assert_eq!(parts[0]["data"]["requestTaskId"], "task-1");
        assert_eq!(parts[0]["data"].as_object().unwrap().len(), 6);
        let denied = answer(&permission(), ResumeStatus::Cancelled, None).unwrap();
        let Answer::Message { parts, .. } = denied else {
            panic!()
        };
        assert_eq!(parts[0]["data"]["decision"], "deny");
        for bad in [
            json!({"decision": "always"}),
            json!({}),
            json!({"decision": "deny", "x": 1}),
        ] {
            let e = answer(&permission(), ResumeStatus::Resolved, Some(&bad)).unwrap_err();
            assert_eq!(e.code, Code::ResumePayloadInvalid);
        }
        assert_eq!(
            answer(&permission(), ResumeStatus::Resolved, None)
                .unwrap_err()
                .code,
            Code::ResumePayloadInvalid
        );
    }

    #[test]
    fn question_answers_become_text() {
        let text = |p: Value| match answer(&question(), ResumeStatus::Resolved, Some(&p)).unwrap() {
            Answer::Message { parts, .. } => parts[0]["text"].as_str().unwrap().to_string(),
            other => panic!("{other:?}"),
        };
        assert_eq!(text(json!({"selectedId": "a-2"})), "Beijing");
        assert_eq!(text(json!({"freeText": "Shanghai"})), "Shanghai");
        assert!(answer(
            &question(),
            ResumeStatus::Resolved,
            Some(&json!({"selectedId": "zz"}))
        )
        .is_err());
        assert_eq!(
            answer(&question(), ResumeStatus::Cancelled, None).unwrap(),
            Answer::CancelExecution
        );
    }

    #[test]
    fn selection_without_free_text_refuses_it() {
        let mut q = question();
        q["kind"] = json!("candidate_selection");
        q["allowFreeText"] = json!(false);
        assert!(answer(&q, ResumeStatus::Resolved, Some(&json!({"freeText": "x"}))).is_err());
        assert!(answer(
            &q,
            ResumeStatus::Resolved,
            Some(&json!({"selectedId": "a"}))
        )
        .is_ok());
    }

    #[test]
    fn deployment_confirmation_sends_the_action() {
        let d = json!({"kind": "deployment_confirmation", "inputId": "d1", "required": true,
                       "options": [{"id": "go", "label": "Deploy", "action": "confirm"}, {"id": "no", "action": "cancel"}]});
        check_envelope(&d).unwrap();
        let Answer::Message { parts, .. } = answer(
            &d,
            ResumeStatus::Resolved,
            Some(&json!({"selectedId": "go"})),
        )
        .unwrap() else {
            panic!()
        };
        assert_eq!(parts[0]["text"], r#"{"action":"confirm"}"#);
        let bad = json!({"kind": "deployment_confirmation", "options": [{"id": "go", "action": "launch"}]});
        assert!(check_envelope(&bad).is_err());
    }
}
