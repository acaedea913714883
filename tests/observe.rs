//! A web console's life over real HTTP against the fake kernel: the thread lookup and the observe
//! stream a reloaded page re-attaches with, CORS for a console on another origin, and the request
//! envelope real chat UIs send (`state` left out).

use fake_kernel::{permission_envelope, FakeKernel, Step};
use iac_code_agui::testing::check_spans;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read};
use std::time::Duration;
use test_support::*;

fn setup() -> (FakeKernel, Adapter) {
    let k = FakeKernel::start();
    let a = Adapter::start(&k.url);
    (k, a)
}

fn text(t: &str) -> Step {
    Step::Status {
        state: "TASK_STATE_WORKING",
        iac: json!({}),
        text: Some(t.into()),
    }
}

fn done() -> Step {
    Step::Status {
        state: "TASK_STATE_INPUT_REQUIRED",
        iac: json!({}),
        text: None,
    }
}

/// Text, a gate the test opens, more text, the end of the turn.
fn gated(k: &FakeKernel) {
    k.script(
        "gated",
        vec![
            text("Here is "),
            text("the first half. "),
            Step::Gate("go".into()),
            text("And the rest."),
            done(),
        ],
    );
}

/// Text, a gate, then a permission wait.
fn gated_permission(k: &FakeKernel) {
    k.script(
        "gated-permission",
        vec![
            text("Let me write it. "),
            Step::Gate("go".into()),
            Step::Input {
                envelope: permission_envelope("perm-1", "call_1"),
                allow: vec![text("Written."), done()],
                deny: vec![text("Not written."), done()],
                answer: vec![],
            },
        ],
    );
}

/// Subscribes on a thread of its own and returns once the answer's head arrived (the observer
/// is attached), checking which answer it is (`X-AGUI-Resume`).
fn attach(
    a: &Adapter,
    exec: &str,
    body: &Value,
    kind: &'static str,
) -> std::thread::JoinHandle<RunResult> {
    let (url, exec, body) = (a.url.clone(), exec.to_string(), body.clone());
    let (tx, rx) = std::sync::mpsc::channel();
    let observer = std::thread::spawn(move || {
        let resp = post_subscribe(&url, &exec, &body, None);
        let header = resp.headers().get("X-AGUI-Resume").cloned();
        tx.send(header.and_then(|h| h.to_str().ok().map(String::from)))
            .unwrap();
        read_result(resp)
    });
    let got = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(got.as_deref(), Some(kind));
    observer
}

/// Starts a run on its own thread; returns once the kernel has streamed its first text (the
/// thread's state file then names the task).
fn start_run(a: &Adapter, thread: &str, text: &str) -> std::thread::JoinHandle<RunResult> {
    let (url, body) = (a.url.clone(), a.request(thread, "r1", text));
    let h = std::thread::spawn(move || post_run(&url, &body, &[]));
    assert!(eventually(10, || {
        let path = a.state_dir.join("threads").join(format!("{thread}.json"));
        std::fs::read(path)
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .is_some_and(|v| v["execution"]["taskId"].is_string())
    }));
    h
}

fn identity(a: &Adapter, thread: &str) -> (String, Value) {
    let (status, v) = a.thread_lookup(thread, "rosInvocationId=invocation-1");
    assert_eq!(status, 200, "{v}");
    let exec = v["executionId"].as_str().unwrap().to_string();
    let body = json!({"threadId": thread, "runId": v["runId"], "rosInvocationId": "invocation-1"});
    (exec, body)
}

#[test]
fn the_thread_lookup_needs_the_bound_identity_and_says_nothing_otherwise() {
    let (_k, a) = setup();
    let (status, v) = a.thread_lookup("t-none", "rosInvocationId=invocation-1");
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (404, Some("EXECUTION_NOT_FOUND"))
    );
    assert_eq!(a.run(&a.request("t-look", "r1", "hello")).status, 200);
    let (status, v) = a.thread_lookup("t-look", "");
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (400, Some("INVALID_INPUT"))
    );
    // The wrong invocation, or a userId on a thread bound to none: the same 404 as no thread.
    for q in ["rosInvocationId=other", "userId=someone"] {
        let (status, v) = a.thread_lookup("t-look", q);
        assert_eq!(
            (status, v["error"]["code"].as_str()),
            (404, Some("EXECUTION_NOT_FOUND")),
            "{q}"
        );
    }
    let (status, v) = a.thread_lookup("t-look", "rosInvocationId=invocation-1");
    assert_eq!(status, 200);
    assert_eq!(v["state"], "idle");
    assert_eq!(v["interrupts"], json!([]));
    assert!(v["executionId"].is_string());
    // An idle thread names its newest run too: a join of it answers the kept conversation.
    assert_eq!(v["runId"], "r1");
}

