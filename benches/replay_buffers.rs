//! Memory of held replay buffers: `FEEDS` executions (default 2,000), each with its buffer filled
//! to the cap (default 256 KiB, `--replay-buffer-bytes`) by a streaming text turn, measured as the
//! process's resident set before and after. `cargo bench --bench replay_buffers`.
//!
//! What it costs per execution: the ring (frames as sent, up to the cap) plus the turn folded for
//! a join, itself capped at the same size (beyond it the fold is dropped and a join asks the
//! kernel). `TURN=worst` (default): a turn whose text stays just under the cap, so both are full;
//! `TURN=long`: a turn of 1.5 × the cap in frames, whose fold is dropped.

use iac_code_agui::feed::Feeds;
use serde_json::json;
use std::time::{Duration, Instant};

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn main() {
    let n: usize = std::env::var("FEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let cap: usize = std::env::var("CAP")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256 * 1024);
    let long = std::env::var("TURN").is_ok_and(|t| t == "long");
    // A grace longer than the bench: nothing is swept meanwhile.
    let feeds = Feeds::start(cap, Duration::from_secs(3600));
    let before = rss_kib();
    let t0 = Instant::now();
    let delta = "x".repeat(200);
    let mut held = Vec::with_capacity(n);
    let mut events = 0usize;
    for i in 0..n {
        let feed = feeds.open(&format!("exec-{i}"));
        feed.push(&[
            json!({"type": "RUN_STARTED", "threadId": "t", "runId": "r"}),
            json!({"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"}),
        ]);
        // `long`: until the ring is full and the fold gone (1.5 × the cap sent); `worst`: the
        // text just under the cap, so the fold is kept and the ring full.
        let frames = if long {
            cap * 3 / 2 / 260
        } else {
            cap / 200 - 2
        };
        for _ in 0..frames {
            feed.push(&[json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": delta, "timestamp": 1})]);
        }
        events += frames + 2;
        held.push(feed);
    }
    let (count, bytes) = feeds.held();
    let after = rss_kib();
    let grown = after.saturating_sub(before) as f64 / 1024.0;
    println!(
        "{count} held executions, {events} events pushed in {:.1} s; buffers hold {:.1} MiB \
         (ring and fold; cap {} KiB each); RSS {:.1} → {:.1} MiB (+{grown:.1} MiB, {:.0} KiB per \
         execution, turn {})",
        t0.elapsed().as_secs_f64(),
        bytes as f64 / 1048576.0,
        cap / 1024,
        before as f64 / 1024.0,
        after as f64 / 1024.0,
        grown * 1024.0 / count as f64,
        if long {
            "long: fold dropped"
        } else {
            "worst: ring and fold full"
        },
    );
}
