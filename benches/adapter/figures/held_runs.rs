//! Figure 3: many concurrent runs held open (one text event, then the fake kernel hangs):
//! memory, threads, descriptors and heartbeats during the hold, and how fast the adapter lets go
//! of the runs once the clients close.

use crate::clients::{hold_client, run_body, Shared};
use crate::procfs::{fd_count, rss_breakdown};
use crate::report::Report;
use crate::server::{Impl, Server};
use crate::support::{mib, uuid};
use crate::{Res, CLIENT_STACK, DRAIN_DEADLINE, HOLD_FOR, HOLD_N, RAMP_DEADLINE, SLACK};
use fake_kernel::FakeKernel;
use std::net::Shutdown;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Our adapter with `HOLD_N` held runs; returns the figures (for the reference section).
pub(crate) fn held_runs(
    rep: &mut Report,
    ours: &Impl,
    kernel: &FakeKernel,
    root: &Path,
) -> Res<HoldStats> {
    rep.line(format!(
        "## 3. {HOLD_N} concurrent held runs (one text event, then Hang; each on its own threadId; \
         `--heartbeat-interval 1`; client threads with {} KiB stacks; held {} s)\n",
        CLIENT_STACK / 1024,
        HOLD_FOR.as_secs()
    ));
    rep.line(HOLD_HEAD);
    let ours_hold = Server::start(ours, &kernel.url, Some("1"), root)
        .and_then(|(srv, _)| hold(&srv, HOLD_N, Some(kernel), 3));
    match &ours_hold {
        Ok(st) => {
            hold_section(rep, "iac-code-agui", st);
            rep.line("");
            hold_notes(rep, "iac-code-agui", st);
            rep.line("");
            rep.row(
                &format!("{HOLD_N} held runs"),
                format!(
                    "peak RSS {:.1} MiB, {} errors, {} threads at peak, heartbeats/client {}–{}, {}/{} streams live",
                    st.hwm_mib,
                    st.errors(),
                    st.peak_threads,
                    st.hb_min,
                    st.hb_max,
                    st.texts,
                    st.clients
                ),
                "< 200 MiB, 0 errors",
                Some(st.hwm_mib < 200.0 && st.errors() == 0),
            );
            rep.row(
                "runs released after the clients close",
                format!(
                    "threads {} → {} in {}, fds {} → {}, {} CancelTask",
                    st.peak_threads,
                    st.after_threads,
                    after(st.threads_down),
                    st.peak_fds,
                    st.after_fds,
                    st.cancels.unwrap_or(0)
                ),
                "back to idle, every run cancelled",
                Some(
                    st.threads_down.is_some()
                        && st.fds_down.is_some()
                        && st.cancels.unwrap_or(0) >= st.started,
                ),
            );
        }
        Err(e) => {
            rep.line(format!("| iac-code-agui | failed: {e} |\n"));
            rep.row(
                &format!("{HOLD_N} held runs"),
                format!("failed: {e}"),
                "< 200 MiB, 0 errors",
                Some(false),
            );
        }
    }
    ours_hold
}

#[derive(Default)]
pub(crate) struct HoldStats {
    pub(crate) clients: usize,
    pub(crate) started: usize,
    pub(crate) ramp: Duration,
    pub(crate) held: Duration,
    pub(crate) non200: usize,
    pub(crate) conn_errors: usize,
    pub(crate) early_end: usize,
    pub(crate) no_run_started: usize,
    pub(crate) run_errors: usize,
    /// Clients that received the scenario's text event (proof that the upstream stream is live).
    pub(crate) texts: usize,
    /// `SendStreamingMessage` calls the fake kernel received for this test.
    pub(crate) upstreams: Option<usize>,
    pub(crate) first_error: Option<String>,
    pub(crate) hb_min: u32,
    pub(crate) hb_median: u32,
    pub(crate) hb_max: u32,
    pub(crate) idle_threads: u64,
    pub(crate) peak_threads: u64,
    pub(crate) peak_rss_mib: f64,
    pub(crate) hwm_mib: f64,
    pub(crate) idle_rss_mib: f64,
    pub(crate) after_threads: u64,
    pub(crate) idle_fds: u64,
    pub(crate) peak_fds: u64,
    pub(crate) after_fds: u64,
    /// Time from closing the clients until the thread count was back to idle.
    pub(crate) threads_down: Option<Duration>,
    /// ... until the open descriptors were back to idle.
    pub(crate) fds_down: Option<Duration>,
    /// ... until the fake kernel had one CancelTask per started run.
    pub(crate) cancels_done: Option<Duration>,
    pub(crate) cancels: Option<usize>,
    pub(crate) breakdown: String,
}

