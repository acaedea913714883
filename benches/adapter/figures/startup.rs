//! Figure 4: start-up (exec → first 200 on /health) and idle footprint (VmRSS, threads).

use crate::report::Report;
use crate::server::{Impl, Server};
use crate::support::{median_f, mib};
use crate::{Res, BIN, STARTS};
use std::path::Path;
use std::time::Duration;

/// Our adapter, `STARTS` times; returns the figures (for the reference section).
pub(crate) fn startup_figure(
    rep: &mut Report,
    ours: &Impl,
    kernel: &str,
    root: &Path,
) -> Res<Startup> {
    rep.line(format!(
        "## 4. Start-up and footprint (exec → first 200 on /health, median of {STARTS} starts; VmRSS 200 ms later)\n"
    ));
    rep.line(STARTUP_HEAD);
    let ours_start = startup(ours, kernel, STARTS, root);
    match &ours_start {
        Ok(s) => {
            startup_line(rep, &format!("`{BIN}` (bench profile)"), s);
            rep.row(
                "first /health after exec",
                format!("{:.2} ms", s.median_ms),
                "< 50 ms",
                Some(s.median_ms < 50.0),
            );
            rep.row(
                "idle RSS",
                format!("{:.2} MiB", s.idle_rss_mib),
                "< 10 MiB",
                Some(s.idle_rss_mib < 10.0),
            );
        }
        Err(e) => {
            rep.line(format!("| ours | failed: {e} |"));
            rep.row(
                "first /health after exec",
                format!("failed: {e}"),
                "< 50 ms",
                Some(false),
            );
        }
    }
    ours_start
}

pub(crate) struct Startup {
    pub(crate) n: usize,
    pub(crate) median_ms: f64,
    pub(crate) min_ms: f64,
    pub(crate) max_ms: f64,
    pub(crate) idle_rss_mib: f64,
    pub(crate) threads: u64,
}

pub(crate) fn startup(imp: &Impl, kernel: &str, n: usize, root: &Path) -> Res<Startup> {
    let mut times = vec![];
    let mut rss = vec![];
    let mut threads = 0;
    for _ in 0..n {
        let (srv, t) = Server::start(imp, kernel, None, root)?;
        times.push(t.as_secs_f64() * 1000.0);
        std::thread::sleep(Duration::from_millis(200));
        rss.push(mib(srv.status("VmRSS")));
        threads = srv.status("Threads");
        drop(srv);
    }
    Ok(Startup {
        n,
        median_ms: median_f(times.clone()),
        min_ms: times.iter().cloned().fold(f64::INFINITY, f64::min),
        max_ms: times.iter().cloned().fold(0.0, f64::max),
        idle_rss_mib: median_f(rss),
        threads,
    })
}

pub(crate) const STARTUP_HEAD: &str =
    "| binary | starts | median | min | max | idle VmRSS | threads |\n|---|---|---|---|---|---|---|";

pub(crate) fn startup_line(rep: &mut Report, who: &str, s: &Startup) {
    rep.line(format!(
        "| {who} | {} | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} MiB | {} |",
        s.n, s.median_ms, s.min_ms, s.max_ms, s.idle_rss_mib, s.threads
    ));
}
