//! The thread list with many threads on disk (issue 23, part 4), measured and reported, never
//! asserted: 10,000 threads of 50 turns each (state files with 50 run digests and 50 ended
//! executions, conversation logs with their header line and 100 records), bound to 91 users (one
//! with 1,000 threads, 90 with 100).
//!
//! 1. Start-up: exec → first `200` on `/health` (median of `STARTS` starts, page cache warm), with
//!    the 10,000 threads and with an empty state dir; `BENCH_BASELINE_BIN=<binary>` adds another
//!    build (the one before the thread list) on the same 10,000 threads. Beside it: exec → the
//!    first thread list answered (the index complete).
//! 2. Pages: the first page (limit 20 and 100) of the user with 1,000 threads and of one with
//!    100, and a next page with its cursor: p50, p99, max over `REQUESTS` requests each on one
//!    keep-alive connection; then the first page again while 4 clients run turns all along.
//!
//! `cargo bench --bench thread_list` prints the report and writes it to
//! `target/bench-thread-list.md`. The generated state dir is kept in `target/bench-thread-list/`
//! (made once, about 250 MB) for the next run.

use fake_kernel::FakeKernel;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, UNIX_EPOCH};
use test_support::{adapter_bin, free_port, post_run};

const THREADS: usize = 10_000;
const TURNS: usize = 50;
const HEAVY: usize = 1_000;
const PER_USER: usize = 100;
const STARTS: usize = 10;
const REQUESTS: usize = 2_000;
const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn main() {
    let data = Path::new(ROOT).join("target/bench-thread-list");
    let state = data.join("state");
    generate(&state);
    let empty = data.join("empty-state");
    let _ = std::fs::remove_dir_all(&empty);
    let kernel = FakeKernel::start();
    let mut out = String::from("# Thread list: 10,000 threads of 50 turns on disk (issue 23)\n\n");
    out.push_str(&format!(
        "{THREADS} threads ({TURNS} turns each: state file {}, conversation log {}); users: 1 with {HEAVY} threads, {} with {PER_USER}.\n\n",
        size_of(&state.join("threads")),
        size_of(&state.join("history")),
        (THREADS - HEAVY) / PER_USER
    ));
    startup_section(&mut out, &kernel.url, &state, &empty);
    pages_section(&mut out, &kernel, &state);
    println!("{out}");
    let report = Path::new(ROOT).join("target/bench-thread-list.md");
    std::fs::write(&report, &out).expect("write the report");
    eprintln!("[bench] report written to {}", report.display());
}

fn user_of(i: usize) -> String {
    if i < HEAVY {
        "u-heavy".into()
    } else {
        format!("u-{:03}", (i - HEAVY) / PER_USER)
    }
}

/// The state dir, made once: threads/ and history/, each thread written at its own time over the
/// last 30 days.
fn generate(state: &Path) {
    let done = state.join(".complete");
    if done.exists() {
        return;
    }
    let started = Instant::now();
    let _ = std::fs::remove_dir_all(state);
    for d in ["threads", "history"] {
        std::fs::create_dir_all(state.join(d)).unwrap();
    }
    let now = UNIX_EPOCH.elapsed().unwrap().as_millis() as u64;
    for i in 0..THREADS {
        let thread = format!("thread-{i:05}");
        let (doc, log) = thread_files(&thread, &user_of(i), i);
        let at = now - (i as u64 * 7_919 % THREADS as u64) * 259_200;
        write_at(&state.join(format!("threads/{thread}.json")), &doc, at);
        write_at(&state.join(format!("history/{thread}.jsonl")), &log, at);
    }
    std::fs::write(&done, b"").unwrap();
    eprintln!(
        "[bench] generated {THREADS} threads in {:?}",
        started.elapsed()
    );
}

fn write_at(path: &Path, bytes: &[u8], ms: u64) {
    std::fs::write(path, bytes).unwrap();
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_modified(UNIX_EPOCH + Duration::from_millis(ms))
        .unwrap();
}

