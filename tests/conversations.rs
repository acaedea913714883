//! The conversation, kept (src/history/): over real HTTP against the fake kernel, what the
//! history route and a join give back equals, message by message, what the streams carried;
//! pages go back with stable cursors; the thread lookup's identity rules; an idle thread is
//! joined with its whole conversation; SIGKILL at random points never tears a conversation nor
//! loses a message the client saw closed.

use fake_kernel::{FakeKernel, Step};
use iac_code_agui::testing::check_spans;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use test_support::*;

fn setup() -> (FakeKernel, Adapter) {
    let k = FakeKernel::start();
    let a = Adapter::start(&k.url);
    (k, a)
}

const ID: &str = "rosInvocationId=invocation-1";

/// `@ag-ui/client`'s reducer (`defaultApplyEvents`), for the events this adapter sends.
fn reduce(messages: &mut Vec<Value>, events: &[Value]) {
    let find = |ms: &Vec<Value>, id: &Value| ms.iter().position(|m| m["id"] == *id);
    for e in events {
        let ty = e["type"].as_str().unwrap_or("");
        match ty {
            "TEXT_MESSAGE_START" | "REASONING_MESSAGE_START"
                if find(messages, &e["messageId"]).is_none() =>
            {
                let role = match ty {
                    "TEXT_MESSAGE_START" => e["role"].clone(),
                    _ => json!("reasoning"),
                };
                messages.push(json!({"id": e["messageId"], "role": role, "content": ""}));
            }
            "TEXT_MESSAGE_CONTENT" | "REASONING_MESSAGE_CONTENT" => {
                let i = find(messages, &e["messageId"]).expect("content of a started message");
                let text = format!(
                    "{}{}",
                    messages[i]["content"].as_str().unwrap(),
                    e["delta"].as_str().unwrap()
                );
                messages[i]["content"] = json!(text);
            }
            "TOOL_CALL_START" => {
                let call = json!({"id": e["toolCallId"], "type": "function",
                    "function": {"name": e["toolCallName"], "arguments": ""}});
                let parent = e.get("parentMessageId").filter(|p| p.is_string());
                match parent.and_then(|p| find(messages, p)) {
                    Some(i) if messages[i]["role"] == "assistant" => {
                        let m = messages[i].as_object_mut().unwrap();
                        m.entry("toolCalls")
                            .or_insert(json!([]))
                            .as_array_mut()
                            .unwrap()
                            .push(call);
                    }
                    found => {
                        let id = match (found, parent) {
                            (None, Some(p)) => p.clone(),
                            _ => e["toolCallId"].clone(),
                        };
                        messages.push(json!({"id": id, "role": "assistant", "toolCalls": [call]}));
                    }
                }
            }
            "TOOL_CALL_ARGS" => {
                for m in messages.iter_mut() {
                    for c in m
                        .get_mut("toolCalls")
                        .and_then(Value::as_array_mut)
                        .into_iter()
                        .flatten()
                    {
                        if c["id"] == e["toolCallId"] {
                            let args = format!(
                                "{}{}",
                                c["function"]["arguments"].as_str().unwrap(),
                                e["delta"].as_str().unwrap()
                            );
                            c["function"]["arguments"] = json!(args);
                        }
                    }
                }
            }
            "TOOL_CALL_RESULT" => {
                let result = json!({"id": e["messageId"], "role": "tool", "toolCallId": e["toolCallId"], "content": e["content"]});
                let owner = messages.iter().position(|m| {
                    m["role"] == "assistant"
                        && m["toolCalls"]
                            .as_array()
                            .is_some_and(|c| c.iter().any(|c| c["id"] == e["toolCallId"]))
                });
                match owner {
                    Some(i) => {
                        let mut at = i + 1;
                        while at < messages.len() && messages[at]["role"] == "tool" {
                            at += 1;
                        }
                        messages.insert(at, result);
                    }
                    None => messages.push(result),
                }
            }
            "ACTIVITY_SNAPSHOT" => {
                let m = json!({"id": e["messageId"], "role": "activity", "activityType": e["activityType"], "content": e["content"]});
                match find(messages, &e["messageId"]) {
                    Some(i) => messages[i] = m,
                    None => messages.push(m),
                }
            }
            "MESSAGES_SNAPSHOT" => *messages = e["messages"].as_array().unwrap().clone(),
            _ => {}
        }
    }
}