#[test]
fn a_thread_bound_to_a_user_answers_that_user_id() {
    let (_k, a) = setup();
    let mut body = a.request("t-user", "r1", "hello");
    body["forwardedProps"]["iacCode"]["userId"] = json!("alice@example.com");
    assert_eq!(a.run(&body).status, 200);
    let (status, v) = a.thread_lookup("t-user", "userId=alice%40example.com");
    assert_eq!((status, v["state"].as_str()), (200, Some("idle")));
    assert_eq!(v["rosInvocationId"], "invocation-1");
    let (status, _) = a.thread_lookup("t-user", "userId=bob");
    assert_eq!(status, 404);
}

#[test]
fn a_waiting_thread_gives_back_its_interrupts_exactly_as_announced() {
    let (_k, a) = setup();
    let r = a.run(&a.request("t-wait", "r1", "scenario:permission"));
    let announced = r.interrupts();
    let (status, v) = a.thread_lookup("t-wait", "rosInvocationId=invocation-1");
    assert_eq!(status, 200);
    assert_eq!(v["state"], "waiting");
    assert_eq!(v["runId"], "r1");
    assert_eq!(v["executionId"], r.session()["executionId"]);
    assert_eq!(v["interrupts"], Value::Array(announced.clone()));
    // The page answers from what the lookup gave it.
    let id = v["interrupts"][0]["id"].clone();
    let resume = a.resume_request(
        "t-wait",
        "r2",
        json!([{"interruptId": id, "status": "resolved", "payload": {"decision": "allow_once"}}]),
    );
    let r2 = a.run(&resume);
    assert_eq!(r2.last()["outcome"]["type"], "success", "{:?}", r2.types());
    assert_eq!(
        a.thread_lookup("t-wait", "rosInvocationId=invocation-1").1["state"],
        "idle"
    );
}

#[test]
fn observing_a_waiting_execution_ends_with_the_same_interrupts() {
    let (_k, a) = setup();
    let r = a.run(&a.request("t-obs-wait", "r1", "scenario:permission"));
    let (exec, body) = identity(&a, "t-obs-wait");
    let o = a.subscribe(&exec, &body);
    assert_eq!(o.status, 200, "{}", o.json);
    assert_eq!(o.events[0]["type"], "RUN_STARTED");
    assert_eq!(o.events[0]["runId"], "r1");
    assert_eq!(o.session()["executionId"], exec.as_str());
    assert_eq!(o.interrupts(), r.interrupts());
    // The turn so far, from the kernel's task history, so a reloaded page redraws it.
    let snapshot = o
        .events
        .iter()
        .find(|e| e["type"] == "MESSAGES_SNAPSHOT")
        .expect("a catch-up snapshot");
    assert_eq!(snapshot["messages"][0]["role"], "user");
    assert_eq!(snapshot["messages"][0]["content"], "scenario:permission");
    check_spans(&o.events).unwrap();
    // Read-only: the thread still waits for the same answer.
    assert_eq!(
        a.thread_lookup("t-obs-wait", "rosInvocationId=invocation-1")
            .1["state"],
        "waiting"
    );
}

