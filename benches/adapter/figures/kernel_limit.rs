//! Figure 7: the kernel-read-directly limit through one run (issue 13). The minimal kernel
//! (`mini_kernel`) serves `MINI_FRAMES` real-shaped text frames; the same client reads them
//! straight from it, through our adapter and through the reference, `ROUNDS` rounds alternating.
//! Reported: events/s, our share of the direct limit, our ratio to the reference, and the CPU per
//! event of the adapter (/proc), of the client (its thread's clock: is the client the limit?) and
//! of the kernel (the thread that wrote the stream).

use crate::clients::{a2a_body, run_body, stream_lines};
use crate::mini_kernel::{thread_cpu_us, MiniKernel, Writes, MINI_FRAMES};
use crate::procfs::{cpu_secs, loadavg};
use crate::report::Report;
use crate::server::{reference_available, Impl, Server};
use crate::support::{contains, median_f, uuid};
use crate::{Res, RunNumbers};
use std::path::Path;
use std::time::{Duration, Instant};

const ROUNDS: usize = 3;
const TIMEOUT: Duration = Duration::from_secs(60);
const DIRECT: &str = "kernel → client (direct)";
const OURS: &str = "iac-code-agui";
const REFERENCE: &str = "reference";

/// One run of the stream along one path.
#[derive(Clone, Copy)]
struct Pass {
    events: usize,
    secs: f64,
    /// CPU seconds of the adapter process (0 on the direct path).
    adapter_cpu: f64,
    client_cpu_us: f64,
    kernel_cpu_us: f64,
}

impl Pass {
    fn rate(&self) -> f64 {
        self.events as f64 / self.secs
    }

    fn per_event(&self, us: f64) -> f64 {
        us / self.events as f64
    }
}

/// A route to the client: straight from the kernel, or through one adapter.
struct Route<'a> {
    name: &'static str,
    srv: Option<&'a Server>,
    passes: Vec<Pass>,
    error: Option<String>,
    /// What the kernel was asked at the adapter's start and around one run.
    calls: String,
}

pub(crate) fn kernel_limit(rep: &mut Report, ours: &Impl, root: &Path, runs: &mut RunNumbers) {
    let kernel = MiniKernel::start();
    rep.line(format!(
        "## 7. The kernel-read-directly limit through one run ({MINI_FRAMES} real-shaped text frames from a minimal kernel, {ROUNDS} rounds alternating)\n\nLoad average at the start: {}.\n",
        loadavg()
    ));
    let srv = start(&kernel, ours, root);
    let reference = reference_available()
        .map_err(|e| rep.line(format!("The reference is not measured: {e}.\n")))
        .ok()
        .map(|p| start(&kernel, &Impl::Reference(p), root));
    let mut paths = vec![Route::new(DIRECT, None, String::new())];
    for (name, s) in [(OURS, Some(&srv)), (REFERENCE, reference.as_ref())] {
        match s {
            Some(Ok((srv, at_start))) => {
                // A warm-up run (not counted) that also shows what the adapter calls around a run.
                kernel.reset_calls();
                let _ = pass(&kernel, Some(srv), runs.next());
                let at_start = if at_start.is_empty() {
                    "nothing"
                } else {
                    at_start
                };
                let calls = format!(
                    "at its start: {at_start}; around one run: {}",
                    kernel.calls()
                );
                paths.push(Route::new(name, Some(srv), calls));
            }
            Some(Err(e)) => rep.line(format!("{name} did not start: `{e}`\n")),
            None => {}
        }
    }
    // Both ways a kernel can write: in large writes (the adapter alone is measured), and a
    // write per frame, as the real kernel flushes every event (issue 13's own limit was taken so).
    for writes in [Writes::Chunks, Writes::PerFrame] {
        kernel.set_writes(writes);
        for r in &mut paths {
            r.passes.clear();
            r.error = None;
        }
        let _ = pass(&kernel, None, runs.next());
        rounds(&kernel, &mut paths, runs);
        table(rep, &paths, &kernel, writes);
        ratios(rep, &paths, writes);
    }
}

