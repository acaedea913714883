//! Figure 1: events per second through one run (`flood-N`), through the adapter and straight from
//! the fake kernel (the limit of the set-up), and the adapter's CPU time per event.

use crate::clients::{a2a_body, run_body, stream_lines};
use crate::procfs::cpu_secs;
use crate::report::Report;
use crate::server::Server;
use crate::support::{contains, uuid};
use crate::{Res, RunNumbers, FLOOD_N, FLOOD_TIMEOUT};
use std::time::Instant;

/// What the later sections need from this one.
pub(crate) struct Throughput {
    /// Our best run.
    pub(crate) flood: Option<Flood>,
    /// Our leanest run's adapter CPU per event, in µs.
    pub(crate) cpu_us: Option<f64>,
    /// The best direct rate (fake kernel → client), events/s.
    pub(crate) direct_rate: Option<f64>,
}

/// Best of 3 after a warm-up, both paths alternating.
pub(crate) fn throughput(
    rep: &mut Report,
    srv: &Server,
    kernel: &str,
    runs: &mut RunNumbers,
) -> Throughput {
    // Warm-up (page cache, allocator, fake-kernel code paths).
    let _ = flood_adapter(srv, 10_000, runs.next());
    let _ = flood_direct(kernel, 10_000, runs.next());
    let mut via = vec![];
    let mut direct = vec![];
    let mut err1 = None;
    for _ in 0..3 {
        match flood_adapter(srv, FLOOD_N, runs.next()) {
            Ok(f) => via.push(f),
            Err(e) => err1 = Some(e),
        }
        match flood_direct(kernel, FLOOD_N, runs.next()) {
            Ok(f) => direct.push(f),
            Err(e) => err1 = Some(e),
        }
    }
    let ours = Throughput {
        flood: (!via.is_empty()).then(|| best(&via)),
        cpu_us: (!via.is_empty()).then(|| leanest(&via).cpu_us_per_event()),
        direct_rate: (!direct.is_empty()).then(|| best(&direct).rate()),
    };
    rep.line(format!(
        "## 1. Throughput: one run, `flood-{FLOOD_N}` (best of 3)\n"
    ));
    table(rep, &via, &direct);
    if let (Some(o), Some(d)) = (ours.flood, ours.direct_rate) {
        ratio_note(rep, o, d, ours.cpu_us);
    }
    if let Some(e) = &err1 {
        rep.line(format!("\nerror: `{e}`\n"));
    }
    match ours.flood {
        Some(f) => rep.row(
            "events/s through one run",
            format!("{:.0}", f.rate()),
            "≥ 50,000",
            Some(f.rate() >= 50_000.0),
        ),
        None => rep.row(
            "events/s through one run",
            format!("failed: {}", err1.clone().unwrap_or_default()),
            "≥ 50,000",
            Some(false),
        ),
    }
    ours
}

pub(crate) fn table(rep: &mut Report, via: &[Flood], direct: &[Flood]) {
    rep.line("| path | events | best wall time | events/s (best) | all runs, events/s | adapter CPU per event (all runs) |\n|---|---|---|---|---|---|");
    for (name, runs) in [("adapter → client", via), ("fake kernel → client", direct)] {
        if runs.is_empty() {
            rep.line(format!("| {name} | – | – | failed | | |"));
            continue;
        }
        let b = best(runs);
        let all: Vec<String> = runs.iter().map(|r| format!("{:.0}", r.rate())).collect();
        let cpu: Vec<String> = runs
            .iter()
            .map(|r| format!("{:.2} µs", r.cpu_us_per_event()))
            .collect();
        rep.line(format!(
            "| {name} | {} | {:.3} s | {:.0} | {} | {} |",
            b.events,
            b.secs,
            b.rate(),
            all.join(", "),
            if b.cpu > 0.0 {
                cpu.join(", ")
            } else {
                "–".into()
            }
        ));
    }
}

