//! Normal (non-interrupt) runs over real HTTP against the fake kernel: routes, the projection of
//! a turn, upstream failures, heartbeats, disconnects, thread rules and the state file. What a
//! request must be to start a run is in `input_rules.rs`.

use fake_kernel::FakeKernel;
use iac_code_agui::testing::check_spans;
use serde_json::{json, Value};
use std::io::Read;
use std::time::Duration;
use test_support::*;

fn setup() -> (FakeKernel, Adapter) {
    let k = FakeKernel::start();
    let a = Adapter::start(&k.url);
    (k, a)
}

#[test]
fn health_answers_the_reference_fields() {
    let (_k, a) = setup();
    let resp = agent().get(format!("{}/health", a.url)).call().unwrap();
    assert_eq!(resp.status(), 200);
    let v: Value = serde_json::from_str(&resp.into_body().read_to_string().unwrap()).unwrap();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "executionKernel",
            "protocol",
            "protocolPackageVersion",
            "serverVersion",
            "status"
        ]
    );
    assert_eq!(v["status"], "ok");
    assert_eq!(v["protocol"], "ag-ui");
    assert_eq!(v["executionKernel"], "a2a-1.0");
}

#[test]
fn unknown_routes_are_404_and_wrong_methods_405_with_json_errors() {
    let (_k, a) = setup();
    let r = agent().get(format!("{}/nope", a.url)).call().unwrap();
    assert_eq!(r.status(), 404);
    let v: Value = serde_json::from_str(&r.into_body().read_to_string().unwrap()).unwrap();
    assert_eq!(v["error"]["code"], "INVALID_INPUT");
    assert_eq!(
        agent().get(format!("{}/", a.url)).call().unwrap().status(),
        405
    );
    assert_eq!(
        agent()
            .post(format!("{}/health", a.url))
            .send_empty()
            .unwrap()
            .status(),
        405
    );
    let cancel = format!("{}/extensions/iac-code/v1/executions/x/cancel", a.url);
    assert_eq!(agent().get(cancel).call().unwrap().status(), 405);
}

#[test]
fn a_normal_turn_streams_what_the_reference_adapter_streamed() {
    let (k, a) = setup();
    let thread = "8473547e-c8ed-4aef-a84c-603a6a8d42da";
    let r = a.run(&a.request(thread, "run-1", "Say hello in one sentence."));
    assert_eq!(r.status, 200);
    assert!(r.content_type.starts_with("text/event-stream"));
    let golden: Vec<Value> = data_lines(include_str!("data/normal-turn.agui.sse"));
    let ours_task = r.session()["taskId"].as_str().unwrap().to_string();
    // Ours over the reference: RUN_STARTED echoes the user's message (a thread's live feed
    // needs it); the rest is the reference's stream.
    let mut events = r.events.clone();
    let input = events[0].as_object_mut().unwrap().remove("input").unwrap();
    assert_eq!(
        input["messages"],
        json!([{"id": "msg-run-1", "role": "user", "content": "Say hello in one sentence."}])
    );
    // A whole `RunAgentInput` (its required arrays too): `@ag-ui/core`'s schema refuses less.
    assert_eq!(
        (&input["tools"], &input["context"]),
        (&json!([]), &json!([]))
    );
    assert_eq!(
        without_ids(&events, &ours_task),
        without_ids(&golden, "4c0dde0f-2c97-4a63-953c-c18ee9a20c1e")
    );
    let s = r.session();
    assert_eq!(
        s["contextId"],
        "agui-1770b0bf824e9baef15a0dd4d95308def8aad5a5"
    );
    assert_eq!(s["threadId"], thread);
    assert_eq!(s["aguiRunId"], "run-1");
    assert_eq!(s["rosInvocationId"], "invocation-1");
    assert!(s["sessionId"].as_str().unwrap().starts_with("session-"));
    // What reached the kernel.
    let calls = k.calls("SendStreamingMessage");
    assert_eq!(calls.len(), 1);
    let req = &calls[0];
    assert_eq!(req["headers"]["a2a-version"], "1.0");
    let m = &req["body"]["params"]["message"];
    assert_eq!(m["messageId"], "msg-run-1");
    assert_eq!(
        m["contextId"],
        "agui-1770b0bf824e9baef15a0dd4d95308def8aad5a5"
    );
    assert!(m.get("taskId").is_none());
    assert_eq!(m["parts"], json!([{"text": "Say hello in one sentence."}]));
    assert_eq!(
        m["metadata"]["iac_code"],
        json!({"cwd": a.cwd(), "rosInvocationId": "invocation-1", "cleanupOnly": false, "preferredLanguage": "en"}),
        "no runMode given: no run_mode sent, the kernel decides (spec: 缺省由 A2A runtime 决定)"
    );
    assert_eq!(
        req["body"]["params"]["configuration"],
        json!({"acceptedOutputModes": ["text/plain"]})
    );
}

