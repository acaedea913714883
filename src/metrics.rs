//! Operator metrics, served by `GET /metrics` in the Prometheus text format (0.0.4).
//!
//! Plain process-wide atomics, bumped where things happen (http, stream, store, a2a, kernel, the
//! end of a run) and read only by [`render`]. Labelled counters (`code`, `status`) are small maps
//! behind a mutex: their label sets are bounded (the error catalogue, HTTP statuses), and they
//! change once per run or refusal, never per event.

use crate::error::Code;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;
use std::time::Duration;

/// Upper bounds (seconds) of the upstream request latency buckets: from a loopback round trip to
/// a kernel that takes seconds to answer the head of a stream.
const UPSTREAM_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
/// Upper bounds (seconds) of the state-write buckets: an fsync'd rename of a small file.
const WRITE_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

/// A fixed-bucket histogram: cumulative counts are computed at render time.
pub(crate) struct Histogram {
    bounds: &'static [f64],
    /// One count per bound, plus the `+Inf` overflow.
    counts: [AtomicU64; 16],
    sum_micros: AtomicU64,
}

impl Histogram {
    const fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: [const { AtomicU64::new(0) }; 16],
            sum_micros: AtomicU64::new(0),
        }
    }

    pub(crate) fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let i = self
            .bounds
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(self.bounds.len());
        self.counts[i].fetch_add(1, Relaxed);
        self.sum_micros
            .fetch_add(d.as_micros().min(u64::MAX as u128) as u64, Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut total = 0;
        for (i, b) in self.bounds.iter().enumerate() {
            total += self.counts[i].load(Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {total}");
        }
        total += self.counts[self.bounds.len()].load(Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {total}");
        let sum = self.sum_micros.load(Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {total}");
    }
}

/// A counter per label value (a code, a status).
struct Labelled(Mutex<BTreeMap<(&'static str, u16), u64>>);

impl Labelled {
    const fn new() -> Labelled {
        Labelled(Mutex::new(BTreeMap::new()))
    }

    fn add(&self, label: &'static str, status: u16) {
        *self.0.lock().entry((label, status)).or_insert(0) += 1;
    }

    fn snapshot(&self) -> Vec<((&'static str, u16), u64)> {
        self.0.lock().iter().map(|(k, v)| (*k, *v)).collect()
    }
}

static RUNS_SUCCESS: AtomicU64 = AtomicU64::new(0);
static RUNS_INTERRUPT: AtomicU64 = AtomicU64::new(0);
static RUNS_ERROR: AtomicU64 = AtomicU64::new(0);
static RUN_ERRORS: Labelled = Labelled::new();
static REJECTED: Labelled = Labelled::new();
static EVENTS: AtomicU64 = AtomicU64::new(0);
static HEARTBEATS: AtomicU64 = AtomicU64::new(0);
static KERNEL_RESTARTS: AtomicU64 = AtomicU64::new(0);
pub(crate) static UPSTREAM_LATENCY: Histogram = Histogram::new(UPSTREAM_BUCKETS);
pub(crate) static STATE_WRITE_LATENCY: Histogram = Histogram::new(WRITE_BUCKETS);
/// State files replaced without the directory's fsync (`Store::save_unsynced`: ends of runs whose client left).
pub(crate) static STATE_WRITES_UNSYNCED: AtomicU64 = AtomicU64::new(0);
/// Where the open connection count comes from (the HTTP server, once it runs).
static CONNECTIONS: OnceLock<Box<dyn Fn() -> usize + Send + Sync>> = OnceLock::new();

/// How a run ended, as the metrics count it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Success,
    Interrupt,
    Error(Code),
}

/// A run ended (its `RUN_FINISHED` or `RUN_ERROR` is about to be sent).
pub(crate) fn run_ended(outcome: Outcome) {
    match outcome {
        Outcome::Success => RUNS_SUCCESS.fetch_add(1, Relaxed),
        Outcome::Interrupt => RUNS_INTERRUPT.fetch_add(1, Relaxed),
        Outcome::Error(code) => {
            RUN_ERRORS.add(code.as_str(), 0);
            RUNS_ERROR.fetch_add(1, Relaxed)
        }
    };
}

/// Runs ended since start-up, whatever their outcome.
pub(crate) fn runs_ended_total() -> u64 {
    [&RUNS_SUCCESS, &RUNS_INTERRUPT, &RUNS_ERROR]
        .iter()
        .map(|n| n.load(Relaxed))
        .sum()
}

/// A request refused before any stream (our JSON error answer).
pub(crate) fn rejected(status: u16, code: Code) {
    REJECTED.add(code.as_str(), status);
}

pub(crate) fn events_sent(n: usize) {
    EVENTS.fetch_add(n as u64, Relaxed);
}

pub(crate) fn heartbeat_sent() {
    HEARTBEATS.fetch_add(1, Relaxed);
}

pub(crate) fn kernel_restarted() {
    KERNEL_RESTARTS.fetch_add(1, Relaxed);
}

/// Sets the source of the open-connection gauge (first call wins: one server per process).
pub(crate) fn count_connections_with(f: impl Fn() -> usize + Send + Sync + 'static) {
    let _ = CONNECTIONS.set(Box::new(f));
}

fn counter(out: &mut String, name: &str, help: &str, value: u64) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
    );
}

fn gauge(out: &mut String, name: &str, help: &str, value: usize) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
    );
}

