//! What a request must be before a run starts (src/input/, the request checks of src/http/),
//! over real HTTP against the fake kernel: the body's size, media type and JSON; the envelope's
//! fields (a 400 in the client's language); the run id's length and a thread id of any length;
//! the cwd (inside the allowed roots, through no symlink out of them, without control
//! characters); the `Host` header; the bearer token and its scheme; the user header a balancer
//! routes by.

use fake_kernel::FakeKernel;
use serde_json::{json, Value};
use test_support::raw::{body_of, exchange, head, Response};
use test_support::*;

fn setup() -> (FakeKernel, Adapter) {
    let k = FakeKernel::start();
    let a = Adapter::start(&k.url);
    (k, a)
}

#[test]
fn oversized_bodies_wrong_media_types_and_bodies_not_json_are_http_errors() {
    let (_k, a) = setup();
    let big = vec![b' '; 12 * 1024 * 1024 + 1];
    let r = agent()
        .post(format!("{}/", a.url))
        .header("Content-Type", "application/json")
        .send(&big[..])
        .unwrap();
    assert_eq!(r.status(), 413);
    let v: Value = serde_json::from_str(&r.into_body().read_to_string().unwrap()).unwrap();
    assert_eq!(v["error"]["code"], "REQUEST_TOO_LARGE");
    let r = agent()
        .post(format!("{}/", a.url))
        .header("Content-Type", "text/plain")
        .send("{}")
        .unwrap();
    assert_eq!(r.status(), 415);
    let v: Value = serde_json::from_str(&r.into_body().read_to_string().unwrap()).unwrap();
    assert_eq!(v["error"]["code"], "UNSUPPORTED_MEDIA_TYPE");
    let r = agent()
        .post(format!("{}/", a.url))
        .header("Content-Type", "application/json")
        .send("{not json")
        .unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = serde_json::from_str(&r.into_body().read_to_string().unwrap()).unwrap();
    assert_eq!(v["error"]["code"], "INVALID_JSON");
}

/// `Accept` never refuses a run: the reference streams whatever the client declares (the spec
/// says a client *should* declare `text/event-stream` and names no refusal), so a client sending
/// `Accept: application/json`, a media type in capitals (media types are case-insensitive,
/// RFC 9110 §8.3.1) or anything else gets the SSE stream, as from the reference.
#[test]
fn every_accept_value_gets_the_stream_as_from_the_reference() {
    let (_k, a) = setup();
    for (i, accept) in [
        "application/json",
        "TEXT/EVENT-STREAM",
        "Text/Event-Stream; q=1",
        "text/html",
        "application/json, text/plain;q=0.5",
    ]
    .into_iter()
    .enumerate()
    {
        let body = a.request("t-accept", &format!("r{i}"), "hi");
        let resp = agent()
            .post(format!("{}/", a.url))
            .header("Content-Type", "application/json")
            .header("Accept", accept)
            .send(serde_json::to_vec(&body).unwrap())
            .unwrap();
        let r = read_result(resp);
        assert_eq!(r.status, 200, "Accept: {accept}: {}", r.json);
        assert_eq!(r.last()["outcome"]["type"], "success", "Accept: {accept}");
    }
}

