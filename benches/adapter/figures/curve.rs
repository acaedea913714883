//! Figure 10 (issue 27): the cost curve. Held runs at 1,000 / 2,500 / 5,000 / 10,000 (or as many
//! as the host's hard open-file limit lets the adapter hold, [`host_max_level`]) against the held kernel (a child process, one epoll
//! thread), read by one epoll client thread: RSS, threads, descriptors, heartbeat lateness at a
//! 15 s and a 1 s interval, `/health` latency while held, admission time, and how fast everything
//! is let go once the clients leave. Then events/s through 1, 10, 100 and 1,000 concurrent
//! streaming runs against the minimal kernel of figure 7. The reference adapter where it can
//! reach it. Tables in the report, SVG plots in target/bench-curve/.
//! `BENCH_ONLY=curve`; `BENCH_CURVE_LEVELS=1000,2500`, `BENCH_CURVE_INTERVALS=15,1`,
//! `BENCH_CURVE_STREAMS=1,10` and `BENCH_CURVE_REFERENCE=0` narrow it.

use crate::clients::{run_body, stream_lines};
use crate::held_clients::Held;
use crate::held_kernel::HeldKernel;
use crate::mini_kernel::MiniKernel;
use crate::procfs::{fd_count, loadavg, rss_breakdown};
use crate::report::Report;
use crate::server::{health_ok, Impl, Server};
use crate::support::{contains, mib, pct};
use crate::svg::{line_chart, Series};
use crate::{Res, ROOT, SLACK};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const ADMIT_DEADLINE: Duration = Duration::from_secs(60);
const DRAIN_DEADLINE: Duration = Duration::from_secs(30);
/// Events per level of the streaming curve (split over its runs).
const STREAM_EVENTS: usize = 200_000;

#[derive(Default, Clone)]
pub(crate) struct HeldPoint {
    pub(crate) who: String,
    pub(crate) n: usize,
    pub(crate) interval: u64,
    pub(crate) admitted: Duration,
    pub(crate) started: usize,
    pub(crate) texts: usize,
    pub(crate) errors: usize,
    pub(crate) first_error: Option<String>,
    pub(crate) idle_rss: f64,
    pub(crate) rss: f64,
    pub(crate) hwm: f64,
    pub(crate) idle_threads: u64,
    pub(crate) threads: u64,
    pub(crate) idle_fds: u64,
    pub(crate) fds: u64,
    pub(crate) heartbeats: u64,
    pub(crate) late: [f64; 3],
    pub(crate) health: [f64; 3],
    pub(crate) health_fail: usize,
    pub(crate) streams: u64,
    pub(crate) cancels: u64,
    pub(crate) threads_down: Option<Duration>,
    pub(crate) fds_down: Option<Duration>,
    pub(crate) cancels_done: Option<Duration>,
    pub(crate) breakdown: String,
    pub(crate) load: String,
    /// The machine's `KernelStack` + `PageTables` (/proc/meminfo) grown during the hold, MiB:
    /// what the threads cost outside the process's RSS (other work on the machine adds noise).
    pub(crate) kernel_mib: f64,
}

impl HeldPoint {
    fn per_run_kib(&self) -> f64 {
        (self.rss - self.idle_rss) * 1024.0 / self.n.max(1) as f64
    }
}

/// The adapter's descriptors that are not a held run's (src/main.rs, `FD_RESERVE`).
const ADAPTER_FD_RESERVE: u64 = 64 + 16 + 32 + 1024;

/// The most held runs this host lets the adapter hold, by the adapter's own start-up arithmetic
/// (src/main.rs, `fit_host_limits`: the hard open-file limit less its reserve, 2 descriptors a
/// run), and at most the 10,000: 9,432 under this host's 20,000.
fn host_max_level() -> usize {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit on a local struct.
    let hard = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        lim.rlim_max
    } else {
        20_000
    };
    (hard.saturating_sub(ADAPTER_FD_RESERVE) / 2).min(10_000) as usize
}

fn env_list(key: &str, default: &[usize]) -> Vec<usize> {
    std::env::var(key)
        .ok()
        .map(|v| v.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| default.to_vec())
}

