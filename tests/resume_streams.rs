//! Resumable streams as they fail in life, against the fake kernel: a connection cut after every
//! k-th event and re-attached with its cursor (exact resume) or without (join), an adapter restart
//! between the cut and the re-attach, a proxy that cuts every connection after a fixed time, and
//! the thread of a client that left (free at once without a grace, busy during one).

use fake_kernel::{pipeline_flow, FakeKernel, Step};
use iac_code_agui::testing::check_spans;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};
use test_support::*;

fn status(iac: Value, text: Option<&str>) -> Step {
    Step::Status {
        state: "TASK_STATE_WORKING",
        iac,
        text: text.map(String::from),
    }
}

fn tool(st: &str, extra: Value) -> Step {
    let mut t = json!({"toolUseId": "call_9", "name": "write_file", "status": st});
    t.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    status(json!({"tool": t}), None)
}

/// Reasoning, text, a tool call, then the pipeline flow (steps, candidates, a pipeline tool)
/// that ends waiting for a permission.
fn rich(k: &FakeKernel) {
    let think = |t: &str| {
        status(
            json!({"thinking": {"type": "raw_thinking", "text": t}}),
            None,
        )
    };
    let mut s = vec![
        think("Let me think. "),
        think("Done."),
        status(json!({}), Some("Writing. ")),
        tool("started", json!({})),
        tool("input_complete", json!({"toolInput": {"path": "/w/a.txt"}})),
        tool("completed", json!({"result": {"ok": true}})),
        status(json!({}), Some("Now the pipeline. ")),
    ];
    s.extend(pipeline_flow());
    k.script("rich", s);
}

struct Frame {
    id: Option<String>,
    ev: Value,
}

/// POSTs `body` to `path` and returns the status, the `X-AGUI-Resume` header and the body.
fn post(
    url: &str,
    path: &str,
    body: &Value,
    cursor: Option<&str>,
) -> (u16, Option<String>, Box<dyn Read + Send>) {
    let mut req = agent()
        .post(format!("{url}{path}"))
        .header("Content-Type", "application/json")
        .header("Accept", "text/event-stream");
    if let Some(c) = cursor {
        req = req.header("Last-Event-ID", c);
    }
    let resp = req.send(serde_json::to_vec(body).unwrap()).unwrap();
    let kind = resp
        .headers()
        .get("X-AGUI-Resume")
        .and_then(|h| h.to_str().ok())
        .map(String::from);
    let status = resp.status().as_u16();
    (status, kind, Box::new(resp.into_body().into_reader()))
}

/// SSE frames, at most `limit` (then the connection is dropped); a broken read ends the list.
fn frames(body: Box<dyn Read + Send>, limit: Option<usize>) -> Vec<Frame> {
    let mut out = Vec::new();
    for item in sse::read(BufReader::new(body)) {
        let Ok(item) = item else { break };
        if let sse::Item::Event(e) = item {
            out.push(Frame {
                ev: e.json(),
                id: e.id,
            });
            if Some(out.len()) == limit {
                break;
            }
        }
    }
    out
}

fn subscribe(a: &Adapter, thread: &str, cursor: Option<&str>) -> (Option<String>, Vec<Frame>) {
    let (st, body) = a.thread_lookup(thread, "rosInvocationId=invocation-1");
    assert_eq!(st, 200, "{body}");
    let exec = body["executionId"].as_str().unwrap().to_string();
    let req =
        json!({"threadId": thread, "runId": body["runId"], "rosInvocationId": "invocation-1"});
    let path = format!("/extensions/iac-code/v1/executions/{exec}/subscribe");
    let (status, kind, reader) = post(&a.url, &path, &req, cursor);
    assert_eq!(status, 200);
    (kind, frames(reader, None))
}

fn events(frames: &[Frame]) -> Vec<Value> {
    frames.iter().map(|f| f.ev.clone()).collect()
}

