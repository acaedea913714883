//! Performance report for `iac-code-agui` against the in-process fake A2A kernel, with the Python
//! reference adapter (`iac-code agui`) side by side when it is installed.
//!
//! `cargo bench --bench adapter` (harness = false) prints a Markdown report and writes it to
//! `target/bench-report.md`. Targets are reported, never asserted: the bench fails only when the
//! harness itself breaks. See benches/README.md for what each figure means.
//!
//! `main` runs the sections in order, one function per figure (figures/), each writing its part of
//! the report and returning what later sections compare with. Around them: `server` (starts the
//! adapter or the reference), `clients` (the streaming and held clients), `procfs` (what /proc says
//! about the server and the machine), `report` (the summary and the Markdown file).

mod clients;
mod figures;
mod held_clients;
mod held_kernel;
mod mini_kernel;
mod procfs;
mod report;
mod server;
mod support;
mod svg;

use fake_kernel::{FakeKernel, Step};
use figures::footprint::static_binary;
use figures::held_runs::held_runs;
use figures::kernel_limit::kernel_limit;
use figures::large::large_messages;
use figures::latency::{latency, latency_script};
use figures::reference::{reference_section, Figures};
use figures::run_latency::{run_latency, start_script, START_SCRIPT};
use figures::startup::startup_figure;
use figures::throughput::throughput;
use procfs::{cpu_mark, other_cpu, CpuMark};
use report::Report;
use serde_json::json;
use server::{Impl, Server};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_iac-code-agui");
const ROOT: &str = env!("CARGO_MANIFEST_DIR");

// Loads, each bounded in count and time.
const FLOOD_N: usize = 200_000;
const FLOOD_TIMEOUT: Duration = Duration::from_secs(60);
const LAT_EVENTS: usize = 2000;
const HOLD_N: usize = 1000;
const HOLD_FOR: Duration = Duration::from_secs(12);
const RAMP_DEADLINE: Duration = Duration::from_secs(60);
const DRAIN_DEADLINE: Duration = Duration::from_secs(30);
const STARTS: usize = 20;
const CLIENT_STACK: usize = 64 * 1024;
/// After the clients close, "back to idle" means at most this many threads (descriptors) above
/// the idle count: the HTTP pool's spare threads vary a little, a leak would be hundreds.
const SLACK: u64 = 10;

type Res<T> = Result<T, String>;

/// Numbers for run and thread ids, unique over the whole bench.
#[derive(Default)]
struct RunNumbers(u64);

impl RunNumbers {
    fn next(&mut self) -> u64 {
        self.0 += 1;
        self.0
    }
}