#[test]
fn subscribe_refuses_bad_bodies_unknown_threads_and_changed_identities() {
    let (_k, a) = setup();
    let r = a.run(&a.request("t-sub-id", "r1", "scenario:permission"));
    let exec = r.session()["executionId"].as_str().unwrap().to_string();
    let good = json!({"threadId": "t-sub-id", "runId": "r1", "rosInvocationId": "invocation-1"});
    for bad in [
        json!([]),
        json!({"threadId": "t-sub-id", "runId": "r1"}),
        json!({"threadId": "t-sub-id", "runId": "", "rosInvocationId": "invocation-1"}),
        json!({"threadId": "t-sub-id", "runId": "r1", "rosInvocationId": "invocation-1", "extra": 1}),
    ] {
        assert_eq!(a.subscribe(&exec, &bad).status, 400, "{bad}");
    }
    let mut unknown = good.clone();
    unknown["threadId"] = json!("t-nobody");
    assert_eq!(a.subscribe(&exec, &unknown).status, 404);
    for (key, value) in [("runId", "r9"), ("rosInvocationId", "invocation-2")] {
        let mut changed = good.clone();
        changed[key] = json!(value);
        assert_eq!(a.subscribe(&exec, &changed).status, 409, "{key}");
    }
    assert_eq!(a.subscribe("other-exec", &good).status, 409);
    // With afterSequence (accepted, unused) and the right identity: a stream.
    let mut with_seq = good.clone();
    with_seq["afterSequence"] = json!(3);
    assert_eq!(a.subscribe(&exec, &with_seq).status, 200);
    // A finished execution is joined with the kept conversation alone (tests/conversations.rs).
    let resume = a.resume_request(
        "t-sub-id",
        "r2",
        json!([{"interruptId": r.interrupts()[0]["id"], "status": "resolved", "payload": {"decision": "deny"}}]),
    );
    assert_eq!(a.run(&resume).status, 200);
    let mut after = good.clone();
    after["runId"] = json!("r2");
    let idle = a.subscribe(&exec, &after);
    assert_eq!(idle.status, 200);
    assert_eq!(
        idle.types(),
        ["RUN_STARTED", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    );
}

#[test]
fn a_reattached_observer_gets_the_text_so_far_then_the_live_rest() {
    let (k, a) = setup();
    gated(&k);
    let run = start_run(&a, "t-live", "scenario:gated");
    assert!(eventually(10, || a
        .thread_lookup("t-live", "rosInvocationId=invocation-1")
        .1["state"]
        == "running"));
    let (exec, body) = identity(&a, "t-live");
    assert_eq!(body["runId"], "r1");
    let observer = attach(&a, &exec, &body, "join");
    k.open("go");
    let o = observer.join().unwrap();
    let r = run.join().unwrap();
    assert_eq!(r.last()["outcome"]["type"], "success");
    assert_eq!(o.status, 200, "{}", o.json);
    let types = o.types();
    assert_eq!(
        &types[..3],
        ["RUN_STARTED", "CUSTOM", "MESSAGES_SNAPSHOT"],
        "{types:?}"
    );
    // The run is live in this process: the join comes from its replay buffer. Closed messages
    // are in the snapshot; the open one is re-opened with its text so far, and the live rest
    // continues it (same message id, the run's whole text).
    let snapshot = &o.events[2]["messages"];
    assert_eq!(snapshot[0]["role"], "user");
    assert_eq!(snapshot[0]["content"], "scenario:gated");
    assert_eq!(o.events[3]["type"], "TEXT_MESSAGE_START");
    assert_eq!(o.events[4]["delta"], "Here is the first half. ");
    let run_message = r.events.iter().find(|e| e["type"] == "TEXT_MESSAGE_START");
    assert_eq!(o.events[3]["messageId"], run_message.unwrap()["messageId"]);
    assert_eq!(o.text(), r.text());
    assert_eq!(o.last()["type"], "RUN_FINISHED");
    assert_eq!(o.last()["outcome"]["type"], "success");
    check_spans(&o.events).unwrap();
    assert!(
        k.calls("CancelTask").is_empty(),
        "an observer never cancels"
    );
}

#[test]
fn an_observer_of_a_run_that_reaches_a_wait_gets_its_interrupts() {
    let (k, a) = setup();
    gated_permission(&k);
    let run = start_run(&a, "t-live-wait", "scenario:gated-permission");
    let (exec, body) = identity(&a, "t-live-wait");
    let observer = attach(&a, &exec, &body, "join");
    k.open("go");
    let r = run.join().unwrap();
    let o = observer.join().unwrap();
    assert_eq!(o.interrupts(), r.interrupts());
    check_spans(&o.events).unwrap();
}

#[test]
fn an_observer_that_leaves_ends_only_its_own_stream_and_gets_heartbeats_meanwhile() {
    let (k, a) = setup();
    gated(&k);
    let run = start_run(&a, "t-leave", "scenario:gated");
    let (exec, body) = identity(&a, "t-leave");
    let resp = post_subscribe(&a.url, &exec, &body, None);
    assert_eq!(resp.status(), 200);
    let mut lines = BufReader::new(resp.into_body().into_reader()).lines();
    // The upstream is silent at the gate: the observer stream still beats (interval 0.2 s).
    let mut beats = 0;
    for _ in 0..200 {
        match lines.next() {
            Some(Ok(l)) if l == ": heartbeat" => beats += 1,
            Some(Ok(_)) => {}
            _ => break,
        }
        if beats == 2 {
            break;
        }
    }
    assert_eq!(beats, 2);
    drop(lines);
    // Noticed by the heartbeat thread (the client's FIN) well within one interval (0.2 s).
    assert!(eventually(2, || a
        .logs()
        .contains("client closed its end of the stream")));
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        k.calls("CancelTask").is_empty(),
        "a leaving observer cancels nothing"
    );
    k.open("go");
    let r = run.join().unwrap();
    assert_eq!(r.last()["outcome"]["type"], "success");
}