/// The events with what differs between two runs of one script taken out: timestamps, expiry
/// times and the run's own ids.
fn normalized(frames: &[Frame]) -> Vec<Value> {
    let evs = events(frames);
    let session = evs.iter().find(|e| e["name"] == "iac-code.session.v1");
    let mut ids: Vec<String> = ["threadId", "runId"]
        .iter()
        .filter_map(|k| evs[0][k].as_str().map(String::from))
        .collect();
    if let Some(s) = session {
        for k in ["executionId", "taskId", "contextId", "sessionId"] {
            ids.extend(s["value"][k].as_str().map(String::from));
        }
    }
    let mut text = serde_json::to_string(&evs).unwrap();
    for id in ids.iter().filter(|i| !i.is_empty()) {
        text = text.replace(id.as_str(), "$ID");
    }
    let mut v: Value = serde_json::from_str(&text).unwrap();
    strip(&mut v);
    v.as_array().unwrap().clone()
}

fn strip(v: &mut Value) {
    match v {
        Value::Object(o) => {
            o.remove("timestamp");
            o.remove("expiresAt");
            o.values_mut().for_each(strip);
        }
        Value::Array(a) => a.iter_mut().for_each(strip),
        _ => {}
    }
}

/// What a client ends up showing: every message's text (snapshots, then deltas) and tool args.
fn transcript(evs: &[Value]) -> BTreeMap<String, String> {
    let mut t = BTreeMap::new();
    for e in evs {
        match e["type"].as_str().unwrap() {
            "MESSAGES_SNAPSHOT" => {
                for m in e["messages"].as_array().unwrap() {
                    if let (Some(content), false) = (m["content"].as_str(), m["role"] == "user") {
                        t.insert(m["id"].as_str().unwrap().to_string(), content.to_string());
                    }
                    for c in m["toolCalls"].as_array().into_iter().flatten() {
                        let args = c["function"]["arguments"].as_str().unwrap().to_string();
                        t.insert(c["id"].as_str().unwrap().to_string(), args);
                    }
                }
            }
            "TEXT_MESSAGE_CONTENT" | "REASONING_MESSAGE_CONTENT" => {
                let id = e["messageId"].as_str().unwrap().to_string();
                t.entry(id)
                    .or_default()
                    .push_str(e["delta"].as_str().unwrap());
            }
            "TOOL_CALL_ARGS" => {
                let id = e["toolCallId"].as_str().unwrap().to_string();
                t.entry(id)
                    .or_default()
                    .push_str(e["delta"].as_str().unwrap());
            }
            "TOOL_CALL_RESULT" => {
                let id = e["messageId"].as_str().unwrap().to_string();
                t.insert(id, e["content"].as_str().unwrap().to_string());
            }
            _ => {}
        }
    }
    t
}

fn with_grace(k: &FakeKernel, secs: &str) -> Adapter {
    Adapter::start_with(
        &k.url,
        Options {
            args: vec!["--detach-grace".into(), secs.into()],
            ..Default::default()
        },
    )
}

fn start(a: &Adapter, thread: &str, limit: Option<usize>) -> Vec<Frame> {
    let (status, _, reader) = post(&a.url, "/", &a.request(thread, "r1", "scenario:rich"), None);
    assert_eq!(status, 200);
    frames(reader, limit)
}

fn assert_ids_increase(frames: &[Frame]) {
    let ids: Vec<&str> = frames
        .iter()
        .map(|f| f.id.as_deref().expect("every data frame has an id"))
        .collect();
    let mut seen = std::collections::HashSet::new();
    assert!(ids.iter().all(|i| seen.insert(*i)), "ids repeat: {ids:?}");
}