impl HoldStats {
    pub(crate) fn errors(&self) -> usize {
        self.non200 + self.conn_errors + self.early_end + self.no_run_started + self.run_errors
    }
}

/// Starts `n` held clients, samples the adapter through the ramp-up and the hold, closes the
/// clients and waits (bounded) until the adapter has let go of the runs.
pub(crate) fn hold(
    srv: &Server,
    n: usize,
    kernel: Option<&FakeKernel>,
    tag: u32,
) -> Res<HoldStats> {
    let mut st = HoldStats {
        clients: n,
        idle_threads: srv.status("Threads"),
        idle_fds: fd_count(srv.pid),
        idle_rss_mib: mib(srv.status("VmRSS")),
        ..Default::default()
    };
    let cancels_before = kernel.map(|k| k.calls("CancelTask").len());
    let streams_before = kernel.map(|k| k.calls("SendStreamingMessage").len());
    let shared = Arc::new(Shared::new(n));
    let t0 = Instant::now();
    let (hbs, handles) = start_clients(srv, n, tag, &shared)?;
    ramp_up_and_hold(srv, &mut st, &shared, &hbs, t0);
    st.started = shared.started.load(Ordering::SeqCst);
    st.texts = shared.texts.load(Ordering::SeqCst);
    if let (Some(k), Some(before)) = (kernel, streams_before) {
        st.upstreams = Some(k.calls("SendStreamingMessage").len() - before);
    }
    let mut counts: Vec<u32> = hbs.iter().map(|h| h.load(Ordering::SeqCst)).collect();
    counts.sort_unstable();
    st.hb_min = *counts.first().unwrap_or(&0);
    st.hb_median = counts.get(counts.len() / 2).copied().unwrap_or(0);
    st.hb_max = *counts.last().unwrap_or(&0);
    close_clients(&shared, handles);
    drain(srv, &mut st, kernel, cancels_before.unwrap_or(0));
    st.non200 = shared.non200.load(Ordering::SeqCst);
    st.conn_errors = shared.conn_errors.load(Ordering::SeqCst);
    st.early_end = shared.early_end.load(Ordering::SeqCst);
    st.run_errors = shared.run_errors.load(Ordering::SeqCst);
    st.no_run_started = n.saturating_sub(st.started + st.non200 + st.conn_errors);
    st.first_error = shared.first_error.lock().unwrap().clone();
    Ok(st)
}

/// Each client's heartbeat count during the hold.
type Heartbeats = Vec<Arc<AtomicU32>>;

/// One client thread per run, each with its own threadId and heartbeat counter.
pub(crate) fn start_clients(
    srv: &Server,
    n: usize,
    tag: u32,
    shared: &Arc<Shared>,
) -> Res<(Heartbeats, Vec<JoinHandle<()>>)> {
    let mut hbs = Vec::with_capacity(n);
    let mut handles = Vec::with_capacity(n);
    for i in 0..n {
        let body = run_body(
            &uuid(tag, i as u64),
            &format!("hold-{i}"),
            "scenario:bench-hold",
            &srv.cwd,
        );
        let hb = Arc::new(AtomicU32::new(0));
        hbs.push(hb.clone());
        let (shared, port) = (shared.clone(), srv.port);
        let h = std::thread::Builder::new()
            .name(format!("client-{i}"))
            .stack_size(CLIENT_STACK)
            .spawn(move || hold_client(port, body, shared, hb))
            .map_err(|e| format!("spawn client thread {i}: {e}"))?;
        handles.push(h);
    }
    Ok((hbs, handles))
}

/// Samples the adapter's peaks until every client started (or failed), then through the hold;
/// heartbeats are counted from the start of the hold. `t0`: when the first client was started.
pub(crate) fn ramp_up_and_hold(
    srv: &Server,
    st: &mut HoldStats,
    shared: &Shared,
    hbs: &[Arc<AtomicU32>],
    t0: Instant,
) {
    let n = st.clients;
    let failed = |s: &Shared| {
        s.non200.load(Ordering::SeqCst)
            + s.conn_errors.load(Ordering::SeqCst)
            + s.early_end.load(Ordering::SeqCst)
    };
    let sample = |st: &mut HoldStats| {
        st.peak_threads = st.peak_threads.max(srv.status("Threads"));
        st.peak_rss_mib = st.peak_rss_mib.max(mib(srv.status("VmRSS")));
        st.peak_fds = st.peak_fds.max(fd_count(srv.pid));
    };
    while shared.started.load(Ordering::SeqCst) + failed(shared) < n && t0.elapsed() < RAMP_DEADLINE
    {
        sample(st);
        std::thread::sleep(Duration::from_millis(50));
    }
    st.ramp = t0.elapsed();
    let hold_start = Instant::now();
    for hb in hbs {
        hb.store(0, Ordering::SeqCst);
    }
    while hold_start.elapsed() < HOLD_FOR {
        sample(st);
        std::thread::sleep(Duration::from_millis(250));
    }
    st.held = hold_start.elapsed();
    sample(st);
    st.hwm_mib = mib(srv.status("VmHWM"));
    st.breakdown = rss_breakdown(srv.pid);
}

