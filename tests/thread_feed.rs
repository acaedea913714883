//! The live feed of a thread (`GET /extensions/iac-code/v1/threads/{threadId}/events`) over
//! real HTTP against the fake kernel: every run of the thread, from any client, arrives on one
//! open feed with the run's own frames and cursors; a cut feed resumes exactly with
//! `Last-Event-ID`; a feed never takes the thread, never cancels, and never keeps a run alive.

use fake_kernel::{FakeKernel, Step};
use serde_json::{json, Value};
use std::io::{BufReader, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};
use test_support::sse::{self, Item};
use test_support::*;

const INVOCATION: &str = "rosInvocationId=invocation-1";

fn setup(args: &[&str]) -> (FakeKernel, Adapter) {
    let k = FakeKernel::start();
    let a = Adapter::start_args(&k.url, args);
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

/// One SSE frame as the client saw it: its `id:` and its event.
type Frame = (String, Value);

/// A run posted on its own connection, its frames with their cursors.
fn post_frames(a: &Adapter, body: &Value) -> Vec<Frame> {
    post_to(&a.url, body)
}

fn post_to(url: &str, body: &Value) -> Vec<Frame> {
    let resp = agent()
        .post(format!("{url}/"))
        .header("Content-Type", "application/json")
        .header("Accept", "text/event-stream")
        .send(serde_json::to_vec(body).unwrap())
        .unwrap();
    assert_eq!(resp.status(), 200);
    frames_of(resp.into_body().into_reader())
}

/// A run posted by another client, on a thread of its own: its frames when joined.
fn post_in_background(a: &Adapter, body: Value) -> std::thread::JoinHandle<Vec<Frame>> {
    let url = a.url.clone();
    std::thread::spawn(move || post_to(&url, &body))
}

fn frames_of(r: impl std::io::Read) -> Vec<Frame> {
    sse::read(BufReader::new(r))
        .filter_map(|i| match i.expect("SSE read") {
            Item::Event(e) => Some((e.id.clone().expect("every frame has an id"), e.json())),
            _ => None,
        })
        .collect()
}

/// An open feed on a raw socket (so the test can cut it), read on a thread of its own.
struct Feed {
    socket: TcpStream,
    items: Receiver<Item>,
    head: String,
}

fn feed_url(thread: &str, query: &str) -> String {
    format!("/extensions/iac-code/v1/threads/{thread}/events?{query}")
}

fn open_feed(a: &Adapter, thread: &str, last_event_id: Option<&str>) -> Feed {
    let mut socket = raw::connect(&a.url);
    socket
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let cursor = last_event_id.map_or(String::new(), |c| format!("Last-Event-ID: {c}\r\n"));
    write!(
        socket,
        "GET {} HTTP/1.1\r\nHost: {}\r\nAccept: text/event-stream\r\n{cursor}\r\n",
        feed_url(thread, INVOCATION),
        raw::addr(&a.url)
    )
    .unwrap();
    let head = raw::read_head(&mut socket).unwrap().expect("a head");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let reader = socket.try_clone().unwrap();
    let (tx, items) = channel();
    std::thread::spawn(move || {
        for item in sse::read(BufReader::new(reader)) {
            let Ok(item) = item else { return };
            if tx.send(item).is_err() {
                return;
            }
        }
    });
    Feed {
        socket,
        items,
        head,
    }
}

impl Feed {
    /// The frames until `runs` runs ended (`RUN_FINISHED`/`RUN_ERROR`), within 20 s.
    fn runs(&self, runs: usize) -> Vec<Frame> {
        let mut out = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut ended = 0;
        while ended < runs {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.items.recv_timeout(left) {
                Ok(Item::Event(e)) => {
                    let v = e.json();
                    if v["type"] == "RUN_FINISHED" || v["type"] == "RUN_ERROR" {
                        ended += 1;
                    }
                    out.push((e.id.clone().expect("an id"), v));
                }
                Ok(_) => {}
                Err(_) => panic!("the feed gave {ended} of {runs} runs: {out:?}"),
            }
        }
        out
    }

    /// The frames until one of type `kind` (included).
    fn until(&self, kind: &str) -> Vec<Frame> {
        let mut out = Vec::new();
        loop {
            match self.items.recv_timeout(Duration::from_secs(20)) {
                Ok(Item::Event(e)) => {
                    let v = e.json();
                    let last = v["type"] == kind;
                    out.push((e.id.clone().expect("an id"), v));
                    if last {
                        return out;
                    }
                }
                Ok(_) => {}
                Err(_) => panic!("no {kind} on the feed: {out:?}"),
            }
        }
    }

    /// Whatever arrives within `d`: frames and heartbeats.
    fn for_a_while(&self, d: Duration) -> (Vec<Frame>, usize) {
        let (mut frames, mut beats) = (Vec::new(), 0);
        let deadline = Instant::now() + d;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.items.recv_timeout(left) {
                Ok(Item::Event(e)) => frames.push((e.id.clone().unwrap(), e.json())),
                Ok(Item::Comment(c)) if c == "heartbeat" => beats += 1,
                Ok(_) => {}
                Err(_) => break,
            }
        }
        (frames, beats)
    }

    fn cut(self) {
        let _ = self.socket.shutdown(Shutdown::Both);
    }
}