/// `ROUNDS` rounds, each one run along every route in turn (so that all see the same load).
fn rounds(kernel: &MiniKernel, routes: &mut [Route], runs: &mut RunNumbers) {
    for _ in 0..ROUNDS {
        for r in routes.iter_mut() {
            match pass(kernel, r.srv, runs.next()) {
                Ok(p) => r.passes.push(p),
                Err(e) => r.error = Some(e),
            }
        }
    }
}

impl<'a> Route<'a> {
    fn new(name: &'static str, srv: Option<&'a Server>, calls: String) -> Route<'a> {
        Route {
            name,
            srv,
            passes: vec![],
            error: None,
            calls,
        }
    }

    fn median_rate(&self) -> Option<f64> {
        (!self.passes.is_empty()).then(|| median_f(self.passes.iter().map(Pass::rate).collect()))
    }
}

/// Starts an adapter against the kernel; also returns what it called at its start.
fn start(kernel: &MiniKernel, imp: &Impl, root: &Path) -> Res<(Server, String)> {
    kernel.reset_calls();
    let (srv, _) = Server::start(imp, &kernel.url, None, root)?;
    // Whatever an adapter asks its kernel just after it is up counts as "at its start".
    std::thread::sleep(Duration::from_millis(500));
    Ok((srv, kernel.calls()))
}

/// One run of the stream: through `srv` (counting `TEXT_MESSAGE_CONTENT` events, up to
/// `RUN_FINISHED`), or straight from the kernel (counting agent messages).
fn pass(kernel: &MiniKernel, srv: Option<&Server>, run: u64) -> Res<Pass> {
    let (url, a2a, body, marker) = match srv {
        Some(s) => (
            s.url.as_str(),
            false,
            run_body(&uuid(7, run), &format!("limit-{run}"), "limit", &s.cwd),
            &b"\"TEXT_MESSAGE_CONTENT\""[..],
        ),
        None => (
            kernel.url.as_str(),
            true,
            a2a_body("limit", run),
            &b"\"ROLE_AGENT\""[..],
        ),
    };
    let (mut events, mut finished) = (0, srv.is_none());
    let cpu0 = srv.map(|s| cpu_secs(s.pid)).unwrap_or(0.0);
    let client0 = thread_cpu_us();
    let t0 = Instant::now();
    stream_lines(url, a2a, body, TIMEOUT, |l| {
        if l.starts_with(b"data: ") {
            if contains(l, marker) {
                events += 1;
            } else if contains(l, b"\"RUN_FINISHED\"") {
                finished = contains(l, b"\"success\"");
            }
        }
    })?;
    let secs = t0.elapsed().as_secs_f64();
    let client_cpu_us = (thread_cpu_us() - client0) as f64;
    let adapter_cpu = srv.map(|s| cpu_secs(s.pid)).unwrap_or(0.0) - cpu0;
    if events != MINI_FRAMES || !finished {
        return Err(format!(
            "{events} of {MINI_FRAMES} text events, finished with success: {finished}"
        ));
    }
    Ok(Pass {
        events,
        secs,
        adapter_cpu,
        client_cpu_us,
        kernel_cpu_us: kernel.last_stream_cpu_us(),
    })
}