#[test]
fn a_stream_cut_after_any_event_resumes_exactly_from_its_cursor() {
    let k = FakeKernel::start();
    rich(&k);
    let a = with_grace(&k, "30");
    let full = start(&a, "t-ref", None);
    assert_eq!(full.last().unwrap().ev["outcome"]["type"], "interrupt");
    assert_ids_increase(&full);
    let n = full.len();
    for cut in 1..n {
        let thread = format!("t-cut-{cut}");
        let first = start(&a, &thread, Some(cut));
        assert_eq!(first.len(), cut);
        let (kind, rest) = subscribe(&a, &thread, first.last().unwrap().id.as_deref());
        assert_eq!(kind.as_deref(), Some("exact"), "cut after {cut}");
        let joined: Vec<Frame> = first.into_iter().chain(rest).collect();
        assert_ids_increase(&joined);
        assert_eq!(normalized(&joined), normalized(&full), "cut after {cut}");
        // Same ids too: the run's own frames, as its replay buffer holds them from the start.
        let (_, whole) = subscribe(&a, &thread, joined[0].id.as_deref());
        let ids = |f: &[Frame]| f.iter().map(|f| f.id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(&joined[1..]), ids(&whole), "cut after {cut}");
    }
}

#[test]
fn a_stream_cut_after_any_event_joins_without_a_cursor() {
    let k = FakeKernel::start();
    rich(&k);
    let a = with_grace(&k, "30");
    let full = start(&a, "t-ref", None);
    let want = transcript(&normalized(&full));
    for cut in 1..full.len() {
        let thread = format!("t-join-{cut}");
        start(&a, &thread, Some(cut));
        let (kind, joined) = subscribe(&a, &thread, None);
        assert_eq!(kind.as_deref(), Some("join"));
        let evs = events(&joined);
        assert_eq!(evs[0]["type"], "RUN_STARTED", "cut after {cut}");
        check_spans(&evs).unwrap();
        assert_ids_increase(&joined);
        let got = normalized(&joined);
        assert_eq!(got.last(), normalized(&full).last(), "same interrupts");
        assert_eq!(transcript(&got), want, "cut after {cut}");
    }
}

#[test]
fn a_cursor_from_before_a_restart_gets_a_join_never_wrong_data() {
    let k = FakeKernel::start();
    rich(&k);
    let mut a = with_grace(&k, "30");
    let full = start(&a, "t-ref", None);
    let first = start(&a, "t-restart", Some(5));
    assert!(eventually(10, || a
        .thread_lookup("t-restart", "rosInvocationId=invocation-1")
        .1["state"]
        == "waiting"));
    a.restart();
    let (kind, joined) = subscribe(&a, "t-restart", first.last().unwrap().id.as_deref());
    assert_eq!(kind.as_deref(), Some("join"));
    let evs = events(&joined);
    assert_eq!(evs[0]["type"], "RUN_STARTED");
    check_spans(&evs).unwrap();
    // From the kernel now (the replay buffer went with the process): the same interrupts.
    assert_eq!(
        normalized(&joined).last().unwrap()["outcome"],
        normalized(&full).last().unwrap()["outcome"],
        "the interrupts as announced"
    );
}

/// A proxy that cuts every connection `cap` after it was accepted (as meshes do).
fn cutting_proxy(upstream: u16, cap: Duration) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for client in listener.incoming().take(200).flatten() {
            let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                continue;
            };
            let pipe = |mut from: TcpStream, mut to: TcpStream| {
                std::thread::spawn(move || {
                    let mut buf = [0u8; 16384];
                    while let Ok(n) = from.read(&mut buf) {
                        if n == 0 || to.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = to.shutdown(std::net::Shutdown::Write);
                });
            };
            pipe(client.try_clone().unwrap(), server.try_clone().unwrap());
            pipe(server.try_clone().unwrap(), client.try_clone().unwrap());
            std::thread::spawn(move || {
                std::thread::sleep(cap);
                let _ = client.shutdown(std::net::Shutdown::Both);
                let _ = server.shutdown(std::net::Shutdown::Both);
            });
        }
    });
    port
}

