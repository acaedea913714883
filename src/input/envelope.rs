//! The request envelope: `RunAgentInput`'s standard fields, read leniently (unknown top-level
//! fields pass, as AG-UI allows), and the one pass that hands each part to its reader.

use super::digest::request_digest;
use super::iac_code::parse_iac_code;
use super::json::{kind, missing, non_empty, not_json, object, string_field, wrong_type, Kind};
use super::parts::parse_messages;
use super::resume::parse_resume;
use super::RunInput;
use crate::error::{Error, Lang, Msg};
use serde_json::value::RawValue;
use std::path::PathBuf;

pub(crate) const MAX_BODY_BYTES: usize = 12 * 1024 * 1024;
/// runIds are kept as idempotency keys in the thread file; a cap keeps that file small.
pub(crate) const MAX_RUN_ID_BYTES: usize = 256;

const ENVELOPE_FIELDS: &[&str] = &[
    "threadId",
    "runId",
    "parentRunId",
    "state",
    "messages",
    "tools",
    "context",
    "forwardedProps",
    "resume",
];

/// Parses and validates a run request body, in one pass over it: `state`, `context` and unknown
/// fields are skipped unread, only the latest user message and the resume entries are built.
/// Also returns the language of the answer: `preferredLanguage` when the body carries one
/// (whether or not the request validates), else `Accept-Language`.
pub fn parse_run(
    body: &[u8],
    allowed_cwds: &[PathBuf],
    accept_language: Option<&str>,
) -> (Lang, Result<RunInput, Error>) {
    let mut lang = Lang::choose(None, accept_language);
    let result = std::str::from_utf8(body)
        .map_err(|_| not_json())
        .and_then(|text| serde_json::from_str::<&RawValue>(text).map_err(|_| not_json()))
        .and_then(|root| {
            let iac = preferred_language(root);
            lang = Lang::choose(iac.as_deref(), accept_language);
            parse_envelope(root, allowed_cwds)
        });
    (lang, result)
}

/// `forwardedProps.iacCode.preferredLanguage` when it is there as a string, read leniently.
fn preferred_language(root: &RawValue) -> Option<String> {
    let root = object(root, ENVELOPE_FIELDS, "").ok()?;
    let fwd = object(root.get("forwardedProps")?, &["iacCode"], "").ok()?;
    let iac = object(fwd.get("iacCode")?, &["preferredLanguage"], "").ok()?;
    string_field(&iac, "preferredLanguage", "").ok()?
}