fn types(frames: &[Frame]) -> Vec<&str> {
    frames
        .iter()
        .map(|(_, e)| e["type"].as_str().unwrap_or(""))
        .collect()
}

/// A thread with one turn done (a feed needs a thread the adapter knows).
fn known_thread(a: &Adapter, thread: &str) {
    a.assert_turn_succeeds(thread, "r0");
}

#[test]
fn two_runs_from_two_clients_arrive_in_order_on_one_open_feed_with_their_own_cursors() {
    let (_k, a) = setup(&[]);
    known_thread(&a, "t-two");
    let feed = open_feed(&a, "t-two", None);
    assert!(!feed.head.contains("X-AGUI-Resume"), "{}", feed.head);
    let first = post_frames(&a, &a.request("t-two", "r1", "first question"));
    // Another client: another connection, another request of the same thread.
    let second = post_in_background(&a, a.request("t-two", "r2", "second question"))
        .join()
        .unwrap();
    let fed = feed.runs(2);
    let mut want = first.clone();
    want.extend(second.clone());
    assert_eq!(
        fed, want,
        "the feed carries the runs' own frames and cursors"
    );
    // Each run's user message rides on RUN_STARTED.input, as @ag-ui/client merges it.
    assert_eq!(
        first[0].1["input"]["messages"],
        json!([{"id": "msg-r1", "role": "user", "content": "first question"}])
    );
    assert_eq!(
        second[0].1["input"]["messages"][0]["content"],
        "second question"
    );
    assert_eq!(first[0].1["input"]["runId"], "r1");
    feed.cut();
}

#[test]
fn a_run_with_an_interrupt_and_its_resume_arrive_one_after_the_other() {
    let (_k, a) = setup(&[]);
    known_thread(&a, "t-wait");
    let feed = open_feed(&a, "t-wait", None);
    let asked = post_frames(&a, &a.request("t-wait", "r1", "scenario:permission"));
    let last = &asked.last().unwrap().1;
    assert_eq!(last["outcome"]["type"], "interrupt", "{last}");
    let id = last["outcome"]["interrupts"][0]["id"].clone();
    let answered = post_frames(&a, &a.resume_request("t-wait", "r2", allow(&id)));
    assert_eq!(answered.last().unwrap().1["outcome"]["type"], "success");
    // A resume carries no user message: its RUN_STARTED has no input.
    assert!(answered[0].1.get("input").is_none(), "{}", answered[0].1);
    let fed = feed.runs(2);
    let mut want = asked;
    want.extend(answered);
    assert_eq!(fed, want);
}

#[test]
fn a_cut_feed_resumes_with_last_event_id_mid_run_exactly() {
    let (k, a) = setup(&[]);
    gated(&k);
    known_thread(&a, "t-cut");
    let feed = open_feed(&a, "t-cut", None);
    let run = post_in_background(&a, a.request("t-cut", "r1", "scenario:gated"));
    let mut seen = feed.until("TEXT_MESSAGE_CONTENT");
    feed.cut();
    let cursor = seen.last().unwrap().0.clone();
    let feed = open_feed(&a, "t-cut", Some(&cursor));
    k.open("go");
    seen.extend(feed.runs(1));
    let own = run.join().unwrap();
    assert_eq!(seen, own, "frames equal, nothing doubled, nothing skipped");
}