#[test]
fn forwarded_props_map_to_the_kernel_metadata_keys_and_images_to_raw_parts() {
    let (k, a) = setup();
    let mut body = a.request("t-meta", "r1", "hi");
    body["messages"][0]["content"] = json!([
        {"type": "text", "text": "look"},
        {"type": "image", "source": {"type": "data", "value": "iVBORw0KGgo=", "mimeType": "image/png"}}
    ]);
    let iac = &mut body["forwardedProps"]["iacCode"];
    iac["model"] = json!("qwen-max");
    iac["userId"] = json!("user-7");
    iac["channel"] = json!("console");
    iac["preferredLanguage"] = json!("zh-CN");
    iac["candidatePresentation"] = json!("rich");
    iac["runMode"] = json!("pipeline");
    iac["pipelineName"] = json!("selling");
    iac["cleanupOnly"] = json!(true);
    iac["thinking"] = json!({"enabled": true, "effort": "high", "budget": 2048});
    iac["alibabaCloud"] = json!({"accessKeyId": "AKID", "regionId": "cn-hangzhou"});
    let r = a.run(&body);
    assert_eq!(r.status, 200, "{:?}", r.json);
    let m = &k.calls("SendStreamingMessage")[0]["body"]["params"]["message"];
    assert_eq!(
        m["parts"][1],
        json!({"raw": "iVBORw0KGgo=", "mediaType": "image/png"})
    );
    let meta = &m["metadata"]["iac_code"];
    assert_eq!(meta["iac_code_model"], "qwen-max");
    assert_eq!(meta["user_id"], "user-7");
    assert_eq!(meta["channel"], "console");
    assert_eq!(meta["preferredLanguage"], "zh-CN");
    assert_eq!(meta["candidatePresentation"], "rich-v1");
    assert_eq!(meta["run_mode"], "pipeline");
    assert_eq!(meta["pipeline_name"], "selling");
    assert_eq!(meta["cleanupOnly"], true);
    assert_eq!(
        meta["thinking"],
        json!({"enabled": true, "effort": "high", "budget": 2048})
    );
    assert_eq!(meta["alibaba_cloud_access_key_id"], "AKID");
    assert_eq!(meta["alibaba_cloud_region_id"], "cn-hangzhou");
}

#[test]
fn the_upstream_bearer_token_is_sent() {
    let k = FakeKernel::with_token("up-secret");
    let a = Adapter::start_with(
        &k.url,
        Options {
            envs: vec![("IAC_CODE_AGUI_A2A_TOKEN".into(), "up-secret".into())],
            ..Default::default()
        },
    );
    let r = a.run(&a.request("t-tok", "r1", "hi"));
    assert_eq!(r.last()["outcome"]["type"], "success");
    assert_eq!(
        k.calls("SendStreamingMessage")[0]["headers"]["authorization"],
        "Bearer up-secret"
    );
    let no_token = Adapter::start(&k.url);
    let r = no_token.run(&no_token.request("t-tok2", "r1", "hi"));
    assert_eq!(r.error_code(), "A2A_UNAVAILABLE");
}

