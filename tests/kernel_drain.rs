//! Replacing the kernel under live runs (SIGHUP, src/kernel_drain.rs): new turns get a retryable
//! 503 with `Retry-After` while the running ones finish; then a managed kernel is restarted, or
//! an external one is waited for while its operator replaces it; then turns are admitted again.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use test_support::*;

fn fake_kernel_bin() -> PathBuf {
    adapter_bin().parent().unwrap().join("examples/fake-kernel")
}

fn turn_body(thread: &str, run: &str, text: &str, cwd: &str) -> Value {
    json!({"threadId": thread, "runId": run, "state": {}, "tools": [], "context": [],
        "messages": [{"id": format!("m-{run}"), "role": "user", "content": text}],
        "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "i", "cwd": cwd}}})
}

/// A turn's refusal: status, `Retry-After`, code.
fn refusal(url: &str, body: &Value) -> (u16, Option<String>, String) {
    let resp = agent()
        .post(format!("{url}/"))
        .header("Content-Type", "application/json")
        .send(serde_json::to_vec(body).unwrap())
        .unwrap();
    let status = resp.status().as_u16();
    let retry = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(String::from);
    let v: Value = serde_json::from_str(&resp.into_body().read_to_string().unwrap_or_default())
        .unwrap_or(Value::Null);
    (
        status,
        retry,
        v["error"]["code"].as_str().unwrap_or("").into(),
    )
}

/// The adapter with `kernel` args, its log and workspace under a fresh directory.
fn start(name: &str, kernel: &[&str]) -> (Child, String, PathBuf, String) {
    let root = temp_dir(name);
    let (log, port) = (root.join("log"), free_port());
    let child = Command::new(adapter_bin())
        .args(["--port", &port.to_string(), "--drain-timeout", "30"])
        .args(["--state-dir", root.join("state").to_str().unwrap()])
        .args(kernel)
        .env("IAC_CODE_AGUI_ALLOWED_CWDS", &root)
        .stderr(std::fs::File::create(&log).unwrap())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}");
    wait_health(&url);
    (child, url, log, root.to_string_lossy().into_owned())
}

fn logs(log: &Path) -> String {
    std::fs::read_to_string(log).unwrap_or_default()
}

/// Sends SIGHUP while a 3 s turn streams; checks the refusal during the drain and that the
/// streaming turn finishes. Returns when turns are admitted again, with the time it took.
fn drain_across_a_streaming_turn(
    adapter: &Child,
    url: &str,
    log: &Path,
    cwd: &str,
    while_drained: impl FnOnce(),
) -> Duration {
    let streaming = std::thread::scope(|s| {
        let h = s.spawn(|| {
            post_run(
                url,
                &turn_body("t-live", "r1", "scenario:paced-30", cwd),
                &[],
            )
        });
        std::thread::sleep(Duration::from_millis(500));
        let signalled = Instant::now();
        // SAFETY: kill(2) on our child.
        unsafe { libc::kill(adapter.id() as libc::pid_t, libc::SIGHUP) };
        assert!(eventually(5, || logs(log).contains("SIGHUP: kernel drain")));
        let (status, retry, code) = refusal(url, &turn_body("t-new", "r1", "hi", cwd));
        assert_eq!(
            (status, retry.as_deref(), code.as_str()),
            (503, Some("5"), "A2A_UNAVAILABLE")
        );
        assert!(eventually(10, || logs(log).contains("kernel drain: drained after")));
        while_drained();
        assert!(
            eventually(30, || logs(log).contains("turns admitted again")),
            "{}",
            logs(log)
        );
        (h.join().unwrap(), signalled.elapsed())
    });
    let (r, took) = streaming;
    assert_eq!(r.last()["outcome"]["type"], "success", "{:?}", r.last());
    assert_eq!(
        r.text().matches('[').count(),
        30,
        "the streaming turn lost text"
    );
    took
}

#[test]
fn a_kernel_drain_restarts_the_managed_kernel_after_the_running_turns_finish() {
    let fake = fake_kernel_bin();
    let (mut a, url, log, cwd) = start("drain-managed", &["--a2a-command", fake.to_str().unwrap()]);
    let waiting = post_run(
        &url,
        &turn_body("t-wait", "r1", "scenario:permission", &cwd),
        &[],
    );
    let interrupt = waiting.interrupts()[0].clone();
    let took = drain_across_a_streaming_turn(&a, &url, &log, &cwd, || {});
    assert_eq!(
        logs(&log).matches("started A2A kernel").count(),
        2,
        "{}",
        logs(&log)
    );
    let r = post_run(&url, &turn_body("t-after", "r1", "hi", &cwd), &[]);
    assert_eq!(r.last()["outcome"]["type"], "success", "{:?}", r.last());
    // The fake kernel forgets its tasks when it restarts (the real one restores input-required
    // ones): the approval is then lost loudly, never answered by a fresh conversation.
    let mut resume = turn_body("t-wait", "r2", "", &cwd);
    resume["messages"] = json!([]);
    resume["resume"] = allow(&interrupt["id"]);
    let r = post_run(&url, &resume, &[]);
    assert_eq!(r.last()["type"], "RUN_ERROR", "{:?}", r.events);
    assert!(
        !r.types().iter().any(|t| t.starts_with("TEXT_MESSAGE")),
        "{:?}",
        r.events
    );
    eprintln!(
        "an approval the restarted fake kernel forgot: RUN_ERROR {}",
        r.error_code()
    );
    eprintln!("kernel drain (managed): turns admitted again {took:?} after SIGHUP");
    let _ = a.kill();
    let _ = a.wait();
}

#[test]
fn a_kernel_drain_waits_for_the_external_kernel_to_be_replaced() {
    let port = free_port().to_string();
    let kernel = || {
        Command::new(fake_kernel_bin())
            .args(["--host", "127.0.0.1", "--port", &port])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut first = kernel();
    let kernel_url = format!("http://127.0.0.1:{port}");
    assert!(eventually(10, || agent()
        .get(format!("{kernel_url}/health"))
        .call()
        .is_ok()));
    let (a, url, log, cwd) = start("drain-external", &["--a2a-url", &kernel_url]);
    let mut second = None;
    let took = drain_across_a_streaming_turn(&a, &url, &log, &cwd, || {
        assert!(
            logs(&log).contains("replace the kernel at"),
            "{}",
            logs(&log)
        );
        let _ = first.kill();
        let _ = first.wait();
        // Still refused while the kernel is away (a real one takes seconds to start).
        let (status, retry, _) = refusal(&url, &turn_body("t-new", "r2", "hi", &cwd));
        assert_eq!((status, retry.as_deref()), (503, Some("5")));
        std::thread::sleep(Duration::from_millis(500));
        second = Some(kernel());
    });
    let r = post_run(&url, &turn_body("t-after", "r1", "hi", &cwd), &[]);
    assert_eq!(r.last()["outcome"]["type"], "success", "{:?}", r.last());
    eprintln!("kernel drain (external): turns admitted again {took:?} after SIGHUP");
    for mut c in [a].into_iter().chain(second) {
        let _ = c.kill();
        let _ = c.wait();
    }
}

#[test]
fn a_turn_still_running_at_the_drain_bound_fails_loudly_and_turns_are_admitted_again() {
    let fake = fake_kernel_bin();
    let root_args = [
        "--a2a-command",
        fake.to_str().unwrap(),
        "--drain-timeout",
        "1",
    ];
    let (mut a, url, log, cwd) = start("drain-bound", &root_args);
    let hung = std::thread::scope(|s| {
        let h = s.spawn(|| post_run(&url, &turn_body("t-hang", "r1", "scenario:hang", &cwd), &[]));
        assert!(eventually(10, || std::fs::read_dir(
            Path::new(&cwd).join("state/threads")
        )
        .is_ok_and(|mut d| d.next().is_some())));
        std::thread::sleep(Duration::from_millis(300));
        // SAFETY: kill(2) on our child.
        unsafe { libc::kill(a.id() as libc::pid_t, libc::SIGHUP) };
        assert!(
            eventually(30, || logs(&log).contains("turns admitted again")),
            "{}",
            logs(&log)
        );
        h.join().unwrap()
    });
    assert!(
        logs(&log).contains("(1 turn(s) still running)"),
        "{}",
        logs(&log)
    );
    assert_eq!(hung.error_code(), "A2A_UNAVAILABLE", "{:?}", hung.last());
    let r = post_run(&url, &turn_body("t-hang", "r2", "hi", &cwd), &[]);
    assert_eq!(r.last()["outcome"]["type"], "success", "{:?}", r.last());
    let _ = a.kill();
    let _ = a.wait();
}
