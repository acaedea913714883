//! Upgrading the adapter under live runs (SIGUSR2, src/upgrade.rs): the new process takes the
//! listening socket, the old one drains. Streams in flight end exactly as an uninterrupted run,
//! approvals pending across the upgrade are answered by the new process, no turn is refused,
//! and a thread still streaming in the old process is busy in the new one, not repaired.

use fake_kernel::FakeKernel;
use serde_json::Value;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use test_support::*;

const STREAMS: usize = 50;
const APPROVALS: usize = 20;
/// 50 numbered items 100 ms apart: a stream that lasts 5 s, across the handover.
const PACED: &str = "scenario:paced-50";

/// The new process, killed when the test ends (it is not the test's child).
struct Successor(u32);

impl Drop for Successor {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the pid the adapter's log named.
        unsafe { libc::kill(self.0 as libc::pid_t, libc::SIGKILL) };
    }
}

/// The number after `prefix` in the log, once it is there (10 s).
fn logged_number(a: &Adapter, prefix: &str) -> u64 {
    let mut found = None;
    eventually(10, || {
        found = a.logs().split(prefix).nth(1).and_then(|rest| {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        });
        found.is_some()
    });
    found.unwrap_or_else(|| panic!("no {prefix:?} in the log:\n{}", a.logs()))
}

/// The events without what differs between two runs of the script (ids, times, the thread's
/// name echoed in `RUN_STARTED.input`).
fn comparable(events: &[Value]) -> Vec<Value> {
    let mut events = without_ids(events, &task_of(events));
    if let Some(input) = events.first_mut().and_then(|e| e.get_mut("input")) {
        input["threadId"] = "$id".into();
    }
    events
}

fn task_of(events: &[Value]) -> String {
    events
        .iter()
        .find(|e| e["type"] == "CUSTOM" && e["name"] == "iac-code.session.v1")
        .and_then(|e| e["value"]["taskId"].as_str())
        .unwrap_or_default()
        .to_string()
}