#[test]
fn a_feed_cut_between_runs_gets_the_runs_it_missed_and_a_stale_cursor_gets_a_gap_run() {
    let (_k, a) = setup(&[]);
    known_thread(&a, "t-between");
    let feed = open_feed(&a, "t-between", None);
    let r1 = post_frames(&a, &a.request("t-between", "r1", "one"));
    assert_eq!(feed.runs(1), r1);
    feed.cut();
    // Two runs while no feed is open: the thread still holds the newest runs for a while.
    let r2 = post_frames(&a, &a.request("t-between", "r2", "two"));
    let cursor = r1.last().unwrap().0.clone();
    let feed = open_feed(&a, "t-between", Some(&cursor));
    assert_eq!(feed.runs(1), r2, "the run after the cursor, whole");
    let (more, _) = feed.for_a_while(Duration::from_millis(500));
    assert!(more.is_empty(), "nothing doubled: {more:?}");
    feed.cut();
    // A cursor of an earlier start of the adapter: said so by a gap run, never skipped silently.
    let stale = cursor.replacen(cursor.split('.').next().unwrap(), "0zz", 1);
    let feed = open_feed(&a, "t-between", Some(&stale));
    let gap = feed.runs(1);
    assert_eq!(
        types(&gap),
        ["RUN_STARTED", "CUSTOM", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    );
    assert_eq!(gap[1].1["name"], "iac-code.feed.gap");
    // Its snapshot is the thread's kept conversation: what the feed missed is in it.
    let users: Vec<&Value> = gap[2].1["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| &m["content"])
        .collect();
    assert!(users.contains(&&json!("two")), "{:?}", gap[2].1);
    // The gap run's own cursor resumes between runs: the next run follows, nothing else.
    let after_gap = gap.last().unwrap().0.clone();
    feed.cut();
    let feed = open_feed(&a, "t-between", Some(&after_gap));
    let r3 = post_frames(&a, &a.request("t-between", "r3", "three"));
    assert_eq!(feed.runs(1), r3);
}

#[test]
fn a_feed_opened_mid_run_gets_the_run_from_its_start() {
    let (k, a) = setup(&[]);
    gated(&k);
    known_thread(&a, "t-mid");
    let run = post_in_background(&a, a.request("t-mid", "r1", "scenario:gated"));
    assert!(eventually(10, || a.thread_lookup("t-mid", INVOCATION).1
        ["state"]
        == "running"));
    std::thread::sleep(Duration::from_millis(200));
    let feed = open_feed(&a, "t-mid", None);
    k.open("go");
    let fed = feed.runs(1);
    assert_eq!(fed, run.join().unwrap());
}

#[test]
fn an_open_feed_never_blocks_a_turn_and_a_feed_client_that_leaves_cancels_nothing() {
    let (k, a) = setup(&[]);
    gated(&k);
    known_thread(&a, "t-free");
    let feed = open_feed(&a, "t-free", None);
    let run = post_in_background(&a, a.request("t-free", "r1", "scenario:gated"));
    feed.until("TEXT_MESSAGE_CONTENT");
    feed.cut();
    std::thread::sleep(Duration::from_millis(600)); // heartbeat ticks see the feed gone
    k.open("go");
    let own = run.join().unwrap();
    assert_eq!(own.last().unwrap().1["outcome"]["type"], "success");
    assert!(k.calls("CancelTask").is_empty(), "a feed never cancels");
    // Feeds open while turns come: each is admitted at once.
    let f1 = open_feed(&a, "t-free", None);
    let f2 = open_feed(&a, "t-free", None);
    for run in ["r2", "r3"] {
        let frames = post_frames(&a, &a.request("t-free", run, "hi"));
        assert_eq!(frames.last().unwrap().1["outcome"]["type"], "success");
    }
    assert_eq!(types(&f1.runs(2)), types(&f2.runs(2)));
}

#[test]
fn a_feed_is_not_a_reader_of_the_run_for_the_detach_grace() {
    let (k, a) = setup(&["--detach-grace", "1"]);
    gated(&k);
    known_thread(&a, "t-grace");
    let feed = open_feed(&a, "t-grace", None);
    let mut own = open_stream(&a.url, &a.request("t-grace", "r1", "scenario:gated"));
    feed.until("TEXT_MESSAGE_CONTENT");
    let mut buf = [0u8; 256];
    let _ = std::io::Read::read(&mut own, &mut buf);
    drop(own); // the run's own client leaves; only the feed watches
    let fed = feed.until("RUN_ERROR");
    assert_eq!(fed.last().unwrap().1["code"], "CANCELLED", "{fed:?}");
    assert!(eventually(10, || !k.calls("CancelTask").is_empty()));
}

#[test]
fn a_feed_answers_only_the_threads_identity_and_the_same_404_otherwise() {
    let (_k, a) = setup(&[]);
    let get = |thread: &str, query: &str| {
        let resp = agent()
            .get(format!("{}{}", a.url, feed_url(thread, query)))
            .call()
            .unwrap();
        let status = resp.status().as_u16();
        let v: Value =
            serde_json::from_str(&resp.into_body().read_to_string().unwrap()).unwrap_or_default();
        (
            status,
            v["error"]["code"].as_str().unwrap_or("").to_string(),
        )
    };
    let not_found = (404, "EXECUTION_NOT_FOUND".to_string());
    assert_eq!(get("t-none", INVOCATION), not_found, "no state file yet");
    let mut body = a.request("t-id", "r1", "hello");
    body["forwardedProps"]["iacCode"]["userId"] = json!("alice");
    assert_eq!(a.run(&body).status, 200);
    assert_eq!(get("t-id", "rosInvocationId=other"), not_found);
    assert_eq!(get("t-id", "userId=bob"), not_found);
    assert_eq!(get("t-id", "").0, 400);
    let feed = open_feed(&a, "t-id", None);
    feed.cut();
    let mut socket = raw::connect(&a.url);
    write!(
        socket,
        "GET {} HTTP/1.1\r\nHost: {}\r\n\r\n",
        feed_url("t-id", "userId=alice"),
        raw::addr(&a.url)
    )
    .unwrap();
    let head = raw::read_head(&mut socket).unwrap().unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("text/event-stream"), "{head}");
}

#[test]
fn a_feed_with_the_bearer_token_set_needs_it() {
    let k = FakeKernel::start();
    let a = Adapter::start_with(
        &k.url,
        Options {
            auth_token: Some("test-token-not-a-secret".into()),
            ..Default::default()
        },
    );
    let resp = agent()
        .get(format!("{}{}", a.url, feed_url("t", INVOCATION)))
        .call()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 401);
}