/// The whole figure.
pub(crate) fn curve(rep: &mut Report, ours: &Impl, root: &Path) {
    let levels = env_list("BENCH_CURVE_LEVELS", &[1000, 2500, 5000, host_max_level()]);
    let intervals = env_list("BENCH_CURVE_INTERVALS", &[15, 1]);
    let streams = env_list("BENCH_CURVE_STREAMS", &[1, 10, 100, 1000]);
    let with_ref = std::env::var("BENCH_CURVE_REFERENCE").map_or(true, |v| v != "0");
    let reference = crate::server::reference_available()
        .ok()
        .filter(|_| with_ref);
    rep.line("## 10. The cost curve: held runs from 1,000 to 10,000, streaming runs from 1 to 1,000 (issue 27)\n");
    let kernel = HeldKernel::start();
    let mut points: Vec<HeldPoint> = Vec::new();
    let mut tag = 100;
    for interval in intervals.iter().map(|i| *i as u64) {
        let hold = Duration::from_secs((interval * 2 + 2).max(12));
        for &n in &levels {
            tag += 1;
            eprintln!("[bench] 10. {n} held runs, heartbeat {interval} s");
            match held_point(ours, &kernel, root, n, interval, hold, tag) {
                Ok(p) => points.push(p),
                Err(e) => rep.line(format!("- ours, {n} runs, {interval} s: failed: {e}")),
            }
        }
    }
    let mut ref_points = Vec::new();
    if let Some(path) = &reference {
        // Its heartbeat is fixed at 15 s; 1,000 runs, as in figure 5.
        let n = env_list("BENCH_CURVE_REF_LEVEL", &[1000])[0];
        tag += 1;
        eprintln!("[bench] 10. the reference, {n} held runs");
        let hold = Duration::from_secs(32);
        let imp = Impl::Reference(path.clone());
        match held_point(&imp, &kernel, root, n, 15, hold, tag) {
            Ok(p) => ref_points.push(p),
            Err(e) => rep.line(format!("- reference, {n} runs: failed: {e}")),
        }
    }
    held_tables(rep, &points, &ref_points);
    let mut flows = Vec::new();
    for &n in &streams {
        eprintln!("[bench] 10. {n} streaming runs");
        flows.push(("iac-code-agui", n, streaming_point(ours, root, n)));
        if let Some(path) = &reference {
            eprintln!("[bench] 10. the reference, {n} streaming runs");
            flows.push((
                "reference",
                n,
                streaming_point(&Impl::Reference(path.clone()), root, n),
            ));
        }
    }
    streaming_table(rep, &flows);
    plots(rep, &points, &ref_points, &flows, &streams);
}

/// `n` held runs on a fresh adapter, heartbeat every `interval` seconds, held for `hold`.
fn held_point(
    imp: &Impl,
    kernel: &HeldKernel,
    root: &Path,
    n: usize,
    interval: u64,
    hold: Duration,
    tag: u32,
) -> Res<HeldPoint> {
    let hb = interval.to_string();
    let srv = Server::start_with(
        imp,
        &kernel.url,
        Some(&hb),
        root,
        &["--max-connections", "20000"],
    )?
    .0;
    // As many runs as the host's limits hold (what the adapter computes at start-up and caps
    // --max-connections to): 2 descriptors a run beside what it has open at idle and a few for
    // /health probes and cancels; 8 memory mappings a run (its thread, and a second for its
    // CancelTask when the client leaves: stack, signal stack and their guard pages) within
    // vm.max_map_count.
    let idle_fds = fd_count(srv.pid);
    let by_fds = nofile(srv.pid).saturating_sub(idle_fds + 16) / 2;
    let by_maps = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(u64::MAX, |m| m.saturating_sub(2_000) / 8);
    let n = n.min(by_fds.min(by_maps).max(1) as usize);
    let mut p = HeldPoint {
        who: imp.name().to_string(),
        n,
        interval,
        idle_rss: mib(srv.status("VmRSS")),
        idle_threads: srv.status("Threads"),
        idle_fds: fd_count(srv.pid),
        ..Default::default()
    };
    let (streams0, cancels0, _) = kernel.stats();
    let kernel0 = kernel_side_kib();
    let t0 = Instant::now();
    let every = Duration::from_secs(interval);
    let mut held = Held::open(srv.port, n, tag, &srv.cwd, every, ADMIT_DEADLINE);
    p.admitted = t0.elapsed();
    let health = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let prober = {
        let (health, stop, port) = (health.clone(), stop.clone(), srv.port);
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let t = Instant::now();
                let ok = health_ok(port);
                let us = t.elapsed().as_micros() as u64;
                health.lock().unwrap().push(if ok { us } else { u64::MAX });
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let peak_threads = AtomicU64::new(0);
    let peak_fds = AtomicU64::new(0);
    held.hold(hold, || {
        peak_threads.fetch_max(srv.status("Threads"), Ordering::SeqCst);
        peak_fds.fetch_max(fd_count(srv.pid), Ordering::SeqCst);
    });
    stop.store(true, Ordering::SeqCst);
    let _ = prober.join();
    p.threads = peak_threads.into_inner().max(srv.status("Threads"));
    p.fds = peak_fds.into_inner().max(fd_count(srv.pid));
    p.rss = mib(srv.status("VmRSS"));
    p.kernel_mib = kernel_side_kib().saturating_sub(kernel0) as f64 / 1024.0;
    p.hwm = mib(srv.status("VmHWM"));
    p.breakdown = rss_breakdown(srv.pid);
    p.load = loadavg();
    let (streams1, _, _) = kernel.stats();
    p.streams = streams1 - streams0;
    p.started = held.started;
    p.texts = held.texts;
    p.errors = held.errors + n.saturating_sub(held.started + held.errors);
    p.first_error = held.first_error.clone();
    p.heartbeats = held.heartbeats;
    let mut late = std::mem::take(&mut held.lateness_us);
    late.sort_unstable();
    p.late = [50, 99, 100].map(|q| pct(&late, q) as f64 / 1000.0);
    let mut h = std::mem::take(&mut *health.lock().unwrap());
    p.health_fail = h.iter().filter(|v| **v == u64::MAX).count();
    h.retain(|v| *v != u64::MAX);
    h.sort_unstable();
    p.health = [50, 99, 100].map(|q| pct(&h, q) as f64 / 1000.0);
    held.close();
    drain(&srv, kernel, &mut p, cancels0);
    Ok(p)
}

/// Waits (bounded) until threads and descriptors are back to idle and every started run was
/// cancelled at the kernel.
fn drain(srv: &Server, kernel: &HeldKernel, p: &mut HeldPoint, cancels0: u64) {
    let closed = Instant::now();
    while closed.elapsed() < DRAIN_DEADLINE {
        if p.threads_down.is_none() && srv.status("Threads") <= p.idle_threads + SLACK {
            p.threads_down = Some(closed.elapsed());
        }
        if p.fds_down.is_none() && fd_count(srv.pid) <= p.idle_fds + SLACK {
            p.fds_down = Some(closed.elapsed());
        }
        let cancels = kernel.stats().1 - cancels0;
        if p.cancels_done.is_none() && cancels >= p.started as u64 {
            p.cancels_done = Some(closed.elapsed());
        }
        p.cancels = cancels;
        if p.threads_down.is_some() && p.fds_down.is_some() && p.cancels_done.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The soft open-file limit of `pid`.
fn nofile(pid: u32) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap_or_default();
    text.lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3)?.parse().ok())
        .unwrap_or(1024)
}

