//! Figure 9 (issue 29): memory under large user messages. 1, 2, 4, 8 and 16 concurrent runs, each
//! with an 11 MiB user message (the body limit is 12 MiB), against the fake kernel, which answers
//! each with a short reply (and, like the A2A SDK, echoes the message in its first task's history,
//! so the adapter also reads it back); then ten rounds of 8. Per round: the adapter's RSS before
//! (`VmRSS`), its peak during the round (`VmHWM`, reset before the round through
//! `/proc/<pid>/clear_refs`), and its RSS 5 s after the last run ended. Bounded: 15 rounds, each
//! run within 60 s, each round's rest 5 s.

use crate::clients::{run_body, stream_lines};
use crate::procfs::{proc_status, rss_breakdown};
use crate::report::Report;
use crate::server::{Impl, Server};
use crate::support::{contains, mib};
use crate::RunNumbers;
use std::path::Path;
use std::time::{Duration, Instant};
use test_support::procfs::reset_hwm;

/// The user message of every run.
pub(crate) const MESSAGE_BYTES: usize = 11 * 1024 * 1024;
const CURVE: [usize; 5] = [1, 2, 4, 8, 16];
const REPEATS: usize = 10;
const REPEAT_AT: usize = 8;
const REST: Duration = Duration::from_secs(5);
const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// One round: RSS before, the peak, RSS 5 s after (kB), the runs that did not succeed, its time.
struct Round {
    n: usize,
    before: u64,
    peak: u64,
    rest: u64,
    failed: usize,
    took: Duration,
}

impl Round {
    /// The peak above `base` (kB), per byte of input in flight.
    fn ratio(&self, base: u64) -> f64 {
        (self.peak.saturating_sub(base) * 1024) as f64 / (self.n * MESSAGE_BYTES) as f64
    }
}

pub(crate) fn large_messages(
    rep: &mut Report,
    ours: &Impl,
    kernel: &str,
    root: &Path,
    runs: &mut RunNumbers,
) {
    let srv = match Server::start(ours, kernel, None, root) {
        Ok((s, _)) => s,
        Err(e) => return rep.line(format!("\n## 9. Large messages\n\nfailed to start: {e}\n")),
    };
    let text = message();
    let start = proc_status(srv.pid, "VmRSS").unwrap_or(0);
    let mut rounds = Vec::new();
    for n in CURVE.into_iter().chain([REPEAT_AT; REPEATS]) {
        eprintln!("[bench] 9. {n} concurrent 11 MiB runs");
        rounds.push(round(&srv, n, &text, runs));
    }
    let breakdown = rss_breakdown(srv.pid);
    write(rep, start, &rounds, &breakdown);
}

/// 11 MiB of plain text (no escapes: the JSON string is as long as the text).
fn message() -> String {
    let line = "The quick brown fox jumps over the lazy dog; a large pasted log line. ";
    line.repeat(MESSAGE_BYTES / line.len() + 1)[..MESSAGE_BYTES].to_string()
}

fn round(srv: &Server, n: usize, text: &str, runs: &mut RunNumbers) -> Round {
    let before = proc_status(srv.pid, "VmRSS").unwrap_or(0);
    reset_hwm(srv.pid);
    let t0 = Instant::now();
    let clients: Vec<_> = (0..n)
        .map(|_| {
            let id = runs.next();
            let body = run_body(&format!("large-{id}"), &format!("r-{id}"), text, &srv.cwd);
            let url = srv.url.clone();
            std::thread::spawn(move || {
                let mut ok = false;
                let r = stream_lines(&url, false, body, RUN_TIMEOUT, |line| {
                    ok |= contains(line, b"\"RUN_FINISHED\"");
                });
                r.is_ok() && ok
            })
        })
        .collect();
    let failed = clients
        .into_iter()
        .map(|c| c.join())
        .filter(|r| !matches!(r, Ok(true)))
        .count();
    let took = t0.elapsed();
    let peak = proc_status(srv.pid, "VmHWM").unwrap_or(0);
    std::thread::sleep(REST);
    let rest = proc_status(srv.pid, "VmRSS").unwrap_or(0);
    Round {
        n,
        before,
        peak,
        rest,
        failed,
        took,
    }
}

fn write(rep: &mut Report, start: u64, rounds: &[Round], breakdown: &str) {
    rep.line(format!(
        "\n## 9. Large messages: concurrent runs of an 11 MiB user message (peak `VmHWM` per round, \
         reset before it; RSS {} s after its last run)\n",
        REST.as_secs()
    ));
    rep.line(format!(
        "RSS at idle after start-up: {:.1} MiB.\n",
        mib(start)
    ));
    rep.line("| round | runs | input in flight | RSS before | peak | (peak − before) ÷ input | (peak − start) ÷ input | RSS 5 s after | after − start | failed | time |");
    rep.line("|---|---|---|---|---|---|---|---|---|---|---|");
    for (i, r) in rounds.iter().enumerate() {
        rep.line(format!(
            "| {} | {} | {} MiB | {:.1} MiB | {:.1} MiB | {:.2}× | {:.2}× | {:.1} MiB | {:+.1} MiB | {} | {:.1} s |",
            i + 1,
            r.n,
            r.n * MESSAGE_BYTES / 1048576,
            mib(r.before),
            mib(r.peak),
            r.ratio(r.before),
            r.ratio(start),
            mib(r.rest),
            mib(r.rest) - mib(start),
            r.failed,
            r.took.as_secs_f64()
        ));
    }
    rep.line(format!(
        "\nRSS by mapping after the last round: {breakdown}\n"
    ));
    let repeats: Vec<&Round> = rounds.iter().filter(|r| r.n == REPEAT_AT).collect();
    // Against the RSS at start-up, not the round's own start: memory kept from earlier rounds
    // counts against the peak.
    let worst_ratio = repeats.iter().map(|r| r.ratio(start)).fold(0.0, f64::max);
    let worst_rest = rounds
        .iter()
        .map(|r| mib(r.rest) - mib(start))
        .fold(f64::MIN, f64::max);
    let failed: usize = rounds.iter().map(|r| r.failed).sum();
    rep.row(
        "8 × 11 MiB messages: (peak − idle at start) ÷ input",
        format!("{worst_ratio:.2}× (worst of {} rounds)", repeats.len()),
        "≤ 2×",
        Some(worst_ratio <= 2.0 && failed == 0),
    );
    rep.row(
        "large messages: RSS 5 s after a round − start",
        format!("{worst_rest:+.1} MiB (worst of {} rounds)", rounds.len()),
        "≤ 20 MiB, no growth",
        Some(worst_rest <= 20.0 && failed == 0),
    );
}