/// The conversation as a client that sent `body` and read `r` has it, plus what this adapter
/// keeps beside the stream: the user's message and each announced interrupt.
fn expect_turn(expected: &mut Vec<Value>, body: &Value, r: &RunResult) {
    if let Some(m) = body["messages"].as_array().and_then(|m| m.last()) {
        expected.push(json!({"id": m["id"], "role": "user", "content": m["content"]}));
    }
    reduce(expected, &r.events);
    let interrupted = r.last()["outcome"]["type"] == "interrupt";
    for i in interrupted.then(|| r.interrupts()).into_iter().flatten() {
        expected.push(
            json!({"id": format!("interrupt-{}", i["id"].as_str().unwrap()), "role": "activity",
            "activityType": "iac-code.interrupt", "content": {"interrupt": i, "answer": null}}),
        );
    }
}

/// The interrupt answered, as the conversation keeps it.
fn answer(expected: &mut [Value], resume: &Value) {
    for entry in resume.as_array().unwrap() {
        let id = format!("interrupt-{}", entry["interruptId"].as_str().unwrap());
        let m = expected
            .iter_mut()
            .find(|m| m["id"] == id.as_str())
            .expect("the interrupt");
        m["content"]["answer"] = json!({"status": entry["status"], "payload": entry["payload"]});
    }
}