#[test]
fn an_upgrade_under_load_loses_no_stream_no_approval_and_refuses_no_turn() {
    let k = FakeKernel::start();
    let mut a = Adapter::start_args(&k.url, &["--drain-timeout", "60"]);
    let baseline = a.run(&a.request("t-baseline", "r1", PACED));
    assert_eq!(baseline.last()["outcome"]["type"], "success");
    let expected = comparable(&baseline.events);

    let approvals: Vec<Value> = (0..APPROVALS)
        .map(|i| a.interrupted(&format!("t-wait-{i}")).1)
        .collect();
    let streams: Vec<_> = (0..STREAMS)
        .map(|i| {
            let (url, body) = (
                a.url.clone(),
                a.request(&format!("t-live-{i}"), "r1", PACED),
            );
            std::thread::spawn(move || post_run(&url, &body, &[]))
        })
        .collect();
    for i in 0..STREAMS {
        a.wait_task(&format!("t-live-{i}"));
    }

    // New turns all along the handover, each on a thread of its own: none may be refused.
    let done = Arc::new(AtomicBool::new(false));
    let (turns, refused) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let prober = {
        let (done, turns, refused) = (done.clone(), turns.clone(), refused.clone());
        let (url, cwd) = (a.url.clone(), a.cwd());
        std::thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                let n = turns.fetch_add(1, Ordering::SeqCst);
                let body = serde_json::json!({"threadId": format!("t-probe-{n}"), "runId": "r1",
                    "state": {}, "tools": [], "context": [],
                    "messages": [{"id": "m", "role": "user", "content": "hi"}],
                    "forwardedProps": {"iacCode": {"schemaVersion": 1,
                        "rosInvocationId": "invocation-1", "cwd": cwd}}});
                let r = post_run(&url, &body, &[]);
                if r.status != 200 || r.last()["outcome"]["type"] != "success" {
                    eprintln!("turn {n} refused or failed: {} {:?}", r.status, r.json);
                    refused.fetch_add(1, Ordering::SeqCst);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };

    let signalled = Instant::now();
    a.signal(libc::SIGUSR2);
    let new_pid = logged_number(&a, "upgrade: started pid ");
    let _successor = Successor(new_pid as u32);
    let new_pid = logged_number(&a, "upgrade: pid ");
    let handover = signalled.elapsed();
    assert!(
        a.logs().contains("stops accepting and drains"),
        "{}",
        a.logs()
    );
    std::thread::sleep(Duration::from_millis(400));

    // The old process still streams t-live-0: busy in the new one, and not repaired there.
    let r = a.run(&a.request("t-live-0", "r2", "hi"));
    assert_eq!(
        (r.status, r.error_code()),
        (409, "THREAD_BUSY"),
        "{:?}",
        r.json
    );

    // A join of that turn in the new process follows it at the kernel to its end.
    let (status, lookup) = a.thread_lookup("t-live-1", "rosInvocationId=invocation-1");
    assert_eq!(
        (status, lookup["state"].as_str()),
        (200, Some("running")),
        "{lookup}"
    );
    let exec = lookup["executionId"].as_str().unwrap();
    let body = serde_json::json!({"threadId": "t-live-1", "runId": "r1",
        "rosInvocationId": "invocation-1"});
    let join = post_subscribe(&a.url, exec, &body, None);
    assert_eq!(join.headers().get("X-AGUI-Resume").unwrap(), "join");
    let joined = read_result(join);
    assert_eq!(
        joined.last()["outcome"]["type"],
        "success",
        "{:?}",
        joined.last()
    );

    // Half of the approvals answered while the old process drains, by the new one.
    for (i, interrupt) in approvals.iter().enumerate().take(APPROVALS / 2) {
        let r = a.run(&a.resume_request(&format!("t-wait-{i}"), "r2", allow(&interrupt["id"])));
        assert_eq!(
            r.last()["outcome"]["type"],
            "success",
            "approval {i}: {:?}",
            r.last()
        );
    }

    for (i, s) in streams.into_iter().enumerate() {
        let r = s.join().unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(
            comparable(&r.events),
            expected,
            "stream {i} differs from an uninterrupted run"
        );
    }
    let drained = a.wait_exit(Duration::from_secs(30));
    let drain = signalled.elapsed();
    assert!(
        drained.is_some_and(|s| s.success()),
        "old process: {drained:?}"
    );
    done.store(true, Ordering::SeqCst);
    prober.join().unwrap();

    // Only the new process is left: the other half of the approvals, and the drained thread.
    for (i, interrupt) in approvals.iter().enumerate().skip(APPROVALS / 2) {
        let r = a.run(&a.resume_request(&format!("t-wait-{i}"), "r2", allow(&interrupt["id"])));
        assert_eq!(
            r.last()["outcome"]["type"],
            "success",
            "approval {i}: {:?}",
            r.last()
        );
    }
    a.assert_turn_succeeds("t-live-0", "r3");
    assert_eq!(
        a.state_file("t-live-0")["execution"]["owner"]
            .as_str()
            .map(|o| o.starts_with(&format!("{new_pid}:"))),
        Some(true)
    );
    assert_eq!(
        refused.load(Ordering::SeqCst),
        0,
        "turns refused during the upgrade"
    );
    let served = a
        .logs()
        .split("serves after ")
        .nth(1)
        .and_then(|r| r.split(';').next().map(String::from));
    eprintln!(
        "upgrade: the new process served after {served:?} ({handover:?} from SIGUSR2 to the log \
         line, seen by the test); old process drained and exited after {drain:?}; {} turns \
         during it, {} refused",
        turns.load(Ordering::SeqCst),
        refused.load(Ordering::SeqCst)
    );
}

fn fake_kernel_bin() -> std::path::PathBuf {
    adapter_bin().parent().unwrap().join("examples/fake-kernel")
}

/// Whether `pid` runs (a zombie does not).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| !s.split(") ").nth(1).unwrap_or("").starts_with('Z'))
}

/// The kernel the guard `guard` started (its only child).
fn kernel_under(guard: u32) -> u32 {
    let children =
        std::fs::read_to_string(format!("/proc/{guard}/task/{guard}/children")).unwrap_or_default();
    children
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("guard {guard} has no kernel"))
}

