//! What a thread's live feed costs, measured and reported, never asserted (the functional
//! checks are in tests/thread_feed.rs), against the in-process fake kernel:
//!
//! 1. Memory and threads per open feed: the adapter's RSS and thread count before and after
//!    `FEEDS` feeds opened on one thread (a feed is its request thread and its socket; no copy of
//!    any replay buffer).
//! 2. Fan-out: one turn of `CHUNKS` text deltas run while the feeds are open: from the run's own
//!    client reading `RUN_FINISHED` to the last feed reading it, and the RSS growth over the turn
//!    (the run's frames are held once, in its replay buffer, whatever the number of feeds).
//!
//! `cargo bench --bench thread_feeds` (harness = false; `FEEDS=N` to change the count) prints the
//! report and writes it to `target/bench-thread-feeds.md`.

use fake_kernel::{FakeKernel, Step};
use serde_json::json;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::mpsc::channel;
use std::time::{Duration, Instant};
use test_support::procfs::{proc_kb, proc_status, raise_own_nofile};
use test_support::raw::{addr, connect, read_head};
use test_support::Adapter;

const CHUNKS: usize = 2000;

fn main() {
    let feeds: usize = std::env::var("FEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    raise_own_nofile();
    let k = FakeKernel::start();
    let chunk = "0123456789 the quick brown fox jumps over the lazy dog. ".repeat(2);
    let mut steps: Vec<Step> = (0..CHUNKS)
        .map(|_| Step::Status {
            state: "TASK_STATE_WORKING",
            iac: json!({}),
            text: Some(chunk.clone()),
        })
        .collect();
    steps.push(Step::Status {
        state: "TASK_STATE_INPUT_REQUIRED",
        iac: json!({}),
        text: None,
    });
    k.script("long", steps);
    let a = Adapter::start(&k.url);
    let pid = a.pid();
    a.assert_turn_succeeds("t-bench", "r0");
    std::thread::sleep(Duration::from_millis(300));
    let (rss0, threads0) = (
        proc_kb(pid, "VmRSS"),
        proc_status(pid, "Threads").unwrap_or(0),
    );
    let (tx, rx) = channel();
    let mut handles = Vec::new();
    for _ in 0..feeds {
        let mut s = open_feed(&a.url, "t-bench");
        let tx = tx.clone();
        handles.push(std::thread::spawn(move || {
            let got = read_until_finished(&mut s);
            tx.send((Instant::now(), got)).unwrap();
            s
        }));
    }
    std::thread::sleep(Duration::from_millis(500));
    let (rss1, threads1) = (
        proc_kb(pid, "VmRSS"),
        proc_status(pid, "Threads").unwrap_or(0),
    );
    let body = a.request("t-bench", "r1", "scenario:long");
    let started = Instant::now();
    let own = test_support::post_run(&a.url, &body, &[]);
    let own_done = Instant::now();
    assert_eq!(own.last()["outcome"]["type"], "success");
    let mut last = own_done;
    let mut sizes = Vec::new();
    for _ in 0..feeds {
        let (at, got) = rx.recv_timeout(Duration::from_secs(60)).expect("a feed");
        last = last.max(at);
        sizes.push(got);
    }
    let rss2 = proc_kb(pid, "VmRSS");
    let equal = sizes.iter().all(|s| *s == sizes[0]);
    let per_feed_kb = (rss1.saturating_sub(rss0)) as f64 / feeds as f64;
    let mut out = String::from("# Thread feeds: what an open feed costs\n\n");
    out.push_str(&format!(
        "{feeds} feeds open on one thread (fake kernel; adapter pid {pid}).\n\n\
         | figure | value |\n|---|---|\n\
         | RSS before the feeds | {rss0} kB |\n\
         | RSS with {feeds} feeds open, idle | {rss1} kB (+{} kB, {per_feed_kb:.1} kB per feed) |\n\
         | adapter threads before / after | {threads0} / {threads1} (+{} for {feeds} feeds) |\n\
         | turn of {CHUNKS} text deltas ({} events, {} bytes on each feed) | {:.0} ms for its own client |\n\
         | its RUN_FINISHED: own client → last of {feeds} feeds | {:.1} ms |\n\
         | RSS after the turn | {rss2} kB (+{} kB over the turn) |\n\
         | every feed got the same bytes | {equal} |\n",
        rss1.saturating_sub(rss0),
        threads1.saturating_sub(threads0),
        own.events.len(),
        sizes[0],
        own_done.duration_since(started).as_secs_f64() * 1000.0,
        last.duration_since(own_done).as_secs_f64() * 1000.0,
        rss2.saturating_sub(rss1),
    ));
    print!("{out}");
    let _ = std::fs::write("target/bench-thread-feeds.md", &out);
    drop(handles);
}

fn open_feed(url: &str, thread: &str) -> TcpStream {
    let mut s = connect(url);
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(
        s,
        "GET /extensions/iac-code/v1/threads/{thread}/events?rosInvocationId=invocation-1 \
         HTTP/1.1\r\nHost: {}\r\n\r\n",
        addr(url)
    )
    .unwrap();
    let head = read_head(&mut s).unwrap().expect("a head");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    s
}

/// Reads the feed until its first `RUN_FINISHED`; the bytes read (heartbeats left out).
fn read_until_finished(s: &mut TcpStream) -> usize {
    let mut got = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    while !got.windows(14).any(|w| w == b"\"RUN_FINISHED\"") {
        let n = s.read(&mut buf).unwrap_or(0);
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got);
    text.lines()
        .filter(|l| l.starts_with("data: ") || l.starts_with("id: "))
        .map(|l| l.len() + 1)
        .sum()
}
