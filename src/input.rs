//! Validation of `RunAgentInput` and of the strict `forwardedProps.iacCode` extension.
//!
//! [`parse_run`] turns the request body into a [`RunInput`] or an `INVALID_INPUT` [`Error`] whose
//! message names the offending field (never its value: values may be secrets). The standard envelope
//! is read leniently (unknown top-level fields pass, as AG-UI allows), the iac-code extension strictly.

use crate::error::{Error, Lang, Msg};
use crate::modes::{Presentation, RunMode};
use base64::Engine;
use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::path::{Component, Path, PathBuf};

pub(crate) const MAX_BODY_BYTES: usize = 12 * 1024 * 1024;
pub(crate) const MAX_IMAGE_BYTES: usize = 8 * 1024 * 1024;
pub(crate) const MAX_IMAGES_BYTES: usize = 10 * 1024 * 1024;
pub(crate) const MAX_ROS_INVOCATION_ID: usize = 256;
/// runIds are kept as idempotency keys in the thread file; a cap keeps that file small.
pub(crate) const MAX_RUN_ID_BYTES: usize = 256;

/// A validated run request.
#[derive(Debug, Clone)]
pub struct RunInput {
    pub(crate) thread_id: String,
    pub(crate) run_id: String,
    pub(crate) parent_run_id: Option<String>,
    pub(crate) iac: IacCode,
    /// The latest user message: its AG-UI id and its parts in A2A form.
    pub(crate) user_message: Option<UserMessage>,
    pub(crate) resume: Option<Vec<ResumeEntry>>,
    /// Canonical digest of the request without its secrets, for run-id idempotency.
    pub(crate) digest: String,
}

#[derive(Debug, Clone)]
pub(crate) struct UserMessage {
    pub(crate) id: String,
    pub(crate) parts: Vec<Value>,
}

/// `forwardedProps.iacCode`, every field checked.
#[derive(Debug, Clone, Default)]
pub(crate) struct IacCode {
    pub(crate) ros_invocation_id: String,
    pub(crate) cwd: String,
    pub(crate) model: Option<String>,
    pub(crate) llm_api_key: Option<String>,
    pub(crate) thinking: Option<ThinkingOptions>,
    pub(crate) user_id: Option<String>,
    pub(crate) channel: Option<String>,
    pub(crate) preferred_language: Option<String>,
    pub(crate) candidate_presentation: Option<Presentation>,
    pub(crate) run_mode: Option<RunMode>,
    pub(crate) pipeline_name: Option<String>,
    pub(crate) cleanup_only: Option<bool>,
    pub(crate) alibaba_cloud: Option<AlibabaCloud>,
}

/// `forwardedProps.iacCode.thinking`: how much the client wants the model to think.
#[derive(Debug, Clone, Default)]
pub(crate) struct ThinkingOptions {
    pub(crate) enabled: Option<bool>,
    pub(crate) effort: Option<String>,
    pub(crate) budget: Option<u64>,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct AlibabaCloud {
    pub(crate) access_key_id: Option<String>,
    pub(crate) access_key_secret: Option<String>,
    pub(crate) security_token: Option<String>,
    pub(crate) region_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ResumeEntry {
    pub(crate) interrupt_id: String,
    pub(crate) status: ResumeStatus,
    pub(crate) payload: Option<Value>,
}

/// How the client answered an interrupt (`resume[].status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResumeStatus {
    /// Answered with a payload.
    Resolved,
    /// Declined: a permission is denied, a question or selection cancels the execution.
    Cancelled,
}

impl ResumeStatus {
    const NAMES: [(ResumeStatus, &'static str); 2] = [
        (ResumeStatus::Resolved, "resolved"),
        (ResumeStatus::Cancelled, "cancelled"),
    ];

    fn as_str(self) -> &'static str {
        match self {
            ResumeStatus::Resolved => "resolved",
            ResumeStatus::Cancelled => "cancelled",
        }
    }
}

impl ResumeEntry {
    /// The canonical form whose digest marks an applied answer: `{status, payload}`.
    pub(crate) fn canonical(&self) -> Value {
        let mut v = serde_json::json!({ "status": self.status.as_str() });
        if let Some(p) = &self.payload {
            v["payload"] = p.clone();
        }
        v
    }
}

fn missing(path: &str) -> Error {
    Msg::Missing.with(&[&path])
}

/// `path` is not of the type `want` names (one of the `MustBe*` messages).
fn wrong_type(path: &str, want: Msg) -> Error {
    want.with(&[&path])
}

fn not_json() -> Error {
    Msg::NotJson.err()
}

/// The JSON type of a raw value, from its first byte (serde_json hands out values trimmed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Object,
    Array,
    String,
    Bool,
    Null,
    Number,
}