#[test]
fn the_lookup_and_subscribe_routes_are_bearer_protected() {
    let k = FakeKernel::start();
    let a = Adapter::start_with(
        &k.url,
        Options {
            auth_token: Some("s3cret".into()),
            ..Default::default()
        },
    );
    let (status, _) = a.thread_lookup("t", "rosInvocationId=x");
    assert_eq!(status, 401);
    let r = a.subscribe(
        "e",
        &json!({"threadId": "t", "runId": "r", "rosInvocationId": "i"}),
    );
    assert_eq!(r.status, 401);
    let resp = agent()
        .get(format!(
            "{}/extensions/iac-code/v1/threads/t?rosInvocationId=x",
            a.url
        ))
        .header("Authorization", "Bearer s3cret")
        .call()
        .unwrap();
    assert_eq!(resp.status(), 404);
}

// ---- CORS ----------------------------------------------------------------------------------

/// `POST /` of a plain turn on `thread` from a page of `origin`.
fn post_from(a: &Adapter, origin: &str, thread: &str) -> ureq::http::Response<ureq::Body> {
    agent()
        .post(format!("{}/", a.url))
        .header("Origin", origin)
        .header("Content-Type", "application/json")
        .send(serde_json::to_vec(&a.request(thread, "r1", "hello")).unwrap())
        .unwrap()
}

fn preflight(a: &Adapter, path: &str, origin: &str) -> ureq::http::Response<ureq::Body> {
    agent()
        .options(format!("{}{path}", a.url))
        .header("Origin", origin)
        .header("Access-Control-Request-Method", "POST")
        .header(
            "Access-Control-Request-Headers",
            "authorization, content-type",
        )
        .call()
        .unwrap()
}

fn header(resp: &ureq::http::Response<ureq::Body>, name: &str) -> Option<String> {
    resp.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(String::from)
}

#[test]
fn an_allowed_origin_gets_answered_preflights_and_cors_headers_on_every_answer() {
    let k = FakeKernel::start();
    let a = Adapter::start_args(&k.url, &["--cors-allow-origin", "http://console.test:8080"]);
    for path in [
        "/",
        "/extensions/iac-code/v1/executions/e1/cancel",
        "/extensions/iac-code/v1/executions/e1/subscribe",
        "/extensions/iac-code/v1/threads/t1",
    ] {
        let r = preflight(&a, path, "http://console.test:8080");
        assert_eq!(r.status(), 204, "{path}");
        assert_eq!(
            header(&r, "access-control-allow-origin").as_deref(),
            Some("http://console.test:8080")
        );
        assert_eq!(header(&r, "vary").as_deref(), Some("Origin"));
        let allowed = header(&r, "access-control-allow-headers").unwrap();
        for h in [
            "Authorization",
            "Content-Type",
            "Accept-Language",
            "Last-Event-ID",
            "X-AGUI-Thread-Id",
            "X-AGUI-User-Id",
        ] {
            assert!(allowed.contains(h), "{allowed}");
        }
        assert!(header(&r, "access-control-allow-methods")
            .unwrap()
            .contains("POST"));
        assert!(header(&r, "access-control-max-age").is_some());
    }
    // The stream and an error answer both carry the origin, so the page can read them.
    let resp = post_from(&a, "http://console.test:8080", "t-cors");
    assert_eq!(
        header(&resp, "access-control-allow-origin").as_deref(),
        Some("http://console.test:8080")
    );
    let r = read_result(resp);
    assert_eq!(r.last()["outcome"]["type"], "success");
    let resp = post_from(&a, "http://console.test:8080", "t-cors");
    assert_eq!(resp.status(), 409);
    assert_eq!(
        header(&resp, "access-control-allow-origin").as_deref(),
        Some("http://console.test:8080")
    );
}