/// `KernelStack` + `PageTables` from /proc/meminfo, KiB.
fn kernel_side_kib() -> u64 {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with("KernelStack:") || l.starts_with("PageTables:"))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum()
}

fn secs(d: Option<Duration>) -> String {
    d.map_or_else(
        || format!("not within {} s", DRAIN_DEADLINE.as_secs()),
        |d| format!("{:.1} s", d.as_secs_f64()),
    )
}

fn held_tables(rep: &mut Report, points: &[HeldPoint], refs: &[HeldPoint]) {
    rep.line("Held runs (one text event, then the kernel writes nothing; each run on its own threadId; `--max-connections 20000`). RSS = `VmRSS` at the end of the hold, per run = (RSS − idle) / runs; threads and descriptors at peak; heartbeat lateness = a heartbeat's arrival − the previous line's − the interval, over every heartbeat of every stream in the hold; `/health` on a fresh connection every 100 ms through the hold; admitted = first connect → the last `RUN_STARTED` (512 runs waiting at a time); let go = after every client closed its socket, threads and fds back to idle (+10), one `CancelTask` per run at the kernel.\n");
    rep.line("| adapter | heartbeat | runs | admitted in | RSS idle → held (VmHWM) | per run | threads idle → held | fds idle → held | heartbeats; lateness p50 / p99 / max | `/health` p50 / p99 / max (failed) | errors; text events; upstream streams | threads / fds idle, all cancelled after | kernel stacks + page tables grown | load average |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for p in points.iter().chain(refs) {
        rep.line(format!(
            "| {} | {} s | {} | {:.1} s | {:.1} → {:.1} MiB ({:.1}) | {:.1} KiB | {} → {} | {} → {} | {}; {:.0} / {:.0} / {:.0} ms | {:.2} / {:.2} / {:.2} ms ({}) | {}; {}; {} | {} / {} / {} ({} CancelTask) | {:.0} MiB | {} |",
            p.who, p.interval, p.n, p.admitted.as_secs_f64(), p.idle_rss, p.rss, p.hwm,
            p.per_run_kib(), p.idle_threads, p.threads, p.idle_fds, p.fds, p.heartbeats,
            p.late[0], p.late[1], p.late[2], p.health[0], p.health[1], p.health[2],
            p.health_fail, p.errors, p.texts, p.streams, secs(p.threads_down),
            secs(p.fds_down), secs(p.cancels_done), p.cancels, p.kernel_mib, p.load
        ));
    }
    rep.line("");
    for p in points.iter().chain(refs) {
        rep.line(format!(
            "- {}, {} runs, {} s: resident memory by mapping at the end of the hold: {}{}",
            p.who,
            p.n,
            p.interval,
            p.breakdown,
            p.first_error
                .as_ref()
                .map(|e| format!("; first error: `{}`", e.replace('`', "'")))
                .unwrap_or_default()
        ));
    }
    rep.line("");
    let top = points
        .iter()
        .filter(|p| p.interval == 15)
        .max_by_key(|p| p.n);
    if let Some(p) = top {
        let ok = p.rss <= 500.0 && p.errors == 0 && p.late[1] < 250.0 && p.health[1] < 10.0;
        rep.row(
            &format!("{} held runs (15 s heartbeat)", p.n),
            format!(
                "RSS {:.1} MiB ({:.1} KiB a run), {} errors, heartbeat p99 {:.0} ms late, /health p99 {:.2} ms, admitted in {:.1} s, let go in {} / cancelled in {}",
                p.rss, p.per_run_kib(), p.errors, p.late[1], p.health[1],
                p.admitted.as_secs_f64(), secs(p.threads_down), secs(p.cancels_done)
            ),
            "≤ 500 MiB, 0 errors, p99 < 250 ms, /health p99 < 10 ms, ≤ 10 s, ≤ 10 s",
            Some(ok && p.admitted.as_secs_f64() <= 10.0),
        );
    }
}