fn kind(raw: &RawValue) -> Kind {
    match raw.get().as_bytes().first() {
        Some(b'{') => Kind::Object,
        Some(b'[') => Kind::Array,
        Some(b'"') => Kind::String,
        Some(b't' | b'f') => Kind::Bool,
        Some(b'n') => Kind::Null,
        _ => Kind::Number,
    }
}

/// A JSON object read without building its values: the raw text of each known key's value
/// (borrowed from the body), the first unknown key and the first repeated known key. Unknown
/// keys' values are skipped unread, so whatever they hold costs no memory.
struct Obj<'a> {
    fields: Vec<(&'static str, &'a RawValue)>,
    unknown: Option<String>,
    duplicate: Option<&'static str>,
}

impl<'a> Obj<'a> {
    fn get(&self, key: &str) -> Option<&'a RawValue> {
        self.fields.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }

    /// The strict form: no unknown and no repeated key.
    fn strict(self, path: &str) -> Result<Obj<'a>, Error> {
        if let Some(k) = &self.unknown {
            return Err(Msg::UnknownField.with(&[&format!("{path}.{k}")]));
        }
        self.no_duplicate(path)
    }

    /// A repeated key is refused everywhere: two readers could pick different values, and a
    /// repeated secret would escape the digest's blanking.
    fn no_duplicate(self, path: &str) -> Result<Obj<'a>, Error> {
        match self.duplicate {
            Some(k) => {
                let at = if path.is_empty() {
                    k.to_string()
                } else {
                    format!("{path}.{k}")
                };
                Err(Msg::DuplicateField.with(&[&at]))
            }
            None => Ok(self),
        }
    }
}

/// Reads `raw` as an object with the `known` keys (a type error when it is not an object).
fn object<'a>(raw: &'a RawValue, known: &[&'static str], path: &str) -> Result<Obj<'a>, Error> {
    if kind(raw) != Kind::Object {
        return Err(wrong_type(path, Msg::MustBeObject));
    }
    struct Visit<'k>(&'k [&'static str]);
    impl<'de> Visitor<'de> for Visit<'_> {
        type Value = Obj<'de>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Obj<'de>, A::Error> {
            let mut obj = Obj {
                fields: Vec::new(),
                unknown: None,
                duplicate: None,
            };
            while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                let Some(&k) = self.0.iter().find(|k| **k == key) else {
                    obj.unknown.get_or_insert_with(|| key.into_owned());
                    map.next_value::<IgnoredAny>()?;
                    continue;
                };
                let value = map.next_value::<&'de RawValue>()?;
                if obj.get(k).is_some() {
                    obj.duplicate.get_or_insert(k);
                }
                obj.fields.push((k, value));
            }
            Ok(obj)
        }
    }
    let mut de = serde_json::Deserializer::from_str(raw.get());
    serde::Deserializer::deserialize_map(&mut de, Visit(known)).map_err(|_| not_json())
}

/// Calls `f` on each element of the array `raw` in turn, without collecting them; stops at the
/// first error `f` returns.
fn each_element<'a>(
    raw: &'a RawValue,
    mut f: impl FnMut(usize, &'a RawValue) -> Result<(), Error>,
) -> Result<(), Error> {
    struct Visit<'f, F>(&'f mut F, Option<Error>);
    impl<'de, F: FnMut(usize, &'de RawValue) -> Result<(), Error>> Visitor<'de> for Visit<'_, F> {
        type Value = Option<Error>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an array")
        }
        fn visit_seq<S: SeqAccess<'de>>(mut self, mut seq: S) -> Result<Option<Error>, S::Error> {
            let mut i = 0;
            while let Some(el) = seq.next_element::<&'de RawValue>()? {
                if let Err(e) = (self.0)(i, el) {
                    self.1 = Some(e);
                    // Skip the rest unread: the deserializer insists on reaching the end.
                    while seq.next_element::<IgnoredAny>()?.is_some() {}
                    break;
                }
                i += 1;
            }
            Ok(self.1)
        }
    }
    let mut de = serde_json::Deserializer::from_str(raw.get());
    match serde::Deserializer::deserialize_seq(&mut de, Visit(&mut f, None)) {
        Ok(None) => Ok(()),
        Ok(Some(e)) => Err(e),
        Err(_) => Err(not_json()),
    }
}

