//! The report: a summary table (figure, measured, target, verdict) and the sections' text,
//! assembled into Markdown, printed and written to target/bench-report.md.

use crate::procfs::{other_cpu, CpuMark};
use crate::support::sh;
use crate::{BIN, ROOT};
use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

#[derive(Default)]
pub(crate) struct Report {
    pub(crate) summary: Vec<[String; 4]>,
    pub(crate) body: String,
}

impl Report {
    pub(crate) fn row(&mut self, what: &str, measured: String, target: &str, met: Option<bool>) {
        let verdict = match met {
            Some(true) => "met",
            Some(false) => "**missed**",
            None => "n/a",
        };
        self.summary.push([
            what.to_string(),
            measured,
            target.to_string(),
            verdict.to_string(),
        ]);
    }

    pub(crate) fn line(&mut self, s: impl AsRef<str>) {
        self.body.push_str(s.as_ref());
        self.body.push('\n');
    }
}

/// The whole report; `started` and `bench_mark`: the start of the bench.
pub(crate) fn write(rep: &Report, started: Instant, bench_mark: &CpuMark) {
    let mut out = String::new();
    let _ = writeln!(out, "# iac-code-agui benchmark report\n");
    let _ =
        writeln!(
        out,
        "Machine: {} cores ({}), {} GiB RAM, Linux {}; `ulimit -n` {}. Bench wall time {:.0} s; over the whole run {} (other work on the machine makes every figure noisier; each section says how much there was).\n",
        sh("nproc", &[]),
        sh("sh", &["-c", "lscpu | sed -n 's/^Model name: *//p' | head -1"]),
        sh("sh", &["-c", "awk '/MemTotal/ {printf \"%.0f\", $2/1048576}' /proc/meminfo"]),
        sh("uname", &["-r"]),
        sh("sh", &["-c", "ulimit -n"]),
        started.elapsed().as_secs_f64(),
        other_cpu(bench_mark)
    );
    let _ = writeln!(
        out,
        "Adapter: `{BIN}` (cargo's bench profile = the release profile) against the in-process fake A2A \
         kernel (tests/fake_kernel) on 127.0.0.1; the clients and the fake kernel run in the bench process, \
         on the same 2 cores. Targets are reported, not asserted.\n"
    );
    let _ = writeln!(
        out,
        "## Summary\n\n| figure | measured | target | verdict |\n|---|---|---|---|"
    );
    for [a, b, c, d] in &rep.summary {
        let _ = writeln!(out, "| {a} | {b} | {c} | {d} |");
    }
    out.push('\n');
    out.push_str(&rep.body);
    println!("{out}");
    let path = Path::new(ROOT).join("target/bench-report.md");
    std::fs::write(&path, &out).expect("write target/bench-report.md");
    eprintln!(
        "[bench] report written to {} ({:.0} s)",
        path.display(),
        started.elapsed().as_secs_f64()
    );
}
