//! The checkers that run beside the clients: every file under the state directory parses
//! whenever it is read (`*.json` whole, `*.jsonl` every complete line; the temporary directories
//! of an atomic write in progress are skipped), and the adapter's RSS, descriptors and threads
//! sampled every few seconds.

use crate::world::World;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;
use test_support::procfs;

/// Walks the state directory every 500 ms until the soak stops.
pub fn check_files(w: &World, state_dir: &Path) {
    while !w.stopping() {
        walk(w, state_dir);
        w.count("state dir scans");
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn walk(w: &World, dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        let Ok(kind) = e.file_type() else { continue };
        if kind.is_dir() {
            // atomicwrites' temporary directory: a write in progress, never the document.
            if !name.starts_with(".atomicwrite") {
                walk(w, &path);
            }
            continue;
        }
        let Ok(bytes) = std::fs::read(&path) else {
            continue;
        };
        if name.ends_with(".jsonl") {
            check_lines(w, &path, &bytes);
        } else if name.ends_with(".json") {
            check_json(w, &path, &bytes);
        } else {
            w.count(&format!(
                "state files of another kind read: {}",
                kind_of(&name)
            ));
        }
    }
}

fn kind_of(name: &str) -> String {
    name.rsplit_once('.')
        .map_or("(no extension)".into(), |(_, ext)| format!(".{ext}"))
}

const NAME: &str = "no state or history file torn";

fn check_json(w: &World, path: &Path, bytes: &[u8]) {
    match serde_json::from_slice::<serde_json::Value>(bytes) {
        Ok(_) => w.checked(NAME),
        Err(e) => w.violation(
            NAME,
            format!("{} ({} bytes): {e}", path.display(), bytes.len()),
        ),
    }
}

fn check_lines(w: &World, path: &Path, bytes: &[u8]) {
    // A last line without its `\n` is a torn tail the contract allows (ignored by the reader).
    let complete = match bytes.iter().rposition(|&b| b == b'\n') {
        Some(i) => &bytes[..=i],
        None => return,
    };
    for (n, line) in complete.split(|&b| b == b'\n').enumerate() {
        if line.is_empty() {
            continue;
        }
        match serde_json::from_slice::<serde_json::Value>(line) {
            Ok(_) => w.checked(NAME),
            Err(e) => w.violation(NAME, format!("{} line {}: {e}", path.display(), n + 1)),
        }
    }
}

/// One sample of the adapter's resources.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sample {
    pub at: f64,
    pub rss_kb: u64,
    pub fds: u64,
    pub threads: u64,
    /// The allocator's bytes handed out (a leak grows them) and free in its arenas, in KiB
    /// (`/metrics`, glibc `mallinfo2`; 0 when unanswered).
    pub heap_kb: u64,
    pub free_kb: u64,
    /// At a rest sample: the RSS when the clients had just paused (before the adapter's trim at
    /// rest, 2 s after its last run).
    pub paused_rss_kb: u64,
}

/// The adapter's RSS, descriptors and threads, read from /proc (no request: a request's own
/// connection would be one of the descriptors counted).
pub fn sample(w: &World) -> Sample {
    let pid = w.adapter_pid.load(Ordering::SeqCst);
    Sample {
        at: w.secs(),
        rss_kb: procfs::proc_kb(pid, "VmRSS"),
        fds: procfs::fd_count(pid),
        threads: procfs::proc_status(pid, "Threads").unwrap_or(0),
        ..Sample::default()
    }
}

/// `s` with the adapter's heap figures, asked of `/metrics` after its descriptors were counted.
pub fn with_heap(w: &World, mut s: Sample) -> Sample {
    (s.heap_kb, s.free_kb) = heap(w);
    s
}

/// The adapter's heap figures from `/metrics`: (in use, free) in KiB.
fn heap(w: &World) -> (u64, u64) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(2)))
        .build()
        .into();
    let text = agent
        .get(format!("{}/metrics", w.url))
        .call()
        .ok()
        .and_then(|r| r.into_body().read_to_string().ok())
        .unwrap_or_default();
    let kb = |series: &str| {
        text.lines()
            .find_map(|l| {
                l.strip_prefix(series)?
                    .strip_prefix(' ')?
                    .parse::<u64>()
                    .ok()
            })
            .map_or(0, |b| b >> 10)
    };
    (
        kb("iac_code_agui_heap_in_use_bytes"),
        kb("iac_code_agui_heap_free_bytes"),
    )
}

/// Prints a sample line every 10 s (the log), until the soak stops.
pub fn log_samples(w: &World) {
    let mut next = 10.0;
    while !w.stopping() {
        if w.secs() >= next {
            // Not while the clients rest: the request's connection would be in the rest sample.
            let resting = w.pause.load(Ordering::SeqCst);
            let s = if resting {
                sample(w)
            } else {
                with_heap(w, sample(w))
            };
            println!(
                "[{:>7.1}s] adapter rss {:.1} MiB (heap in use {:.1}, free {:.1}), fds {}, threads {}; runs {}, requests {}, violations {}",
                s.at,
                s.rss_kb as f64 / 1024.0,
                s.heap_kb as f64 / 1024.0,
                s.free_kb as f64 / 1024.0,
                s.fds,
                s.threads,
                w.get("runs"),
                w.get("requests"),
                w.violations().len()
            );
            next += 10.0;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