/// A raw value as a `Value` (small values only: ids, payloads, message content).
fn value(raw: &RawValue) -> Result<Value, Error> {
    serde_json::from_str(raw.get()).map_err(|_| not_json())
}

fn string_field(obj: &Obj, key: &str, path: &str) -> Result<Option<String>, Error> {
    match obj.get(key) {
        None => Ok(None),
        Some(raw) if kind(raw) == Kind::String => Ok(Some(
            serde_json::from_str(raw.get()).map_err(|_| not_json())?,
        )),
        Some(_) => Err(wrong_type(path, Msg::MustBeString)),
    }
}

fn non_empty(obj: &Obj, key: &str, path: &str) -> Result<String, Error> {
    match string_field(obj, key, path)? {
        None => Err(missing(path)),
        Some(s) if s.trim().is_empty() => Err(wrong_type(path, Msg::MustBeNonEmptyString)),
        Some(s) => Ok(s),
    }
}

fn bool_field(obj: &Obj, key: &str, path: &str) -> Result<Option<bool>, Error> {
    match obj.get(key) {
        None => Ok(None),
        Some(raw) if kind(raw) == Kind::Bool => Ok(Some(raw.get() == "true")),
        Some(_) => Err(wrong_type(path, Msg::MustBeBool)),
    }
}

/// A string field that must be one of `names`, read as the value its name stands for.
fn choice<T: Copy>(
    obj: &Obj,
    key: &str,
    path: &str,
    names: &[(T, &str)],
) -> Result<Option<T>, Error> {
    let Some(s) = string_field(obj, key, path)? else {
        return Ok(None);
    };
    match names.iter().find(|(_, name)| *name == s) {
        Some((value, _)) => Ok(Some(*value)),
        None => {
            let list: Vec<&str> = names.iter().map(|(_, name)| *name).collect();
            Err(Msg::NotOneOf.with(&[&path, &list.join(", ")]))
        }
    }
}

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

/// SHA-256 of the request's bytes with each secret's value replaced by `null`, so neither the
/// state file nor a digest of a low-entropy secret can leak it. No tree of the body is built:
/// `secrets` are the raw values, borrowed from `body`, located by the one parse.
fn request_digest(body: &str, secrets: &[&RawValue]) -> String {
    let base = body.as_ptr() as usize;
    let mut spans: Vec<(usize, usize)> = secrets
        .iter()
        .map(|raw| {
            let start = raw.get().as_ptr() as usize - base;
            (start, start + raw.get().len())
        })
        .collect();
    spans.sort_unstable();
    let mut hasher = Sha256::new();
    let mut at = 0;
    for (start, end) in spans {
        if start < at || end > body.len() {
            continue; // never: secrets are distinct values inside the body
        }
        hasher.update(&body.as_bytes()[at..start]);
        hasher.update(b"null");
        at = end;
    }
    hasher.update(&body.as_bytes()[at..]);
    crate::ids::hex(&hasher.finalize())
}

const IAC_CODE_FIELDS: &[&str] = &[
    "schemaVersion",
    "rosInvocationId",
    "cwd",
    "model",
    "llmApiKey",
    "thinking",
    "userId",
    "channel",
    "preferredLanguage",
    "candidatePresentation",
    "runMode",
    "pipelineName",
    "cleanupOnly",
    "alibabaCloud",
];