fn main() {
    // `cargo bench` passes `--bench`; nothing to parse. The bench runs itself again as figure
    // 10's kernel (a child process: its descriptors do not count against the bench's).
    if std::env::var("BENCH_ROLE").as_deref() == Ok("held-kernel") {
        held_kernel::child_main();
        return;
    }
    procfs::raise_own_nofile();
    let started = Instant::now();
    let bench_mark = cpu_mark();
    let mut mark = bench_mark;
    let root = std::env::temp_dir().join(format!("agui-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).expect("create the bench directory");
    let kernel = start_kernel();
    // BENCH_ADAPTER_BIN: another build of the adapter (a before/after comparison).
    let ours = Impl::Ours(std::env::var("BENCH_ADAPTER_BIN").unwrap_or_else(|_| BIN.to_string()));
    let mut rep = Report::default();
    let mut runs = RunNumbers::default();
    // BENCH_ONLY=<name>: one figure alone (held = 3, frames = 6, limit = 7, start = 8,
    // large = 9, curve = 10).
    let only = std::env::var("BENCH_ONLY").ok();
    if let Some(only) = only.as_deref() {
        match only {
            "frames" => frames_section(&mut rep, &ours, &kernel.url, &root, &mut runs),
            "limit" => kernel_limit(&mut rep, &ours, &root, &mut runs),
            "start" => run_latency(&mut rep, &ours, &kernel, &mut runs),
            "large" => large_messages(&mut rep, &ours, &kernel.url, &root, &mut runs),
            "held" => {
                let _ = held_runs(&mut rep, &ours, &kernel, &root);
            }
            "curve" => figures::curve::curve(&mut rep, &ours, &root),
            other => {
                panic!(
                    "BENCH_ONLY={other}: not a figure (held, frames, limit, start, large, curve)"
                )
            }
        }
        rep.line(format!("\nDuring this section {}.\n", other_cpu(&mark)));
        report::write(&rep, started, &bench_mark);
        let _ = std::fs::remove_dir_all(&root);
        return;
    }

    eprintln!("[bench] 1. throughput");
    let srv = Server::start(&ours, &kernel.url, None, &root)
        .expect("start the adapter")
        .0;
    let flood = throughput(&mut rep, &srv, &kernel.url, &mut runs);
    eprintln!("[bench] 2. latency");
    let lat = latency(&mut rep, &srv, &kernel.url, &mut runs);
    drop(srv);
    end_section(&mut rep, &mut mark);

    eprintln!("[bench] 3. {HOLD_N} concurrent runs");
    let hold = held_runs(&mut rep, &ours, &kernel, &root);
    end_section(&mut rep, &mut mark);

    eprintln!("[bench] 4. start-up");
    let start = startup_figure(&mut rep, &ours, &kernel.url, &root);
    static_binary(&mut rep, &kernel.url, &root);
    end_section(&mut rep, &mut mark);

    eprintln!("[bench] 5. reference");
    let ours_fig = Figures {
        flood: flood.flood,
        cpu_us: flood.cpu_us,
        lat: lat.as_ref().ok().map(|l| (l.p(50), l.p(99))),
        start: start.as_ref().ok().map(|s| (s.median_ms, s.idle_rss_mib)),
        hold: hold.as_ref().ok().map(|h| (h.hwm_mib, h.errors(), h.texts)),
    };
    reference_section(
        &mut rep,
        &kernel,
        &root,
        &ours_fig,
        flood.direct_rate,
        &mut runs,
    );
    rep.line(format!("\nDuring this section {}.\n", other_cpu(&mark)));
    mark = cpu_mark();

    eprintln!("[bench] 6. frame sets");
    frames_section(&mut rep, &ours, &kernel.url, &root, &mut runs);
    end_section(&mut rep, &mut mark);

    eprintln!("[bench] 7. the kernel-read-directly limit");
    kernel_limit(&mut rep, &ours, &root, &mut runs);
    end_section(&mut rep, &mut mark);

    eprintln!("[bench] 8. start and resume latency");
    run_latency(&mut rep, &ours, &kernel, &mut runs);
    end_section(&mut rep, &mut mark);

    eprintln!("[bench] 9. large messages");
    large_messages(&mut rep, &ours, &kernel.url, &root, &mut runs);
    end_section(&mut rep, &mut mark);

    eprintln!("[bench] 10. the cost curve");
    figures::curve::curve(&mut rep, &ours, &root);
    rep.line(format!("\nDuring this section {}.\n", other_cpu(&mark)));

    report::write(&rep, started, &bench_mark);
    drop(kernel);
    let _ = std::fs::remove_dir_all(&root);
}

/// Figure 6 (benches/README.md): ours and, when installed, the reference, on the frame sets.
fn frames_section(
    rep: &mut Report,
    ours: &Impl,
    kernel: &str,
    root: &std::path::Path,
    runs: &mut RunNumbers,
) {
    let srv = Server::start(ours, kernel, None, root)
        .expect("start the adapter")
        .0;
    let reference = server::reference_available()
        .ok()
        .and_then(|path| Server::start(&Impl::Reference(path), kernel, None, root).ok())
        .map(|(s, _)| s);
    let mut servers = vec![("iac-code-agui", &srv)];
    if let Some(r) = &reference {
        servers.push(("reference", r));
    }
    figures::frames::frame_sets(rep, &servers, runs);
}

/// The fake kernel with the bench's own scenarios.
fn start_kernel() -> FakeKernel {
    let kernel = FakeKernel::start();
    figures::frames::register(&kernel);
    kernel.script("bench-latency", latency_script());
    kernel.script(START_SCRIPT, start_script());
    kernel.script(
        "bench-hold",
        vec![
            Step::Status {
                state: "TASK_STATE_WORKING",
                iac: json!({}),
                text: Some("held".into()),
            },
            Step::Hang,
        ],
    );
    kernel
}

/// How much of the machine's CPU went elsewhere during the section; the next one starts now.
fn end_section(rep: &mut Report, mark: &mut CpuMark) {
    rep.line(format!("\nDuring this section {}.\n", other_cpu(mark)));
    *mark = cpu_mark();
}
