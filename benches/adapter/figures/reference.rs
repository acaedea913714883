//! Figure 5: the Python reference adapter (`iac-code agui`, from target/real-kernel-venv) measured
//! the same way, side by side with our figures; skipped, and said so, when it is not installed.

use crate::figures::held_runs::{hold, hold_notes, hold_section, HoldStats, HOLD_HEAD};
use crate::figures::latency::latency_adapter;
use crate::figures::startup::startup;
use crate::figures::throughput::{best, flood_adapter, leanest, Flood};
use crate::report::Report;
use crate::server::{reference_available, Impl, Server};
use crate::support::sh;
use crate::{RunNumbers, DRAIN_DEADLINE, FLOOD_N, HOLD_FOR, HOLD_N, STARTS};
use fake_kernel::FakeKernel;
use std::path::Path;
use std::time::{Duration, Instant};

pub(crate) struct Figures {
    pub(crate) flood: Option<Flood>,
    pub(crate) cpu_us: Option<f64>,
    pub(crate) lat: Option<(u64, u64)>,
    pub(crate) start: Option<(f64, f64)>,
    pub(crate) hold: Option<(f64, usize, usize)>,
}

pub(crate) fn reference_section(
    rep: &mut Report,
    kernel: &FakeKernel,
    root: &Path,
    ours: &Figures,
    direct_rate: Option<f64>,
    runs: &mut RunNumbers,
) {
    rep.line("## 5. The Python reference adapter (`iac-code agui`) side by side\n");
    match reference_available() {
        Err(why) => {
            rep.line(format!("Not measured: {why}.\n"));
            rep.row(
                "events/s vs the reference",
                "reference unavailable".into(),
                "≥ 10×",
                None,
            );
            rep.row(
                "idle RSS vs the reference",
                "reference unavailable".into(),
                "≤ 1/10",
                None,
            );
        }
        Ok(path) => reference(rep, &path, kernel, root, ours, direct_rate, runs),
    }
}

/// Throughput, latency and start-up into one comparison table, then held runs with their own.
pub(crate) fn reference(
    rep: &mut Report,
    path: &str,
    kernel: &FakeKernel,
    root: &Path,
    ours: &Figures,
    direct_rate: Option<f64>,
    runs: &mut RunNumbers,
) {
    let imp = Impl::Reference(path.to_string());
    let version = sh(path, &["--version"]);
    rep.line(format!(
        "`{path}` ({}), started as `iac-code agui --host 127.0.0.1 --port P --a2a-url <fake> --state-dir <tmp>` \
         with `IAC_CODE_AGUI_ALLOWED_CWDS`; same fake kernel, same clients.\n",
        version.lines().next().unwrap_or("")
    ));
    let mut table: Vec<String> = vec![];
    let srv = match Server::start(&imp, &kernel.url, None, root) {
        Ok((s, _)) => Some(s),
        Err(e) => {
            rep.line(format!("The reference did not start: `{e}`\n"));
            None
        }
    };
    let (ref_flood, ref_cpu) = match &srv {
        Some(srv) => reference_throughput(rep, srv, direct_rate, runs),
        None => (None, None),
    };
    compare_throughput(rep, &mut table, ours, ref_flood, ref_cpu);
    if let Some(srv) = &srv {
        reference_latency(rep, &mut table, srv, ours, runs);
    }
    drop(srv);
    reference_startup(rep, &mut table, &imp, kernel, root, ours);
    // 3. Held runs, last: the reference's fixed 15 s heartbeat means a 12 s hold sees at most one.
    let ref_hold = Server::start(&imp, &kernel.url, None, root)
        .and_then(|(srv, _)| hold(&srv, HOLD_N, Some(kernel), 5));
    if let Ok(st) = &ref_hold {
        if let Some((o_rss, o_err, o_text)) = ours.hold {
            table.push(format!(
                "| {HOLD_N} held runs: peak RSS; errors; runs whose first text event arrived | {o_rss:.1} MiB; {o_err}; {o_text} | {:.1} MiB; {}; {} | {:.2}× RSS | |",
                st.hwm_mib,
                st.errors(),
                st.texts,
                o_rss / st.hwm_mib
            ));
        }
    }
    rep.line("| figure | iac-code-agui | reference | ours vs reference | target |\n|---|---|---|---|---|");
    for row in &table {
        rep.line(row);
    }
    reference_held_runs(rep, &ref_hold);
}