#[test]
fn a_disallowed_origin_gets_no_cors_headers_and_no_run() {
    let k = FakeKernel::start();
    let a = Adapter::start_args(&k.url, &["--cors-allow-origin", "http://console.test:8080"]);
    let r = preflight(&a, "/", "http://evil.test");
    assert_eq!(r.status(), 403);
    assert_eq!(header(&r, "access-control-allow-origin"), None);
    let resp = post_from(&a, "http://evil.test", "t-evil");
    assert_eq!(resp.status(), 403);
    assert_eq!(header(&resp, "access-control-allow-origin"), None);
    assert!(k.calls("SendStreamingMessage").is_empty(), "no run started");
    // The page's own origin (Origin names the Host it was sent to) needs no CORS at all.
    let host = a.url.trim_start_matches("http://").to_string();
    let resp = post_from(&a, &format!("http://{host}"), "t-same");
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "access-control-allow-origin"), None);
    let _ = resp.into_body().into_reader().read_to_end(&mut Vec::new());
}

/// What a plain nginx `proxy_pass` does to a page it serves from `http://localhost:8080`: the
/// adapter gets the page's `Origin` and the upstream's `Host`. The 403 names both causes (the
/// proxy must pass the page's Host; another origin must be allowed) with the values compared,
/// and the log says which header and value it compared. (Through Debian's nginx itself:
/// `tests/proxy/run.sh`.)
#[test]
fn an_origin_refusal_names_both_causes_and_the_values_it_compared() {
    let (_k, a) = setup();
    let resp = post_from(&a, "http://localhost:8080", "t-proxied");
    assert_eq!(resp.status(), 403);
    let v: serde_json::Value =
        serde_json::from_str(&resp.into_body().read_to_string().unwrap()).unwrap();
    let message = v["error"]["message"].as_str().unwrap();
    let host = a.url.trim_start_matches("http://");
    for part in [
        "`http://localhost:8080`".to_string(),
        format!("`{host}`"),
        "proxy_set_header Host $http_host".to_string(),
        "--cors-allow-origin http://localhost:8080".to_string(),
    ] {
        assert!(message.contains(&part), "{part} not in: {message}");
    }
    assert!(
        eventually(5, || a.logs().contains(&format!(
            "Origin \"http://localhost:8080\" is neither the request's Host \"{host}\""
        ))),
        "{}",
        a.logs()
    );
}

#[test]
fn without_the_flag_no_other_origin_is_served() {
    let (k, a) = setup();
    let r = preflight(&a, "/", "http://console.test:8080");
    assert_eq!(r.status(), 403);
    assert_eq!(header(&r, "access-control-allow-origin"), None);
    // Health stays readable by anyone (no CORS headers, so a browser hides it).
    let resp = agent()
        .get(format!("{}/health", a.url))
        .header("Origin", "http://console.test:8080")
        .call()
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(k.calls("SendStreamingMessage").is_empty());
}

// ---- the envelope real chat UIs send ---------------------------------------------------------

#[test]
fn a_request_without_state_tools_or_context_runs_like_one_with_the_defaults() {
    let (_k, a) = setup();
    let mut body = a.request("t-nostate", "r1", "hello");
    let obj = body.as_object_mut().unwrap();
    obj.remove("state");
    obj.remove("tools");
    obj.insert("context".into(), Value::Null);
    let r = a.run(&body);
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.last()["outcome"]["type"], "success");
    let mut bad = a.request("t-nostate2", "r1", "hello");
    bad["tools"] = json!([{"name": "x"}]);
    assert_eq!(a.run(&bad).status, 400);
}