#[test]
fn invalid_input_is_a_localized_400_before_any_stream() {
    let (k, a) = setup();
    let mut body = a.request("t-invalid", "r1", "hi");
    body["forwardedProps"]["iacCode"]["unknownField"] = json!(true);
    let en = a.run(&body);
    assert_eq!(en.status, 400);
    assert_eq!(en.json["error"]["code"], "INVALID_INPUT");
    assert!(en.json["error"]["message"]
        .as_str()
        .unwrap()
        .contains("Unknown field"));
    body["forwardedProps"]["iacCode"]["preferredLanguage"] = json!("zh-CN");
    let zh = a.run(&body);
    assert!(
        zh.json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("未知字段"),
        "{}",
        zh.json
    );
    let mut plain = a.request("t-invalid", "r2", "hi");
    plain["tools"] = json!([{"name": "x", "description": "y"}]);
    let zh = post_run(
        &a.url,
        &plain,
        &[("Accept-Language", "zh-CN,zh;q=0.9,en;q=0.5")],
    );
    assert!(
        zh.json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("空数组"),
        "{}",
        zh.json
    );
    let not_json = agent()
        .post(format!("{}/", a.url))
        .header("Content-Type", "application/json")
        .send("{nope")
        .unwrap();
    assert_eq!(not_json.status(), 400);
    assert!(
        k.calls("SendStreamingMessage").is_empty(),
        "nothing reached the kernel"
    );
}

#[test]
fn a_run_id_over_256_bytes_is_400() {
    let k = FakeKernel::start();
    let a = Adapter::start(&k.url);
    let long = a.run(&a.request("t-runid", &"r".repeat(257), "hi"));
    assert_eq!(
        (long.status, long.error_code()),
        (400, "INVALID_INPUT"),
        "{:?}",
        long.json
    );
    let max = a.run(&a.request("t-runid", &"r".repeat(256), "hi"));
    assert_eq!(max.status, 200, "{:?}", max.json);
    assert!(k.calls("SendStreamingMessage").len() == 1);
}

#[test]
fn a_long_plain_thread_id_maps_to_a_valid_file_name() {
    let k = FakeKernel::start();
    let a = Adapter::start(&k.url);
    let thread = "a".repeat(300);
    for run in ["r1", "r2"] {
        let r = a.run(&a.request(&thread, run, "hi"));
        assert_eq!(r.status, 200, "{run}: {:?}", r.json);
        assert_eq!(r.last()["outcome"]["type"], "success");
    }
    for e in std::fs::read_dir(a.state_dir.join("threads"))
        .unwrap()
        .flatten()
    {
        let name = e.file_name();
        assert!(name.len() <= 255, "{name:?}");
    }
}

#[test]
fn a_cwd_outside_the_roots_is_refused_naming_the_variable_and_the_roots() {
    let k = FakeKernel::start();
    let a = Adapter::start(&k.url);
    let mut body = a.request("t-cwd", "r1", "hi");
    body["forwardedProps"]["iacCode"]["cwd"] = "/".into();
    let r = a.run(&body);
    let message = r.json["error"]["message"].as_str().unwrap_or("");
    assert_eq!(r.status, 400);
    assert!(message.contains("IAC_CODE_AGUI_ALLOWED_CWDS"), "{message}");
    let root = a.workspace.parent().unwrap().display().to_string();
    assert!(message.contains(&root), "{message}");
}

#[test]
fn a_symlink_under_an_allowed_root_cannot_escape_it() {
    let k = FakeKernel::start();
    let a = Adapter::start(&k.url);
    let ws = a.workspace.clone();
    std::os::unix::fs::symlink("/etc", ws.join("link-to-etc")).unwrap();
    std::fs::create_dir_all(ws.join("inner")).unwrap();
    std::os::unix::fs::symlink(ws.join("inner"), ws.join("link-inner")).unwrap();
    for (i, cwd) in [ws.join("link-to-etc/nonexistent"), ws.join("link-to-etc")]
        .iter()
        .enumerate()
    {
        let mut body = a.request(&format!("t-link-{i}"), "r1", "hi");
        body["forwardedProps"]["iacCode"]["cwd"] = json!(cwd);
        let r = a.run(&body);
        assert_eq!(
            (r.status, r.error_code()),
            (400, "INVALID_INPUT"),
            "{cwd:?}"
        );
    }
    let mut body = a.request("t-link-in", "r1", "hi");
    body["forwardedProps"]["iacCode"]["cwd"] = json!(ws.join("link-inner/sub"));
    assert_eq!(a.run(&body).status, 200, "a link that stays inside is fine");
    assert_eq!(k.calls("SendStreamingMessage").len(), 1);
}

