//! Hostile-client figures (issue 9), measured and reported, never asserted:
//!
//! 1. `/health` latency (p50 / p99 / max of 200 sequential requests on fresh connections) while
//!    1,000 idle or slow connections are held open (a third idle, a third mid-head, a third
//!    mid-body). Target: p99 < 10 ms.
//! 2. Peak RSS growth (`VmHWM`, reset first) for one legal 12 MiB run request whose `state` holds
//!    ~1.57 M `{"a":0},`, and the RSS left after the run. Target: a few times the body; ~0 after.
//!
//! `cargo bench --bench hostile` (harness = false) prints the report and writes it to
//! `target/bench-hostile.md`. The functional bounds live in `tests/hostile.rs`.

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;
use test_support::procfs::{proc_kb, raise_own_nofile, reset_hwm};
use test_support::raw::{health, try_connect};
use test_support::{agent, Adapter, Options};

const HELD: usize = 1000;
const PROBES: usize = 200;

fn adapter(kernel: &str) -> Adapter {
    let flags = [
        "--max-connections",
        "2048",
        "--header-timeout",
        "60",
        "--body-timeout",
        "60",
        "--keepalive-timeout",
        "60",
        "--heartbeat-interval",
        "15",
    ];
    Adapter::start_with(
        kernel,
        Options {
            args: flags.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        },
    )
}

/// `HELD` connections: idle, mid-head, mid-body.
fn hold(url: &str) -> Vec<TcpStream> {
    (0..HELD)
        .filter_map(|i| {
            let mut s = try_connect(url).ok()?;
            let bytes: &[u8] = match i % 3 {
                0 => b"",
                1 => b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: a",
                _ => b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n{\"threadId\":",
            };
            s.write_all(bytes).ok()?;
            Some(s)
        })
        .collect()
}

fn pct(sorted: &[Duration], p: usize) -> Duration {
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

fn health_latency(a: &Adapter) -> String {
    let held = hold(&a.url);
    std::thread::sleep(Duration::from_millis(500));
    let mut lat = Vec::new();
    let mut errors = 0;
    for _ in 0..PROBES {
        match health(&a.url, Duration::from_secs(2)) {
            Ok(d) => lat.push(d),
            Err(_) => errors += 1,
        }
    }
    drop(held);
    if lat.is_empty() {
        return format!(
            "| /health with {HELD} slow connections | no answer ({errors} errors) | p99 < 10 ms |"
        );
    }
    lat.sort();
    format!(
        "| /health with {HELD} slow connections held, p50 / p99 / max ({PROBES} probes, {errors} errors) | {:.2} / {:.2} / {:.2} ms | p99 < 10 ms |",
        pct(&lat, 50).as_secs_f64() * 1e3,
        pct(&lat, 99).as_secs_f64() * 1e3,
        lat[lat.len() - 1].as_secs_f64() * 1e3
    )
}

/// Peak growth and leftover RSS for one 12 MiB `state` body.
fn big_state(a: &Adapter) -> String {
    let prefix = format!(
        r#"{{"threadId":"t-big","runId":"r1","tools":[],"context":[],"messages":[{{"id":"m1","role":"user","content":"hi"}}],"forwardedProps":{{"iacCode":{{"schemaVersion":1,"rosInvocationId":"invocation-1","cwd":{}}}}},"state":{{"items":["#,
        serde_json::json!(a.cwd())
    );
    let n = (12 * 1024 * 1024 - prefix.len() - 16) / 8;
    let mut body = prefix.into_bytes();
    for _ in 0..n - 1 {
        body.extend_from_slice(br#"{"a":0},"#);
    }
    body.extend_from_slice(br#"{"a":0}]}}"#);
    let pid = a.pid();
    let before = proc_kb(pid, "VmRSS");
    let reset = reset_hwm(pid);
    let base = if reset { before } else { proc_kb(pid, "VmHWM") };
    let sent = agent()
        .post(format!("{}/", a.url))
        .header("Content-Type", "application/json")
        .header("Accept", "text/event-stream")
        .send(&body[..])
        .map(|r| (r.status().as_u16(), r.into_body().read_to_string().is_ok()));
    std::thread::sleep(Duration::from_millis(300));
    let peak = proc_kb(pid, "VmHWM").saturating_sub(base);
    let after = proc_kb(pid, "VmRSS").saturating_sub(before);
    let body_kb = body.len() as u64 / 1024;
    format!(
        "| one 12 MiB `state` body ({body_kb} KiB; answer {sent:?}; VmHWM reset: {reset}): peak RSS growth; RSS after | {:.1} MiB = {:.1}× the body; +{:.1} MiB | a few × the body; ~0 after |",
        peak as f64 / 1024.0,
        peak as f64 / body_kb as f64,
        after as f64 / 1024.0
    )
}

fn main() {
    let soft = raise_own_nofile();
    let kernel = fake_kernel::FakeKernel::start();
    let a = adapter(&kernel.url);
    // Warm up: the first run's threads and buffers are not what is measured.
    let warm = a.run(&a.request("t-warm", "r1", "hi"));
    let mut report =
        String::from("# Hostile-client figures\n\n| figure | value | target |\n|---|---|---|\n");
    for row in [health_latency(&a), big_state(&a)] {
        report.push_str(&row);
        report.push('\n');
    }
    report.push_str(&format!(
        "\nRLIMIT_NOFILE (bench process) {soft}; warm-up run HTTP {}.\n",
        warm.status
    ));
    print!("{report}");
    let out = concat!(env!("CARGO_MANIFEST_DIR"), "/target/bench-hostile.md");
    let _ = std::fs::write(out, &report);
}