#[test]
fn a_run_longer_than_a_proxys_connection_cap_completes_through_it_with_nothing_lost() {
    let k = FakeKernel::start();
    let text: Vec<Step> = (0..30)
        .flat_map(|i| [status(json!({}), Some(&format!("[{i}]"))), Step::Sleep(50)])
        .chain([Step::Status {
            state: "TASK_STATE_INPUT_REQUIRED",
            iac: json!({}),
            text: None,
        }])
        .collect();
    k.script("long", text);
    let a = with_grace(&k, "5");
    let proxy = format!(
        "http://127.0.0.1:{}",
        cutting_proxy(a.port(), Duration::from_millis(300))
    );
    let body = a.request("t-proxy", "r1", "scenario:long");
    let (status, _, reader) = post(&proxy, "/", &body, None);
    assert_eq!(status, 200);
    let mut all = frames(reader, None);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut reconnects = 0;
    while all.last().is_none_or(|f| f.ev["type"] != "RUN_FINISHED") {
        assert!(Instant::now() < deadline, "the run did not finish");
        let (_, st) = a.thread_lookup("t-proxy", "rosInvocationId=invocation-1");
        let exec = st["executionId"].as_str().unwrap().to_string();
        let req = json!({"threadId": "t-proxy", "runId": "r1", "rosInvocationId": "invocation-1"});
        let path = format!("/extensions/iac-code/v1/executions/{exec}/subscribe");
        let (status, kind, reader) = post(&proxy, &path, &req, all.last().unwrap().id.as_deref());
        assert_eq!(status, 200);
        assert_eq!(kind.as_deref(), Some("exact"));
        all.extend(frames(reader, None));
        reconnects += 1;
    }
    assert!(reconnects >= 2, "the proxy cut the run {reconnects} times");
    assert_ids_increase(&all);
    let evs = events(&all);
    check_spans(&evs).unwrap();
    let text: String = (0..30).map(|i| format!("[{i}]")).collect();
    let got: String = evs
        .iter()
        .filter(|e| e["type"] == "TEXT_MESSAGE_CONTENT")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(got, text);
    assert_eq!(evs.last().unwrap()["outcome"]["type"], "success");
}

fn gated(k: &FakeKernel) {
    k.script(
        "gated",
        vec![
            status(json!({}), Some("Here is ")),
            Step::Gate("go".into()),
            status(json!({}), Some("the rest.")),
            Step::Status {
                state: "TASK_STATE_INPUT_REQUIRED",
                iac: json!({}),
                text: None,
            },
        ],
    );
}

#[test]
fn without_a_grace_the_thread_of_a_client_that_left_takes_its_next_turn_at_once() {
    let k = FakeKernel::start();
    gated(&k);
    // The kernel winds a cancelled task down for 2 s (its context stays busy meanwhile).
    k.slow_cancels(2000);
    let a = Adapter::start(&k.url);
    let (status, _, reader) = post(
        &a.url,
        "/",
        &a.request("t-free", "r1", "scenario:gated"),
        None,
    );
    assert_eq!(status, 200);
    let got = frames(reader, Some(3));
    assert_eq!(got.len(), 3);
    assert!(eventually(10, || k.calls("CancelTask").len() == 1));
    // The old task still works upstream: the next turn is admitted and waits for it.
    let next = a.run(&a.request("t-free", "r2", "scenario:normal"));
    assert_eq!(next.status, 200, "{}", next.json);
    assert_eq!(next.last()["type"], "RUN_FINISHED", "{:?}", next.types());
    assert_eq!(next.last()["outcome"]["type"], "success");
}

#[test]
fn a_turn_sent_the_instant_its_client_dropped_is_admitted_not_refused_as_busy() {
    let k = FakeKernel::start();
    gated(&k);
    // Heartbeats too rare to notice the drop: only the admission's own look at the old
    // client's socket can free the thread in time.
    let a = Adapter::start_with(
        &k.url,
        Options {
            args: vec!["--heartbeat-interval".into(), "60".into()],
            ..Default::default()
        },
    );
    let (status, _, reader) = post(
        &a.url,
        "/",
        &a.request("t-instant", "r1", "scenario:gated"),
        None,
    );
    assert_eq!(status, 200);
    assert_eq!(frames(reader, Some(3)).len(), 3); // and the connection is dropped
    let next = a.run(&a.request("t-instant", "r2", "scenario:normal"));
    assert_eq!(next.status, 200, "{}", next.json);
    assert_eq!(next.last()["outcome"]["type"], "success");
}