/// The validated extension and the raw values of its secrets (for the digest to leave out).
fn parse_iac_code<'a>(
    raw: &'a RawValue,
    allowed_cwds: &[PathBuf],
) -> Result<(IacCode, Vec<&'a RawValue>), Error> {
    const P: &str = "forwardedProps.iacCode";
    let obj = object(raw, IAC_CODE_FIELDS, P)?.strict(P)?;
    let mut secrets: Vec<&RawValue> = obj.get("llmApiKey").into_iter().collect();
    match obj.get("schemaVersion") {
        None => return Err(missing("forwardedProps.iacCode.schemaVersion")),
        Some(n) if kind(n) == Kind::Number && value(n)?.as_f64() == Some(1.0) => {}
        Some(_) => return Err(Msg::SchemaVersion.err()),
    }
    let ros_invocation_id = non_empty(
        &obj,
        "rosInvocationId",
        "forwardedProps.iacCode.rosInvocationId",
    )?;
    if ros_invocation_id.chars().count() > MAX_ROS_INVOCATION_ID {
        return Err(Msg::RosInvocationIdTooLong.with(&[&MAX_ROS_INVOCATION_ID]));
    }
    let cwd = non_empty(&obj, "cwd", "forwardedProps.iacCode.cwd")?;
    check_cwd(&cwd, allowed_cwds)?;
    let s = |key: &str| string_field(&obj, key, &format!("{P}.{key}"));
    let thinking = match obj.get("thinking") {
        None => None,
        Some(t) => Some(parse_thinking(t)?),
    };
    let alibaba_cloud = match obj.get("alibabaCloud") {
        None => None,
        Some(c) => {
            let path = "forwardedProps.iacCode.alibabaCloud";
            let keys = [
                "accessKeyId",
                "accessKeySecret",
                "securityToken",
                "regionId",
            ];
            let c = object(c, &keys, path)?.strict(path)?;
            secrets.extend(c.get("accessKeySecret"));
            secrets.extend(c.get("securityToken"));
            let f = |k: &str| string_field(&c, k, &format!("{path}.{k}"));
            Some(AlibabaCloud {
                access_key_id: f("accessKeyId")?,
                access_key_secret: f("accessKeySecret")?,
                security_token: f("securityToken")?,
                region_id: f("regionId")?,
            })
        }
    };
    let iac = IacCode {
        ros_invocation_id,
        cwd,
        model: s("model")?,
        llm_api_key: s("llmApiKey")?,
        thinking,
        user_id: s("userId")?,
        channel: s("channel")?,
        preferred_language: s("preferredLanguage")?,
        candidate_presentation: choice(
            &obj,
            "candidatePresentation",
            "forwardedProps.iacCode.candidatePresentation",
            &Presentation::NAMES,
        )?,
        run_mode: choice(
            &obj,
            "runMode",
            "forwardedProps.iacCode.runMode",
            &RunMode::NAMES,
        )?,
        pipeline_name: s("pipelineName")?,
        cleanup_only: bool_field(&obj, "cleanupOnly", "forwardedProps.iacCode.cleanupOnly")?,
        alibaba_cloud,
    };
    Ok((iac, secrets))
}

fn parse_thinking(raw: &RawValue) -> Result<ThinkingOptions, Error> {
    let path = "forwardedProps.iacCode.thinking";
    let t = object(raw, &["enabled", "effort", "budget"], path)?.strict(path)?;
    let budget = match t.get("budget") {
        None => None,
        Some(b) => match (kind(b) == Kind::Number).then(|| value(b)).transpose()? {
            Some(n) if n.as_u64().is_some_and(|n| n > 0) => n.as_u64(),
            _ => {
                return Err(wrong_type(
                    "forwardedProps.iacCode.thinking.budget",
                    Msg::MustBePositiveInteger,
                ))
            }
        },
    };
    Ok(ThinkingOptions {
        enabled: bool_field(&t, "enabled", "forwardedProps.iacCode.thinking.enabled")?,
        effort: string_field(&t, "effort", "forwardedProps.iacCode.thinking.effort")?,
        budget,
    })
}

/// An absolute path without `..` or control characters, inside one of the allowed roots both as
/// written and once resolved: the longest existing prefix is canonicalized (following every
/// symlink in it) and the rest appended, so a link under a root cannot lead out of it even when the
/// path's tail does not exist yet.
fn check_cwd(cwd: &str, roots: &[PathBuf]) -> Result<(), Error> {
    if cwd.chars().any(char::is_control) {
        return Err(Msg::CwdControlChars.err());
    }
    let path = Path::new(cwd);
    let lexical_ok =
        path.is_absolute() && !path.components().any(|c| matches!(c, Component::ParentDir));
    if !lexical_ok {
        return Err(Msg::CwdNotAbsolute.err());
    }
    let inside = |p: &Path| {
        roots.iter().any(|root| {
            p.starts_with(root)
                || root
                    .canonicalize()
                    .map(|r| p.starts_with(r))
                    .unwrap_or(false)
        })
    };
    if inside(path) && resolve_existing_prefix(path).is_some_and(|real| inside(&real)) {
        Ok(())
    } else {
        // Names the roots and the variable that sets them: the usual cause is an adapter
        // started elsewhere than the client's workspace (the default roots are its own cwd and
        // the temp dir).
        let shown = std::env::join_paths(roots)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        Err(Msg::CwdNotAllowed.with(&[&shown]))
    }
}