#[test]
fn reasoning_tools_artifacts_and_progress_are_projected_and_balanced() {
    let (_k, a) = setup();
    let r = a.run(&a.request("t-rich", "r1", "scenario:reasoning"));
    assert_eq!(
        r.types(),
        [
            "RUN_STARTED",
            "CUSTOM",
            "REASONING_START",
            "REASONING_MESSAGE_START",
            "REASONING_MESSAGE_CONTENT",
            "REASONING_MESSAGE_CONTENT",
            "REASONING_MESSAGE_END",
            "REASONING_END",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "RUN_FINISHED"
        ]
    );
    assert_eq!(r.last()["usage"][0]["totalTokens"], 5);
    let r = a.run(&a.request("t-rich", "r2", "scenario:tools-artifact"));
    check_spans(&r.events).unwrap();
    let t = r.types();
    for want in [
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
    ] {
        assert!(t.contains(&want.to_string()), "{want} in {t:?}");
    }
    let start = r
        .events
        .iter()
        .find(|e| e["type"] == "TOOL_CALL_START")
        .unwrap();
    assert!(start["parentMessageId"]
        .as_str()
        .unwrap()
        .ends_with("-message"));
    assert_eq!(
        r.custom("iac-code.artifact.v1")[0]["value"]["artifactId"],
        "a1"
    );
    assert_eq!(
        r.custom("iac-code.artifact.v1")[0]["value"]["schemaVersion"],
        1
    );
    assert_eq!(r.custom("iac-code.tool-progress.v1").len(), 2);
    let result = r
        .events
        .iter()
        .find(|e| e["type"] == "TOOL_CALL_RESULT")
        .unwrap();
    assert_eq!(result["content"], r#"{"ok":true}"#);
    assert_eq!(r.last()["outcome"]["type"], "success");
}

#[test]
fn upstream_failures_end_the_run_with_the_spec_codes_and_closed_spans() {
    let (k, a) = setup();
    for (i, (scenario, code)) in [
        ("fail", "A2A_EXECUTION_FAILED"),
        ("rpc-error", "A2A_EXECUTION_FAILED"),
        ("die", "A2A_UNAVAILABLE"),
        ("garbage", "A2A_PROTOCOL_ERROR"),
        ("mismatch", "A2A_PROTOCOL_ERROR"),
        ("no-such-scenario", "A2A_EXECUTION_FAILED"),
    ]
    .into_iter()
    .enumerate()
    {
        let r = a.run(&a.request(
            &format!("t-fail-{i}"),
            "r1",
            &format!("scenario:{scenario}"),
        ));
        assert_eq!(r.status, 200);
        assert_eq!(r.types()[0], "RUN_STARTED");
        assert_eq!(r.error_code(), code, "{scenario}: {:?}", r.last());
        assert!(!r.last()["message"].as_str().unwrap().is_empty());
        check_spans(&r.events).unwrap();
    }
    let failed = a.run(&a.request("t-fail-x", "r1", "scenario:fail"));
    assert!(failed.last()["message"]
        .as_str()
        .unwrap()
        .contains("rejected the request"));
    // A thread whose run failed takes the next turn normally.
    let r = a.run(&a.request("t-fail-0", "r2", "hello again"));
    assert_eq!(r.last()["outcome"]["type"], "success");
    drop(k);
}

#[test]
fn an_unreachable_kernel_is_a2a_unavailable() {
    let port = free_port();
    let a = Adapter::start(&format!("http://127.0.0.1:{port}"));
    let r = a.run(&a.request("t-down", "r1", "hi"));
    assert_eq!(r.error_code(), "A2A_UNAVAILABLE");
    assert_eq!(r.types(), ["RUN_STARTED", "RUN_ERROR"]);
}

#[test]
fn sse_framing_from_the_upstream_survives_crlf_comments_and_split_chunks() {
    let (_k, a) = setup();
    let r = a.run(&a.request("t-frame", "r1", "scenario:framing"));
    assert_eq!(r.text(), "你好");
    assert_eq!(r.last()["outcome"]["type"], "success");
}

#[test]
fn a_silent_upstream_gets_heartbeat_comments() {
    let (_k, a) = setup();
    let r = a.run(&a.request("t-hb", "r1", "scenario:silent"));
    assert!(r.heartbeats >= 2, "heartbeats: {}", r.heartbeats);
    assert_eq!(r.text(), "Thinking done.");
}

#[test]
fn a_client_that_disconnects_mid_run_gets_its_task_cancelled_while_the_upstream_is_silent() {
    let (k, a) = setup();
    let mut stream = open_stream(&a.url, &a.request("t-gone", "r1", "scenario:hang"));
    let mut buf = [0u8; 256];
    let _ = stream.read(&mut buf).unwrap();
    assert!(eventually(5, || !k
        .calls("SendStreamingMessage")
        .is_empty()));
    drop(stream);
    assert!(
        eventually(10, || !k.calls("CancelTask").is_empty()),
        "CancelTask was not sent"
    );
    let task = k.calls("CancelTask")[0]["body"]["params"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(k.task_state(&task).as_deref(), Some("TASK_STATE_CANCELED"));
    // The thread is free again.
    assert!(eventually(5, || a
        .run(&a.request("t-gone", "r2", "hi"))
        .status
        == 200));
}

#[test]
fn a_second_concurrent_run_on_a_thread_is_thread_busy() {
    let (k, a) = setup();
    let stream = open_stream(&a.url, &a.request("t-busy", "r1", "scenario:hang"));
    assert!(eventually(5, || !k
        .calls("SendStreamingMessage")
        .is_empty()));
    let second = a.run(&a.request("t-busy", "r2", "hi"));
    assert_eq!((second.status, second.error_code()), (409, "THREAD_BUSY"));
    let other_thread = a.run(&a.request("t-other", "r1", "hi"));
    assert_eq!(other_thread.last()["outcome"]["type"], "success");
    drop(stream);
}

#[test]
fn a_thread_stays_bound_to_its_first_cwd_and_user() {
    let (_k, a) = setup();
    let first = a.run(&a.request("t-bind", "r1", "hi"));
    assert_eq!(first.status, 200);
    let other = a.workspace.join("other");
    std::fs::create_dir_all(&other).unwrap();
    let mut moved = a.request("t-bind", "r2", "hi");
    moved["forwardedProps"]["iacCode"]["cwd"] = json!(other);
    assert_eq!(a.run(&moved).error_code(), "THREAD_BINDING_CONFLICT");
    let mut user = a.request("t-bind", "r3", "hi");
    user["forwardedProps"]["iacCode"]["userId"] = json!("someone-else");
    let r = a.run(&user);
    assert_eq!((r.status, r.error_code()), (409, "THREAD_BINDING_CONFLICT"));
}

#[test]
fn a_reused_run_id_is_duplicate_for_the_same_request_and_conflict_otherwise() {
    let (k, a) = setup();
    let body = a.request("t-idem", "r1", "hi");
    assert_eq!(a.run(&body).last()["outcome"]["type"], "success");
    let again = a.run(&body);
    assert_eq!(
        (again.status, again.error_code()),
        (409, "DUPLICATE_RUN_ID")
    );
    let changed = a.run(&a.request("t-idem", "r1", "something else"));
    assert_eq!(
        (changed.status, changed.error_code()),
        (409, "RUN_ID_CONFLICT")
    );
    assert_eq!(k.calls("SendStreamingMessage").len(), 1);
}

#[test]
fn an_unwritable_state_dir_fails_closed_before_the_stream() {
    if !can_inject(
        Fault::Immutable,
        "an_unwritable_state_dir_fails_closed_before_the_stream",
    ) {
        return;
    }
    let k = FakeKernel::start();
    let root = temp_dir("ro-state");
    let _ro = Immutable::new(&root.join("threads"));
    let a = Adapter::start_with(
        &k.url,
        Options {
            state_dir: Some(root),
            ..Default::default()
        },
    );
    let r = a.run(&a.request("t-ro", "r1", "hi"));
    assert_eq!(
        (r.status, r.error_code()),
        (500, "STATE_PERSISTENCE_FAILED")
    );
    assert!(k.calls("SendStreamingMessage").is_empty());
}

#[test]
fn an_unreadable_state_file_is_state_unavailable() {
    let k = FakeKernel::start();
    let root = temp_dir("bad-state");
    std::fs::create_dir_all(root.join("threads")).unwrap();
    std::fs::write(root.join("threads/t-bad.json"), b"{torn").unwrap();
    let a = Adapter::start_with(
        &k.url,
        Options {
            state_dir: Some(root),
            ..Default::default()
        },
    );
    let r = a.run(&a.request("t-bad", "r1", "hi"));
    assert_eq!((r.status, r.error_code()), (503, "STATE_UNAVAILABLE"));
}

#[test]
fn secrets_reach_the_kernel_but_never_the_state_dir_or_the_logs() {
    let (k, a) = setup();
    let mut body = a.request("t-secret", "r1", "hi");
    let iac = &mut body["forwardedProps"]["iacCode"];
    iac["llmApiKey"] = json!("sk-LLMKEY-0123456789");
    iac["alibabaCloud"] = json!({"accessKeyId": "LTAI-ID", "accessKeySecret": "AKSECRET-abcdef", "securityToken": "STSTOKEN-xyz"});
    assert_eq!(a.run(&body).last()["outcome"]["type"], "success");
    // A failing request with the same secrets, and a bad one, so error paths log too.
    body["runId"] = json!("r2");
    body["forwardedProps"]["iacCode"]["cwd"] = json!("/not/allowed");
    assert_eq!(a.run(&body).status, 400);
    let meta =
        &k.calls("SendStreamingMessage")[0]["body"]["params"]["message"]["metadata"]["iac_code"];
    assert_eq!(meta["iac_code_api_key"], "sk-LLMKEY-0123456789");
    assert_eq!(meta["alibaba_cloud_access_key_secret"], "AKSECRET-abcdef");
    assert_eq!(meta["alibaba_cloud_security_token"], "STSTOKEN-xyz");
    let disk = read_tree(&a.state_dir);
    let logs = a.logs();
    assert!(!disk.is_empty() && !logs.is_empty());
    for secret in ["sk-LLMKEY-0123456789", "AKSECRET-abcdef", "STSTOKEN-xyz"] {
        assert!(!disk.contains(secret), "{secret} on disk");
        assert!(!logs.contains(secret), "{secret} in logs");
    }
}

/// Every file under `dir`, concatenated.
fn read_tree(dir: &std::path::Path) -> String {
    let mut all = String::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                all.push_str(&read_tree(&p));
            } else {
                all.push_str(&String::from_utf8_lossy(
                    &std::fs::read(&p).unwrap_or_default(),
                ));
            }
        }
    }
    all
}