#[test]
fn an_upgrade_hands_the_managed_kernel_over_and_the_new_process_owns_it() {
    let root = temp_dir("upgrade-managed");
    let (log, port) = (root.join("log"), free_port());
    let cwd = root.to_string_lossy().into_owned();
    let mut old = std::process::Command::new(adapter_bin())
        .args(["--port", &port.to_string(), "--drain-timeout", "60"])
        .args(["--state-dir", root.join("state").to_str().unwrap()])
        .args(["--a2a-command", fake_kernel_bin().to_str().unwrap()])
        // The kernel's output re-logged: its pipes are handed over too.
        .args(["--log-format", "json"])
        .env("IAC_CODE_AGUI_ALLOWED_CWDS", &cwd)
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}");
    wait_health(&url);
    let logs = || std::fs::read_to_string(&log).unwrap_or_default();
    let number_after = |prefix: &str| -> Option<u32> {
        let rest = logs().split(prefix).nth(1)?.to_string();
        rest.chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse()
            .ok()
    };
    let guard = number_after("A2A kernel guard: pid ").expect("kernel start logged");
    let kernel = kernel_under(guard);
    assert_eq!(
        number_after("(pid "),
        Some(kernel),
        "the log names the kernel itself"
    );
    let turn = |thread: &str, run: &str, text: &str, resume: Option<Value>| {
        let mut body = serde_json::json!({"threadId": thread, "runId": run, "state": {},
            "tools": [], "context": [],
            "messages": [{"id": format!("m-{run}"), "role": "user", "content": text}],
            "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "i", "cwd": cwd}}});
        if let Some(resume) = resume {
            body["messages"] = serde_json::json!([]);
            body["resume"] = resume;
        }
        post_run(&url, &body, &[])
    };
    let waiting = turn("t-wait", "r1", "scenario:permission", None).interrupts()[0].clone();
    let streaming = {
        std::thread::scope(|s| {
            let h = s.spawn(move || turn("t-live", "r1", "scenario:paced-30", None));
            std::thread::sleep(Duration::from_millis(500));
            // SAFETY: kill(2) on our child.
            unsafe { libc::kill(old.id() as libc::pid_t, libc::SIGUSR2) };
            h.join().unwrap()
        })
    };
    assert_eq!(
        streaming.last()["outcome"]["type"],
        "success",
        "{:?}",
        streaming.last()
    );
    assert!(
        eventually(30, || matches!(old.try_wait(), Ok(Some(_)))),
        "old process still runs"
    );
    let new = Successor(number_after("upgrade: started pid ").expect("new process logged"));
    assert!(
        logs().contains(&format!("adopted the A2A kernel (guard pid {guard})")),
        "{}",
        logs()
    );
    assert_eq!(
        logs().matches("started A2A kernel").count(),
        1,
        "a second kernel: {}",
        logs()
    );
    assert!(
        alive(guard) && alive(kernel),
        "the kernel did not outlive the old process"
    );
    // With `--log-format json` the kernel's output is re-logged: the new process reads it now.
    let stdout = std::fs::read_link(format!("/proc/{kernel}/fd/1")).unwrap();
    let readers = std::fs::read_dir(format!("/proc/{}/fd", new.0)).unwrap();
    assert!(
        readers
            .flatten()
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l == stdout)),
        "the new process does not read the kernel's output ({})",
        stdout.display()
    );
    let took = logs()
        .split("serves after ")
        .nth(1)
        .and_then(|r| r.split(';').next().map(String::from));
    eprintln!("upgrade with a managed kernel: the new process served after {took:?}");
    let r = turn("t-wait", "r2", "", Some(allow(&waiting["id"])));
    assert_eq!(r.last()["outcome"]["type"], "success", "{:?}", r.last());

    // Upgraded again: the adopted kernel is handed on once more.
    // SAFETY: kill(2) on the pid the log named.
    unsafe { libc::kill(new.0 as libc::pid_t, libc::SIGUSR2) };
    let third = || {
        let text = logs();
        let rest = text.split("upgrade: started pid ").nth(2)?.to_string();
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        digits.parse::<u32>().ok()
    };
    assert!(eventually(10, || third().is_some()), "{}", logs());
    let newest = Successor(third().unwrap());
    assert!(
        eventually(20, || !alive(new.0)),
        "the second process did not exit"
    );
    assert_eq!(
        logs().matches("started A2A kernel").count(),
        1,
        "{}",
        logs()
    );
    assert!(
        alive(guard) && alive(kernel),
        "the kernel did not outlive the second process"
    );
    let r = turn("t-third", "r1", "hi", None);
    assert_eq!(r.last()["outcome"]["type"], "success", "{:?}", r.last());

    // The newest process owns it now: SIGKILLed, it leaves no kernel behind either.
    // SAFETY: kill(2) on the pid the log named.
    unsafe { libc::kill(newest.0 as libc::pid_t, libc::SIGKILL) };
    assert!(
        eventually(15, || !alive(guard) && !alive(kernel)),
        "kernel {kernel} orphaned"
    );
}