#[test]
fn a_cwd_with_control_characters_is_400() {
    let k = FakeKernel::start();
    let a = Adapter::start(&k.url);
    for (i, bad) in ["a\nb", "a\u{0}b", "a\rb", "a\u{1b}[2Jb", "a\tb"]
        .iter()
        .enumerate()
    {
        let mut body = a.request(&format!("t-ctl-{i}"), "r1", "hi");
        body["forwardedProps"]["iacCode"]["cwd"] = json!(format!("{}/{bad}", a.cwd()));
        let r = a.run(&body);
        assert_eq!(
            (r.status, r.error_code()),
            (400, "INVALID_INPUT"),
            "{bad:?}: {:?}",
            r.json
        );
    }
    assert!(k.calls("SendStreamingMessage").is_empty());
}

/// A run request with the given `Host` header (none if empty), answered in full.
fn run_with_host(a: &Adapter, host: &str, thread: &str) -> Response {
    let body = body_of(&a.request(thread, "r1", "hi"));
    let mut req = format!(
        "POST / HTTP/1.1\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !host.is_empty() {
        req.push_str(&format!("Host: {host}\r\n"));
    }
    req.push_str("\r\n");
    let mut bytes = req.into_bytes();
    bytes.extend_from_slice(&body);
    exchange(&a.url, &bytes)
        .unwrap_or_else(|e| panic!("Host {host}: {e}"))
        .unwrap_or_else(|| panic!("Host {host}: closed without an answer"))
}

#[test]
fn a_non_loopback_host_header_is_refused() {
    let k = FakeKernel::start();
    let a = Adapter::start(&k.url);
    let p = a.port();
    for (i, host) in [
        "evil.example".to_string(),
        format!("evil.example:{p}"),
        format!("127.0.0.1.evil.example:{p}"),
        format!("localhost.evil.example:{p}"),
        "10.0.0.1".to_string(),
    ]
    .iter()
    .enumerate()
    {
        let r = run_with_host(&a, host, &format!("t-host-bad-{i}"));
        assert!((400..500).contains(&r.status), "Host {host}: {}", r.head);
        assert_eq!(r.error_code(), "INVALID_INPUT", "Host {host}");
        // It names the value it compared and the way out behind a proxy that passes the Host.
        let message = r.json()["error"]["message"]
            .as_str()
            .unwrap_or("")
            .to_string();
        assert!(
            message.contains(&format!("`{host}`")) && message.contains("--allowed-host"),
            "{message}"
        );
    }
    assert!(
        k.calls("SendStreamingMessage").is_empty(),
        "a rebound Host started a run"
    );
    for (i, host) in [
        format!("127.0.0.1:{p}"),
        format!("localhost:{p}"),
        "localhost".to_string(),
        format!("[::1]:{p}"),
    ]
    .iter()
    .enumerate()
    {
        let r = run_with_host(&a, host, &format!("t-host-ok-{i}"));
        assert_eq!(r.status, 200, "Host {host}: {}", r.head);
    }
}

#[test]
fn an_allowed_host_is_accepted() {
    let k = FakeKernel::start();
    let a = Adapter::start_args(&k.url, &["--allowed-host", "agui.internal"]);
    let p = a.port();
    for host in [format!("agui.internal:{p}"), "agui.internal".to_string()] {
        let r = run_with_host(&a, &host, &format!("t-allowed-{}", host.len()));
        assert_eq!(r.status, 200, "Host {host}: {}", r.head);
    }
    let r = run_with_host(&a, &format!("other.internal:{p}"), "t-allowed-other");
    assert!((400..500).contains(&r.status), "{}", r.head);
}