fn parse_envelope(root_raw: &RawValue, allowed_cwds: &[PathBuf]) -> Result<RunInput, Error> {
    let root = object(root_raw, ENVELOPE_FIELDS, "").map_err(|_| Msg::NotAnObject.err())?;
    let root = root.no_duplicate("")?;
    let thread_id = non_empty(&root, "threadId", "threadId")?;
    let run_id = non_empty(&root, "runId", "runId")?;
    if run_id.len() > MAX_RUN_ID_BYTES {
        return Err(Msg::RunIdTooLong.with(&[&MAX_RUN_ID_BYTES]));
    }
    let parent_run_id = match root.get("parentRunId") {
        Some(raw) if kind(raw) == Kind::Null => None,
        _ => string_field(&root, "parentRunId", "parentRunId")?,
    };
    // `state` may be anything, absent or null: the 1.0 schema makes it optional and the official
    // client leaves a null `agent.state` out of the request (real chat UIs start with one).
    let messages = root.get("messages").ok_or_else(|| missing("messages"))?;
    if kind(messages) != Kind::Array {
        return Err(wrong_type("messages", Msg::MustBeArray));
    }
    // `tools` and `context` default to `[]` in the 1.0 schema: absent or null is that default.
    let defaulted = |key: &str| root.get(key).filter(|raw| kind(raw) != Kind::Null);
    if let Some(tools) = defaulted("tools") {
        if kind(tools) != Kind::Array {
            return Err(wrong_type("tools", Msg::MustBeArray));
        }
        if !tools.get()[1..].trim_start().starts_with(']') {
            return Err(Msg::ToolsNotEmpty.err());
        }
    }
    if defaulted("context").is_some_and(|c| kind(c) != Kind::Array) {
        return Err(wrong_type("context", Msg::MustBeArray));
    }
    let forwarded = object(
        root.get("forwardedProps")
            .ok_or_else(|| missing("forwardedProps"))?,
        &["iacCode"],
        "forwardedProps",
    )?
    .no_duplicate("forwardedProps")?;
    // Only `iacCode` (the reference's rule): a setting a framework puts beside it (a model, a
    // temperature) would otherwise be ignored while the user believes it applies.
    if let Some(key) = forwarded.unknown_key() {
        return Err(Msg::ForwardedPropsOnlyIacCode.with(&[&key]));
    }
    let iac_raw = forwarded
        .get("iacCode")
        .ok_or_else(|| missing("forwardedProps.iacCode"))?;
    let (iac, secrets) = parse_iac_code(iac_raw, allowed_cwds)?;
    let user_message = parse_messages(messages)?;
    let resume = match root.get("resume") {
        None => None,
        Some(raw) if kind(raw) == Kind::Null => None,
        Some(raw) => Some(parse_resume(raw)?),
    };
    if user_message.is_none() && resume.is_none() {
        return Err(Msg::NoUserMessage.err());
    }
    Ok(RunInput {
        digest: request_digest(root_raw.get(), &secrets),
        thread_id,
        run_id,
        parent_run_id,
        iac,
        user_message,
        resume,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::fixtures::{base, err_of, parse, roots};
    use serde_json::json;

    #[test]
    fn minimal_request_parses() {
        let r = parse(&base()).unwrap();
        assert_eq!(r.thread_id, "t1");
        assert_eq!(r.user_message.unwrap().parts, vec![json!({"text": "hi"})]);
        assert_eq!(r.iac.cwd, "/workspace/s1");
    }

    #[test]
    fn envelope_fields_are_required_and_typed() {
        for key in ["threadId", "runId", "messages", "forwardedProps"] {
            let e = err_of(|v| {
                v.as_object_mut().unwrap().remove(key);
            });
            assert!(e.contains(key), "{key}: {e}");
        }
        assert!(err_of(|v| v["threadId"] = json!("")).contains("threadId"));
        assert!(err_of(|v| v["tools"] = json!([{"name": "x"}])).contains("empty array"));
        assert!(err_of(|v| v["tools"] = json!({})).contains("tools"));
        assert!(err_of(|v| v["context"] = json!("x")).contains("context"));
        assert!(err_of(|v| v["messages"] = json!(null)).contains("messages"));
    }

    #[test]
    fn a_missing_or_null_state_tools_or_context_is_the_empty_default() {
        for key in ["state", "tools", "context"] {
            let mut v = base();
            v.as_object_mut().unwrap().remove(key);
            assert!(parse(&v).is_ok(), "{key} absent");
            let mut v = base();
            v[key] = json!(null);
            assert!(parse(&v).is_ok(), "{key} null");
        }
    }

    #[test]
    fn run_id_is_capped_at_256_bytes() {
        let mut v = base();
        v["runId"] = json!("r".repeat(256));
        assert!(parse(&v).is_ok());
        let e = err_of(|v| v["runId"] = json!("é".repeat(129)));
        assert!(e.contains("`runId` must be at most 256 bytes"), "{e}");
    }

    #[test]
    fn messages_are_localized() {
        let mut v = base();
        v["tools"] = json!([1]);
        let e = parse(&v).unwrap_err();
        assert!(e.message(Lang::Zh).contains("空数组"));
    }

    #[test]
    fn state_and_context_are_skipped_unbuilt_and_lang_comes_from_the_one_parse() {
        let mut v = base();
        let deep = format!("{}1{}", "[".repeat(10_000), "]".repeat(10_000));
        let mut text = serde_json::to_string(&v).unwrap();
        text = text.replace(r#""state":{}"#, &format!(r#""state":{deep}"#));
        assert!(parse_run(text.as_bytes(), &roots(), None).1.is_ok());
        v["forwardedProps"]["iacCode"]["preferredLanguage"] = json!("zh-CN");
        v["tools"] = json!([1]);
        let (lang, r) = parse_run(&serde_json::to_vec(&v).unwrap(), &roots(), Some("en"));
        assert_eq!(lang, Lang::Zh);
        assert!(r.is_err());
        let (lang, _) = parse_run(b"{not json", &roots(), Some("zh"));
        assert_eq!(lang, Lang::Zh);
        let (lang, _) = parse_run(b"[]", &roots(), None);
        assert_eq!(lang, Lang::En);
    }
}