/// `path` with its longest existing prefix canonicalized and the remaining components appended;
/// `None` when the remainder holds `..` (a lexical `..` after a symlink would be resolved by the
/// kernel against the link's target, not against what we checked).
fn resolve_existing_prefix(path: &Path) -> Option<PathBuf> {
    for prefix in path.ancestors() {
        let Ok(real) = prefix.canonicalize() else {
            continue;
        };
        let rest = path.strip_prefix(prefix).ok()?;
        let mut out = real;
        for c in rest.components() {
            match c {
                Component::Normal(name) => out.push(name),
                Component::CurDir => {}
                _ => return None,
            }
        }
        return Some(out);
    }
    None
}

/// Checks every user message and returns the latest one in A2A form. Messages are visited one
/// at a time; only a user message's content is built.
fn parse_messages(messages: &RawValue) -> Result<Option<UserMessage>, Error> {
    let mut latest = None;
    let mut total_image_bytes = 0usize;
    each_element(messages, |i, m| {
        let path = format!("messages[{i}]");
        let m = object(m, &["role", "id", "content"], &path)?.no_duplicate(&path)?;
        let role = non_empty(&m, "role", &format!("{path}.role"))?;
        if role != "user" {
            return Ok(());
        }
        let id = non_empty(&m, "id", &format!("{path}.id"))?;
        let content = m
            .get("content")
            .ok_or_else(|| missing(&format!("{path}.content")))?;
        let parts = user_parts(content, &path, &mut total_image_bytes)?;
        latest = Some(UserMessage { id, parts });
        Ok(())
    })?;
    Ok(latest)
}

fn user_parts(content: &RawValue, path: &str, images: &mut usize) -> Result<Vec<Value>, Error> {
    let empty = || Msg::ContentEmpty.with(&[&path]);
    match kind(content) {
        Kind::String => {
            let s: String = serde_json::from_str(content.get()).map_err(|_| not_json())?;
            if s.is_empty() {
                return Err(empty());
            }
            Ok(vec![serde_json::json!({ "text": s })])
        }
        Kind::Array => {
            let mut parts = Vec::new();
            each_element(content, |j, part| {
                parts.push(content_part(part, &format!("{path}.content[{j}]"), images)?);
                Ok(())
            })?;
            if parts.is_empty() {
                return Err(empty());
            }
            Ok(parts)
        }
        _ => Err(wrong_type(
            &format!("{path}.content"),
            Msg::MustBeStringOrParts,
        )),
    }
}

fn content_part(part: &RawValue, path: &str, images: &mut usize) -> Result<Value, Error> {
    let obj = object(part, &["type", "text", "source", "metadata"], path)?.no_duplicate(path)?;
    let kind_of = non_empty(&obj, "type", &format!("{path}.type"))?;
    match kind_of.as_str() {
        "text" => {
            let text = string_field(&obj, "text", &format!("{path}.text"))?
                .ok_or_else(|| missing(&format!("{path}.text")))?;
            Ok(serde_json::json!({ "text": text }))
        }
        "image" => image_part(&obj, path, images),
        other => Err(Msg::PartUnsupported.with(&[&path, &other])),
    }
}

fn image_part(obj: &Obj, path: &str, images: &mut usize) -> Result<Value, Error> {
    let source_path = format!("{path}.source");
    let source = object(
        obj.get("source").ok_or_else(|| missing(&source_path))?,
        &["type", "mimeType", "value"],
        &source_path,
    )?
    .no_duplicate(&source_path)?;
    let source_type = match source.get("type") {
        Some(raw) if kind(raw) == Kind::String => Some(value(raw)?),
        _ => None,
    };
    if source_type.as_ref().and_then(Value::as_str) != Some("data") {
        return Err(Msg::ImageNotInline.with(&[&path]));
    }
    let mime = non_empty(&source, "mimeType", &format!("{path}.source.mimeType"))?;
    if !mime.starts_with("image/") {
        return Err(wrong_type(
            &format!("{path}.source.mimeType"),
            Msg::MustBeImageType,
        ));
    }
    let data = non_empty(&source, "value", &format!("{path}.source.value"))?;
    let decoded_len = base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .map_err(|_| wrong_type(&format!("{path}.source.value"), Msg::MustBeBase64))?
        .len();
    if decoded_len > MAX_IMAGE_BYTES {
        return Err(Msg::ImageTooLarge.with(&[&path, &(MAX_IMAGE_BYTES >> 20)]));
    }
    *images += decoded_len;
    if *images > MAX_IMAGES_BYTES {
        return Err(Msg::ImagesTooLarge.with(&[&(MAX_IMAGES_BYTES >> 20)]));
    }
    // The base64 text moves into the part (no copy unless it had surrounding blanks).
    let data = if data.trim().len() == data.len() {
        data
    } else {
        data.trim().to_string()
    };
    let mut raw = serde_json::json!({ "raw": data, "mediaType": mime });
    if let Some(name) = obj
        .get("metadata")
        .and_then(|m| object(m, &["filename"], "").ok())
        .and_then(|m| m.get("filename"))
        .filter(|f| kind(f) == Kind::String)
        .map(value)
        .transpose()?
    {
        raw["filename"] = name;
    }
    Ok(raw)
}