#[test]
fn bearer_auth_protects_runs_and_cancel_but_not_health() {
    let k = FakeKernel::start();
    let a = Adapter::start_with(
        &k.url,
        Options {
            envs: vec![("IAC_CODE_AGUI_AUTH_TOKEN".into(), "tok-123".into())],
            ..Default::default()
        },
    );
    // `Adapter::spawn` clears the variable; set it through the environment of a second adapter.
    drop(a);
    let port = free_port();
    let state = temp_dir("auth");
    let mut child = std::process::Command::new(adapter_bin())
        .args([
            "--port",
            &port.to_string(),
            "--a2a-url",
            &k.url,
            "--state-dir",
            state.to_str().unwrap(),
        ])
        .env("IAC_CODE_AGUI_AUTH_TOKEN", "tok-123")
        .env("IAC_CODE_AGUI_ALLOWED_CWDS", state.to_str().unwrap())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}");
    wait_health(&url);
    let body = json!({"threadId": "t", "runId": "r", "state": {}, "tools": [], "context": [],
        "messages": [{"id": "m", "role": "user", "content": "hi"}],
        "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "i", "cwd": state.to_str().unwrap()}}});
    let none = post_run(&url, &body, &[]);
    assert_eq!(
        (none.status, none.json["error"]["code"].as_str()),
        (401, Some("UNAUTHORIZED"))
    );
    let wrong = post_run(&url, &body, &[("Authorization", "Bearer tok-124")]);
    assert_eq!(wrong.status, 401);
    let ok = post_run(&url, &body, &[("Authorization", "Bearer tok-123")]);
    assert_eq!(ok.status, 200);
    assert_eq!(ok.last()["type"], "RUN_FINISHED");
    let (status, _) = post_json(
        &format!("{url}/extensions/iac-code/v1/executions/e/cancel"),
        &json!({}),
    );
    assert_eq!(status, 401);
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn the_bearer_scheme_is_case_insensitive() {
    let k = FakeKernel::start();
    let a = Adapter::start_with(
        &k.url,
        Options {
            auth_token: Some("tok-123".into()),
            ..Default::default()
        },
    );
    let body = body_of(&json!({"threadId": "t-none", "rosInvocationId": "invocation-1"}));
    let status = |auth: &str| {
        let cl = format!("Content-Length: {}", body.len());
        let auth = format!("Authorization: {auth}");
        let mut req = head(
            "POST",
            "/extensions/iac-code/v1/executions/e1/cancel",
            &["Content-Type: application/json", &cl, &auth],
        );
        req.extend_from_slice(&body);
        exchange(&a.url, &req).unwrap().expect("an answer").status
    };
    for ok in [
        "Bearer tok-123",
        "bearer tok-123",
        "BEARER tok-123",
        "bEaReR tok-123",
    ] {
        assert_ne!(status(ok), 401, "{ok}");
    }
    for bad in [
        "Basic tok-123",
        "Bearertok-123",
        "BEARER tok-124",
        "tok-123",
    ] {
        assert_eq!(status(bad), 401, "{bad}");
    }
}

#[test]
fn a_forwarded_prop_beside_iac_code_is_refused_by_name_with_where_frameworks_put_it() {
    let (k, a) = setup();
    let mut body = a.request("t-fwd", "r1", "hi");
    body["forwardedProps"]["model"] = json!("qwen-max");
    let r = a.run(&body);
    assert_eq!((r.status, r.error_code()), (400, "INVALID_INPUT"));
    let message = r.json["error"]["message"].as_str().unwrap();
    assert!(message.contains("`model`"), "{message}");
    assert!(message.contains("forwardedProps.iacCode"), "{message}");
    assert!(message.contains("TanStack AI"), "{message}");
    body["forwardedProps"]["iacCode"]["preferredLanguage"] = json!("zh-CN");
    let zh = a.run(&body);
    let message = zh.json["error"]["message"].as_str().unwrap();
    assert!(message.contains("只能包含 `iacCode`"), "{message}");
    // Nothing reached the kernel, and the thread takes the same run id once the request is right.
    assert!(k.calls("SendStreamingMessage").is_empty());
    let ok = a.run(&a.request("t-fwd", "r1", "hi"));
    assert_eq!(ok.last()["outcome"]["type"], "success");
}

/// Only the latest user message is checked (and sent): a history a client keeps with a remote
/// image, an empty text and an audio part in earlier user messages (and an assistant message
/// without content) still runs its next turn, as the spec and the reference only use the latest
/// user message. The latest one is still checked strictly.
#[test]
fn odd_history_messages_never_refuse_a_later_turn() {
    let (k, a) = setup();
    a.assert_turn_succeeds("t-history", "r1");
    let mut body = a.request("t-history", "r2", "and now?");
    body["messages"] = json!([
        {"id": "h1", "role": "user", "content": [{"type": "image", "source": {"type": "url", "value": "https://example.com/a.png"}}]},
        {"id": "h2", "role": "assistant", "content": "ok"},
        {"id": "h3", "role": "user", "content": ""},
        {"id": "h4", "role": "user", "content": [{"type": "audio", "source": {"type": "data", "value": "AA==", "mimeType": "audio/wav"}}]},
        {"id": "h5", "role": "assistant"},
        {"id": "m2", "role": "user", "content": "and now?"}
    ]);
    let r = a.run(&body);
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.last()["outcome"]["type"], "success", "{:?}", r.last());
    let sent = k.calls("SendStreamingMessage");
    let message = &sent.last().unwrap()["body"]["params"]["message"];
    assert_eq!(message["parts"], json!([{"text": "and now?"}]), "{message}");
    body["runId"] = json!("r3");
    body["messages"][5]["content"] = json!("");
    let refused = a.run(&body);
    assert_eq!(
        (refused.status, refused.error_code()),
        (400, "INVALID_INPUT")
    );
    assert!(
        refused.json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("messages[5]"),
        "{}",
        refused.json
    );
}

/// A `null` optional `forwardedProps.iacCode` field is "not given", as the reference reads it
/// (its fields declared `X | None = None`; secrets too): the turn runs and nothing of it reaches
/// the kernel. A required field, or the plain boolean `cleanupOnly`, is still refused as `null`.
#[test]
fn a_null_optional_iac_code_field_is_taken_as_absent() {
    let (k, a) = setup();
    let mut body = a.request("t-nulls", "r1", "hi");
    let iac = &mut body["forwardedProps"]["iacCode"];
    for key in [
        "model",
        "llmApiKey",
        "thinking",
        "userId",
        "channel",
        "preferredLanguage",
        "candidatePresentation",
        "runMode",
        "pipelineName",
        "alibabaCloud",
    ] {
        iac[key] = Value::Null;
    }
    let r = a.run(&body);
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.last()["outcome"]["type"], "success");
    let sent = k.calls("SendStreamingMessage");
    let meta = &sent[0]["body"]["params"]["message"]["metadata"]["iac_code"];
    for key in [
        "iac_code_model",
        "iac_code_api_key",
        "user_id",
        "channel",
        "run_mode",
    ] {
        assert!(meta.get(key).is_none(), "{key} sent: {meta}");
    }
    let mut nested = a.request("t-nulls", "r2", "hi");
    nested["forwardedProps"]["iacCode"]["thinking"] = json!({"effort": null, "budget": null});
    nested["forwardedProps"]["iacCode"]["alibabaCloud"] = json!({"accessKeyId": null, "accessKeySecret": null, "securityToken": null, "regionId": null});
    let r = a.run(&nested);
    assert_eq!(r.status, 200, "{}", r.json);
    let mut required = a.request("t-nulls", "r3", "hi");
    required["forwardedProps"]["iacCode"]["cleanupOnly"] = Value::Null;
    let r = a.run(&required);
    assert_eq!(
        (r.status, r.error_code()),
        (400, "INVALID_INPUT"),
        "{}",
        r.json
    );
}