/// A probe, then N sized to ~8 s a run, best of up to 3 more within ~45 s.
pub(crate) fn reference_throughput(
    rep: &mut Report,
    srv: &Server,
    direct_rate: Option<f64>,
    run_numbers: &mut RunNumbers,
) -> (Option<Flood>, Option<f64>) {
    let mut ref_flood = None;
    let mut ref_cpu = None;
    match flood_adapter(srv, 20_000, run_numbers.next()) {
        Ok(probe) => {
            let n = ((probe.rate() * 8.0) as usize).clamp(20_000, FLOOD_N) / 1000 * 1000;
            let mut runs = vec![probe];
            let budget = Instant::now();
            for _ in 0..3 {
                if budget.elapsed() > Duration::from_secs(45) {
                    break;
                }
                match flood_adapter(srv, n, run_numbers.next()) {
                    Ok(f) => runs.push(f),
                    Err(e) => rep.line(format!("reference flood-{n} failed: `{e}`\n")),
                }
            }
            let b = best(&runs);
            ref_flood = Some(b);
            ref_cpu = Some(leanest(&runs).cpu_us_per_event());
            let all: Vec<String> = runs
                .iter()
                .map(|r| {
                    format!(
                        "{:.0} ({} events, {:.1} µs CPU/event)",
                        r.rate(),
                        r.events,
                        r.cpu_us_per_event()
                    )
                })
                .collect();
            rep.line(format!(
                    "Throughput runs (a flood-20000 probe, then flood-{n}): {}; the direct limit was {:.0} events/s.\n",
                    all.join(", "),
                    direct_rate.unwrap_or(f64::NAN)
                ));
        }
        Err(e) => rep.line(format!("Throughput: failed: `{e}`\n")),
    }
    (ref_flood, ref_cpu)
}

pub(crate) fn compare_throughput(
    rep: &mut Report,
    table: &mut Vec<String>,
    ours: &Figures,
    ref_flood: Option<Flood>,
    ref_cpu: Option<f64>,
) {
    let ratio = |a: f64, b: f64| format!("{:.1}×", a / b);
    table.push(match (ours.flood, ref_flood) {
        (Some(o), Some(r)) => format!(
            "| events/s, one run | {:.0} | {:.0} | {} | ≥ 10× |",
            o.rate(),
            r.rate(),
            ratio(o.rate(), r.rate())
        ),
        _ => "| events/s, one run | | not measured | | ≥ 10× |".into(),
    });
    table.push(match (ours.cpu_us, ref_cpu) {
        (Some(o), Some(r)) => format!(
            "| adapter CPU per event | {o:.2} µs | {r:.1} µs | {} fewer | (capacity, no target) |",
            ratio(r, o)
        ),
        _ => "| adapter CPU per event | | not measured | | |".into(),
    });
    match (ours.flood, ref_flood) {
        (Some(o), Some(r)) => rep.row(
            "events/s vs the reference",
            format!(
                "{:.0} vs {:.0} = {}",
                o.rate(),
                r.rate(),
                ratio(o.rate(), r.rate())
            ),
            "≥ 10×",
            Some(o.rate() >= 10.0 * r.rate()),
        ),
        _ => rep.row(
            "events/s vs the reference",
            "not measured".into(),
            "≥ 10×",
            None,
        ),
    }
    if let (Some(o), Some(r)) = (ours.cpu_us, ref_cpu) {
        rep.row(
            "adapter CPU per event vs the reference",
            format!("{o:.2} µs vs {r:.1} µs = {} less", ratio(r, o)),
            "(no target; capacity view of the 10× goal)",
            None,
        );
    }
}