#[test]
fn with_a_grace_a_client_that_left_keeps_the_thread_busy_until_the_grace_cancels_the_run() {
    let k = FakeKernel::start();
    gated(&k);
    let a = with_grace(&k, "1");
    let (status, _, reader) = post(
        &a.url,
        "/",
        &a.request("t-grace", "r1", "scenario:gated"),
        None,
    );
    assert_eq!(status, 200);
    assert_eq!(frames(reader, Some(3)).len(), 3);
    assert!(eventually(10, || {
        let r = a.run(&a.request("t-grace", "r-busy", "scenario:normal"));
        r.status == 409
            && r.json["error"]["message"]
                .as_str()
                .unwrap_or("")
                .contains("detach grace")
    }));
    assert!(eventually(10, || k.calls("CancelTask").len() == 1));
    assert!(eventually(10, || a
        .run(&a.request("t-grace", "r2", "scenario:normal"))
        .status
        == 200));
}

#[test]
fn with_a_grace_an_observer_that_reattaches_sees_the_run_finish() {
    let k = FakeKernel::start();
    gated(&k);
    let a = with_grace(&k, "30");
    let (status, _, reader) = post(
        &a.url,
        "/",
        &a.request("t-back", "r1", "scenario:gated"),
        None,
    );
    assert_eq!(status, 200);
    let first = frames(reader, Some(3));
    let cursor = first.last().unwrap().id.clone();
    let observer = {
        let url = a.url.clone();
        let (_, st) = a.thread_lookup("t-back", "rosInvocationId=invocation-1");
        let exec = st["executionId"].as_str().unwrap().to_string();
        std::thread::spawn(move || {
            let req =
                json!({"threadId": "t-back", "runId": "r1", "rosInvocationId": "invocation-1"});
            let path = format!("/extensions/iac-code/v1/executions/{exec}/subscribe");
            let (_, kind, reader) = post(&url, &path, &req, cursor.as_deref());
            (kind, frames(reader, None))
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    k.open("go");
    let (kind, rest) = observer.join().unwrap();
    assert_eq!(kind.as_deref(), Some("exact"));
    let all: Vec<Frame> = first.into_iter().chain(rest).collect();
    check_spans(&events(&all)).unwrap();
    assert_eq!(all.last().unwrap().ev["outcome"]["type"], "success");
    assert!(k.calls("CancelTask").is_empty());
}

/// What the chaos soak counted as a stream without an end (1,320 s, at a kernel SIGKILL), and
/// why that was its client's doing: an observer whose stream ended with the run's `RUN_ERROR`
/// (the kernel died) re-attached anyway, with that `RUN_ERROR`'s own cursor. Nothing follows a
/// run's last event, so the exact answer is exact and empty: no event, the end of the body. (The
/// soak's observer re-attached after every first stream, cut or not; it now does after a cut
/// only, as `contrib/console` does.) A grace keeps the ended run's buffer, so the resume finds it
/// held; without one it lands there only in the moment between the end and the buffer's release.
#[test]
fn an_exact_resume_from_the_runs_last_event_is_exact_and_empty() {
    let k = FakeKernel::start();
    k.script(
        "dies",
        vec![
            status(json!({}), Some("Hello. ")),
            Step::Gate("die".into()),
            Step::Die,
        ],
    );
    let a = with_grace(&k, "30");
    let (status, _, reader) = post(
        &a.url,
        "/",
        &a.request("t-died", "r1", "scenario:dies"),
        None,
    );
    assert_eq!(status, 200);
    let owner = std::thread::spawn(move || frames(reader, None));
    assert!(eventually(10, || k.calls("SendStreamingMessage").len() == 1));
    std::thread::sleep(Duration::from_millis(300));
    k.open("die");
    let owner = owner.join().unwrap();
    let end = owner.last().unwrap();
    assert_eq!(end.ev["type"], "RUN_ERROR", "{}", end.ev);
    let (kind, after) = subscribe(&a, "t-died", end.id.as_deref());
    assert_eq!(kind.as_deref(), Some("exact"));
    assert!(
        after.is_empty(),
        "events after the run's last: {:?}",
        events(&after)
    );
}