/// A state file as the adapter writes it after `TURNS` turns, and a conversation log with its
/// header line and a user and an assistant message per turn.
fn thread_files(thread: &str, user: &str, i: usize) -> (Vec<u8>, Vec<u8>) {
    let hex = |n: usize| format!("{:064x}", n as u128 * 0x9E37_79B9_7F4A_7C15 + i as u128);
    let uuid = |n: usize| format!("{:08x}-0000-4000-8000-{:012x}", i, n);
    let mut digests = serde_json::Map::new();
    for t in 0..TURNS {
        digests.insert(format!("run-{i}-{t}"), json!(hex(t)));
    }
    let doc = json!({
        "schemaVersion": 1, "threadId": thread, "contextId": format!("agui-{}", &hex(0)[..40]),
        "cwd": "/srv/workspace", "userId": user, "iacCodeSessionId": uuid(999),
        "execution": {"executionId": uuid(TURNS - 1), "rosInvocationId": "invocation-1",
            "taskId": null, "pending": {}, "pipelineOpenSteps": [], "pipelineSequence": 0,
            "textSnapshotDigests": [], "runMode": null, "pipelineName": null},
        "runDigests": digests, "appliedResumeDigests": [],
        "terminalExecutionIds": (0..TURNS).map(uuid).collect::<Vec<_>>(),
    });
    let mut log = serde_json::to_vec(&json!({"type": "thread", "v": 1, "threadId": thread,
        "title": format!("Deploy the network of project {i}"), "createdAt": "2026-11-01T09:00:00.000Z"}))
    .unwrap();
    log.push(b'\n');
    for t in 0..TURNS {
        for (seq, role, text) in [
            (2 * t + 1, "user", "Please deploy a VPC with two vSwitches and a NAT gateway in cn-hangzhou."),
            (2 * t + 2, "assistant", "Done: the VPC, both vSwitches and the NAT gateway are created; the stack is in CREATE_COMPLETE."),
        ] {
            let record = json!({"seq": seq, "at": "2026-11-01T09:00:00.000Z", "type": "message",
                "message": {"id": format!("msg-{t}-{role}"), "role": role, "content": text}});
            log.extend(serde_json::to_vec(&record).unwrap());
            log.push(b'\n');
        }
    }
    (serde_json::to_vec_pretty(&doc).unwrap(), log)
}

fn size_of(dir: &Path) -> String {
    let bytes: u64 = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum();
    format!("{:.1} KiB avg", bytes as f64 / THREADS as f64 / 1024.0)
}

/// A started adapter, SIGKILLed when dropped.
struct Started {
    child: Child,
    url: String,
    health: Duration,
}

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(bin: &Path, kernel: &str, state: &Path) -> Started {
    let port = free_port();
    let workdir = state.parent().unwrap();
    let t0 = Instant::now();
    let child = Command::new(bin)
        .args(["--port", &port.to_string(), "--a2a-url", kernel])
        .arg("--state-dir")
        .arg(state)
        .env("IAC_CODE_AGUI_ALLOWED_CWDS", workdir)
        .env_remove("IAC_CODE_AGUI_AUTH_TOKEN")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the adapter");
    let mut started = Started {
        child,
        url: format!("http://127.0.0.1:{port}"),
        health: Duration::ZERO,
    };
    while !health_ok(port) {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no /health within 30 s"
        );
        std::thread::sleep(Duration::from_micros(250));
    }
    started.health = t0.elapsed();
    started
}

/// One `GET /health` on a fresh connection: did it answer 200?
fn health_ok(port: u16) -> bool {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let asked =
        s.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    let mut head = [0u8; 12];
    asked.is_ok() && s.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.1 200")
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Start-up with the threads, without, and the baseline build's.
fn startup_section(out: &mut String, kernel: &str, state: &Path, empty: &Path) {
    out.push_str(&format!(
        "## Start-up (exec → first 200 on /health; median, min, max of {STARTS} starts)\n\n\
         | binary | state dir | median | min | max | exec → first thread list (index built), median |\n|---|---|---|---|---|---|\n"
    ));
    let mut binaries = vec![("this build".to_string(), adapter_bin().to_path_buf(), true)];
    if let Ok(base) = std::env::var("BENCH_BASELINE_BIN") {
        binaries.push((format!("baseline `{base}`"), PathBuf::from(base), false));
    }
    for (name, bin, lists) in &binaries {
        for (what, dir) in [("10,000 threads", state), ("empty", empty)] {
            if !lists && dir == empty {
                continue;
            }
            let (mut health, mut listed) = (Vec::new(), Vec::new());
            for _ in 0..STARTS {
                let t0 = Instant::now();
                let s = start(bin, kernel, dir);
                health.push(ms(s.health));
                if *lists {
                    let (status, _) =
                        Conn::open(&s.url).get("/extensions/iac-code/v1/threads?userId=u-heavy");
                    assert_eq!(status, 200);
                    listed.push(ms(t0.elapsed()));
                }
            }
            health.sort_by(f64::total_cmp);
            listed.sort_by(f64::total_cmp);
            let list = listed
                .get(listed.len() / 2)
                .map_or("—".into(), |m| format!("{m:.1} ms"));
            let line = format!(
                "| {name} | {what} | {:.2} ms | {:.2} ms | {:.2} ms | {list} |\n",
                health[health.len() / 2],
                health[0],
                health[health.len() - 1]
            );
            eprint!("[bench] {line}");
            out.push_str(&line);
        }
    }
    out.push('\n');
}

/// A keep-alive HTTP/1.1 connection that writes each request in one segment (`TCP_NODELAY`),
/// as a browser does: a client that writes a request in pieces with Nagle's algorithm on measures
/// the server's delayed ACK (40 ms), not the server.
struct Conn {
    s: TcpStream,
    host: String,
}

impl Conn {
    fn open(url: &str) -> Conn {
        let host = url.trim_start_matches("http://").to_string();
        let s = TcpStream::connect(&host).unwrap();
        s.set_nodelay(true).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        Conn { s, host }
    }

    /// `GET path`: the status and the body.
    fn get(&mut self, path: &str) -> (u16, Vec<u8>) {
        let req = format!("GET {path} HTTP/1.1\r\nHost: {}\r\n\r\n", self.host);
        self.s.write_all(req.as_bytes()).unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            self.s.read_exact(&mut byte).unwrap();
            head.push(byte[0]);
        }
        let head = String::from_utf8(head).unwrap();
        let status = head[9..12].parse().unwrap();
        let length = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse().unwrap())
            })
            .expect("a Content-Length");
        let mut body = vec![0u8; length];
        self.s.read_exact(&mut body).unwrap();
        (status, body)
    }
}