#[test]
fn a_thread_begun_in_the_draining_process_is_listed_by_the_new_one() {
    use std::io::Write;
    use test_support::raw::{connect, head, read_response, read_until, run_request};
    let k = FakeKernel::start();
    let mut a = Adapter::start_args(&k.url, &["--drain-timeout", "30"]);
    // A keep-alive connection the old process accepted before the upgrade.
    let mut s = connect(&a.url);
    s.write_all(&head("GET", "/health", &[])).unwrap();
    assert_eq!(read_response(&mut s).unwrap().unwrap().status, 200);
    // A turn streaming in the old process keeps it draining for 3 s.
    let streaming = {
        let (url, body) = (
            a.url.clone(),
            a.request("t-paced", "r1", "scenario:paced-30"),
        );
        std::thread::spawn(move || post_run(&url, &body, &[]))
    };
    a.wait_task("t-paced");
    let old = a.pid();
    a.signal(libc::SIGUSR2);
    let _successor = Successor(logged_number(&a, "upgrade: started pid ") as u32);
    logged_number(&a, "upgrade: pid ");
    // A turn on that connection, after the handover: the draining process serves it.
    let mut body = a.request("t-drained", "r1", "hi");
    body["forwardedProps"]["iacCode"]["userId"] = "u-drained".into();
    s.write_all(&run_request(&serde_json::to_vec(&body).unwrap(), &[]))
        .unwrap();
    if let Err(got) = read_until(&mut s, b"RUN_FINISHED", Duration::from_secs(10)) {
        panic!("the turn did not end: {}", String::from_utf8_lossy(&got));
    }
    let owner = a.state_file("t-drained")["execution"]["owner"].clone();
    assert!(
        owner
            .as_str()
            .is_some_and(|o| o.starts_with(&format!("{old}:"))),
        "{owner}"
    );
    drop(s);
    assert_eq!(
        streaming.join().unwrap().last()["outcome"]["type"],
        "success"
    );
    assert!(
        a.wait_exit(Duration::from_secs(30)).is_some(),
        "old process still runs"
    );
    let list = format!("{}/extensions/iac-code/v1/threads?userId=u-drained", a.url);
    let listed = || {
        let text = agent()
            .get(&list)
            .call()
            .unwrap()
            .into_body()
            .read_to_string()
            .unwrap();
        text.contains("\"t-drained\"")
    };
    assert!(
        eventually(5, listed),
        "the new process does not list the thread"
    );
}

#[test]
fn a_new_binary_that_does_not_start_leaves_the_old_process_serving() {
    use std::os::unix::fs::PermissionsExt;
    let k = FakeKernel::start();
    let root = temp_dir("upgrade-broken");
    // Started through a symlink to a release directory, as many deployments do.
    let (v1, v2) = (root.join("v1"), root.join("v2"));
    std::fs::create_dir_all(&v1).unwrap();
    std::fs::create_dir_all(&v2).unwrap();
    std::fs::copy(adapter_bin(), v1.join("iac-code-agui")).unwrap();
    std::os::unix::fs::symlink(&v1, root.join("current")).unwrap();
    let bin = root.join("current/iac-code-agui");
    let (log, port) = (root.join("log"), free_port());
    let mut old = std::process::Command::new(&bin)
        .args(["--port", &port.to_string(), "--a2a-url", &k.url])
        .args(["--state-dir", root.join("state").to_str().unwrap()])
        .env("IAC_CODE_AGUI_ALLOWED_CWDS", &root)
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}");
    wait_health(&url);
    // A broken release, switched to as such deployments do: the symlink replaced atomically.
    let broken = v2.join("iac-code-agui");
    std::fs::write(&broken, "#!/bin/sh\nexit 3\n").unwrap();
    std::fs::set_permissions(&broken, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink(&v2, root.join("current.new")).unwrap();
    std::fs::rename(root.join("current.new"), root.join("current")).unwrap();
    // SAFETY: kill(2) on our child.
    unsafe { libc::kill(old.id() as libc::pid_t, libc::SIGUSR2) };
    let logs = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        eventually(10, || logs().contains("upgrade abandoned")),
        "{}",
        logs()
    );
    assert!(
        logs().contains("exited (exit status: 3) before it served"),
        "{}",
        logs()
    );
    assert!(matches!(old.try_wait(), Ok(None)), "the old process exited");
    let body = serde_json::json!({"threadId": "t-after", "runId": "r1", "state": {}, "tools": [],
        "context": [], "messages": [{"id": "m", "role": "user", "content": "hi"}],
        "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "i",
            "cwd": root.to_str().unwrap()}}});
    let r = post_run(&url, &body, &[]);
    assert_eq!(r.last()["outcome"]["type"], "success", "{:?}", r.last());
    let _ = old.kill();
    let _ = old.wait();
}