#[test]
fn an_idle_feed_gets_heartbeats() {
    let (_k, a) = setup(&[]);
    known_thread(&a, "t-beat");
    let feed = open_feed(&a, "t-beat", None);
    let (frames, beats) = feed.for_a_while(Duration::from_millis(1500));
    assert!(frames.is_empty(), "{frames:?}");
    assert!(
        beats >= 2,
        "{beats} heartbeats in 1.5 s at a 0.2 s interval"
    );
}

#[test]
fn a_run_that_outgrew_the_buffer_is_entered_by_its_join_and_an_evicted_cursor_gets_a_gap_first() {
    let (k, a) = setup(&["--replay-buffer-bytes", "4096"]);
    let mut steps: Vec<Step> = (0..60)
        .map(|i| text(&format!("chunk {i:02} of the answer. ")))
        .collect();
    steps.push(Step::Gate("go".into()));
    steps.push(text("The end."));
    steps.push(done());
    k.script("long-gated", steps);
    known_thread(&a, "t-big");
    let early = open_feed(&a, "t-big", None);
    let run = post_in_background(&a, a.request("t-big", "r1", "scenario:long-gated"));
    // (A feed that falls behind the 4 KiB ring while reading the run ends its response: it only
    // gives the first cursor here.)
    let first = early.until("RUN_STARTED");
    assert!(eventually(10, || a.thread_lookup("t-big", INVOCATION).1
        ["state"]
        == "running"));
    std::thread::sleep(Duration::from_millis(500)); // the 60 chunks outgrow the 4 KiB ring
                                                    // Opened now: the run's first frames are gone, so the feed enters it by its join.
    let late = open_feed(&a, "t-big", None);
    // A cursor of a frame dropped since: a gap run first, then the join.
    let stale = open_feed(&a, "t-big", Some(&first[0].0));
    k.open("go");
    let own = run.join().unwrap();
    // This run's messages: a join's snapshot also holds the thread's earlier turns.
    let own_ids: Vec<Value> = own
        .iter()
        .filter(|(_, e)| e["type"] == "TEXT_MESSAGE_START")
        .map(|(_, e)| e["messageId"].clone())
        .collect();
    let text_of = |frames: &[Frame]| -> String {
        let mut text = String::new();
        for (_, e) in frames {
            if e["type"] == "TEXT_MESSAGE_CONTENT" {
                text.push_str(e["delta"].as_str().unwrap());
            }
            for m in e["messages"].as_array().into_iter().flatten() {
                if m["role"] == "assistant" && own_ids.contains(&m["id"]) {
                    text.push_str(m["content"].as_str().unwrap_or(""));
                }
            }
        }
        text
    };
    let late = late.runs(1);
    assert_eq!(late[0].1["type"], "RUN_STARTED");
    assert!(
        types(&late).contains(&"MESSAGES_SNAPSHOT"),
        "{:?}",
        types(&late)
    );
    assert_eq!(
        text_of(&late),
        text_of(&own),
        "the join and the rest: the whole text"
    );
    assert_eq!(
        late.last(),
        own.last(),
        "the run's own end, with its cursor"
    );
    let stale = stale.runs(2);
    assert_eq!(
        types(&stale)[..4],
        ["RUN_STARTED", "CUSTOM", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    );
    assert_eq!(stale[1].1["name"], "iac-code.feed.gap");
    assert_eq!(text_of(&stale[4..]), text_of(&own));
    early.cut();
}