fn history(a: &Adapter, thread: &str, query: &str) -> (u16, Value) {
    let url = format!(
        "{}/extensions/iac-code/v1/threads/{thread}/messages?{query}",
        a.url
    );
    let resp = agent().get(url).call().unwrap();
    let status = resp.status().as_u16();
    let text = resp.into_body().read_to_string().unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// Every page, newest first, put back in order.
fn all_pages(a: &Adapter, thread: &str, limit: usize) -> Vec<Value> {
    let mut all: Vec<Value> = Vec::new();
    let mut cursor = String::new();
    loop {
        let q = format!("{ID}&limit={limit}{cursor}");
        let (status, page) = history(a, thread, &q);
        assert_eq!(status, 200, "{page}");
        let mut chunk = page["messages"].as_array().unwrap().clone();
        assert!(chunk.len() <= limit);
        chunk.extend(all);
        all = chunk;
        match page["nextCursor"].as_str() {
            Some(c) => cursor = format!("&before={c}"),
            None => return all,
        }
    }
}

/// A join of the thread's newest execution, as a reloaded page does it (the lookup, then the
/// subscribe), with `extra` keys in the body.
fn join(a: &Adapter, thread: &str, extra: Value) -> RunResult {
    let (status, v) = a.thread_lookup(thread, ID);
    assert_eq!(status, 200, "{v}");
    let mut body =
        json!({"threadId": thread, "runId": v["runId"], "rosInvocationId": "invocation-1"});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    a.subscribe(v["executionId"].as_str().unwrap(), &body)
}

/// A turn that waits for a permission, answered `allow_once`: both runs kept as streamed.
fn answered_turn(a: &Adapter, t: &str, body: Value, expected: &mut Vec<Value>, n: usize) {
    let r = a.run(&body);
    assert_eq!(r.last()["outcome"]["type"], "interrupt", "{:?}", r.types());
    expect_turn(expected, &body, &r);
    let resume = json!([{"interruptId": r.interrupts()[0]["id"], "status": "resolved",
                         "payload": {"decision": "allow_once"}}]);
    let body = a.resume_request(t, &format!("r{n}-answer"), resume.clone());
    let r = a.run(&body);
    assert_eq!(r.last()["outcome"]["type"], "success", "{:?}", r.types());
    check_spans(&r.events).unwrap();
    answer(expected, &resume);
    expect_turn(expected, &body, &r);
}

#[test]
fn the_kept_conversation_is_what_the_streams_carried_message_by_message() {
    let (_k, a) = setup();
    let t = "t-conv";
    let mut expected = Vec::new();
    let run = |n: usize, text: &str, expected: &mut Vec<Value>| {
        let body = a.request(t, &format!("r{n}"), text);
        let r = a.run(&body);
        assert_eq!(r.last()["outcome"]["type"], "success", "{:?}", r.last());
        check_spans(&r.events).unwrap();
        expect_turn(expected, &body, &r);
    };
    run(1, "scenario:reasoning", &mut expected);
    run(2, "scenario:tools-artifact", &mut expected);
    let body = a.request(t, "r3", "scenario:permission");
    answered_turn(&a, t, body, &mut expected, 3);
    let mut body = a.request(t, "r4", "scenario:pipeline");
    let iac = &mut body["forwardedProps"]["iacCode"];
    iac["runMode"] = json!("pipeline");
    iac["pipelineName"] = json!("selling");
    answered_turn(&a, t, body, &mut expected, 4);
    for n in 5..12 {
        run(n, "hello", &mut expected);
    }
    let roles = |ms: &[Value]| -> Vec<String> {
        ms.iter()
            .map(|m| m["role"].as_str().unwrap().to_string())
            .collect()
    };
    for role in ["user", "assistant", "reasoning", "tool", "activity"] {
        assert!(
            roles(&expected).iter().any(|r| r == role),
            "no {role} in {:?}",
            roles(&expected)
        );
    }
    assert!(expected.iter().any(|m| m["toolCalls"].is_array()));
    let kept = all_pages(&a, t, 7);
    assert_eq!(kept.len(), expected.len(), "{:#?}", roles(&kept));
    for (k, e) in kept.iter().zip(&expected) {
        assert_eq!(k, e);
    }
    // The join of the idle thread: a run of its own with the whole conversation.
    let j = join(&a, t, json!({}));
    assert_eq!(
        j.types(),
        ["RUN_STARTED", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    );
    assert_eq!(j.events[1]["messages"], Value::Array(expected.clone()));
    // A page can ask for the newest messages only.
    let j = join(&a, t, json!({"historyLimit": 3}));
    assert_eq!(
        j.events[1]["messages"].as_array().unwrap()[..],
        expected[expected.len() - 3..]
    );
}

#[test]
fn history_pages_go_back_with_stable_cursors_and_refuse_bad_ones() {
    let (_k, a) = setup();
    let t = "t-pages";
    for n in 0..8 {
        a.assert_turn_succeeds(t, &format!("r{n}"));
    }
    let (status, first) = history(&a, t, &format!("{ID}&limit=4"));
    assert_eq!(status, 200);
    assert_eq!(first["threadId"], t);
    let cursor = first["nextCursor"].as_str().unwrap().to_string();
    let (_, older) = history(&a, t, &format!("{ID}&limit=4&before={cursor}"));
    // New turns do not move a page already handed out.
    a.assert_turn_succeeds(t, "r-late");
    let (_, again) = history(&a, t, &format!("{ID}&limit=4&before={cursor}"));
    assert_eq!(older, again);
    assert_eq!(all_pages(&a, t, 5).len(), all_pages(&a, t, 500).len());
    let (_, default) = history(&a, t, ID);
    assert_eq!(default["messages"].as_array().unwrap().len(), 18);
    assert_eq!(default["nextCursor"], Value::Null);
    for q in [
        "limit=0",
        "limit=501",
        "limit=x",
        "before=%21%21",
        "before=MA",
    ] {
        let (status, v) = history(&a, t, &format!("{ID}&{q}"));
        assert_eq!(
            (status, v["error"]["code"].as_str()),
            (400, Some("INVALID_INPUT")),
            "{q}"
        );
    }
}

#[test]
fn the_history_route_answers_only_the_thread_lookup_s_identities() {
    let (_k, a) = setup();
    let mut body = a.request("t-who", "r1", "hello");
    body["forwardedProps"]["iacCode"]["userId"] = json!("alice");
    assert_eq!(a.run(&body).status, 200);
    for q in [ID, "userId=alice"] {
        assert_eq!(history(&a, "t-who", q).0, 200, "{q}");
    }
    // A wrong identity and an unknown thread: the same 404, even with a bad cursor.
    let (s1, v1) = history(&a, "t-who", "userId=bob&before=%21");
    let (s2, v2) = history(&a, "t-nobody", &format!("{ID}&before=%21"));
    assert_eq!((s1, s2), (404, 404));
    assert_eq!(v1, v2);
    assert_eq!(history(&a, "t-who", "limit=3").0, 400);
}

#[test]
fn a_join_of_a_running_turn_starts_with_the_past_turns_then_the_live_rest() {
    let (k, a) = setup();
    k.script(
        "gated",
        vec![
            Step::Status {
                state: "TASK_STATE_WORKING",
                iac: json!({}),
                text: Some("First half. ".into()),
            },
            Step::Gate("go".into()),
            Step::Status {
                state: "TASK_STATE_WORKING",
                iac: json!({}),
                text: Some("Second half.".into()),
            },
            Step::Status {
                state: "TASK_STATE_INPUT_REQUIRED",
                iac: json!({}),
                text: None,
            },
        ],
    );
    let t = "t-live-join";
    a.assert_turn_succeeds(t, "r1");
    a.assert_turn_succeeds(t, "r2");
    let (url, body) = (a.url.clone(), a.request(t, "r3", "scenario:gated"));
    let own = std::thread::spawn(move || post_run(&url, &body, &[]));
    assert!(eventually(10, || a.thread_lookup(t, ID).1["state"] == "running"));
    assert!(eventually(10, || all_pages(&a, t, 50)
        .iter()
        .any(|m| m["content"] == "First half. ")));
    let (url, k2) = (a.url.clone(), ());
    let _ = (url, k2);
    let joined = std::thread::scope(|s| {
        let j = s.spawn(|| join(&a, t, json!({})));
        std::thread::sleep(Duration::from_millis(300));
        k.open("go");
        j.join().unwrap()
    });
    let own = own.join().unwrap();
    let snapshot = joined
        .events
        .iter()
        .find(|e| e["type"] == "MESSAGES_SNAPSHOT")
        .unwrap();
    let msgs = snapshot["messages"].as_array().unwrap();
    // Two past turns (user + reply each), this turn's user message; its open reply follows live.
    assert_eq!(msgs.len(), 5, "{msgs:?}");
    assert_eq!(msgs[4]["content"], "scenario:gated");
    assert_eq!(joined.text(), "First half. Second half.");
    assert_eq!(own.text(), joined.text());
    check_spans(&joined.events).unwrap();
    let mut kept = Vec::new();
    reduce(&mut kept, &joined.events);
    assert_eq!(kept, all_pages(&a, t, 50));
}

#[test]
fn a_join_of_a_waiting_turn_starts_with_the_past_turns_then_this_turn_and_its_interrupt() {
    let (k, a) = setup();
    waiting_join_is_the_whole_conversation(&a);
    // With a detach grace the ended run's replay buffer is still held and answers the join.
    let grace = Options {
        args: vec!["--detach-grace".into(), "30".into()],
        ..Default::default()
    };
    waiting_join_is_the_whole_conversation(&Adapter::start_with(&k.url, grace));
}

fn waiting_join_is_the_whole_conversation(a: &Adapter) {
    let t = "t-wait-join";
    let mut expected = Vec::new();
    for n in 1..=2 {
        let body = a.request(t, &format!("r{n}"), "scenario:reasoning");
        let r = a.run(&body);
        assert_eq!(r.last()["outcome"]["type"], "success", "{:?}", r.types());
        expect_turn(&mut expected, &body, &r);
    }
    let earlier = expected.len();
    let body = a.request(t, "r3", "scenario:permission");
    let r = a.run(&body);
    assert_eq!(r.last()["outcome"]["type"], "interrupt", "{:?}", r.types());
    expect_turn(&mut expected, &body, &r);
    assert_eq!(a.thread_lookup(t, ID).1["state"], "waiting");
    let j = join(a, t, json!({}));
    assert_eq!(j.types()[..2], ["RUN_STARTED", "CUSTOM"]);
    // The snapshot: every earlier message in order, then this turn's (its user message first).
    let snapshot = &j.events[2];
    assert_eq!(snapshot["type"], "MESSAGES_SNAPSHOT");
    let msgs = snapshot["messages"].as_array().unwrap();
    assert!(msgs.len() > earlier, "{msgs:?}");
    assert_eq!(msgs[..earlier], expected[..earlier]);
    assert_eq!(msgs[earlier]["role"], "user");
    assert_eq!(msgs[earlier]["content"], "scenario:permission");
    assert_eq!(msgs[..], expected[..msgs.len()]);
    // What follows it (the message the interrupt waits on, as the events that streamed it: a
    // client such as assistant-ui attaches the interrupt to that message; the interrupt's record)
    // completes it: reduced as `@ag-ui/client` does, the join is the whole kept conversation.
    let call = r.interrupts()[0]["toolCallId"].clone();
    assert!(
        j.events[3..]
            .iter()
            .any(|e| e["type"] == "TOOL_CALL_START" && e["toolCallId"] == call),
        "{:?}",
        j.types()
    );
    let mut seen = Vec::new();
    reduce(&mut seen, &j.events);
    assert_eq!(seen, expected);
    assert_eq!(seen, all_pages(a, t, 50));
    check_spans(&j.events).unwrap();
    // It ends with the pending interrupt exactly as announced, and it can be answered.
    assert_eq!(j.last()["type"], "RUN_FINISHED");
    assert_eq!(j.last()["outcome"], r.last()["outcome"]);
    let resume = json!([{"interruptId": r.interrupts()[0]["id"], "status": "resolved",
                         "payload": {"decision": "allow_once"}}]);
    let r = a.run(&a.resume_request(t, "r3-answer", resume));
    assert_eq!(r.last()["outcome"]["type"], "success", "{:?}", r.types());
}

/// The events a client read before its connection went away.
fn read_until_cut(url: String, body: Value, seen: Arc<Mutex<Vec<Value>>>) {
    let Ok(resp) = agent()
        .post(format!("{url}/"))
        .header("Content-Type", "application/json")
        .header("Accept", "text/event-stream")
        .send(serde_json::to_vec(&body).unwrap())
    else {
        return;
    };
    let reader = BufReader::new(resp.into_body().into_reader());
    for line in reader.lines() {
        let Ok(line) = line else { return };
        if let Some(data) = line.strip_prefix("data: ") {
            if let Ok(v) = serde_json::from_str(data) {
                seen.lock().unwrap().push(v);
            }
        }
    }
}

/// What a client saw closed: each message's text as it stood at its last end (a message the
/// kernel goes on with is opened again under its id), tool calls whose end arrived, results.
type Closed = (Vec<(String, String)>, Vec<String>, Vec<String>);

fn closed(events: &[Value]) -> Closed {
    let mut msgs = Vec::new();
    let mut texts: Vec<(String, String)> = Vec::new();
    let (mut calls, mut results) = (Vec::new(), Vec::new());
    for e in events {
        reduce(&mut msgs, std::slice::from_ref(e));
        let ty = e["type"].as_str().unwrap_or("");
        if matches!(ty, "TEXT_MESSAGE_END" | "REASONING_MESSAGE_END") {
            let id = e["messageId"].as_str().unwrap().to_string();
            let m = msgs.iter().find(|m| m["id"] == id.as_str()).unwrap();
            let content = m["content"].as_str().unwrap().to_string();
            texts.retain(|(i, _)| *i != id);
            texts.push((id, content));
        } else if ty == "TOOL_CALL_END" {
            calls.push(e["toolCallId"].as_str().unwrap().to_string());
        } else if ty == "TOOL_CALL_RESULT" {
            results.push(e["messageId"].as_str().unwrap().to_string());
        }
    }
    (texts, calls, results)
}

#[test]
fn sigkill_at_random_points_never_tears_a_conversation_nor_loses_a_closed_message() {
    let k = FakeKernel::start();
    let mut a = Adapter::start(&k.url);
    let text = |t: &str| Step::Status {
        state: "TASK_STATE_WORKING",
        iac: json!({}),
        text: Some(t.into()),
    };
    let think = |t: &str| Step::Status {
        state: "TASK_STATE_WORKING",
        iac: json!({"thinking": {"type": "raw_thinking", "text": t}}),
        text: None,
    };
    let tool = |st: &str, extra: Value| {
        let mut t = json!({"toolUseId": "call_1", "name": "write_file", "status": st});
        t.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        Step::Status {
            state: "TASK_STATE_WORKING",
            iac: json!({"tool": t}),
            text: None,
        }
    };
    let mut script = Vec::new();
    for i in 0..4 {
        script.extend([
            think(&format!("Thinking {i}. ")),
            Step::Sleep(3),
            text(&format!("Part {i}, ")),
            Step::Sleep(3),
            text("more. "),
            Step::Sleep(3),
        ]);
    }
    script.extend([
        tool("started", json!({})),
        tool("input_complete", json!({"toolInput": {"path": "/w/a.txt"}})),
        Step::Sleep(3),
        tool("completed", json!({"result": {"ok": true}})),
        text("Done."),
        Step::Status {
            state: "TASK_STATE_INPUT_REQUIRED",
            iac: json!({}),
            text: None,
        },
    ]);
    k.script("kill-me", script);
    let mut rng = Rng(0xc0ffee);
    let deadline = Instant::now() + Duration::from_secs(90);
    let (mut kills, mut checked_closed) = (0, 0);
    for i in 0..40 {
        if Instant::now() >= deadline {
            break;
        }
        kills += 1;
        let thread = format!("t-conv-kill-{}", i % 4);
        let body = a.request(&thread, &format!("r{i}"), "scenario:kill-me");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let client = {
            let (url, seen) = (a.url.clone(), seen.clone());
            std::thread::spawn(move || read_until_cut(url, body, seen))
        };
        std::thread::sleep(Duration::from_micros(rng.next_u64() % 120_000));
        a.kill();
        let _ = client.join();
        let path = a.state_dir.join("history").join(format!("{thread}.jsonl"));
        let bytes = std::fs::read(&path).unwrap_or_default();
        let text = String::from_utf8(bytes).expect("UTF-8");
        let whole = text.rfind('\n').map_or(0, |i| i + 1);
        let mut last_seq = 0;
        for (n, line) in text[..whole].lines().enumerate() {
            let v: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{thread} line {n}: {e}: {line}"));
            if n == 0 {
                assert_eq!(v["type"], "thread", "{line}");
                continue;
            }
            let seq = v["seq"].as_u64().unwrap();
            assert!(seq > last_seq, "{thread}: seq {seq} after {last_seq}");
            last_seq = seq;
        }
        a.restart();
        if seen.lock().unwrap().is_empty() {
            continue; // killed before the run was admitted: nothing was sent
        }
        let kept = all_pages(&a, &thread, 500);
        let (texts, calls, results) = closed(&seen.lock().unwrap());
        for (id, content) in &texts {
            let m = kept
                .iter()
                .find(|m| m["id"] == id.as_str())
                .unwrap_or_else(|| panic!("{id} lost: {kept:?}"));
            assert!(
                m["content"].as_str().unwrap().starts_with(content.as_str()),
                "{id}: {m} vs {content}"
            );
            checked_closed += 1;
        }
        for id in &calls {
            assert!(
                kept.iter().any(|m| m["toolCalls"]
                    .as_array()
                    .is_some_and(|c| c.iter().any(|c| c["id"] == id.as_str()))),
                "call {id} lost"
            );
        }
        for id in &results {
            assert!(
                kept.iter().any(|m| m["id"] == id.as_str()),
                "result {id} lost"
            );
        }
        // Sent before the kernel's first answer: kept once the client saw more than the start.
        if seen.lock().unwrap().len() > 1 {
            assert!(
                kept.iter().any(|m| m["id"] == format!("msg-r{i}").as_str()),
                "the user's message of r{i} lost"
            );
        }
    }
    assert!(kills >= 10, "only {kills} kills");
    assert!(
        checked_closed > 0,
        "no kill came after a closed message: the window is wrong"
    );
    eprintln!("{kills} kills, {checked_closed} closed messages found kept");
}

#[test]
fn a_turn_cut_by_a_kill_keeps_what_was_sent_and_is_completed_from_the_kernel() {
    let k = FakeKernel::start();
    let mut a = Adapter::start(&k.url);
    k.script(
        "cut",
        vec![
            Step::Status {
                state: "TASK_STATE_WORKING",
                iac: json!({}),
                text: Some("Before the cut, ".into()),
            },
            Step::Gate("cut".into()),
            Step::Status {
                state: "TASK_STATE_WORKING",
                iac: json!({}),
                text: Some("after it.".into()),
            },
            Step::Status {
                state: "TASK_STATE_INPUT_REQUIRED",
                iac: json!({}),
                text: None,
            },
        ],
    );
    let t = "t-cut";
    let seen = Arc::new(Mutex::new(Vec::new()));
    let client = {
        let (url, body, seen) = (
            a.url.clone(),
            a.request(t, "r1", "scenario:cut"),
            seen.clone(),
        );
        std::thread::spawn(move || read_until_cut(url, body, seen))
    };
    assert!(eventually(10, || seen
        .lock()
        .unwrap()
        .iter()
        .any(|e| e["type"] == "TEXT_MESSAGE_CONTENT")));
    a.kill();
    let _ = client.join();
    a.restart();
    // What was sent is kept: the user's message and the text so far.
    let kept = all_pages(&a, t, 50);
    assert_eq!(kept[0]["content"], "scenario:cut");
    assert_eq!(kept[1]["content"], "Before the cut, ");
    // The kernel goes on; the next turn repairs the execution and completes the cut turn.
    k.open("cut");
    a.assert_turn_succeeds(t, "r2");
    let kept = all_pages(&a, t, 50);
    assert_eq!(
        kept[1]["id"],
        seen.lock()
            .unwrap()
            .iter()
            .find(|e| e["type"] == "TEXT_MESSAGE_START")
            .unwrap()["messageId"]
    );
    assert_eq!(kept[1]["content"], "Before the cut, after it.");
    assert_eq!(kept.len(), 4, "{kept:?}");
}