pub(crate) fn close_clients(shared: &Shared, handles: Vec<JoinHandle<()>>) {
    shared.stop.store(true, Ordering::SeqCst);
    for s in shared.sockets.lock().unwrap().iter() {
        let _ = s.shutdown(Shutdown::Both);
    }
    for h in handles {
        let _ = h.join();
    }
}

/// Waits (bounded) until the adapter has let go of the runs: threads and descriptors back to
/// idle and, with the fake kernel, one CancelTask per started run.
pub(crate) fn drain(
    srv: &Server,
    st: &mut HoldStats,
    kernel: Option<&FakeKernel>,
    cancels_before: usize,
) {
    let closed = Instant::now();
    let cancels = |k: &FakeKernel| k.calls("CancelTask").len() - cancels_before;
    while closed.elapsed() < DRAIN_DEADLINE {
        if st.threads_down.is_none() && srv.status("Threads") <= st.idle_threads + SLACK {
            st.threads_down = Some(closed.elapsed());
        }
        if st.fds_down.is_none() && fd_count(srv.pid) <= st.idle_fds + SLACK {
            st.fds_down = Some(closed.elapsed());
        }
        if let Some(k) = kernel {
            if st.cancels_done.is_none() && cancels(k) >= st.started {
                st.cancels_done = Some(closed.elapsed());
            }
        }
        if st.threads_down.is_some()
            && st.fds_down.is_some()
            && (kernel.is_none() || st.cancels_done.is_some())
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    st.after_threads = srv.status("Threads");
    st.after_fds = fd_count(srv.pid);
    st.cancels = kernel.map(cancels);
}

pub(crate) fn ms(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

pub(crate) const HOLD_HEAD: &str = "| adapter | clients | RUN_STARTED | ramp-up | held | peak RSS (VmHWM) | threads idle → peak → after | fds idle → peak → after | heartbeats per client in the hold (min / median / max) | errors | first text event received / upstream streams opened | after closing all clients |\n|---|---|---|---|---|---|---|---|---|---|---|---|";

pub(crate) fn after(d: Option<Duration>) -> String {
    match d {
        Some(d) => format!("{:.1} s", d.as_secs_f64()),
        None => format!("not within {} s", DRAIN_DEADLINE.as_secs()),
    }
}

pub(crate) fn hold_section(rep: &mut Report, who: &str, st: &HoldStats) {
    let cancels = match st.cancels {
        Some(c) => format!("; {c} CancelTask (all in {})", after(st.cancels_done)),
        None => String::new(),
    };
    rep.line(format!(
        "| {who} | {} | {}/{} | {} | {} | {:.1} MiB | {} → {} → {} | {} → {} → {} | {} / {} / {} | {} (non-200 {}, connection {}, early end {}, no RUN_STARTED {}, RUN_ERROR/FINISHED {}) | {} / {} | threads idle in {}, fds idle in {}{cancels} |",
        st.clients, st.started, st.clients, ms(st.ramp), ms(st.held), st.hwm_mib,
        st.idle_threads, st.peak_threads, st.after_threads,
        st.idle_fds, st.peak_fds, st.after_fds,
        st.hb_min, st.hb_median, st.hb_max,
        st.errors(), st.non200, st.conn_errors, st.early_end, st.no_run_started, st.run_errors,
        st.texts, st.upstreams.map(|u| u.to_string()).unwrap_or_else(|| "?".into()),
        after(st.threads_down), after(st.fds_down),
    ));
}

pub(crate) fn hold_notes(rep: &mut Report, who: &str, st: &HoldStats) {
    rep.line(format!(
        "- {who}: {:.0} KiB of peak RSS per held run above idle; resident memory at the end of the hold by mapping: {}",
        (st.hwm_mib - st.idle_rss_mib) * 1024.0 / st.clients.max(1) as f64,
        st.breakdown
    ));
    if let Some(e) = &st.first_error {
        rep.line(format!("- {who}: first error: `{}`", e.replace('`', "'")));
    }
}
