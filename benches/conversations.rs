//! The kept conversations (src/history/), measured and reported, never asserted:
//!
//! 1. `THREADS` threads (default 10,000) of `TURNS` turns each (default 50) written on disk
//!    through the adapter's own write path (`History::keep_turn`: the user's message, then a
//!    reply's `TEXT_MESSAGE_START/CONTENT/END` through the run's recorder), with a state file per
//!    thread bound to a user: the cost of keeping a turn (two records, two `write()`s), per turn
//!    and per message.
//! 2. The same append on one thread with the `fdatasync` a run does where it saves its state.
//! 3. The adapter (release build) started on that state dir: how long until `/health` answers,
//!    then `GET …/threads/{threadId}/messages` over HTTP (keep-alive) for random threads, the
//!    newest page and a page before a cursor (limit 50 each): latency p50/p99/max.
//!
//! `cargo bench --bench conversations` prints the report and writes it to
//! `target/bench-conversations.md`; the files live in `target/bench-conversations/` (removed at
//! the end unless `KEEP=1`).

use iac_code_agui::history::History;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use test_support::{agent, Adapter, Options, Rng};

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

/// One turn's reply events, as a run streams them.
fn reply(thread: usize, turn: usize) -> Vec<Value> {
    let id = format!("task-{thread}-{turn}-message");
    let text = format!(
        "Turn {turn}: here is a VPC template outline for thread {thread}: one VPC, two \
         vSwitches, a security group and a NAT gateway, in two zones."
    );
    vec![
        json!({"type": "TEXT_MESSAGE_START", "messageId": id, "role": "assistant", "timestamp": 1}),
        json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": id, "delta": text, "timestamp": 1}),
        json!({"type": "TEXT_MESSAGE_END", "messageId": id, "timestamp": 1}),
        json!({"type": "RUN_FINISHED", "threadId": "t", "runId": "r", "outcome": {"type": "success"}}),
    ]
}

fn thread_id(i: usize) -> String {
    format!("bench-thread-{i:05}")
}

/// Writes the threads: their conversations and their state files (bound to `bench-user`).
fn fill(dir: &std::path::Path, threads: usize, turns: usize) -> Vec<Duration> {
    let history = History::new(dir, 1000);
    std::fs::create_dir_all(dir.join("threads")).unwrap();
    let mut per_turn = Vec::with_capacity(threads * turns);
    for i in 0..threads {
        let t = thread_id(i);
        let doc = json!({"schemaVersion": 1, "threadId": t, "contextId": "ctx", "cwd": "/",
                         "userId": "bench-user", "iacCodeSessionId": null, "execution": null});
        std::fs::write(
            dir.join("threads").join(format!("{t}.json")),
            doc.to_string(),
        )
        .unwrap();
        for n in 0..turns {
            let events = reply(i, n);
            let text = format!("Question {n} about the network of thread {i}?");
            let started = Instant::now();
            history.keep_turn(&t, &format!("user-{i}-{n}"), &text, &events);
            per_turn.push(started.elapsed());
        }
    }
    per_turn
}

fn main() {
    let threads = env_or("THREADS", 10_000);
    let turns = env_or("TURNS", 50);
    let samples = env_or("SAMPLES", 2_000);
    let dir = std::env::current_dir()
        .unwrap()
        .join("target/bench-conversations");
    let _ = std::fs::remove_dir_all(&dir);
    let mut out = format!(
        "# Conversations: {threads} threads × {turns} turns on disk\n\n| figure | value |\n|---|---|\n"
    );
    let t0 = Instant::now();
    let mut per_turn = fill(&dir, threads, turns);
    let fill_time = t0.elapsed();
    per_turn.sort();
    let bytes: u64 = std::fs::read_dir(dir.join("history"))
        .unwrap()
        .flatten()
        .map(|e| e.metadata().map_or(0, |m| m.len()))
        .sum();
    let rows = [
        (
            "turns written (user message + reply: 2 messages, 3 records, 2 writes)",
            format!("{} in {:.1} s", threads * turns, fill_time.as_secs_f64()),
        ),
        (
            "keep a turn, p50 / p99",
            format!("{} / {}", us(pct(&per_turn, 0.5)), us(pct(&per_turn, 0.99))),
        ),
        (
            "keep a message (mean)",
            us(fill_time / (threads * turns * 2) as u32),
        ),
        (
            "conversation logs on disk",
            format!(
                "{:.0} MiB ({} bytes a thread)",
                bytes as f64 / 1048576.0,
                bytes / threads as u64
            ),
        ),
    ];
    for (k, v) in rows {
        out.push_str(&format!("| {k} | {v} |\n"));
    }
    // 2. With the fdatasync a run does where it saves its state.
    let synced_dir = dir.join("synced");
    let history = History::new(&synced_dir, 1_000_000);
    let mut synced = Vec::new();
    for n in 0..500 {
        let started = Instant::now();
        history.keep_turn("synced", &format!("u{n}"), "Question?", &reply(0, n));
        history.sync("synced");
        synced.push(started.elapsed());
    }
    synced.sort();
    out.push_str(&format!(
        "| keep a turn + fdatasync, p50 / p99 | {} / {} |\n",
        us(pct(&synced, 0.5)),
        us(pct(&synced, 0.99))
    ));
    // 3. The history route over HTTP.
    let started = Instant::now();
    let a = Adapter::start_with(
        "http://127.0.0.1:9",
        Options {
            state_dir: Some(dir.clone()),
            ..Default::default()
        },
    );
    let startup = started.elapsed();
    out.push_str(&format!(
        "| adapter start-up to `/health` with these threads on disk | {} |\n",
        ms(startup)
    ));
    let http = agent();
    let mut rng = Rng(0x5eed);
    let get = |url: String| -> (Duration, Value) {
        let started = Instant::now();
        let resp = http.get(&url).call().unwrap();
        let body: Value =
            serde_json::from_str(&resp.into_body().read_to_string().unwrap()).unwrap();
        (started.elapsed(), body)
    };
    let (mut newest, mut older) = (Vec::new(), Vec::new());
    for _ in 0..samples {
        let t = thread_id(rng.below(threads));
        let base = format!(
            "{}/extensions/iac-code/v1/threads/{t}/messages?userId=bench-user&limit=50",
            a.url
        );
        let (took, page) = get(base.clone());
        assert_eq!(
            page["messages"].as_array().map(Vec::len),
            Some(50.min(turns * 2)),
            "{page}"
        );
        newest.push(took);
        if let Some(c) = page["nextCursor"].as_str() {
            let (took, page) = get(format!("{base}&before={c}"));
            assert!(
                page["messages"].as_array().is_some_and(|m| !m.is_empty()),
                "{page}"
            );
            older.push(took);
        }
    }
    for (name, mut v) in [("newest page", newest), ("a page before a cursor", older)] {
        if v.is_empty() {
            continue;
        }
        v.sort();
        out.push_str(&format!(
            "| history route, {name} (limit 50, {} samples): p50 / p99 / max | {} / {} / {} |\n",
            v.len(),
            ms(pct(&v, 0.5)),
            ms(pct(&v, 0.99)),
            ms(*v.last().unwrap())
        ));
    }
    drop(a);
    print!("{out}");
    let _ = std::fs::write("target/bench-conversations.md", &out);
    if std::env::var("KEEP").is_err() {
        let _ = std::fs::remove_dir_all(&dir);
    }
}
