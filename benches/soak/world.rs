//! What the clients, the fault scheduler and the checkers share: the counts, the violations, the
//! adapter's epoch (bumped at each SIGKILL, so a stream cut by one is told from a stream the
//! adapter dropped), and the pause that lets the adapter come to rest for a resource sample.

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The spec's error codes (`src/code.rs`): every refusal and every `RUN_ERROR` must carry one.
pub const SPEC_CODES: &[&str] = &[
    "UNAUTHORIZED",
    "UNSUPPORTED_MEDIA_TYPE",
    "REQUEST_TOO_LARGE",
    "INVALID_JSON",
    "INVALID_INPUT",
    "DUPLICATE_RUN_ID",
    "RUN_ID_CONFLICT",
    "THREAD_BUSY",
    "THREAD_BINDING_CONFLICT",
    "RESUME_REQUIRED",
    "INCOMPLETE_RESUME",
    "UNKNOWN_INTERRUPT",
    "RESUME_PAYLOAD_INVALID",
    "RESUME_ALREADY_APPLIED",
    "EXECUTION_EXPIRED",
    "EXECUTION_LOST",
    "EXECUTION_NOT_FOUND",
    "STATE_PERSISTENCE_FAILED",
    "STATE_UNAVAILABLE",
    "A2A_UNAVAILABLE",
    "A2A_PROTOCOL_ERROR",
    "A2A_EXECUTION_FAILED",
    "SESSION_BACKUP_NOT_READY",
    "CANCELLED",
    "INTERNAL_ERROR",
];

/// README, "Bounds of a Stop and of a client that leaves": by 3 s after a Stop or a client found
/// gone both connections are shut down and a turn that arrived meanwhile is admitted; after
/// `RUN_FINISHED`/`RUN_ERROR` at once. A `409 THREAD_BUSY` later than this after the previous
/// run ended breaks the invariant.
pub const BUSY_BOUND: Duration = Duration::from_secs(3);
/// Scheduling slack on this shared 2-core machine, added to `BUSY_BOUND` before a 409 counts.
pub const BUSY_SLACK: Duration = Duration::from_millis(500);

pub struct World {
    pub url: String,
    pub cwd: String,
    pub start: Instant,
    pub ttl_secs: u64,
    counts: Mutex<BTreeMap<String, u64>>,
    violations: Mutex<Vec<String>>,
    /// Bumped before and after each adapter SIGKILL: odd while the adapter is down.
    pub adapter_epoch: AtomicU64,
    pub adapter_pid: AtomicU32,
    /// Clients finish their episode and wait while set (a resource sample at rest).
    pub pause: AtomicBool,
    pub idle_clients: AtomicUsize,
    pub stop: AtomicBool,
    /// While set, clients pick the episode of a client that stops reading.
    pub slow_readers: AtomicBool,
    /// While set, the kernel hangs: clients give up on a stream after `hang_patience`.
    pub kernel_hung: AtomicBool,
}

impl World {
    pub fn new(url: String, cwd: String, ttl_secs: u64) -> World {
        World {
            url,
            cwd,
            start: Instant::now(),
            ttl_secs,
            counts: Mutex::new(BTreeMap::new()),
            violations: Mutex::new(Vec::new()),
            adapter_epoch: AtomicU64::new(0),
            adapter_pid: AtomicU32::new(0),
            pause: AtomicBool::new(false),
            idle_clients: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            slow_readers: AtomicBool::new(false),
            kernel_hung: AtomicBool::new(false),
        }
    }

    pub fn count(&self, what: &str) {
        self.add(what, 1);
    }

    pub fn add(&self, what: &str, n: u64) {
        *self.counts.lock().entry(what.to_string()).or_default() += n;
    }

    /// Keeps the largest value seen under `what`.
    pub fn max(&self, what: &str, v: u64) {
        let mut c = self.counts.lock();
        let e = c.entry(what.to_string()).or_default();
        *e = (*e).max(v);
    }

    pub fn counts(&self) -> BTreeMap<String, u64> {
        self.counts.lock().clone()
    }

    pub fn get(&self, what: &str) -> u64 {
        self.counts.lock().get(what).copied().unwrap_or(0)
    }

    /// An invariant broke: `invariant` names it, `detail` the thread and run ids.
    pub fn violation(&self, invariant: &str, detail: String) {
        let line = format!("[{:>7.1}s] {invariant}: {detail}", self.secs());
        eprintln!("VIOLATION {line}");
        self.count(&format!("violation: {invariant}"));
        let mut v = self.violations.lock();
        if v.len() < 200 {
            v.push(line);
        }
    }

    pub fn violations(&self) -> Vec<String> {
        self.violations.lock().clone()
    }

    /// A check passed: counted under `invariant`.
    pub fn checked(&self, invariant: &str) {
        self.count(&format!("checked: {invariant}"));
    }

    pub fn secs(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    pub fn epoch(&self) -> u64 {
        self.adapter_epoch.load(Ordering::SeqCst)
    }

    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }
}
