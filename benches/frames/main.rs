//! Per-event cost of the relay's hot path on the real kernel's frame shapes (issue 13).
//!
//! `cargo bench --bench frames` (harness = false; a few seconds). Each frame set in this folder
//! (`*.a2a.sse`, built from the captured kernel traffic by `make.py`) is repeated into one upstream
//! stream of about 20,000 frames and relayed in-process through `iac_code_agui::hotpath::Relay`:
//! the SSE reader, the JSON-RPC parsing, the projection and the client frame writer a run uses.
//! Reported, never asserted: CPU time per upstream frame and per AG-UI event (this thread's CPU
//! clock; median and range of 7 passes), and heap allocations per frame in steady state, counted
//! by the global allocator below (the first two cycles of each set are the warm-up).
//! The output goes to stdout and `target/bench-frames.md`.

use iac_code_agui::hotpath::Relay;
use iac_code_agui::projection::RunIds;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

struct Counting;
static ALLOCS: AtomicU64 = AtomicU64::new(0);

static TRACE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
thread_local!(static IN_TRACE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) });

/// `FRAMES_TRACE=1`: prints where the first steady-state allocations come from (debug builds).
fn trace() {
    if TRACE.load(Ordering::Relaxed) && !IN_TRACE.with(|t| t.replace(true)) {
        eprintln!("{}", std::backtrace::Backtrace::force_capture());
        if ALLOCS.load(Ordering::Relaxed) > 0 {
            TRACE.store(
                ALLOCS.load(Ordering::Relaxed) % 1000 != 0,
                Ordering::Relaxed,
            );
        }
        IN_TRACE.with(|t| t.set(false));
    }
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        trace();
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        System.alloc(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        System.realloc(p, l, n)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/frames");
const TARGET_FRAMES: usize = 20_000;
const PASSES: usize = 7;
const SETS: [&str; 4] = ["text", "tool", "reasoning", "pipeline"];

fn ids() -> RunIds {
    RunIds {
        thread_id: "bench-thread".into(),
        run_id: "bench-run".into(),
        execution_id: "bench-exec".into(),
        context_id: "agui-58633450475f377504ca56b46b5a293d95591ee7".into(),
        ros_invocation_id: "bench-inv".into(),
        ..Default::default()
    }
}

/// The set's frames, repeated with `$N` (cycle) and `$SEQ` (running sequence) filled in.
fn upstream(set: &str) -> (Vec<u8>, usize, usize) {
    let cycle = std::fs::read_to_string(format!("{DIR}/{set}.a2a.sse")).expect("frame set");
    let per_cycle = cycle.matches("data: ").count();
    let cycles = TARGET_FRAMES / per_cycle;
    let mut out = String::with_capacity(cycle.len() * cycles);
    let mut seq = 0;
    for n in 1..=cycles {
        for frame in cycle.split_inclusive("\n\n") {
            seq += 1;
            out.push_str(
                &frame
                    .replace("$N", &n.to_string())
                    .replace("$SEQ", &seq.to_string()),
            );
        }
    }
    (out.into_bytes(), per_cycle, cycles)
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec for the kernel to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

struct Pass {
    frames: usize,
    events: usize,
    cpu_ns: u64,
    steady_allocs: u64,
    steady_frames: usize,
    bytes_out: usize,
}

/// How much of the path a pass runs.
#[derive(Clone, Copy, PartialEq)]
enum Depth {
    /// The SSE reader only.
    Read,
    /// The reader and the frame view (JSON-RPC parsing).
    View,
    /// Everything: reader, view, projection, client frames.
    Relay,
}

fn step(relay: &mut Relay<&[u8]>, depth: Depth) -> Option<usize> {
    let r = match depth {
        Depth::Read => relay.read_only().map(|n| n.map(|_| 0)),
        Depth::View => relay.view_only().map(|n| n.map(|_| 0)),
        Depth::Relay => relay.step(),
    };
    r.expect("the relay accepts the frame set")
}

fn pass(bytes: &[u8], warm_frames: usize, depth: Depth) -> Pass {
    let mut relay = Relay::new(bytes, ids());
    let (mut frames, mut events, mut bytes_out) = (0, 0, 0);
    let mut allocs_at_warm = 0;
    let started = thread_cpu_ns();
    while let Some(n) = step(&mut relay, depth) {
        frames += 1;
        events += n;
        bytes_out += relay.body.len();
        if frames == warm_frames {
            allocs_at_warm = ALLOCS.load(Ordering::Relaxed);
            TRACE.store(
                std::env::var_os("FRAMES_TRACE").is_some(),
                Ordering::Relaxed,
            );
        }
        if frames == warm_frames + 3 {
            TRACE.store(false, Ordering::Relaxed);
        }
    }
    let cpu_ns = thread_cpu_ns() - started;
    Pass {
        frames,
        events,
        cpu_ns,
        steady_allocs: ALLOCS.load(Ordering::Relaxed) - allocs_at_warm,
        steady_frames: frames - warm_frames,
        bytes_out,
    }
}

/// The cheapest pass serde_json makes over the frames (`IgnoredAny`), µs per frame: the floor
/// any JSON reading of them has on this machine at this moment.
fn json_floor(bytes: &[u8]) -> f64 {
    let text = std::str::from_utf8(bytes).expect("UTF-8 frames");
    let frames: Vec<&[u8]> = text
        .split("\n\n")
        .filter_map(|f| f.strip_prefix("data: "))
        .map(str::as_bytes)
        .collect();
    let runs = (0..PASSES).map(|_| {
        let started = thread_cpu_ns();
        for f in &frames {
            let _: serde::de::IgnoredAny = serde_json::from_slice(f).expect("JSON frames");
        }
        (thread_cpu_ns() - started) as f64 / 1e3 / frames.len() as f64
    });
    median(runs.collect()).0
}

fn median(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn main() {
    let mut rep = String::new();
    rep.push_str(&format!(
        "| frame set | frames (per cycle) | events | CPU per frame, µs: median (min–max of {PASSES}) | CPU per event, µs | of which reading / reading + viewing, µs per frame (JSON floor) | allocations per frame (steady state) | bytes out per frame |\n|---|---|---|---|---|---|---|---|\n"
    ));
    let only = std::env::var("FRAMES_SET").ok();
    for set in SETS
        .into_iter()
        .filter(|s| only.as_deref().is_none_or(|o| o == *s))
    {
        let (bytes, per_cycle, _) = upstream(set);
        let _ = pass(&bytes, 2 * per_cycle, Depth::Relay); // warm-up
        let passes: Vec<Pass> = (0..PASSES)
            .map(|_| pass(&bytes, 2 * per_cycle, Depth::Relay))
            .collect();
        let p0 = &passes[0];
        let per_frame = median(
            passes
                .iter()
                .map(|p| p.cpu_ns as f64 / 1e3 / p.frames as f64)
                .collect(),
        );
        let per_event = median(
            passes
                .iter()
                .map(|p| p.cpu_ns as f64 / 1e3 / p.events as f64)
                .collect(),
        );
        let allocs = p0.steady_allocs as f64 / p0.steady_frames as f64;
        let floor = |depth| {
            median(
                (0..PASSES)
                    .map(|_| {
                        let p = pass(&bytes, 2 * per_cycle, depth);
                        p.cpu_ns as f64 / 1e3 / p.frames as f64
                    })
                    .collect(),
            )
            .0
        };
        let (read, view) = (floor(Depth::Read), floor(Depth::View));
        let json = json_floor(&bytes);
        rep.push_str(&format!(
            "| {set} | {} ({per_cycle}) | {} | {:.2} ({:.2}–{:.2}) | {:.2} | {read:.2} / {view:.2} ({json:.2}) | {:.2} | {} |\n",
            p0.frames,
            p0.events,
            per_frame.0,
            per_frame.1,
            per_frame.2,
            per_event.0,
            allocs,
            p0.bytes_out / p0.frames,
        ));
    }
    print!("{rep}");
    let target = concat!(env!("CARGO_MANIFEST_DIR"), "/target/bench-frames.md");
    let _ = std::fs::write(target, &rep);
}
