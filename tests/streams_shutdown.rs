//! Streams, upstream deadlines, shutdown and crash recovery (issue 9): a client that stops reading
//! or closes its end, heartbeats that never wait on one stream, an upstream that never reads, a
//! hung kernel behind the cancel extension, SIGTERM, SIGKILL mid-run, a cancel racing a resume and
//! HTTP/1.0. Every wait here is bounded; intervals are small (heartbeat 0.2 s, write timeout 1 s).

use fake_kernel::FakeKernel;
use iac_code_agui::testing::check_spans;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};
use test_support::*;

/// Sends `POST /` over a raw connection (`version` is `1.0` or `1.1`) and returns the socket.
fn raw_post(url: &str, body: &Value, version: &str) -> TcpStream {
    let addr = url.strip_prefix("http://").unwrap();
    let mut s = TcpStream::connect(addr).unwrap();
    let bytes = serde_json::to_vec(body).unwrap();
    write!(
        s,
        "POST / HTTP/{version}\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Accept: text/event-stream\r\nContent-Length: {}\r\n\r\n",
        bytes.len()
    )
    .unwrap();
    s.write_all(&bytes).unwrap();
    s
}

fn cancel_url(a: &Adapter, execution: &Value) -> String {
    format!(
        "{}/extensions/iac-code/v1/executions/{}/cancel",
        a.url,
        execution.as_str().unwrap()
    )
}

fn cancel_body(thread: &str) -> Value {
    json!({"threadId": thread, "rosInvocationId": "invocation-1"})
}

/// Waits until the thread's state file records a task id; returns the state.
fn wait_task(a: &Adapter, thread: &str) -> Value {
    let path = a.state_dir.join(format!("threads/{thread}.json"));
    assert!(
        eventually(10, || path.exists()
            && a.state_file(thread)["execution"]["taskId"].is_string()),
        "no task id recorded for {thread}"
    );
    a.state_file(thread)
}

/// Starts a run that hangs upstream on `thread` (its client keeps reading in the background) and
/// returns the thread's state once the task is known.
fn hanging_run(a: &Adapter, thread: &str) -> Value {
    let (url, body) = (a.url.clone(), a.request(thread, "r1", "scenario:hang"));
    std::thread::spawn(move || {
        let _ = agent()
            .post(format!("{url}/"))
            .header("Content-Type", "application/json")
            .send(serde_json::to_vec(&body).unwrap())
            .map(|r| r.into_body().read_to_string());
    });
    wait_task(a, thread)
}

/// Runs a plain turn on `thread` and checks that it ends in success.
fn assert_turn_succeeds(a: &Adapter, thread: &str, run: &str) {
    let r = a.run(&a.request(thread, run, "hi"));
    assert_eq!(r.last()["outcome"]["type"], "success", "{:?}", r.last());
}

fn process_gone(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("State:") && l.contains('Z'))
        })
        .unwrap_or(true)
}