#[test]
fn the_state_file_keeps_the_reference_layout() {
    let (_k, a) = setup();
    assert_eq!(a.run(&a.request("thread-layout", "r1", "hi")).status, 200);
    let ours = a.state_file("thread-layout");
    let reference: Value =
        serde_json::from_str(include_str!("data/permission-flow.state.json")).unwrap();
    let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&ours), keys(&reference));
    // Plus the execution's mode and the adapter process that runs it (an upgrade's two
    // processes, src/store/owner.rs), which the reference neither writes nor minds (its loader
    // reads named keys only: `iac_code/agui/adapter.py`, `_restore_thread_state`).
    let mut execution = keys(&reference["execution"]);
    execution.extend([
        "owner".to_string(),
        "pipelineName".to_string(),
        "runMode".to_string(),
    ]);
    execution.sort();
    assert_eq!(keys(&ours["execution"]), execution);
    assert_eq!(ours["execution"]["runMode"], Value::Null, "none given");
    assert_eq!(ours["contextId"], json!(fake_context("thread-layout")));
    assert_eq!(
        ours["terminalExecutionIds"][0],
        ours["execution"]["executionId"]
    );
    assert!(ours["runDigests"]["r1"].as_str().unwrap().len() == 64);
}

fn fake_context(thread: &str) -> String {
    use sha2::Digest;
    let h = sha2::Sha256::digest(thread.as_bytes());
    let hex: String = h.iter().map(|b| format!("{b:02x}")).collect();
    format!("agui-{}", &hex[..40])
}