/// `REQUESTS` GETs of `path` on one keep-alive connection: p50, p99, max in ms, and the last body.
fn measure(url: &str, path: &str) -> (f64, f64, f64, Value) {
    let mut conn = Conn::open(url);
    let mut times = Vec::with_capacity(REQUESTS);
    let mut body = Value::Null;
    for _ in 0..REQUESTS {
        let t = Instant::now();
        let (status, bytes) = conn.get(path);
        times.push(ms(t.elapsed()));
        assert_eq!(status, 200);
        body = serde_json::from_slice(&bytes).unwrap();
    }
    times.sort_by(f64::total_cmp);
    (
        percentile(&times, 0.5),
        percentile(&times, 0.99),
        times[times.len() - 1],
        body,
    )
}

fn pages_section(out: &mut String, kernel: &FakeKernel, state: &Path) {
    let s = start(adapter_bin(), &kernel.url, state);
    let base = "/extensions/iac-code/v1/threads";
    out.push_str(&format!(
        "## Pages ({REQUESTS} requests each, one keep-alive connection; target: first page p99 < 20 ms)\n\n\
         | request | threads in the answer | p50 | p99 | max |\n|---|---|---|---|---|\n"
    ));
    let first = format!("{base}?userId=u-heavy");
    let cursor = measure(&s.url, &first).3["nextCursor"]
        .as_str()
        .unwrap()
        .to_string();
    let cases = [
        (
            "first page, user with 1,000 threads (limit 20)",
            first.clone(),
        ),
        (
            "first page, user with 1,000 threads, limit 100",
            format!("{first}&limit=100"),
        ),
        (
            "first page, user with 100 threads (limit 20)",
            format!("{base}?userId=u-042"),
        ),
        (
            "next page with its cursor (limit 20)",
            format!("{first}&cursor={cursor}"),
        ),
    ];
    for (what, path) in cases {
        row(out, what, &s.url, &path);
    }
    // The same while 4 clients run turns all along on threads of the user (their own, so that
    // the generated state dir stays as it was for the next run).
    let stop = Arc::new(AtomicBool::new(false));
    let busy: Vec<_> = (0..4)
        .map(|c| {
            let (url, stop) = (s.url.clone(), stop.clone());
            let cwd = state.parent().unwrap().to_string_lossy().into_owned();
            std::thread::spawn(move || {
                let mut n = 0;
                while !stop.load(Ordering::SeqCst) {
                    let thread = format!("busy-{c}");
                    let body = json!({"threadId": thread, "runId": format!("busy-{c}-{n}"),
                        "state": {}, "tools": [], "context": [],
                        "messages": [{"id": format!("m-{c}-{n}"), "role": "user", "content": "hi"}],
                        "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "invocation-1",
                            "cwd": cwd, "userId": "u-heavy"}}});
                    post_run(&url, &body, &[]);
                    n += 1;
                }
                n
            })
        })
        .collect();
    row(
        out,
        "first page (limit 20) while 4 clients run turns on its threads",
        &s.url,
        &first,
    );
    stop.store(true, Ordering::SeqCst);
    let turns: usize = busy.into_iter().map(|b| b.join().unwrap()).sum();
    out.push_str(&format!(
        "\n({turns} turns ran on 4 of the user's threads during the last row: those threads are on \
         its first page, running or idle from one request to the next.)\n"
    ));
    drop(s);
    for c in 0..4 {
        let _ = std::fs::remove_file(state.join(format!("threads/busy-{c}.json")));
    }
}

fn row(out: &mut String, what: &str, url: &str, path: &str) {
    let (p50, p99, max, body) = measure(url, path);
    let n = body["threads"].as_array().map_or(0, Vec::len);
    out.push_str(&format!(
        "| {what} | {n} | {p50:.2} ms | {p99:.2} ms | {max:.2} ms |\n"
    ));
}