#[test]
fn a_client_that_stops_reading_is_dropped_and_its_thread_freed() {
    let k = FakeKernel::start();
    let a = Adapter::start_args(&k.url, &["--write-timeout", "1"]);
    let stuck = raw_post(
        &a.url,
        &a.request("t-stuck", "r1", "scenario:flood-400000"),
        "1.1",
    );
    // A tiny receive buffer, never read: the adapter's writes stop making progress.
    let small: libc::c_int = 4096;
    // SAFETY: setsockopt on our own socket with a local int.
    unsafe {
        libc::setsockopt(
            stuck.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&small as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
    let state = wait_task(&a, "t-stuck");
    let task = state["execution"]["taskId"].as_str().unwrap().to_string();
    // Dropped after the write timeout: the task is cancelled and the thread is free again.
    assert!(
        eventually(20, || k.task_state(&task).as_deref()
            == Some("TASK_STATE_CANCELED")),
        "the stuck client's task was not cancelled"
    );
    assert!(
        eventually(10, || a.state_file("t-stuck")["terminalExecutionIds"]
            .as_array()
            .is_some_and(|t| !t.is_empty())),
        "the stuck run never ended"
    );
    let (status, v) = post_json(
        &cancel_url(&a, &state["execution"]["executionId"]),
        &cancel_body("t-stuck"),
    );
    // The state file records the end before the run thread lets go of the thread's slot: in
    // that instant the extension still finds the run active and answers `cancelled`.
    assert_eq!(status, 200, "{v}");
    assert!(
        matches!(v["status"].as_str(), Some("already_terminal" | "cancelled")),
        "{v}"
    );
    assert_turn_succeeds(&a, "t-stuck", "r2");
    drop(stuck);
}

#[test]
fn a_stuck_client_does_not_slow_the_heartbeats_of_other_streams() {
    let k = FakeKernel::start();
    let a = Adapter::start_args(&k.url, &["--write-timeout", "3"]);
    // Several stuck clients, each holding its stream's writer for up to the write timeout.
    let stuck: Vec<TcpStream> = (0..3)
        .map(|i| {
            raw_post(
                &a.url,
                &a.request(&format!("t-stuck-{i}"), "r1", "scenario:flood-400000"),
                "1.1",
            )
        })
        .collect();
    for i in 0..3 {
        wait_task(&a, &format!("t-stuck-{i}"));
    }
    // A healthy stream on a silent upstream: heartbeats every 0.2 s for 2 s.
    let mut healthy = open_stream(&a.url, &a.request("t-healthy", "r1", "scenario:hang"));
    let started = Instant::now();
    let mut seen = String::new();
    let mut buf = [0u8; 4096];
    while started.elapsed() < Duration::from_secs(2) {
        let n = healthy.read(&mut buf).unwrap();
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    let beats = seen.matches(": heartbeat").count();
    assert!(beats >= 4, "{beats} heartbeats in 2 s at a 0.2 s interval");
    drop(stuck);
}

#[test]
fn a_client_that_closes_its_end_is_noticed_while_the_upstream_is_silent() {
    let k = FakeKernel::start();
    let a = Adapter::start_args(&k.url, &["--heartbeat-interval", "0.5"]);
    let s = raw_post(
        &a.url,
        &a.request("t-halfclose", "r1", "scenario:hang"),
        "1.1",
    );
    let state = wait_task(&a, "t-halfclose");
    // Only the client's sending side closes: heartbeat writes still succeed, a peek sees EOF.
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let task = state["execution"]["taskId"].as_str().unwrap().to_string();
    assert!(
        eventually(5, || k.task_state(&task).as_deref()
            == Some("TASK_STATE_CANCELED")),
        "a half-closed client was not noticed"
    );
    drop(s);
}

#[test]
fn an_upstream_that_never_reads_the_request_fails_the_run_within_the_idle_timeout() {
    // A kernel that accepts connections and never reads or answers.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    // The connections are held until the run has ended: without the idle timeout it never would.
    let (release, released) = std::sync::mpsc::channel::<()>();
    let held = std::thread::spawn(move || {
        let conns: Vec<_> = listener.incoming().take(1).collect();
        let _ = released.recv();
        drop(conns);
    });
    let a = Adapter::start_args(&url, &["--a2a-idle-timeout", "1"]);
    // 10 MB of text: more than the socket buffers hold, so the request write itself stalls.
    let text = "x".repeat(10 * 1024 * 1024);
    let started = Instant::now();
    let r = a.run(&a.request("t-deaf", "r1", &text));
    assert_eq!(r.error_code(), "A2A_UNAVAILABLE", "{:?}", r.last());
    // A bound, not a speed figure: the test client gives up after 30 s; under a loaded CI machine
    // the 10 MB body alone has taken 6-10 s in a debug build.
    eprintln!(
        "ended after {:?} with a 1 s idle timeout",
        started.elapsed()
    );
    release.send(()).unwrap();
    held.join().unwrap();
}

#[test]
fn the_cancel_extension_answers_within_bounds_when_the_kernel_hangs() {
    let k = FakeKernel::start();
    let a = Adapter::start(&k.url);
    let first = a.run(&a.request("t-hung", "r1", "scenario:permission"));
    let execution = first.session()["executionId"].clone();
    k.stall_cancels(true);
    let started = Instant::now();
    let (status, v) = post_json(&cancel_url(&a, &execution), &cancel_body("t-hung"));
    assert_eq!((status, v["status"].as_str()), (200, Some("cancelled")));
    // A bound, not a speed figure: a stalled CancelTask would hold the answer forever; ours gives
    // up after 5 s, and a loaded machine must not turn that margin into a failure.
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "the cancel extension took {:?}",
        started.elapsed()
    );
    // Closed durably; the thread is not held: a new turn is admitted at once.
    assert_eq!(a.state_file("t-hung")["execution"]["pending"], json!({}));
    k.stall_cancels(false);
    assert_turn_succeeds(&a, "t-hung", "r2");
}

#[test]
fn sigterm_ends_every_active_run_with_run_error_and_the_end_of_the_stream() {
    let k = FakeKernel::start();
    let a = Adapter::start(&k.url);
    let readers: Vec<_> = ["t-term-1", "t-term-2"]
        .iter()
        .map(|t| {
            let (url, body) = (a.url.clone(), a.request(t, "r1", "scenario:hang"));
            std::thread::spawn(move || post_run(&url, &body, &[]))
        })
        .collect();
    let tasks: Vec<String> = ["t-term-1", "t-term-2"]
        .iter()
        .map(|t| {
            wait_task(&a, t)["execution"]["taskId"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let pid = a.pid();
    let started = Instant::now();
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
    for r in readers {
        // `post_run` reads the chunked body to its end: a cut-off stream fails the read.
        let r = r.join().expect("the stream ended properly");
        assert_eq!(r.error_code(), "A2A_UNAVAILABLE");
        assert_eq!(r.last()["message"], "The adapter is shutting down.");
        check_spans(&r.events).unwrap();
    }
    for task in &tasks {
        assert_eq!(k.task_state(task).as_deref(), Some("TASK_STATE_CANCELED"));
    }
    assert!(
        eventually(25, || process_gone(pid)),
        "the adapter did not exit"
    );
    eprintln!("exited {:?} after SIGTERM", started.elapsed());
    assert!(a.logs().contains("shutting down"), "{}", a.logs());
}

#[test]
fn a_thread_left_running_by_sigkill_is_repaired_before_its_next_turn() {
    let k = FakeKernel::start();
    let mut a = Adapter::start(&k.url);
    let old = hanging_run(&a, "t-crash");
    let old_task = old["execution"]["taskId"].as_str().unwrap().to_string();
    a.restart();
    assert_eq!(
        k.task_state(&old_task).as_deref(),
        Some("TASK_STATE_WORKING")
    );
    assert_turn_succeeds(&a, "t-crash", "r2");
    assert_eq!(
        k.task_state(&old_task).as_deref(),
        Some("TASK_STATE_CANCELED")
    );
    let state = a.state_file("t-crash");
    assert!(state["terminalExecutionIds"]
        .as_array()
        .unwrap()
        .contains(&old["execution"]["executionId"]));
    assert_ne!(
        state["execution"]["executionId"],
        old["execution"]["executionId"]
    );
    let (status, v) = post_json(
        &cancel_url(&a, &old["execution"]["executionId"]),
        &cancel_body("t-crash"),
    );
    assert_eq!(
        (status, v["status"].as_str()),
        (200, Some("already_terminal"))
    );
}

#[test]
fn after_sigkill_the_cancel_extension_reaches_the_old_execution_and_the_next_turn_runs() {
    let k = FakeKernel::start();
    let mut a = Adapter::start(&k.url);
    let old = hanging_run(&a, "t-crash2");
    let old_task = old["execution"]["taskId"].as_str().unwrap().to_string();
    a.restart();
    let (status, v) = post_json(
        &cancel_url(&a, &old["execution"]["executionId"]),
        &cancel_body("t-crash2"),
    );
    assert_eq!((status, v["status"].as_str()), (200, Some("cancelled")));
    assert_eq!(
        k.task_state(&old_task).as_deref(),
        Some("TASK_STATE_CANCELED")
    );
    assert_turn_succeeds(&a, "t-crash2", "r2");
}

#[test]
fn a_task_the_kernel_will_not_stop_fails_the_turn_and_stays_reachable() {
    let k = FakeKernel::start();
    let mut a = Adapter::start(&k.url);
    let old = hanging_run(&a, "t-stubborn");
    a.restart();
    k.ignore_cancels(true);
    let r = a.run(&a.request("t-stubborn", "r2", "hi"));
    assert_eq!(r.error_code(), "A2A_UNAVAILABLE", "{:?}", r.last());
    // The old execution is still the thread's: not replaced by the failed turn.
    let state = a.state_file("t-stubborn");
    assert_eq!(
        state["execution"]["executionId"],
        old["execution"]["executionId"]
    );
    k.ignore_cancels(false);
    let r = a.run(&a.request("t-stubborn", "r3", "hi"));
    assert_eq!(r.last()["outcome"]["type"], "success", "{:?}", r.last());
}

#[test]
fn a_cancel_racing_a_resume_leaves_a_consistent_state() {
    let k = FakeKernel::start();
    let a = Adapter::start(&k.url);
    let deadline = Instant::now() + Duration::from_secs(90);
    for i in 0..20 {
        assert!(Instant::now() < deadline, "bounded: 20 tries within 90 s");
        let thread = format!("t-race-{i}");
        let first = a.run(&a.request(&thread, "r1", "scenario:permission"));
        let interrupt = first.interrupts()[0].clone();
        let execution = first.session()["executionId"].clone();
        let resume = a.resume_request(
            &thread,
            "r2",
            json!([{"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": "allow_once"}}]),
        );
        let url = a.url.clone();
        let resumer = std::thread::spawn(move || post_run(&url, &resume, &[]));
        std::thread::sleep(Duration::from_micros((i as u64 % 10) * 700));
        let (status, v) = post_json(&cancel_url(&a, &execution), &cancel_body(&thread));
        let r = resumer.join().unwrap();
        assert!(
            status == 200 || status == 404,
            "try {i}: cancel answered {status} {v}"
        );
        // Whatever won, nothing stays pending and the execution is closed.
        assert!(
            eventually(5, || {
                let s = a.state_file(&thread);
                s["execution"]["pending"] == json!({})
                    && s["terminalExecutionIds"]
                        .as_array()
                        .is_some_and(|t| t.contains(&execution))
            }),
            "try {i}: {} / resume {:?}",
            a.state_file(&thread),
            r.events.last().or(Some(&r.json))
        );
        if r.status == 200 {
            let outcome = &r.last()["outcome"]["type"];
            let code = r.last()["code"].as_str().unwrap_or("");
            assert!(
                outcome == "success" || matches!(code, "CANCELLED" | "EXECUTION_LOST"),
                "try {i}: {:?}",
                r.last()
            );
        }
        let next = a.run(&a.request(&thread, "r3", "hi"));
        assert_eq!(next.last()["outcome"]["type"], "success", "try {i}");
    }
    drop(k);
}

#[test]
fn an_http_1_0_client_gets_a_close_delimited_stream() {
    let k = FakeKernel::start();
    let a = Adapter::start(&k.url);
    let mut s = raw_post(&a.url, &a.request("t-http10", "r1", "hi"), "1.0");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all)
        .expect("the body ends when the connection closes");
    let text = String::from_utf8(all).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let head_lower = head.to_ascii_lowercase();
    assert!(!head_lower.contains("transfer-encoding"), "{head}");
    assert!(head_lower.contains("connection: close"), "{head}");
    let events: Vec<Value> = BufReader::new(body.as_bytes())
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| {
            l.strip_prefix("data: ")
                .map(|d| serde_json::from_str(d).unwrap())
        })
        .collect();
    assert_eq!(events[0]["type"], "RUN_STARTED");
    assert_eq!(events.last().unwrap()["type"], "RUN_FINISHED");
    // No chunk-size lines: every non-empty line is an SSE field or comment.
    for line in body.lines().filter(|l| !l.is_empty()) {
        assert!(
            line.starts_with("data: ") || line.starts_with("id: ") || line.starts_with(':'),
            "unexpected line {line:?}"
        );
    }
}

#[test]
fn a_connection_close_request_keeps_its_stream_through_a_silent_upstream() {
    // tiny_http shuts the read side of such a connection at once; that is not a client leaving.
    let k = FakeKernel::start();
    let a = Adapter::start(&k.url);
    let body = serde_json::to_vec(&a.request("t-close", "r1", "scenario:silent")).unwrap();
    let addr = a.url.strip_prefix("http://").unwrap().to_string();
    let mut s = TcpStream::connect(&addr).unwrap();
    write!(
        s,
        "POST / HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    s.write_all(&body).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).unwrap();
    let text = String::from_utf8_lossy(&all);
    assert!(text.contains("RUN_FINISHED"), "{text}");
    assert!(text.contains(": heartbeat"), "{text}");
    assert!(text.ends_with("0\r\n\r\n"), "{text}");
    assert!(k.calls("CancelTask").is_empty());
}