/// `n` concurrent streaming runs, `STREAM_EVENTS / n` text frames each (200 at least): events/s
/// over the wall time of all of them, errors, peak RSS.
fn streaming_point(imp: &Impl, root: &Path, n: usize) -> Res<(f64, usize, f64)> {
    let frames = (STREAM_EVENTS / n).max(200);
    let mk = MiniKernel::with_frames(frames);
    let srv = Server::start(imp, &mk.url, None, root)?.0;
    let events = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let t0 = Instant::now();
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let (url, cwd) = (srv.url.clone(), srv.cwd.clone());
            let (events, errors) = (events.clone(), errors.clone());
            std::thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn(move || {
                    let body = run_body(
                        &crate::support::uuid(90, i as u64),
                        &format!("s-{i}"),
                        "go",
                        &cwd,
                    );
                    let mut finished = false;
                    let mut count = 0;
                    let r = stream_lines(&url, false, body, Duration::from_secs(120), |l| {
                        if contains(l, b"\"TEXT_MESSAGE_CONTENT\"") {
                            count += 1;
                        } else if contains(l, b"\"RUN_FINISHED\"") {
                            finished = true;
                        }
                    });
                    events.fetch_add(count, Ordering::SeqCst);
                    if r.is_err() || !finished {
                        errors.fetch_add(1, Ordering::SeqCst);
                    }
                })
                .map_err(|e| e.to_string())
        })
        .collect::<Res<_>>()?;
    for h in handles {
        let _ = h.join();
    }
    let wall = t0.elapsed().as_secs_f64();
    let hwm = mib(srv.status("VmHWM"));
    let ev = events.load(Ordering::SeqCst) as f64;
    Ok((ev / wall, errors.load(Ordering::SeqCst) as usize, hwm))
}