/// What a client following README's rules shows: every message's text, a join's snapshot first
/// (it replaces what the message held), then the deltas.
fn transcript(events: &[Value]) -> std::collections::BTreeMap<String, String> {
    let mut t = std::collections::BTreeMap::new();
    for e in events {
        match e["type"].as_str().unwrap_or("") {
            "MESSAGES_SNAPSHOT" => {
                for m in e["messages"].as_array().into_iter().flatten() {
                    if let (Some(text), false) = (m["content"].as_str(), m["role"] == "user") {
                        t.insert(m["id"].as_str().unwrap().to_string(), text.to_string());
                    }
                }
            }
            "TEXT_MESSAGE_CONTENT" => {
                let id = e["messageId"].as_str().unwrap().to_string();
                t.entry(id)
                    .or_insert_with(String::new)
                    .push_str(e["delta"].as_str().unwrap());
            }
            _ => {}
        }
    }
    t
}

#[test]
fn a_client_cut_during_the_drain_rejoins_in_the_new_process_with_nothing_lost_or_doubled() {
    use std::io::BufReader;
    let k = FakeKernel::start();
    let mut a = Adapter::start_args(&k.url, &["--detach-grace", "30", "--drain-timeout", "60"]);
    let full = a.run(&a.request("t-whole", "r1", "scenario:paced-30"));
    // The first 6 events of the turn, then the client's connection is cut.
    let reader = open_stream(&a.url, &a.request("t-cut", "r1", "scenario:paced-30"));
    let (mut first, mut cursor) = (Vec::new(), None);
    for item in sse::read(BufReader::new(reader)) {
        if let Ok(sse::Item::Event(e)) = item {
            first.push(e.json());
            cursor = e.id.clone();
            if first.len() == 6 {
                break;
            }
        }
    }
    a.signal(libc::SIGUSR2);
    let _successor = Successor(logged_number(&a, "upgrade: started pid ") as u32);
    logged_number(&a, "upgrade: pid ");
    std::thread::sleep(Duration::from_millis(300));
    // The old process keeps the run (detach grace); the client re-attaches with its cursor and
    // reaches the new process, which joins the turn from the kernel.
    let (status, lookup) = a.thread_lookup("t-cut", "rosInvocationId=invocation-1");
    assert_eq!(
        (status, lookup["state"].as_str()),
        (200, Some("running")),
        "{lookup}"
    );
    let exec = lookup["executionId"].as_str().unwrap();
    let body = serde_json::json!({"threadId": "t-cut", "runId": "r1",
        "rosInvocationId": "invocation-1"});
    let resp = post_subscribe(&a.url, exec, &body, Some(&cursor.expect("a cursor")));
    assert_eq!(resp.headers().get("X-AGUI-Resume").unwrap(), "join");
    let rest = read_result(resp);
    assert_eq!(
        rest.last()["outcome"]["type"],
        "success",
        "{:?}",
        rest.last()
    );
    let shown = transcript(&first.into_iter().chain(rest.events).collect::<Vec<_>>());
    let whole = transcript(&full.events);
    assert_eq!(
        shown.values().collect::<Vec<_>>(),
        whole.values().collect::<Vec<_>>(),
        "the text shown after the re-attach differs from an uninterrupted turn's"
    );
    assert!(
        a.wait_exit(Duration::from_secs(30)).is_some(),
        "old process still runs"
    );
}

#[test]
fn a_run_still_streaming_at_the_drain_timeout_ends_as_at_a_shutdown() {
    let k = FakeKernel::start();
    let mut a = Adapter::start_args(&k.url, &["--drain-timeout", "1"]);
    let hung = {
        let (url, body) = (a.url.clone(), a.request("t-hang", "r1", "scenario:hang"));
        std::thread::spawn(move || post_run(&url, &body, &[]))
    };
    a.wait_task("t-hang");
    a.signal(libc::SIGUSR2);
    let _successor = Successor(logged_number(&a, "upgrade: started pid ") as u32);
    assert!(
        a.wait_exit(Duration::from_secs(20)).is_some(),
        "old process still runs"
    );
    let r = hung.join().unwrap();
    assert_eq!(r.error_code(), "A2A_UNAVAILABLE", "{:?}", r.last());
    assert_eq!(r.last()["message"], "The adapter is shutting down.");
    assert!(a.logs().contains("1 run(s) still active"), "{}", a.logs());
    // The new process takes the thread's next turn (the old one closed the execution).
    a.assert_turn_succeeds("t-hang", "r2");
}