/// How the adapter compares with the direct path, and its capacity per CPU-second.
pub(crate) fn ratio_note(rep: &mut Report, o: Flood, d: f64, cpu_us: Option<f64>) {
    rep.line(format!(
            "\nadapter / direct = **{:.2}**: {}. The fake kernel, the adapter and the client share the 2 cores. \
             The adapter used {:.2} CPU-s for {} events ({:.0}% of one core over the run) = a capacity of \
             ~{:.0} events per adapter CPU-second.\n",
            o.rate() / d,
            if d > 1.5 * o.rate() {
                "the fake kernel streams much faster than the adapter relays, so the adapter is what bounds this set-up"
            } else {
                "the fake kernel is close to the limit of this set-up, so the adapter's figure is bounded by it"
            },
            o.cpu,
            o.events,
            o.cpu / o.secs * 100.0,
            1e6 / cpu_us.unwrap_or(f64::NAN)
        ));
}

#[derive(Clone, Copy)]
pub(crate) struct Flood {
    pub(crate) events: usize,
    pub(crate) secs: f64,
    /// CPU seconds the adapter process used during the run (0 for the direct path).
    pub(crate) cpu: f64,
}

impl Flood {
    pub(crate) fn rate(&self) -> f64 {
        self.events as f64 / self.secs
    }

    pub(crate) fn cpu_us_per_event(&self) -> f64 {
        self.cpu * 1e6 / self.events as f64
    }
}

/// One flood run through an adapter; counts TEXT_MESSAGE_CONTENT events.
pub(crate) fn flood_adapter(srv: &Server, n: usize, run: u64) -> Res<Flood> {
    let body = run_body(
        &uuid(1, run),
        &format!("flood-{run}"),
        &format!("scenario:flood-{n}"),
        &srv.cwd,
    );
    let mut events = 0;
    let mut finished = false;
    let cpu0 = cpu_secs(srv.pid);
    let t0 = Instant::now();
    stream_lines(&srv.url, false, body, FLOOD_TIMEOUT, |l| {
        if l.starts_with(b"data: ") {
            if contains(l, b"\"TEXT_MESSAGE_CONTENT\"") {
                events += 1;
            } else if contains(l, b"\"RUN_FINISHED\"") || contains(l, b"\"RUN_ERROR\"") {
                finished = true;
            }
        }
    })?;
    let secs = t0.elapsed().as_secs_f64();
    let cpu = cpu_secs(srv.pid) - cpu0;
    if events != n || !finished {
        return Err(format!(
            "flood-{n}: received {events} text events, finished: {finished}"
        ));
    }
    Ok(Flood { events, secs, cpu })
}

/// The same stream read straight from the fake kernel: the limit of the set-up.
pub(crate) fn flood_direct(kernel: &str, n: usize, run: u64) -> Res<Flood> {
    let mut events = 0;
    let t0 = Instant::now();
    stream_lines(
        kernel,
        true,
        a2a_body(&format!("scenario:flood-{n}"), run),
        FLOOD_TIMEOUT,
        |l| {
            if l.starts_with(b"data: ") && contains(l, b"\"ROLE_AGENT\"") {
                events += 1;
            }
        },
    )?;
    let secs = t0.elapsed().as_secs_f64();
    if events != n {
        return Err(format!("direct flood-{n}: received {events} text events"));
    }
    Ok(Flood {
        events,
        secs,
        cpu: 0.0,
    })
}

/// The run with the lowest adapter CPU time per event.
pub(crate) fn leanest(runs: &[Flood]) -> Flood {
    *runs
        .iter()
        .min_by(|a, b| {
            a.cpu_us_per_event()
                .partial_cmp(&b.cpu_us_per_event())
                .unwrap()
        })
        .unwrap()
}

pub(crate) fn best(runs: &[Flood]) -> Flood {
    *runs
        .iter()
        .max_by(|a, b| a.rate().partial_cmp(&b.rate()).unwrap())
        .unwrap()
}
