//! The outgoing message: what a `SendStreamingMessage` starts ([`Turn`]) and the client's settings
//! written into `metadata.iac_code` under the kernel's own key names, in one place
//! (`iac_code_metadata`; read from the kernel's source).

use crate::modes::{Presentation, RunMode};
use serde_json::{json, Map, Value};

/// What a `SendStreamingMessage` starts.
pub(crate) enum Turn<'a> {
    /// A new turn in the thread's context, in the client's `runMode`/`pipelineName` (none given:
    /// none sent, the kernel decides).
    New,
    /// An answer on the task waiting for input; `extra` keys join `metadata.iac_code`.
    Answer {
        task_id: &'a str,
        extra: Option<Value>,
        /// The execution's mode: the kernel reads the mode from each message
        /// (`iac_code/a2a/request_mode.py`), so an answer without it is a normal chat turn.
        mode: ExecutionMode<'a>,
    },
}

/// The `run_mode` and `pipeline_name` an execution started with.
#[derive(Clone, Copy, Default)]
pub(crate) struct ExecutionMode<'a> {
    pub(crate) run_mode: Option<RunMode>,
    pub(crate) pipeline_name: Option<&'a str>,
}

/// The client's settings every message's `metadata.iac_code` carries, borrowed from wherever the
/// caller keeps them (src/run/ fills it from the request's `forwardedProps.iacCode`).
#[derive(Clone, Copy, Default)]
pub(crate) struct TurnOptions<'a> {
    pub(crate) cwd: &'a str,
    pub(crate) ros_invocation_id: &'a str,
    pub(crate) preferred_language: Option<&'a str>,
    pub(crate) cleanup_only: bool,
    pub(crate) user_id: Option<&'a str>,
    pub(crate) channel: Option<&'a str>,
    pub(crate) model: Option<&'a str>,
    pub(crate) llm_api_key: Option<&'a str>,
    pub(crate) candidate_presentation: Option<Presentation>,
    /// The mode of a [`Turn::New`] (an answer carries its execution's own).
    pub(crate) mode: ExecutionMode<'a>,
    pub(crate) thinking: ThinkingMetadata<'a>,
    pub(crate) cloud: CloudCredentials<'a>,
}

/// `metadata.iac_code.thinking` of a message we send: the client's thinking options (sent only
/// when one of them is given).
#[derive(Clone, Copy, Default)]
pub(crate) struct ThinkingMetadata<'a> {
    pub(crate) enabled: Option<bool>,
    pub(crate) effort: Option<&'a str>,
    pub(crate) budget: Option<u64>,
}

/// The `alibaba_cloud_*` keys.
#[derive(Clone, Copy, Default)]
pub(crate) struct CloudCredentials<'a> {
    pub(crate) access_key_id: Option<&'a str>,
    pub(crate) access_key_secret: Option<&'a str>,
    pub(crate) security_token: Option<&'a str>,
    pub(crate) region_id: Option<&'a str>,
}

/// The A2A `message` of a `SendStreamingMessage`: a `ROLE_USER` message in the thread's context
/// whose `metadata.iac_code` carries the client's `options`.
/// The parts are moved in, never copied (a user message may be 12 MiB).
pub(crate) fn user_message(
    message_id: &str,
    parts: Vec<Value>,
    context_id: &str,
    options: &TurnOptions,
    turn: Turn,
) -> Value {
    let mut meta = iac_code_metadata(options, &turn);
    let mut message = json!({
        "messageId": message_id,
        "role": "ROLE_USER",
        "contextId": context_id,
    });
    message["parts"] = Value::Array(parts);
    if let Turn::Answer { task_id, extra, .. } = turn {
        if let (Some(m), Some(Value::Object(extra))) = (meta.as_object_mut(), extra) {
            m.extend(extra);
        }
        message["taskId"] = json!(task_id);
    }
    message["metadata"] = json!({ "iac_code": meta });
    message
}

/// The kernel's name of a candidate presentation: `rich` is its `rich-v1`.
fn kernel_presentation(p: Presentation) -> &'static str {
    match p {
        Presentation::Standard => "standard",
        Presentation::Rich => "rich-v1",
    }
}