#[test]
fn the_next_turn_reuses_the_context_with_a_new_execution_and_invocation() {
    let (k, a) = setup();
    let first = a.run(&a.request("t-turns", "r1", "hi"));
    let mut second_body = a.request("t-turns", "r2", "and again");
    second_body["forwardedProps"]["iacCode"]["rosInvocationId"] = json!("invocation-2");
    let second = a.run(&second_body);
    assert_eq!(second.last()["outcome"]["type"], "success");
    let (s1, s2) = (first.session(), second.session());
    assert_eq!(s1["contextId"], s2["contextId"]);
    assert_eq!(s1["sessionId"], s2["sessionId"], "same iac-code session");
    assert_ne!(s1["executionId"], s2["executionId"]);
    assert_eq!(s2["rosInvocationId"], "invocation-2");
    let calls = k.calls("SendStreamingMessage");
    assert_eq!(
        calls[0]["body"]["params"]["message"]["contextId"],
        calls[1]["body"]["params"]["message"]["contextId"]
    );
    std::thread::sleep(Duration::from_millis(10));
}

#[test]
fn preferred_language_then_accept_language_pick_among_seven_languages() {
    let (_k, a) = setup();
    let mut body = a.request("t-lang", "r1", "hi");
    body["forwardedProps"]["iacCode"]["preferredLanguage"] = json!("fr");
    body["forwardedProps"]["iacCode"]["unknownField"] = json!(true);
    let r = post_run(&a.url, &body, &[("Accept-Language", "zh")]);
    let message = r.json["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("Champ inconnu"), "{message}");
    let mut bad = a.request("t-lang-2", "r1", "hi");
    bad["forwardedProps"]["iacCode"]["cwd"] = json!("relative/path");
    let r = post_run(&a.url, &bad, &[("Accept-Language", "de-DE, ja;q=0.5")]);
    let message = r.json["error"]["message"].as_str().unwrap();
    assert!(message.contains("absoluter Pfad"), "{message}");
}