/// The open connections, and the allocator's figures: a leak grows the bytes in use; the free
/// ones are what bursts left in the arenas.
fn process_gauges(out: &mut String) {
    let connections = CONNECTIONS.get().map_or(0, |f| f());
    gauge(
        out,
        "iac_code_agui_open_connections",
        "Open client connections.",
        connections,
    );
    let heap = crate::memory::heap();
    gauge(
        out,
        "iac_code_agui_heap_in_use_bytes",
        "Bytes the allocator has handed out and not got back (glibc mallinfo2).",
        heap.in_use,
    );
    gauge(
        out,
        "iac_code_agui_heap_free_bytes",
        "Bytes free in the allocator's arenas (their pages go back to the system at rest).",
        heap.free,
    );
}

/// The whole exposition; `active_runs` comes from the store.
pub(crate) fn render(active_runs: usize) -> String {
    let mut out = String::with_capacity(4096);
    gauge(
        &mut out,
        "iac_code_agui_active_runs",
        "Runs streaming now.",
        active_runs,
    );
    process_gauges(&mut out);
    let _ = writeln!(
        out,
        "# HELP iac_code_agui_runs_total Runs ended, by outcome.\n\
         # TYPE iac_code_agui_runs_total counter"
    );
    for (outcome, n) in [
        ("success", &RUNS_SUCCESS),
        ("interrupt", &RUNS_INTERRUPT),
        ("error", &RUNS_ERROR),
    ] {
        let v = n.load(Relaxed);
        let _ = writeln!(out, "iac_code_agui_runs_total{{outcome=\"{outcome}\"}} {v}");
    }
    let _ = writeln!(
        out,
        "# HELP iac_code_agui_run_errors_total Runs ended with RUN_ERROR, by code.\n\
         # TYPE iac_code_agui_run_errors_total counter"
    );
    for ((code, _), v) in RUN_ERRORS.snapshot() {
        let _ = writeln!(out, "iac_code_agui_run_errors_total{{code=\"{code}\"}} {v}");
    }
    let _ = writeln!(
        out,
        "# HELP iac_code_agui_http_rejected_total Requests refused before a stream, by status \
         and code.\n# TYPE iac_code_agui_http_rejected_total counter"
    );
    for ((code, status), v) in REJECTED.snapshot() {
        let _ = writeln!(
            out,
            "iac_code_agui_http_rejected_total{{status=\"{status}\",code=\"{code}\"}} {v}"
        );
    }
    let events = EVENTS.load(Relaxed);
    counter(
        &mut out,
        "iac_code_agui_events_sent_total",
        "AG-UI events written to clients.",
        events,
    );
    let beats = HEARTBEATS.load(Relaxed);
    counter(
        &mut out,
        "iac_code_agui_heartbeats_total",
        "SSE heartbeats written.",
        beats,
    );
    let restarts = KERNEL_RESTARTS.load(Relaxed);
    counter(
        &mut out,
        "iac_code_agui_kernel_restarts_total",
        "Restarts of the managed A2A kernel after it exited.",
        restarts,
    );
    counter(
        &mut out,
        "iac_code_agui_state_writes_unsynced_total",
        "Thread-state files replaced without the directory fsync: the ends of runs whose client had left.",
        STATE_WRITES_UNSYNCED.load(Relaxed),
    );
    UPSTREAM_LATENCY.render(
        &mut out,
        "iac_code_agui_upstream_request_seconds",
        "A2A requests: time to the answer's head (streams) or whole answer (calls).",
    );
    STATE_WRITE_LATENCY.render(
        &mut out,
        "iac_code_agui_state_write_seconds",
        "Atomic replacement of a thread-state file, fsync included.",
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_with_sum_and_count() {
        static H: Histogram = Histogram::new(&[0.01, 0.1]);
        H.observe(Duration::from_millis(5));
        H.observe(Duration::from_millis(50));
        H.observe(Duration::from_secs(2));
        let mut out = String::new();
        H.render(&mut out, "x", "help");
        assert!(out.contains("x_bucket{le=\"0.01\"} 1\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"0.1\"} 2\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"+Inf\"} 3\n"), "{out}");
        assert!(out.contains("x_sum 2.055\nx_count 3\n"), "{out}");
    }

    #[test]
    fn the_exposition_has_every_family_with_help_and_type() {
        run_ended(Outcome::Error(Code::Cancelled));
        rejected(401, Code::InvalidInput);
        let text = render(3);
        for family in [
            "iac_code_agui_active_runs",
            "iac_code_agui_open_connections",
            "iac_code_agui_runs_total",
            "iac_code_agui_run_errors_total",
            "iac_code_agui_http_rejected_total",
            "iac_code_agui_events_sent_total",
            "iac_code_agui_heartbeats_total",
            "iac_code_agui_kernel_restarts_total",
            "iac_code_agui_upstream_request_seconds",
            "iac_code_agui_state_write_seconds",
        ] {
            assert!(text.contains(&format!("# TYPE {family} ")), "{family}");
        }
        assert!(text.contains("iac_code_agui_active_runs 3\n"));
        assert!(text.contains("iac_code_agui_run_errors_total{code=\"CANCELLED\"}"));
        assert!(text
            .contains("iac_code_agui_http_rejected_total{status=\"401\",code=\"INVALID_INPUT\"}"));
        assert!(UPSTREAM_BUCKETS.len() < 16 && WRITE_BUCKETS.len() < 16);
    }
}
