//! Figure 2: the latency the adapter adds per event: the fake kernel stamps each text event with
//! `$NOW`, the client computes now − stamp, through the adapter and straight from the fake kernel.

use crate::clients::{a2a_body, run_body, stream_lines};
use crate::report::Report;
use crate::server::Server;
use crate::support::{contains, now_us, number_after, pct, uuid};
use crate::{Res, RunNumbers, LAT_EVENTS};
use fake_kernel::Step;
use serde_json::json;
use std::time::Duration;

/// Both paths at once; returns ours (for the reference section).
pub(crate) fn latency(
    rep: &mut Report,
    srv: &Server,
    kernel: &str,
    runs: &mut RunNumbers,
) -> Res<Latency> {
    // Both paths at once, so that both see the same background load (the two streams are ~5 ms
    // apart and cost little).
    let (lat_via, lat_direct) = {
        let (a, b) = (runs.next(), runs.next());
        let url = kernel.to_string();
        let direct = std::thread::spawn(move || latency_direct(&url, b));
        let via = latency_adapter(srv, a);
        (
            via,
            direct
                .join()
                .unwrap_or_else(|_| Err("latency thread panicked".into())),
        )
    };
    rep.line(format!(
        "## 2. Added latency per event ({LAT_EVENTS} text events whose text is `$NOW`, client computes now − t)\n"
    ));
    rep.line("| path | events | spacing (median) | p50 | p99 | max |\n|---|---|---|---|---|---|");
    for (name, l) in [
        ("adapter → client", &lat_via),
        ("fake kernel → client", &lat_direct),
    ] {
        match l {
            Ok(l) => rep.line(format!(
                "| {name} | {} | {} µs | {} µs | {} µs | {} µs |",
                l.samples.len(),
                l.spacing_us,
                l.p(50),
                l.p(99),
                l.samples.last().unwrap()
            )),
            Err(e) => rep.line(format!("| {name} | failed: {e} | | | | |")),
        }
    }
    if let (Ok(v), Ok(d)) = (&lat_via, &lat_direct) {
        let p50 = v.p(50) as i64 - d.p(50) as i64;
        let p99 = v.p(99) as i64 - d.p(99) as i64;
        rep.line(format!(
            "\nadded by the adapter: p50 **{p50} µs**, p99 **{p99} µs**. (The fake's `Sleep(1)` polls \
             every 5 ms, so the events arrive ~5 ms apart rather than 1 ms.)\n"
        ));
        rep.row(
            "p99 added latency",
            format!("{p99} µs (p50 {p50} µs)"),
            "< 1 ms",
            Some(p99 < 1000),
        );
    } else {
        rep.row("p99 added latency", "failed".into(), "< 1 ms", Some(false));
    }
    lat_via
}

pub(crate) struct Latency {
    pub(crate) samples: Vec<u64>,
    pub(crate) spacing_us: u64,
}

impl Latency {
    pub(crate) fn p(&self, p: usize) -> u64 {
        pct(&self.samples, p)
    }
}

pub(crate) fn latency_script() -> Vec<Step> {
    let mut s = Vec::with_capacity(LAT_EVENTS * 2 + 1);
    for _ in 0..LAT_EVENTS {
        s.push(Step::Status {
            state: "TASK_STATE_WORKING",
            iac: json!({}),
            text: Some("$NOW".into()),
        });
        s.push(Step::Sleep(1));
    }
    s.push(Step::Status {
        state: "TASK_STATE_INPUT_REQUIRED",
        iac: json!({}),
        text: None,
    });
    s
}

pub(crate) fn collect_latency(
    url: &str,
    a2a: bool,
    body: Vec<u8>,
    key: &[u8],
    marker: &[u8],
) -> Res<Latency> {
    let mut samples = Vec::with_capacity(LAT_EVENTS);
    let mut stamps = Vec::with_capacity(LAT_EVENTS);
    stream_lines(url, a2a, body, Duration::from_secs(120), |l| {
        let now = now_us();
        if l.starts_with(b"data: ") && contains(l, marker) {
            if let Some(t) = number_after(l, key) {
                samples.push(now.saturating_sub(t));
                stamps.push(t);
            }
        }
    })?;
    if samples.len() != LAT_EVENTS {
        return Err(format!(
            "latency run: {} of {LAT_EVENTS} timestamped events",
            samples.len()
        ));
    }
    let mut gaps: Vec<u64> = stamps
        .windows(2)
        .map(|w| w[1].saturating_sub(w[0]))
        .collect();
    gaps.sort_unstable();
    samples.sort_unstable();
    Ok(Latency {
        samples,
        spacing_us: pct(&gaps, 50),
    })
}

pub(crate) fn latency_adapter(srv: &Server, run: u64) -> Res<Latency> {
    let body = run_body(
        &uuid(2, run),
        &format!("lat-{run}"),
        "scenario:bench-latency",
        &srv.cwd,
    );
    collect_latency(
        &srv.url,
        false,
        body,
        b"\"delta\":\"",
        b"\"TEXT_MESSAGE_CONTENT\"",
    )
}

pub(crate) fn latency_direct(kernel: &str, run: u64) -> Res<Latency> {
    collect_latency(
        kernel,
        true,
        a2a_body("scenario:bench-latency", run),
        b"\"text\":\"",
        b"\"ROLE_AGENT\"",
    )
}