fn parse_resume(raw: &RawValue) -> Result<Vec<ResumeEntry>, Error> {
    if kind(raw) != Kind::Array {
        return Err(wrong_type("resume", Msg::MustBeArray));
    }
    let mut entries = Vec::new();
    each_element(raw, |i, item| {
        let path = format!("resume[{i}]");
        let obj =
            object(item, &["interruptId", "status", "payload"], &path)?.no_duplicate(&path)?;
        let interrupt_id = non_empty(&obj, "interruptId", &format!("{path}.interruptId"))?;
        let status = choice(
            &obj,
            "status",
            &format!("{path}.status"),
            &ResumeStatus::NAMES,
        )?
        .ok_or_else(|| missing(&format!("{path}.status")))?;
        let payload = match obj.get("payload") {
            None => None,
            Some(p) if kind(p) == Kind::Null => None,
            Some(p) => Some(value(p)?),
        };
        entries.push(ResumeEntry {
            interrupt_id,
            status,
            payload,
        });
        Ok(())
    })?;
    Ok(entries)
}

/// The body of the cancel extension: the thread and invocation that own the execution.
#[derive(Debug)]
pub(crate) struct CancelRequest {
    pub(crate) thread_id: String,
    pub(crate) ros_invocation_id: String,
}

/// Parses the cancel extension's body: a JSON object with `threadId` and `rosInvocationId`, both
/// non-empty strings (other fields pass unread).
pub(crate) fn parse_cancel(body: &[u8]) -> Result<CancelRequest, Error> {
    let v: Value = serde_json::from_slice(body).map_err(|_| Msg::CancelNotJson.err())?;
    let field = |k: &str| {
        v.get(k)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .ok_or_else(|| missing(k))
    };
    Ok(CancelRequest {
        thread_id: field("threadId")?,
        ros_invocation_id: field("rosInvocationId")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn roots() -> Vec<PathBuf> {
        vec![PathBuf::from("/workspace")]
    }

    fn base() -> Value {
        json!({
            "threadId": "t1", "runId": "r1", "state": {}, "tools": [], "context": [],
            "messages": [{"id": "m1", "role": "user", "content": "hi"}],
            "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "inv-1", "cwd": "/workspace/s1"}}
        })
    }

    fn parse(v: &Value) -> Result<RunInput, Error> {
        parse_run(&serde_json::to_vec(v).unwrap(), &roots(), None).1
    }

    fn err_of(mut f: impl FnMut(&mut Value)) -> String {
        let mut v = base();
        f(&mut v);
        parse(&v).unwrap_err().message(Lang::En).to_string()
    }

    #[test]
    fn minimal_request_parses() {
        let r = parse(&base()).unwrap();
        assert_eq!(r.thread_id, "t1");
        assert_eq!(r.user_message.unwrap().parts, vec![json!({"text": "hi"})]);
        assert_eq!(r.iac.cwd, "/workspace/s1");
    }

    #[test]
    fn unknown_iac_code_fields_are_rejected() {
        let e = err_of(|v| v["forwardedProps"]["iacCode"]["extra"] = json!(1));
        assert!(
            e.contains("Unknown field `forwardedProps.iacCode.extra`"),
            "{e}"
        );
        let e = err_of(|v| v["forwardedProps"]["iacCode"]["thinking"] = json!({"x": 1}));
        assert!(e.contains("thinking.x"), "{e}");
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
    fn iac_code_limits_and_types() {
        let long = "x".repeat(257);
        assert!(
            err_of(|v| v["forwardedProps"]["iacCode"]["rosInvocationId"] = json!(long))
                .contains("256")
        );
        assert!(
            err_of(|v| v["forwardedProps"]["iacCode"]["schemaVersion"] = json!(2))
                .contains("must be 1")
        );
        assert!(
            err_of(|v| v["forwardedProps"]["iacCode"]["runMode"] = json!("fast"))
                .contains("normal, pipeline")
        );
        assert!(
            err_of(|v| v["forwardedProps"]["iacCode"]["thinking"] = json!({"budget": 0}))
                .contains("positive integer")
        );
        assert!(
            err_of(|v| v["forwardedProps"]["iacCode"]["cleanupOnly"] = json!("yes"))
                .contains("boolean")
        );
        assert!(err_of(
            |v| v["forwardedProps"]["iacCode"]["candidatePresentation"] = json!("fancy")
        )
        .contains("standard, rich"));
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
    fn cwd_must_be_absolute_and_inside_a_root() {
        assert!(
            err_of(|v| v["forwardedProps"]["iacCode"]["cwd"] = json!("rel/path"))
                .contains("absolute")
        );
        assert!(
            err_of(|v| v["forwardedProps"]["iacCode"]["cwd"] = json!("/workspace/../etc"))
                .contains("absolute")
        );
        assert!(
            err_of(|v| v["forwardedProps"]["iacCode"]["cwd"] = json!("/etc")).contains("allowed")
        );
        assert!(
            err_of(|v| v["forwardedProps"]["iacCode"]["cwd"] = json!("/workspacex"))
                .contains("allowed")
        );
    }

    #[test]
    fn cwd_refuses_control_characters() {
        for cwd in [
            "/workspace/a\0b",
            "/workspace/a\nb",
            "/workspace/\t",
            "/workspace/\u{7f}",
        ] {
            let e = err_of(|v| v["forwardedProps"]["iacCode"]["cwd"] = json!(cwd));
            assert!(e.contains("control characters"), "{cwd:?}: {e}");
        }
    }

    #[test]
    fn cwd_symlinks_are_resolved_through_the_longest_existing_prefix() {
        let base = std::env::temp_dir().join(format!("agui-cwd-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let ws = base.join("ws");
        std::fs::create_dir_all(ws.join("real/sub")).unwrap();
        std::fs::create_dir_all(base.join("outside")).unwrap();
        std::os::unix::fs::symlink(base.join("outside"), ws.join("link-out")).unwrap();
        std::os::unix::fs::symlink(ws.join("real"), ws.join("link-in")).unwrap();
        let roots = [ws.clone()];
        let check = |rel: &str| check_cwd(ws.join(rel).to_str().unwrap(), &roots);
        assert!(check("real/sub").is_ok());
        assert!(check("real/not-yet/deeper").is_ok());
        assert!(check("link-in/not-yet").is_ok());
        assert!(check("link-out").is_err());
        assert!(check("link-out/nonexistent").is_err());
        assert!(check("link-out/nonexistent/deeper").is_err());
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn only_text_and_inline_images_are_accepted() {
        let img = base64::engine::general_purpose::STANDARD.encode([1u8, 2, 3]);
        let mut v = base();
        v["messages"][0]["content"] = json!([
            {"type": "text", "text": "look"},
            {"type": "image", "source": {"type": "data", "value": img, "mimeType": "image/png"}}
        ]);
        let parts = parse(&v).unwrap().user_message.unwrap().parts;
        assert_eq!(parts[1], json!({"raw": img, "mediaType": "image/png"}));
        for part in [
            json!({"type": "image", "source": {"type": "url", "value": "http://x/y.png"}}),
            json!({"type": "audio", "source": {"type": "data", "value": "AA==", "mimeType": "audio/wav"}}),
            json!({"type": "video", "source": {"type": "data", "value": "AA==", "mimeType": "video/mp4"}}),
            json!({"type": "document", "source": {"type": "data", "value": "AA==", "mimeType": "application/pdf"}}),
            json!({"type": "binary", "mimeType": "application/octet-stream", "data": "AA=="}),
            json!({"type": "image", "source": {"type": "data", "value": "!!!", "mimeType": "image/png"}}),
        ] {
            let e = err_of(|v| v["messages"][0]["content"] = json!([part.clone()]));
            assert!(e.contains("content[0]"), "{part}: {e}");
        }
    }

    #[test]
    fn image_size_limits() {
        let big = base64::engine::general_purpose::STANDARD.encode(vec![0u8; MAX_IMAGE_BYTES + 1]);
        let e = err_of(
            |v| v["messages"][0]["content"] = json!([{"type": "image", "source": {"type": "data", "value": big, "mimeType": "image/png"}}]),
        );
        assert!(e.contains("8 MiB"), "{e}");
        let six = base64::engine::general_purpose::STANDARD.encode(vec![0u8; 6 * 1024 * 1024]);
        let img = json!({"type": "image", "source": {"type": "data", "value": six, "mimeType": "image/png"}});
        let e = err_of(|v| v["messages"][0]["content"] = json!([img.clone(), img.clone()]));
        assert!(e.contains("10 MiB"), "{e}");
    }

    #[test]
    fn resume_entries_parse_and_a_message_is_optional_then() {
        let mut v = base();
        v["messages"] = json!([]);
        v["resume"] =
            json!([{"interruptId": "p1", "status": "resolved", "payload": {"decision": "deny"}}]);
        let r = parse(&v).unwrap();
        assert_eq!(
            r.resume.unwrap()[0].payload,
            Some(json!({"decision": "deny"}))
        );
        v["resume"] = json!([{"interruptId": "p1", "status": "maybe"}]);
        assert!(parse(&v).is_err());
        v.as_object_mut().unwrap().remove("resume");
        assert!(parse(&v).is_err());
    }

    #[test]
    fn errors_never_echo_secret_values_and_digest_ignores_them() {
        let e = err_of(|v| v["forwardedProps"]["iacCode"]["llmApiKey"] = json!(12345));
        assert!(!e.contains("12345"));
        let mut a = base();
        a["forwardedProps"]["iacCode"]["llmApiKey"] = json!("sk-one");
        let mut b = base();
        b["forwardedProps"]["iacCode"]["llmApiKey"] = json!("sk-two");
        assert_eq!(parse(&a).unwrap().digest, parse(&b).unwrap().digest);
        b["messages"][0]["content"] = json!("other");
        assert_ne!(parse(&a).unwrap().digest, parse(&b).unwrap().digest);
    }

    #[test]
    fn messages_are_localized() {
        let mut v = base();
        v["tools"] = json!([1]);
        let e = parse(&v).unwrap_err();
        assert!(e.message(Lang::Zh).contains("空数组"));
    }

    #[test]
    fn digest_blanks_every_secret_and_nothing_else() {
        let with = |key: &str, secret: &str| {
            let mut v = base();
            v["forwardedProps"]["iacCode"]["llmApiKey"] = json!("sk-x");
            v["forwardedProps"]["iacCode"]["alibabaCloud"] =
                json!({"accessKeyId": "AK", "accessKeySecret": "S1", "securityToken": "T1"});
            match key {
                "llmApiKey" => v["forwardedProps"]["iacCode"][key] = json!(secret),
                _ => v["forwardedProps"]["iacCode"]["alibabaCloud"][key] = json!(secret),
            }
            parse(&v).unwrap().digest
        };
        for key in ["llmApiKey", "accessKeySecret", "securityToken"] {
            assert_eq!(with(key, "one"), with(key, "two"), "{key}");
        }
        assert_ne!(with("accessKeyId", "one"), with("accessKeyId", "two"));
        // state and context are part of the request's identity, though never built.
        let mut a = base();
        a["state"] = json!({"k": 1});
        assert_ne!(parse(&a).unwrap().digest, parse(&base()).unwrap().digest);
    }

    #[test]
    fn repeated_fields_are_refused_so_no_secret_escapes_the_blanking() {
        let body = br#"{"threadId":"t","runId":"r","state":{},"tools":[],"context":[],
            "messages":[{"id":"m","role":"user","content":"hi"}],
            "forwardedProps":{"iacCode":{"schemaVersion":1,"rosInvocationId":"i",
            "cwd":"/workspace/a","llmApiKey":"sk-1","llmApiKey":"sk-2"}}}"#;
        let e = parse_run(body, &roots(), None).1.unwrap_err();
        assert!(e.message(Lang::En).contains("appears twice"), "{e}");
        let body = br#"{"threadId":"t","threadId":"u"}"#;
        let e = parse_run(body, &roots(), None).1.unwrap_err();
        assert!(
            e.message(Lang::En).contains("`threadId` appears twice"),
            "{e}"
        );
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
