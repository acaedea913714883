//! The chaos soak (issue 25, part 2): 50 scripted clients of mixed traffic against the adapter
//! for `SOAK_SECS` (default 1800), the fake kernel as its own process, with faults injected on a
//! schedule, and checkers asserting the invariants all the way through. It prints its time and
//! figures (and writes them to `target/bench-soak.md`) and exits non-zero when an invariant broke,
//! each violation named with its thread and run ids.
//!
//! `cargo bench --bench soak` (30 minutes); `SOAK_SECS=60 cargo bench --bench soak` (the CI
//! step). Needs root for the disk-full fault (a tmpfs mount); without it that fault is skipped
//! and said so. `SOAK_CLIENTS` (50) and `SOAK_SEED` change the load.

mod client;
mod faults;
mod observe;
mod stream;
mod watch;
mod world;

use faults::{Disk, Kernel};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use test_support::{Adapter, Options};
use watch::Sample;
use world::World;

/// Lifetime of a pending interrupt: short, so that clients see interrupts expire.
const TTL_SECS: u64 = 8;

#[derive(Clone, Copy, Debug)]
enum Fault {
    KernelKill,
    AdapterKill,
    KernelHang(u64),
    DiskFull(u64),
    SlowReaders(u64),
    /// Clients paused, the adapter at rest: a resource sample.
    Rest,
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The schedule: `(second, fault)`, in order. The adapter is SIGKILLed only before the first rest
/// sample, so that the resources are compared on one process from that sample to the end.
fn schedule(total: u64) -> (Vec<(u64, Fault)>, u64) {
    use Fault::*;
    if total < 300 {
        let first_rest = total / 3;
        let s = vec![
            (total / 8, AdapterKill),
            (total / 6, KernelHang(6)),
            (first_rest, Rest),
            (total * 26 / 60, KernelKill),
            (total * 32 / 60, DiskFull(10)),
            (total * 45 / 60, SlowReaders(5)),
        ];
        return (
            s.into_iter().filter(|(t, _)| *t + 5 < total).collect(),
            first_rest,
        );
    }
    let first_rest = 600.min(total / 3);
    // Rest samples every 5 minutes after the first, to see the trajectory (a leak grows steadily,
    // an allocator's warm-up levels off); the flatness check compares the first with the last.
    let rests = (0..)
        .map(|i| first_rest + 300 * i)
        .take_while(|t| t + 60 < total);
    let mut s: Vec<(u64, Fault)> = rests.map(|t| (t, Rest)).collect();
    let near_rest = |t: u64| t >= first_rest - 45 && (t - first_rest + 45) % 300 < 90;
    for t in [90, 330, 540] {
        if t + 30 < first_rest {
            s.push((t, AdapterKill));
        }
    }
    let kinds = [KernelKill, KernelHang(30), DiskFull(60), SlowReaders(20)];
    let mut t = 120;
    let mut k = 0;
    while t + 90 < total {
        if !near_rest(t) && ![90, 330, 540].iter().any(|a: &u64| t.abs_diff(*a) < 30) {
            s.push((t, kinds[k % kinds.len()]));
            k += 1;
        }
        t += 75;
    }
    s.sort_by_key(|e| e.0);
    (s, first_rest)
}

fn main() {
    faults::kernel_role();
    let total = env_u64("SOAK_SECS", 1800);
    let clients = env_u64("SOAK_CLIENTS", 50) as usize;
    let seed = env_u64("SOAK_SEED", 25);
    println!("# soak: {total} s, {clients} clients, seed {seed}, interrupt TTL {TTL_SECS} s");
    test_support::procfs::raise_own_nofile();
    // Room for the kept conversations of 30 minutes (about 9 KiB a run, a flood's 300,000
    // deltas near 1 MiB: 256 MiB was full by minute 12 and refused every turn after); the
    // ballast of a disk-full fault fills what is left, so the short version keeps 256 MiB.
    let disk = Disk::mount(if total < 300 { 256 } else { 2048 });
    if disk.is_none() {
        println!("disk-full fault SKIPPED: no tmpfs mount (needs root)");
    }
    let mut kernel = Kernel::start();
    let args = vec!["--interrupt-ttl".to_string(), TTL_SECS.to_string()];
    let state_dir = disk.as_ref().map(Disk::state_dir);
    let mut adapter = Adapter::start_with(
        &kernel.url,
        Options {
            args,
            state_dir,
            ..Default::default()
        },
    );
    let w = Arc::new(World::new(adapter.url.clone(), adapter.cwd(), TTL_SECS));
    w.adapter_pid.store(adapter.pid(), Ordering::SeqCst);
    let t0 = Instant::now();
    let mut handles = Vec::new();
    for i in 0..clients {
        let c = client::Client::new(
            i,
            w.clone(),
            seed.wrapping_mul(1_000_003).wrapping_add(i as u64 * 7919),
        );
        handles.push(
            std::thread::Builder::new()
                .stack_size(256 << 10)
                .spawn(move || c.run())
                .unwrap(),
        );
    }
    let (wf, sd) = (w.clone(), adapter.state_dir.clone());
    handles.push(std::thread::spawn(move || watch::check_files(&wf, &sd)));
    let wl = w.clone();
    handles.push(std::thread::spawn(move || watch::log_samples(&wl)));
    let (plan, _) = schedule(total);
    let mut rests = Vec::new();
    for (at, fault) in plan {
        sleep_until(&w, t0 + Duration::from_secs(at));
        inject(
            &w,
            fault,
            &mut kernel,
            &mut adapter,
            disk.as_ref(),
            clients,
            &mut rests,
        );
    }
    sleep_until(&w, t0 + Duration::from_secs(total));
    inject(
        &w,
        Fault::Rest,
        &mut kernel,
        &mut adapter,
        disk.as_ref(),
        clients,
        &mut rests,
    );
    let alive = adapter.alive();
    w.stop.store(true, Ordering::SeqCst);
    for h in handles {
        let _ = h.join();
    }
    if !alive {
        w.violation(
            "the adapter stays up (but for the SIGKILLs injected)",
            adapter
                .logs()
                .lines()
                .rev()
                .take(5)
                .collect::<Vec<_>>()
                .join(" | "),
        );
    }
    let ok = report(&w, t0.elapsed(), &rests, total, clients);
    drop(adapter);
    drop(kernel);
    drop(disk);
    std::process::exit(if ok { 0 } else { 1 });
}

fn sleep_until(w: &World, at: Instant) {
    while Instant::now() < at && !w.stopping() {
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn inject(
    w: &World,
    fault: Fault,
    kernel: &mut Kernel,
    adapter: &mut Adapter,
    disk: Option<&Disk>,
    clients: usize,
    rests: &mut Vec<Sample>,
) {
    println!("[{:>7.1}s] fault: {fault:?}", w.secs());
    match fault {
        Fault::KernelKill => {
            kernel.kill();
            std::thread::sleep(Duration::from_millis(500));
            kernel.restart();
            w.count("faults: kernel SIGKILLed and restarted");
        }
        Fault::AdapterKill => {
            w.adapter_epoch.fetch_add(1, Ordering::SeqCst);
            adapter.restart();
            w.adapter_pid.store(adapter.pid(), Ordering::SeqCst);
            w.adapter_epoch.fetch_add(1, Ordering::SeqCst);
            w.count("faults: adapter SIGKILLed and restarted on its state dir");
        }
        Fault::KernelHang(secs) => {
            kernel.hang(true);
            w.kernel_hung.store(true, Ordering::SeqCst);
            std::thread::sleep(Duration::from_secs(secs));
            kernel.hang(false);
            w.kernel_hung.store(false, Ordering::SeqCst);
            w.count("faults: kernel hung");
        }
        Fault::DiskFull(secs) => disk_full(w, disk, secs),
        Fault::SlowReaders(secs) => {
            w.slow_readers.store(true, Ordering::SeqCst);
            std::thread::sleep(Duration::from_secs(secs));
            w.slow_readers.store(false, Ordering::SeqCst);
            w.count("faults: a burst of clients that stop reading");
        }
        Fault::Rest => rests.push(rest(w, clients)),
    }
}

fn disk_full(w: &World, disk: Option<&Disk>, secs: u64) {
    let Some(disk) = disk else {
        w.count("faults: disk full SKIPPED (no tmpfs)");
        return;
    };
    let written = disk.fill();
    println!(
        "[{:>7.1}s] disk full: {} MiB of ballast, {} bytes free",
        w.secs(),
        written >> 20,
        faults::free_bytes(&disk.mount)
    );
    std::thread::sleep(Duration::from_secs(secs));
    disk.free();
    w.count("faults: state disk full");
}

/// Pauses the clients, lets the adapter come to rest, samples it, resumes the clients.
fn rest(w: &World, clients: usize) -> Sample {
    w.pause.store(true, Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(60);
    while w.idle_clients.load(Ordering::SeqCst) < clients && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let idle = w.idle_clients.load(Ordering::SeqCst);
    let paused = watch::with_heap(w, watch::sample(w));
    std::thread::sleep(Duration::from_secs(3));
    // Settled: what outlives the clients by seconds (tiny_http's pool threads above its four
    // wait 5 s for a task before they exit; a CancelTask retried) is gone once threads and fds
    // stay the same for 6 s (at most 30 s).
    let mut s = watch::sample(w);
    let mut same = 0;
    for _ in 0..30 {
        std::thread::sleep(Duration::from_secs(1));
        let next = watch::sample(w);
        same = if (next.threads, next.fds) == (s.threads, s.fds) {
            same + 1
        } else {
            0
        };
        s = next;
        if same >= 6 {
            break;
        }
    }
    let mut s = watch::with_heap(w, s);
    s.paused_rss_kb = paused.rss_kb;
    println!(
        "[{:>7.1}s] at rest ({idle}/{clients} clients idle): rss {:.1} MiB (at the pause {:.1}), heap in use {:.1} MiB, free {:.1} MiB, fds {}, threads {}",
        s.at,
        s.rss_kb as f64 / 1024.0,
        paused.rss_kb as f64 / 1024.0,
        s.heap_kb as f64 / 1024.0,
        s.free_kb as f64 / 1024.0,
        s.fds,
        s.threads
    );
    w.pause.store(false, Ordering::SeqCst);
    s
}

fn report(w: &World, took: Duration, rests: &[Sample], total: u64, clients: usize) -> bool {
    let mut out = format!(
        "# Soak: {total} s asked, {:.0} s taken, {clients} clients\n\n| count | n |\n|---|---|\n",
        took.as_secs_f64()
    );
    for (k, v) in w.counts() {
        out.push_str(&format!("| {k} | {v} |\n"));
    }
    out.push_str("\n| at rest | second | RSS MiB | RSS at the pause | heap in use | heap free | fds | threads |\n|---|---|---|---|---|---|---|---|\n");
    let mib = |kb: u64| kb as f64 / 1024.0;
    for s in rests {
        out.push_str(&format!(
            "| | {:.0} | {:.1} | {:.1} | {:.1} | {:.1} | {} | {} |\n",
            s.at,
            mib(s.rss_kb),
            mib(s.paused_rss_kb),
            mib(s.heap_kb),
            mib(s.free_kb),
            s.fds,
            s.threads
        ));
    }
    if let [first, .., last] = rests {
        if total < 300 {
            // The short version's 40 s are not past the allocator's warm-up (+28% to +49%
            // measured over them): its RSS is only held under +100% (a runaway).
            flat(w, "RSS", first.rss_kb, last.rss_kb, 100.0, &mut out);
        } else {
            heap_flat(w, first.heap_kb, last.heap_kb, &mut out);
            rss_bounded(w, rests, &mut out);
        }
        flat(w, "fds", first.fds, last.fds, 5.0, &mut out);
        flat(w, "threads", first.threads, last.threads, 5.0, &mut out);
    }
    let v = w.violations();
    out.push_str(&format!("\nviolations: {}\n", v.len()));
    for line in &v {
        out.push_str(&format!("- {line}\n"));
    }
    println!("\n{out}");
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/target/bench-soak.md");
    let _ = std::fs::write(path, &out);
    v.is_empty()
}

/// The leak check: what the allocator has handed out, at rest, grows under 5% from the first
/// rest sample to the last (or under 1 MiB: the threads' allocation caches, glibc's tcache,
/// count as in use and move by that much).
fn heap_flat(w: &World, first: u64, last: u64, out: &mut String) {
    const NAME: &str = "heap in use at rest flat (no leak)";
    let grew = last as f64 - first as f64;
    let pct = grew / (first.max(1) as f64) * 100.0;
    out.push_str(&format!(
        "\nheap in use at rest: {first} → {last} KiB ({pct:+.1}%, bound 5% or 1 MiB)"
    ));
    if grew < 1024.0 || pct < 5.0 {
        w.checked(NAME);
    } else {
        w.violation(NAME, format!("{first} → {last} KiB ({pct:+.1}%)"));
    }
}

/// RSS at rest, every sample, under [`RSS_AT_REST_MAX_KB`]: what the allocator's arenas keep
/// resident around the live heap after a burst (pages pinned by blocks still in use; the free
/// ones go back at rest) depends on where the bursts left those blocks, so it moves between
/// samples by some MiB either way, and is held to a bound rather than to flatness.
fn rss_bounded(w: &World, rests: &[Sample], out: &mut String) {
    const NAME: &str = "RSS at rest under its bound";
    let max = rests.iter().map(|s| s.rss_kb).max().unwrap_or(0);
    out.push_str(&format!(
        "\nRSS at rest: at most {:.1} MiB (bound {} MiB)",
        max as f64 / 1024.0,
        RSS_AT_REST_MAX_KB / 1024
    ));
    if max < RSS_AT_REST_MAX_KB {
        w.checked(NAME);
    } else {
        w.violation(NAME, format!("{:.1} MiB", max as f64 / 1024.0));
    }
}

/// The bound of the RSS at rest (the long version): the live heap at rest (about 11 MiB, flat)
/// and the binary, stacks and arenas around it.
const RSS_AT_REST_MAX_KB: u64 = 64 * 1024;

/// "After warm-up, RSS, fds and threads flat": growth from the first rest sample to the last
/// under `bound` percent.
fn flat(w: &World, what: &str, first: u64, last: u64, bound: f64, out: &mut String) {
    let growth = (last as f64 - first as f64) / (first.max(1) as f64) * 100.0;
    out.push_str(&format!(
        "\n{what}: {first} → {last} ({growth:+.1}%, bound {bound}%)"
    ));
    const NAME: &str = "after warm-up, RSS, fds and threads flat (growth under the bound)";
    if growth < bound {
        w.checked(NAME);
    } else {
        w.violation(NAME, format!("{what} {first} → {last} ({growth:+.1}%)"));
    }
}