/// A used `runId` is never usable again (the spec), also after 256 newer runs on the thread:
/// the newest 256 are kept whole in `runDigests`, every older one hashed in `usedRunIds`
/// (16 bytes a run), so the same request again is `DUPLICATE_RUN_ID` and another one
/// `RUN_ID_CONFLICT`, as for a recent run, and the file stays loadable by the reference.
#[test]
fn a_used_run_id_is_never_usable_again_even_after_256_newer_runs() {
    let (k, a) = setup();
    let first = a.request("t-reuse", "r-first", "hi");
    assert_eq!(a.run(&first).last()["outcome"]["type"], "success");
    for i in 0..260 {
        a.assert_turn_succeeds("t-reuse", &format!("r{i:03}"));
    }
    let sent = k.calls("SendStreamingMessage").len();
    let again = a.run(&first);
    assert_eq!(
        (again.status, again.error_code()),
        (409, "DUPLICATE_RUN_ID")
    );
    let other = a.run(&a.request("t-reuse", "r-first", "something else"));
    assert_eq!((other.status, other.error_code()), (409, "RUN_ID_CONFLICT"));
    let old = a.run(&a.request("t-reuse", "r000", "something else"));
    assert_eq!((old.status, old.error_code()), (409, "RUN_ID_CONFLICT"));
    assert_eq!(
        k.calls("SendStreamingMessage").len(),
        sent,
        "nothing reached the kernel"
    );
    let state = a.state_file("t-reuse");
    assert_eq!(state["runDigests"].as_object().unwrap().len(), 256);
    // 261 runs: 256 whole, 5 as 16-byte records (80 bytes, 108 as base64).
    assert_eq!(state["usedRunIds"].as_str().unwrap().len(), 108);
    a.assert_turn_succeeds("t-reuse", "r-next");
}