type Flow = (&'static str, usize, Res<(f64, usize, f64)>);

fn streaming_table(rep: &mut Report, flows: &[Flow]) {
    rep.line(format!("\nStreaming runs: n concurrent runs against the minimal kernel of figure 7 (256 KiB writes), {STREAM_EVENTS} text frames in all per level (at least 200 a run), each run read by its own ureq line reader; events/s = `TEXT_MESSAGE_CONTENT` received by all clients / wall time from the first POST to the last end; errors = runs without `RUN_FINISHED`. Load average {}.\n", loadavg()));
    rep.line("| adapter | concurrent runs | events/s | errors | peak RSS (VmHWM) |\n|---|---|---|---|---|");
    for (who, n, r) in flows {
        match r {
            Ok((rate, errors, hwm)) => rep.line(format!(
                "| {who} | {n} | {rate:.0} | {errors} | {hwm:.1} MiB |"
            )),
            Err(e) => rep.line(format!("| {who} | {n} | failed: {e} | | |")),
        }
    }
    rep.line("");
}

fn plots(
    rep: &mut Report,
    points: &[HeldPoint],
    refs: &[HeldPoint],
    flows: &[Flow],
    streams: &[usize],
) {
    let dir = Path::new(ROOT).join("target/bench-curve");
    let _ = std::fs::create_dir_all(&dir);
    let mut levels: Vec<usize> = points.iter().map(|p| p.n).collect();
    levels.sort_unstable();
    levels.dedup();
    let xs: Vec<f64> = levels.iter().map(|n| *n as f64).collect();
    let at = |interval: u64, f: &dyn Fn(&HeldPoint) -> f64| -> Vec<Option<f64>> {
        levels
            .iter()
            .map(|n| {
                points
                    .iter()
                    .find(|p| p.n == *n && p.interval == interval)
                    .map(f)
            })
            .collect()
    };
    let reference = |f: &dyn Fn(&HeldPoint) -> f64| -> Vec<Option<f64>> {
        levels
            .iter()
            .map(|n| refs.iter().find(|p| p.n == *n).map(f))
            .collect()
    };
    let charts = [
        (
            "held-rss.svg",
            line_chart(
                "Held runs: resident memory",
                "held runs",
                "RSS, MiB",
                &xs,
                &[
                    Series {
                        name: "iac-code-agui (15 s heartbeat)",
                        color: "#1f77b4",
                        ys: at(15, &|p| p.rss),
                    },
                    Series {
                        name: "iac-code-agui (1 s heartbeat)",
                        color: "#17becf",
                        ys: at(1, &|p| p.rss),
                    },
                    Series {
                        name: "reference (Python)",
                        color: "#d62728",
                        ys: reference(&|p| p.rss),
                    },
                ],
            ),
        ),
        (
            "held-per-run.svg",
            line_chart(
                "Held runs: memory per run",
                "held runs",
                "KiB per run",
                &xs,
                &[
                    Series {
                        name: "iac-code-agui (15 s heartbeat)",
                        color: "#1f77b4",
                        ys: at(15, &|p| p.per_run_kib()),
                    },
                    Series {
                        name: "reference (Python)",
                        color: "#d62728",
                        ys: reference(&|p| p.per_run_kib()),
                    },
                ],
            ),
        ),
        (
            "held-threads.svg",
            line_chart(
                "Held runs: threads",
                "held runs",
                "threads",
                &xs,
                &[
                    Series {
                        name: "iac-code-agui",
                        color: "#1f77b4",
                        ys: at(15, &|p| p.threads as f64),
                    },
                    Series {
                        name: "reference (Python)",
                        color: "#d62728",
                        ys: reference(&|p| p.threads as f64),
                    },
                ],
            ),
        ),
        (
            "held-latency.svg",
            line_chart(
                "Held runs: p99 latencies",
                "held runs",
                "ms",
                &xs,
                &[
                    Series {
                        name: "heartbeat lateness p99, 15 s interval",
                        color: "#1f77b4",
                        ys: at(15, &|p| p.late[1]),
                    },
                    Series {
                        name: "heartbeat lateness p99, 1 s interval",
                        color: "#17becf",
                        ys: at(1, &|p| p.late[1]),
                    },
                    Series {
                        name: "/health p99 (15 s run)",
                        color: "#2ca02c",
                        ys: at(15, &|p| p.health[1]),
                    },
                    Series {
                        name: "reference: heartbeat lateness p99 (15 s)",
                        color: "#d62728",
                        ys: reference(&|p| p.late[1]),
                    },
                ],
            ),
        ),
    ];
    let sx: Vec<f64> = streams.iter().map(|n| *n as f64).collect();
    let rate = |who: &str| -> Vec<Option<f64>> {
        streams
            .iter()
            .map(|n| {
                flows
                    .iter()
                    .find(|f| f.0 == who && f.1 == *n)
                    .and_then(|f| f.2.as_ref().ok())
                    .map(|r| r.0)
            })
            .collect()
    };
    let stream_chart = line_chart(
        "Streaming runs: events/s through the adapter",
        "concurrent streaming runs",
        "events/s",
        &sx,
        &[
            Series {
                name: "iac-code-agui",
                color: "#1f77b4",
                ys: rate("iac-code-agui"),
            },
            Series {
                name: "reference (Python)",
                color: "#d62728",
                ys: rate("reference"),
            },
        ],
    );
    let mut names = Vec::new();
    for (name, svg) in charts.iter().chain([&("streaming.svg", stream_chart)]) {
        let _ = std::fs::write(dir.join(name), svg);
        names.push(*name);
    }
    rep.line(format!(
        "Plots (target/bench-curve/, copied to benches/curve/ by benches/run.sh): {}\n",
        names.join(", ")
    ));
}