pub(crate) fn reference_latency(
    rep: &mut Report,
    table: &mut Vec<String>,
    srv: &Server,
    ours: &Figures,
    runs: &mut RunNumbers,
) {
    match latency_adapter(srv, runs.next()) {
        Ok(l) => table.push(format!(
            "| latency fake → client, p50 / p99 (spacing {} µs) | {} | {} / {} µs | | |",
            l.spacing_us,
            ours.lat
                .map(|(a, b)| format!("{a} / {b} µs"))
                .unwrap_or_default(),
            l.p(50),
            l.p(99)
        )),
        Err(e) => rep.line(format!("Latency: failed: `{e}`\n")),
    }
}

/// Fewer starts than ours: about a second each.
pub(crate) fn reference_startup(
    rep: &mut Report,
    table: &mut Vec<String>,
    imp: &Impl,
    kernel: &FakeKernel,
    root: &Path,
    ours: &Figures,
) {
    let n = 10;
    match startup(imp, &kernel.url, n, root) {
        Ok(s) => {
            if let Some((o_ms, o_rss)) = ours.start {
                table.push(format!(
                    "| first /health after exec (median; ours of {STARTS}, reference of {n}) | {o_ms:.2} ms | {:.0} ms | 1/{:.0} | |",
                    s.median_ms,
                    s.median_ms / o_ms
                ));
                table.push(format!(
                    "| idle RSS | {o_rss:.2} MiB | {:.1} MiB | 1/{:.0} | ≤ 1/10 |",
                    s.idle_rss_mib,
                    s.idle_rss_mib / o_rss
                ));
                rep.row(
                    "idle RSS vs the reference",
                    format!(
                        "{o_rss:.2} MiB vs {:.1} MiB = 1/{:.0}",
                        s.idle_rss_mib,
                        s.idle_rss_mib / o_rss
                    ),
                    "≤ 1/10",
                    Some(o_rss * 10.0 <= s.idle_rss_mib),
                );
            }
            rep.line(format!(
                "Start-up: {n} starts, median {:.0} ms (min {:.0}, max {:.0}); idle VmRSS {:.1} MiB; {} threads.\n",
                s.median_ms, s.min_ms, s.max_ms, s.idle_rss_mib, s.threads
            ));
        }
        Err(e) => rep.line(format!("Start-up: failed: `{e}`\n")),
    }
}

/// Held runs last: the reference's fixed 15 s heartbeat means a 12 s hold sees at most one.
pub(crate) fn reference_held_runs(rep: &mut Report, ref_hold: &Result<HoldStats, String>) {
    rep.line(format!(
        "\nHeld runs, reference ({HOLD_N} clients; its heartbeat is fixed at 15 s, so a {} s hold sees at most one):\n",
        HOLD_FOR.as_secs()
    ));
    rep.line(HOLD_HEAD);
    match ref_hold {
        Ok(st) => {
            hold_section(rep, "reference", st);
            rep.line("");
            hold_notes(rep, "reference", st);
            if st.texts < st.started {
                rep.line(format!(
                    "- reference: only {} of its {} started runs got their first text event, and the fake kernel saw {} \
                     `SendStreamingMessage` calls: the rest had `RUN_STARTED` and then waited for an upstream connection \
                     (its A2A client is an `httpx.AsyncClient()` with the default limit of 100 connections). Not counted \
                     as errors by the definition above, but those runs made no progress during the hold.",
                    st.texts,
                    st.started,
                    st.upstreams.map(|u| u.to_string()).unwrap_or_else(|| "?".into())
                ));
            }
            if st.cancels == Some(0) {
                rep.line(format!(
                    "- reference: {} s after its clients closed it had sent no `CancelTask` and still held {} descriptors \
                     (idle {}): the upstream streams of the departed clients stayed open.",
                    DRAIN_DEADLINE.as_secs(),
                    st.after_fds,
                    st.idle_fds
                ));
            }
        }
        Err(e) => rep.line(format!("| reference | failed: {e} |")),
    }
    rep.line("");
}