/// A balancer in front of several pairs routes all of a user's requests by `X-AGUI-User-Id`
/// (contrib/deploy): a header naming another user than the body's `userId` (or none there), or
/// than a route's `userId` query, would put a thread where its user's list cannot see it: 400.
#[test]
fn a_user_header_that_disagrees_with_the_body_or_the_query_is_400() {
    let (_k, a) = setup();
    let mut body = a.request("t-user", "r1", "hi");
    body["forwardedProps"]["iacCode"]["userId"] = json!("alice");
    let refused = post_run(&a.url, &body, &[("X-AGUI-User-Id", "bob")]);
    assert_eq!(
        (refused.status, refused.error_code()),
        (400, "INVALID_INPUT")
    );
    let message = refused.json["error"]["message"].as_str().unwrap_or("");
    assert!(message.contains("X-AGUI-User-Id"), "{message}");
    let anonymous = a.request("t-anon", "r1", "hi");
    let refused = post_run(&a.url, &anonymous, &[("X-AGUI-User-Id", "alice")]);
    assert_eq!(
        (refused.status, refused.error_code()),
        (400, "INVALID_INPUT")
    );
    let admitted = post_run(&a.url, &body, &[("X-AGUI-User-Id", "alice")]);
    assert_eq!(
        admitted.last()["outcome"]["type"],
        "success",
        "{:?}",
        admitted.last()
    );
    let lookup = |user: &str| {
        let url = format!(
            "{}/extensions/iac-code/v1/threads/t-user?userId=alice",
            a.url
        );
        let r = agent()
            .get(url)
            .header("X-AGUI-User-Id", user)
            .call()
            .unwrap();
        let status = r.status().as_u16();
        let v: Value = serde_json::from_str(&r.into_body().read_to_string().unwrap()).unwrap();
        (status, v)
    };
    let (status, v) = lookup("bob");
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (400, Some("INVALID_INPUT"))
    );
    let (status, v) = lookup("alice");
    assert_eq!((status, v["state"].as_str()), (200, Some("idle")), "{v}");
}
