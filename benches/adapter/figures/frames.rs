//! Figure 6: adapter CPU per upstream frame on the real kernel's frame shapes (benches/frames/:
//! normal-turn text, tool calls, reasoning, pipeline envelopes), ours and the reference's in the
//! same run, each set streamed by the fake kernel as one run of `FRAMES_PER_SET` frames.

use crate::clients::run_body;
use crate::procfs::cpu_secs;
use crate::report::Report;
use crate::server::Server;
use crate::support::{contains, uuid};
use crate::{Res, RunNumbers, ROOT};
use fake_kernel::{FakeKernel, Step};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

pub(crate) const SETS: [&str; 4] = ["text", "tool", "reasoning", "pipeline"];
const FRAMES_PER_SET: usize = 20_000;
const TIMEOUT: Duration = Duration::from_secs(120);
/// The captured ids the frame files carry; the fake kernel fills in each run's own.
const IDS: [(&str, &str); 3] = [
    ("07195cb1-be1b-4aa4-93c0-53feadfa81e7", "$TASK"),
    ("agui-58633450475f377504ca56b46b5a293d95591ee7", "$CTX"),
    ("9d08fcfb-85c7-4bb8-9ec3-024ec4a1b37d", "$SESSION"),
];

/// Registers one script per frame set (`bench-frames-<set>`): the set's cycle repeated, then the
/// task completes.
pub(crate) fn register(kernel: &FakeKernel) {
    for set in SETS {
        let cycle = std::fs::read_to_string(format!("{ROOT}/benches/frames/{set}.a2a.sse"))
            .expect("frame set");
        let frames: Vec<&str> = cycle
            .split("\n\n")
            .filter_map(|f| f.strip_prefix("data: "))
            .collect();
        let mut steps = Vec::with_capacity(FRAMES_PER_SET + 1);
        let mut seq = 0;
        for n in 1.. {
            for f in &frames {
                if steps.len() == FRAMES_PER_SET {
                    break;
                }
                seq += 1;
                let mut f = f
                    .replace("$N", &n.to_string())
                    .replace("$SEQ", &seq.to_string());
                for (id, placeholder) in IDS {
                    f = f.replace(id, placeholder);
                }
                let v: Value = serde_json::from_str(&f).expect("a JSON frame");
                steps.push(Step::Item(v["result"].clone()));
            }
            if steps.len() == FRAMES_PER_SET {
                break;
            }
        }
        steps.push(Step::Status {
            state: "TASK_STATE_COMPLETED",
            iac: json!({}),
            text: None,
        });
        kernel.script(&format!("bench-frames-{set}"), steps);
    }
}

#[derive(Clone, Copy)]
pub(crate) struct SetRun {
    pub(crate) events: usize,
    pub(crate) secs: f64,
    pub(crate) cpu: f64,
}

impl SetRun {
    pub(crate) fn cpu_us_per_frame(&self) -> f64 {
        self.cpu * 1e6 / FRAMES_PER_SET as f64
    }
}

/// One run of the set through `srv`: the events it delivered, its wall time, the server's CPU.
pub(crate) fn run_set(srv: &Server, set: &str, run: u64) -> Res<SetRun> {
    let body = run_body(
        &uuid(6, run),
        &format!("frames-{run}"),
        &format!("scenario:bench-frames-{set}"),
        &srv.cwd,
    );
    let (mut events, mut finished) = (0, false);
    let cpu0 = cpu_secs(srv.pid);
    let t0 = Instant::now();
    crate::clients::stream_lines(&srv.url, false, body, TIMEOUT, |l| {
        if l.starts_with(b"data: ") {
            events += 1;
            finished |= contains(l, b"\"RUN_FINISHED\"");
        }
    })?;
    let secs = t0.elapsed().as_secs_f64();
    let cpu = cpu_secs(srv.pid) - cpu0;
    if !finished {
        return Err(format!("{set}: no RUN_FINISHED after {events} events"));
    }
    Ok(SetRun { events, secs, cpu })
}

/// Three runs of each set through each server (ours first), alternating; the median CPU per frame.
pub(crate) fn frame_sets(rep: &mut Report, servers: &[(&str, &Server)], runs: &mut RunNumbers) {
    rep.line(format!(
        "## 6. Adapter CPU per frame on the real kernel's frame shapes ({FRAMES_PER_SET} frames a run, median of 3)\n"
    ));
    rep.line("| frame set | adapter | events | wall time | adapter CPU per frame (all runs) |\n|---|---|---|---|---|");
    let mut medians: Vec<(String, &str, f64)> = vec![];
    for set in SETS {
        for (name, srv) in servers {
            let mut all = vec![];
            for _ in 0..3 {
                match run_set(srv, set, runs.next()) {
                    Ok(r) => all.push(r),
                    Err(e) => rep.line(format!("| {set} | {name} | error: `{e}` | | |")),
                }
            }
            if all.is_empty() {
                continue;
            }
            let mut cpu: Vec<f64> = all.iter().map(SetRun::cpu_us_per_frame).collect();
            cpu.sort_by(f64::total_cmp);
            let median = cpu[cpu.len() / 2];
            let r = all[0];
            let shown: Vec<String> = cpu.iter().map(|c| format!("{c:.2}")).collect();
            rep.line(format!(
                "| {set} | {name} | {} | {:.2} s | **{median:.2} µs** ({}) |",
                r.events,
                r.secs,
                shown.join(", ")
            ));
            medians.push((set.to_string(), name, median));
        }
    }
    for set in SETS {
        let of = |who: &str| {
            medians
                .iter()
                .find(|(s, n, _)| s == set && *n == who)
                .map(|m| m.2)
        };
        if let (Some(o), Some(r)) = (of("iac-code-agui"), of("reference")) {
            rep.line(format!(
                "\n{set}: the reference uses **{:.1}×** our CPU per frame.",
                r / o
            ));
        }
    }
    rep.line("");
}
