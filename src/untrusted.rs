//! The parsers of untrusted bytes, each with the property it must keep, for the coverage-guided
//! fuzz targets (`tests/fuzz_targets/`) and their regression tests (`tests/fuzz.rs`); hidden API
//! like `hotpath`. Each `check_*` runs one parser on arbitrary bytes and panics when a property
//! fails, so a target is one call and a finding replays as one call.
//!
//! What is untrusted: a client's body (`RunAgentInput` with its `resume` entries, the cancel and
//! subscribe bodies), its `Last-Event-ID` and `Accept-Language`, the `--config` file, and a
//! kernel's stream (a hostile or broken kernel is untrusted too): the SSE reader, the frame view
//! and the pipeline envelope view. The request head is the vendored tiny_http's
//! (`tiny_http::parse_request`).

mod a2a;
mod head;
mod text;

pub use a2a::{check_a2a_frame, check_a2a_stream, check_sse};
pub use head::check_http_head;
pub use text::{check_accept_language, check_cursor, check_yaml_config};

use crate::error::{Error, Lang};
use crate::input::{parse_cancel, parse_run};
use std::path::PathBuf;

/// The one `INVALID_INPUT` answer of a refused body, in English (the catalogue decides the rest).
fn refusal(e: &Error) -> String {
    assert_eq!(e.status(), 400, "a refused body is a 400: {e}");
    e.to_json(Lang::En).to_string()
}

/// The secrets a run request may carry, where they are.
const SECRETS: [&str; 3] = [
    "/forwardedProps/iacCode/llmApiKey",
    "/forwardedProps/iacCode/alibabaCloud/accessKeySecret",
    "/forwardedProps/iacCode/alibabaCloud/securityToken",
];

/// `RunAgentInput`: the verdict does not depend on the language of the answer; the same body
/// gives the same digest twice (run-id idempotency); a digest is a SHA-256 in hex; neither the
/// verdict, nor the digest, nor a refusal's message in any language depends on a secret's value.
pub fn check_run_input(body: &[u8]) {
    let cwds = [PathBuf::from("/tmp")];
    let (_, first) = parse_run(body, &cwds, None);
    let (lang, second) = parse_run(body, &cwds, Some("zh-CN, fr;q=0.5"));
    assert!(Lang::ALL.contains(&lang));
    match (first, second) {
        (Ok(a), Ok(b)) => {
            assert_eq!(a.digest, b.digest, "one body, two digests");
            assert_eq!(a.digest.len(), 64);
            assert!(a.digest.bytes().all(|c| c.is_ascii_hexdigit()));
            assert!(!a.thread_id.is_empty() && !a.run_id.is_empty());
            assert!(a.run_id.len() <= 256);
            assert_eq!((a.thread_id, a.run_id), (b.thread_id, b.run_id));
        }
        (Err(a), Err(b)) => assert_eq!(refusal(&a), refusal(&b)),
        (a, b) => panic!("the verdict depends on the language: {a:?} / {b:?}"),
    }
    if let Ok(tree) = serde_json::from_slice::<serde_json::Value>(body) {
        check_secrets_change_nothing(tree, &cwds);
    }
}

/// The body written again, then once more with other values for its (non-empty string)
/// secrets: the same digest, or the same refusal in every language.
fn check_secrets_change_nothing(mut tree: serde_json::Value, cwds: &[PathBuf]) {
    let verdict = |tree: &serde_json::Value| {
        parse_run(tree.to_string().as_bytes(), cwds, None)
            .1
            .map(|run| run.digest)
            .map_err(|e| {
                Lang::ALL
                    .iter()
                    .map(|&lang| e.message(lang))
                    .collect::<Vec<_>>()
            })
    };
    let before = verdict(&tree);
    let mut changed = false;
    for path in SECRETS {
        match tree.pointer_mut(path) {
            Some(v @ serde_json::Value::String(_)) if v.as_str() != Some("") => {
                *v = serde_json::Value::from("another secret value");
                changed = true;
            }
            _ => {}
        }
    }
    if changed {
        assert_eq!(
            before,
            verdict(&tree),
            "a secret's value changes the verdict"
        );
    }
}

/// The cancel and subscribe bodies: a refusal is a 400; what is accepted reads back the same
/// from the body rebuilt of its fields.
pub fn check_control_bodies(body: &[u8]) {
    match parse_cancel(body) {
        Ok(c) => {
            let again = serde_json::json!({"threadId": c.thread_id,
                "rosInvocationId": c.ros_invocation_id});
            let d = parse_cancel(again.to_string().as_bytes()).expect("rebuilt cancel body");
            assert_eq!(
                (c.thread_id, c.ros_invocation_id),
                (d.thread_id, d.ros_invocation_id)
            );
        }
        Err(e) => {
            refusal(&e);
        }
    }
    match crate::observe::subscribe_body(body) {
        Ok(s) => {
            let again = serde_json::json!({"threadId": s.thread_id, "runId": s.run_id,
                "rosInvocationId": s.ros_invocation_id});
            let t = crate::observe::subscribe_body(again.to_string().as_bytes())
                .expect("rebuilt subscribe body");
            assert_eq!(
                (s.thread_id, s.run_id, s.ros_invocation_id),
                (t.thread_id, t.run_id, t.ros_invocation_id)
            );
        }
        Err(e) => {
            refusal(&e);
        }
    }
}