/// The client's settings → `metadata.iac_code`, in one place (names read from the kernel's source).
fn iac_code_metadata(o: &TurnOptions, turn: &Turn) -> Value {
    let mut m = Map::new();
    let mut put = |k: &str, v: Option<Value>| {
        if let Some(v) = v {
            m.insert(k.to_string(), v);
        }
    };
    let s = |v: Option<&str>| v.map(|s| json!(s));
    let trimmed = |v: Option<&str>| v.map(|v| json!(v.trim())).filter(|v| v != "");
    put("cwd", Some(json!(o.cwd)));
    put("rosInvocationId", Some(json!(o.ros_invocation_id)));
    put("preferredLanguage", s(o.preferred_language));
    put("cleanupOnly", Some(json!(o.cleanup_only)));
    put("user_id", s(o.user_id));
    put("channel", s(o.channel));
    put("iac_code_model", trimmed(o.model));
    put("iac_code_api_key", trimmed(o.llm_api_key));
    put(
        "candidatePresentation",
        o.candidate_presentation
            .map(|p| json!(kernel_presentation(p))),
    );
    let mode = match turn {
        Turn::New => o.mode,
        Turn::Answer { mode, .. } => *mode,
    };
    put("run_mode", s(mode.run_mode.map(RunMode::as_str)));
    put("pipeline_name", s(mode.pipeline_name));
    let mut th = Map::new();
    if let Some(e) = o.thinking.enabled {
        th.insert("enabled".into(), json!(e));
    }
    if let Some(e) = o.thinking.effort {
        th.insert("effort".into(), json!(e));
    }
    if let Some(b) = o.thinking.budget {
        th.insert("budget".into(), json!(b));
    }
    if !th.is_empty() {
        put("thinking", Some(Value::Object(th)));
    }
    put("alibaba_cloud_access_key_id", s(o.cloud.access_key_id));
    put(
        "alibaba_cloud_access_key_secret",
        s(o.cloud.access_key_secret),
    );
    put("alibaba_cloud_security_token", s(o.cloud.security_token));
    put("alibaba_cloud_region_id", s(o.cloud.region_id));
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_uses_the_kernel_key_names() {
        let iac = TurnOptions {
            ros_invocation_id: "inv",
            cwd: "/w",
            preferred_language: Some("en"),
            model: Some(" m "),
            llm_api_key: Some("k"),
            user_id: Some("u"),
            candidate_presentation: Some(Presentation::Rich),
            mode: ExecutionMode {
                run_mode: Some(RunMode::Pipeline),
                pipeline_name: Some("selling"),
            },
            thinking: ThinkingMetadata {
                enabled: Some(true),
                effort: None,
                budget: Some(9),
            },
            cloud: CloudCredentials {
                access_key_id: Some("id"),
                region_id: Some("cn"),
                ..Default::default()
            },
            ..Default::default()
        };
        let m = iac_code_metadata(&iac, &Turn::New);
        assert_eq!(m["iac_code_model"], "m");
        assert_eq!(m["iac_code_api_key"], "k");
        assert_eq!(m["user_id"], "u");
        assert_eq!(m["candidatePresentation"], "rich-v1");
        assert_eq!(m["run_mode"], "pipeline");
        assert_eq!(m["cleanupOnly"], false);
        assert_eq!(m["pipeline_name"], "selling");
        assert_eq!(m["thinking"], json!({"enabled": true, "budget": 9}));
        assert_eq!(m["alibaba_cloud_region_id"], "cn");
        assert!(m.get("alibaba_cloud_security_token").is_none());
        // An answer carries the execution's mode, not the request's.
        let answer = Turn::Answer {
            task_id: "t",
            extra: None,
            mode: ExecutionMode {
                run_mode: Some(RunMode::Normal),
                pipeline_name: None,
            },
        };
        let m = iac_code_metadata(&iac, &answer);
        assert_eq!(m["run_mode"], "normal");
        assert!(m.get("pipeline_name").is_none());
    }

    #[test]
    fn no_run_mode_is_sent_when_the_client_gave_none() {
        let iac = TurnOptions {
            cwd: "/w",
            ..Default::default()
        };
        let m = iac_code_metadata(&iac, &Turn::New);
        assert!(m.get("run_mode").is_none(), "{m}");
        assert!(m.get("pipeline_name").is_none(), "{m}");
    }

    #[test]
    fn a_new_turn_and_an_answer_are_one_message_shape_and_only_the_answer_names_the_task() {
        let iac = TurnOptions {
            cwd: "/w",
            ros_invocation_id: "inv",
            preferred_language: Some("en"),
            ..Default::default()
        };
        let parts = [json!({"text": "hi"})];
        let turn = user_message("m1", parts.to_vec(), "ctx", &iac, Turn::New);
        assert_eq!(
            turn,
            json!({"messageId": "m1", "role": "ROLE_USER", "parts": parts, "contextId": "ctx",
                   "metadata": {"iac_code": iac_code_metadata(&iac, &Turn::New)}})
        );
        let answer = Turn::Answer {
            task_id: "task-1",
            extra: Some(json!({"inputResponse": {"value": "v"}})),
            mode: ExecutionMode::default(),
        };
        let m = user_message("m2", parts.to_vec(), "ctx", &iac, answer);
        assert_eq!(m["taskId"], "task-1");
        assert_eq!(
            m["metadata"]["iac_code"]["inputResponse"],
            json!({"value": "v"})
        );
        assert_eq!(m["metadata"]["iac_code"]["cwd"], "/w");
        assert!(m["metadata"]["iac_code"].get("run_mode").is_none());
    }
}