fn table(rep: &mut Report, paths: &[Route], kernel: &MiniKernel, writes: Writes) {
    let how = match writes {
        Writes::Chunks => "writes 256 KiB at a time",
        Writes::PerFrame => {
            "writes each frame with a write of its own, as a server that flushes every event"
        }
    };
    rep.line(format!(
        "### The kernel {how}\n\nFrames as the real kernel's (benches/frames/text.a2a.sse cycled; {} bytes a frame on average), \
         between the submitted task and `TASK_STATE_COMPLETED`. The client is the ureq line reader of \
         figure 1; its CPU is its thread's clock, the kernel's the writing thread's (it fills the ids into \
         a pre-rendered template and {how}).\n",
        kernel.mean_frame_bytes()
    ));
    rep.line("| path | events/s, median (all runs) | adapter CPU per event, pooled (each run; its share of the wall time) | client CPU per event (share of the wall time) | kernel CPU per frame |\n|---|---|---|---|---|");
    for p in paths {
        let Some(median) = p.median_rate() else {
            rep.line(format!(
                "| {} | failed: `{}` | | | |",
                p.name,
                p.error.clone().unwrap_or_default()
            ));
            continue;
        };
        let all: Vec<String> = p
            .passes
            .iter()
            .map(|r| format!("{:.0}", r.rate()))
            .collect();
        let each = |f: &dyn Fn(&Pass) -> f64| {
            let v: Vec<String> = p.passes.iter().map(|r| format!("{:.2}", f(r))).collect();
            v.join(", ")
        };
        let adapter = if p.srv.is_some() {
            // /proc counts CPU in 10 ms ticks (±0.5 µs an event at 20,000 events): the pooled
            // figure, over every run, is the finer one.
            let cpu: f64 = p.passes.iter().map(|r| r.adapter_cpu).sum();
            let events: usize = p.passes.iter().map(|r| r.events).sum();
            let busy: Vec<String> = p
                .passes
                .iter()
                .map(|r| format!("{:.0}%", r.adapter_cpu / r.secs * 100.0))
                .collect();
            format!(
                "**{:.2} µs** pooled ({} µs; {} of the wall time)",
                cpu * 1e6 / events as f64,
                each(&|r| r.per_event(r.adapter_cpu * 1e6)),
                busy.join(", ")
            )
        } else {
            "–".into()
        };
        let busy: Vec<String> = p
            .passes
            .iter()
            .map(|r| format!("{:.0}%", r.client_cpu_us / 1e6 / r.secs * 100.0))
            .collect();
        rep.line(format!(
            "| {} | **{median:.0}** ({}) | {adapter} | {} µs ({}) | {} µs |",
            p.name,
            all.join(", "),
            each(&|r| r.per_event(r.client_cpu_us)),
            busy.join(", "),
            each(&|r| r.per_event(r.kernel_cpu_us)),
        ));
        if let Some(e) = &p.error {
            rep.line(format!("| {} | a run failed: `{e}` | | | |", p.name));
        }
    }
    rep.line("");
    for p in paths.iter().filter(|p| p.srv.is_some()) {
        rep.line(format!("- What {} asked the kernel: {}.", p.name, p.calls));
    }
}

/// Ours against the direct limit and against the reference, round by round and by medians.
fn ratios(rep: &mut Report, paths: &[Route], writes: Writes) {
    let kernel = match writes {
        Writes::Chunks => "the kernel's writes 256 KiB",
        Writes::PerFrame => "a kernel write per frame",
    };
    let of = |name: &str| paths.iter().find(|p| p.name == name);
    let (Some(direct), Some(ours)) = (of(DIRECT), of(OURS)) else {
        return;
    };
    let per_round = |a: &Route, b: &Route, f: &dyn Fn(f64, f64) -> String| {
        let v: Vec<String> = a
            .passes
            .iter()
            .zip(&b.passes)
            .map(|(x, y)| f(x.rate(), y.rate()))
            .collect();
        v.join(", ")
    };
    if let (Some(o), Some(d)) = (ours.median_rate(), direct.median_rate()) {
        let share = o / d * 100.0;
        rep.line(format!(
            "\nThrough our adapter: **{share:.0}%** of the direct limit (medians; by round: {}).",
            per_round(ours, direct, &|a, b| format!("{:.0}%", a / b * 100.0))
        ));
        rep.row(
            &format!("events/s through one run vs the kernel read directly (real-shaped frames, {kernel})"),
            format!("{o:.0} vs {d:.0} = {share:.0}%"),
            "≥ 70% (issue 13)",
            Some(share >= 70.0),
        );
    }
    let Some(reference) = of(REFERENCE) else {
        rep.row(
            &format!("events/s vs the reference (real-shaped frames, {kernel})"),
            "reference unavailable".into(),
            "≥ 20× (issue 13)",
            None,
        );
        return;
    };
    if let (Some(o), Some(r)) = (ours.median_rate(), reference.median_rate()) {
        rep.line(format!(
            "Against the reference: **{:.1}×** its events/s (medians; by round: {}).\n",
            o / r,
            per_round(ours, reference, &|a, b| format!("{:.1}×", a / b))
        ));
        rep.row(
            &format!("events/s vs the reference (real-shaped frames, {kernel})"),
            format!("{o:.0} vs {r:.0} = {:.1}×", o / r),
            "≥ 20× (issue 13)",
            Some(o >= 20.0 * r),
        );
    }
}
