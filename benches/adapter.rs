//! Performance report for `iac-code-agui` against the in-process fake A2A kernel, with the Python
//! reference adapter (`iac-code agui`) side by side when it is installed.
//!
//! `cargo bench --bench adapter` (harness = false) prints a Markdown report and writes it to
//! `target/bench-report.md`. Targets are reported, never asserted: the bench fails only when the
//! harness itself breaks. See benches/README.md for what each figure means.

use serde_json::json;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fake_kernel::{FakeKernel, Step};

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

// ---- small utilities ---------------------------------------------------------------------

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind 127.0.0.1:0")
        .local_addr()
        .unwrap()
        .port()
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    find(hay, needle).is_some()
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || hay.len() < needle.len() {
        return None;
    }
    let first = needle[0];
    let last = hay.len() - needle.len();
    let mut i = 0;
    while i <= last {
        match hay[i..=last].iter().position(|&b| b == first) {
            None => return None,
            Some(p) => {
                i += p;
                if &hay[i..i + needle.len()] == needle {
                    return Some(i);
                }
                i += 1;
            }
        }
    }
    None
}

/// The decimal number right after `key` in `line`, if any.
fn number_after(line: &[u8], key: &[u8]) -> Option<u64> {
    let at = find(line, key)? + key.len();
    let digits: Vec<u8> = line[at..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .copied()
        .collect();
    if digits.is_empty() {
        return None;
    }
    std::str::from_utf8(&digits).ok()?.parse().ok()
}

/// A numeric field of /proc/<pid>/status (kB for Vm*, a count for Threads).
fn proc_status(pid: u32, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find(|l| l.starts_with(key) && l[key.len()..].starts_with(':'))
        .and_then(|l| l[key.len() + 1..].split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// User + system CPU time of `pid`, in seconds.
fn cpu_secs(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    let rest: Vec<&str> = stat
        .rsplit_once(')')
        .map(|r| r.1)
        .unwrap_or("")
        .split_whitespace()
        .collect();
    // utime and stime are fields 14 and 15; `rest` starts at field 3.
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|&i| rest.get(i)?.parse::<f64>().ok())
        .sum();
    // SAFETY: sysconf has no preconditions.
    ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

fn fd_count(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count() as u64)
        .unwrap_or(0)
}

/// Resident memory of `pid` grouped by mapping kind (anonymous mappings by permission and size, so
/// that thread stacks and malloc arenas show up as groups), largest first.
fn rss_breakdown(pid: u32) -> String {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/smaps")) else {
        return "(no /proc/<pid>/smaps)".into();
    };
    let mut groups: std::collections::HashMap<String, (u64, u64)> = Default::default();
    let mut current = String::new();
    for line in text.lines() {
        let mut parts = line.split_whitespace();
        let first = parts.next().unwrap_or("");
        if first.contains('-') && first.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            let (a, b) = first.split_once('-').unwrap();
            let lo = u64::from_str_radix(a, 16).unwrap_or(0);
            let hi = u64::from_str_radix(b, 16).unwrap_or(0);
            let size = hi.saturating_sub(lo) / 1024;
            let perms = parts.next().unwrap_or("");
            let path = parts.nth(3).unwrap_or("");
            current = if path.starts_with('[') {
                path.to_string()
            } else if !path.is_empty() {
                "file-backed".into()
            } else {
                format!("anon {perms} {size} KiB")
            };
        } else if first == "Rss:" {
            let kb: u64 = parts.next().and_then(|v| v.parse().ok()).unwrap_or(0);
            let e = groups.entry(current.clone()).or_default();
            e.0 += 1;
            e.1 += kb;
        }
    }
    let mut v: Vec<(String, (u64, u64))> = groups.into_iter().filter(|g| g.1 .1 > 0).collect();
    v.sort_by_key(|g| std::cmp::Reverse(g.1 .1));
    v.iter()
        .take(6)
        .map(|(k, (n, kb))| format!("{k} ×{n}: {:.1} MiB", mib(*kb)))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Where the machine's CPU time went since `since`: the share of the 2 cores used by processes
/// other than the bench and its children, and the hypervisor's steal.
#[derive(Clone, Copy)]
struct CpuMark {
    at: Instant,
    busy: f64,
    steal: f64,
    ours: f64,
}

fn cpu_mark() -> CpuMark {
    // SAFETY: sysconf has no preconditions; getrusage fills a local struct.
    let tck = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let f: Vec<f64> = stat
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    let get = |i: usize| f.get(i).copied().unwrap_or(0.0) / tck;
    // user nice system idle iowait irq softirq steal
    let busy = get(0) + get(1) + get(2) + get(5) + get(6);
    let mut ours = 0.0;
    for who in [libc::RUSAGE_SELF, libc::RUSAGE_CHILDREN] {
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        if unsafe { libc::getrusage(who, &mut ru) } == 0 {
            let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
            ours += tv(ru.ru_utime) + tv(ru.ru_stime);
        }
    }
    CpuMark {
        at: Instant::now(),
        busy,
        steal: get(7),
        ours,
    }
}

fn ncpu() -> f64 {
    std::thread::available_parallelism()
        .map(|n| n.get() as f64)
        .unwrap_or(1.0)
}

/// "other processes used X% ..." since `m` (valid when no child of ours is running unreaped).
fn other_cpu(m: &CpuMark) -> String {
    let now = cpu_mark();
    let cap = now.at.duration_since(m.at).as_secs_f64() * ncpu();
    let other = ((now.busy - m.busy) - (now.ours - m.ours)).max(0.0);
    format!(
        "{:.0}% of the machine's CPU went to other processes, {:.0}% to this bench (fake kernel, clients, adapter), {:.0}% was stolen by the hypervisor",
        other / cap * 100.0,
        (now.ours - m.ours) / cap * 100.0,
        (now.steal - m.steal) / cap * 100.0
    )
}

fn mib(kb: u64) -> f64 {
    kb as f64 / 1024.0
}

fn median_f(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    if v.is_empty() {
        return f64::NAN;
    }
    v[v.len() / 2]
}

fn pct(sorted: &[u64], p: usize) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

fn sh(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|e| format!("({cmd}: {e})"))
}

fn uuid(a: u32, b: u64) -> String {
    format!("{a:08x}-0000-4000-8000-{b:012x}")
}

fn raise_fd_limit() {
    // SAFETY: getrlimit/setrlimit on a local struct.
    unsafe {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

// ---- the servers under test --------------------------------------------------------------

#[derive(Clone)]
enum Impl {
    /// Our adapter: the binary path.
    Ours(String),
    /// The Python reference: path of `iac-code`.
    Reference(String),
}

impl Impl {
    fn name(&self) -> &'static str {
        match self {
            Impl::Ours(_) => "iac-code-agui",
            Impl::Reference(_) => "reference (Python)",
        }
    }
}

struct Server {
    child: Option<Child>,
    pid: u32,
    port: u16,
    url: String,
    log: PathBuf,
    cwd: String,
}

impl Server {
    /// Starts `imp` on a free port and waits for the first 200 on /health; returns the server and
    /// the time from exec to that answer.
    fn start(
        imp: &Impl,
        kernel: &str,
        heartbeat: Option<&str>,
        root: &Path,
    ) -> Res<(Server, Duration)> {
        let port = free_port();
        let dir = root.join(format!("srv-{port}"));
        let workspace = dir.join("workspace");
        std::fs::create_dir_all(&workspace).map_err(|e| e.to_string())?;
        let state = dir.join("state");
        let log = dir.join("server.log");
        let out = std::fs::File::create(&log).map_err(|e| e.to_string())?;
        let mut cmd = match imp {
            Impl::Ours(bin) => {
                let mut c = Command::new(bin);
                c.args(["--port", &port.to_string(), "--a2a-url", kernel]);
                c.arg("--state-dir").arg(&state);
                if let Some(hb) = heartbeat {
                    c.args(["--heartbeat-interval", hb]);
                }
                c
            }
            Impl::Reference(bin) => {
                let mut c = Command::new(bin);
                c.args([
                    "agui",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    &port.to_string(),
                    "--a2a-url",
                    kernel,
                ]);
                c.arg("--state-dir").arg(&state);
                c
            }
        };
        cmd.env("IAC_CODE_AGUI_ALLOWED_CWDS", &dir)
            .env_remove("IAC_CODE_AGUI_AUTH_TOKEN")
            .env_remove("IAC_CODE_AGUI_A2A_TOKEN")
            .env_remove("RUST_LOG")
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(out.try_clone().map_err(|e| e.to_string())?)
            .stderr(out);
        let t0 = Instant::now();
        let child = cmd
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", imp.name()))?;
        let pid = child.id();
        let mut srv = Server {
            child: Some(child),
            pid,
            port,
            url: format!("http://127.0.0.1:{port}"),
            log,
            cwd: workspace.to_string_lossy().into_owned(),
        };
        let deadline = t0 + Duration::from_secs(30);
        loop {
            if health_ok(port) {
                return Ok((srv, t0.elapsed()));
            }
            if let Some(Ok(Some(status))) = srv.child.as_mut().map(|c| c.try_wait()) {
                return Err(format!(
                    "{} exited ({status}) before /health: {}",
                    imp.name(),
                    srv.log_tail()
                ));
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "{} gave no /health 200 within 30 s: {}",
                    imp.name(),
                    srv.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_micros(250));
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(5).collect();
        tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
    }

    fn status(&self, key: &str) -> u64 {
        proc_status(self.pid, key).unwrap_or(0)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SIGTERM first (a clean exit), SIGKILL after a bounded grace.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(3);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// One `GET /health` on a fresh connection: did it answer 200?
fn health_ok(port: u16) -> bool {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut head = [0u8; 12];
    s.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.1 200")
}

// ---- HTTP client -------------------------------------------------------------------------

fn agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(timeout))
        .build()
        .into()
}

fn run_body(thread: &str, run: &str, text: &str, cwd: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "threadId": thread, "runId": run, "state": {}, "tools": [], "context": [],
        "messages": [{"id": format!("msg-{run}"), "role": "user", "content": text}],
        "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "invocation-1", "cwd": cwd}}
    }))
    .unwrap()
}

/// The JSON-RPC call the adapter would make, sent straight to the fake kernel.
fn a2a_body(text: &str, n: u64) -> Vec<u8> {
    let ctx = format!("agui-{:040x}", (n as u128) << 64 | now_us() as u128);
    serde_json::to_vec(&json!({
        "jsonrpc": "2.0", "id": format!("bench-{n}"), "method": "SendStreamingMessage",
        "params": {
            "message": {"messageId": format!("bench-msg-{n}"), "role": "ROLE_USER", "contextId": ctx,
                        "parts": [{"text": text}], "metadata": {"iac_code": {"cwd": std::env::temp_dir()}}},
            "configuration": {"acceptedOutputModes": ["text/plain"]}
        }
    }))
    .unwrap()
}

/// POSTs `body` and feeds every line of the streamed answer to `f`.
fn stream_lines(
    url: &str,
    a2a: bool,
    body: Vec<u8>,
    timeout: Duration,
    mut f: impl FnMut(&[u8]),
) -> Res<()> {
    let mut req = agent(timeout)
        .post(format!("{url}/"))
        .header("Content-Type", "application/json")
        .header("Accept", "text/event-stream");
    if a2a {
        req = req.header("A2A-Version", "1.0");
    }
    let resp = req
        .send(&body[..])
        .map_err(|e| format!("POST {url}/: {e}"))?;
    let status = resp.status().as_u16();
    let mut body = resp.into_body();
    if status != 200 {
        let text = body.read_to_string().unwrap_or_default();
        return Err(format!("POST {url}/ answered {status}: {text}"));
    }
    let mut reader = BufReader::with_capacity(64 * 1024, body.into_reader());
    let mut line = Vec::with_capacity(512);
    loop {
        line.clear();
        let n = reader
            .read_until(b'\n', &mut line)
            .map_err(|e| format!("reading the stream from {url}: {e}"))?;
        if n == 0 {
            return Ok(());
        }
        f(&line);
    }
}

// ---- 1. throughput -----------------------------------------------------------------------

#[derive(Clone, Copy)]
struct Flood {
    events: usize,
    secs: f64,
    /// CPU seconds the adapter process used during the run (0 for the direct path).
    cpu: f64,
}

impl Flood {
    fn rate(&self) -> f64 {
        self.events as f64 / self.secs
    }

    fn cpu_us_per_event(&self) -> f64 {
        self.cpu * 1e6 / self.events as f64
    }
}

/// One flood run through an adapter; counts TEXT_MESSAGE_CONTENT events.
fn flood_adapter(srv: &Server, n: usize, run: u64) -> Res<Flood> {
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
fn flood_direct(kernel: &str, n: usize, run: u64) -> Res<Flood> {
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
fn leanest(runs: &[Flood]) -> Flood {
    *runs
        .iter()
        .min_by(|a, b| {
            a.cpu_us_per_event()
                .partial_cmp(&b.cpu_us_per_event())
                .unwrap()
        })
        .unwrap()
}

fn best(runs: &[Flood]) -> Flood {
    *runs
        .iter()
        .max_by(|a, b| a.rate().partial_cmp(&b.rate()).unwrap())
        .unwrap()
}

// ---- 2. latency --------------------------------------------------------------------------

struct Latency {
    samples: Vec<u64>,
    spacing_us: u64,
}

impl Latency {
    fn p(&self, p: usize) -> u64 {
        pct(&self.samples, p)
    }
}

fn latency_script() -> Vec<Step> {
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

fn collect_latency(url: &str, a2a: bool, body: Vec<u8>, key: &[u8], marker: &[u8]) -> Res<Latency> {
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

fn latency_adapter(srv: &Server, run: u64) -> Res<Latency> {
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

fn latency_direct(kernel: &str, run: u64) -> Res<Latency> {
    collect_latency(
        kernel,
        true,
        a2a_body("scenario:bench-latency", run),
        b"\"text\":\"",
        b"\"ROLE_AGENT\"",
    )
}

// ---- 3. concurrent held runs -------------------------------------------------------------

#[derive(Default)]
struct HoldStats {
    clients: usize,
    started: usize,
    ramp: Duration,
    held: Duration,
    non200: usize,
    conn_errors: usize,
    early_end: usize,
    no_run_started: usize,
    run_errors: usize,
    /// Clients that received the scenario's text event (proof that the upstream stream is live).
    texts: usize,
    /// `SendStreamingMessage` calls the fake kernel received for this test.
    upstreams: Option<usize>,
    first_error: Option<String>,
    hb_min: u32,
    hb_median: u32,
    hb_max: u32,
    idle_threads: u64,
    peak_threads: u64,
    peak_rss_mib: f64,
    hwm_mib: f64,
    idle_rss_mib: f64,
    after_threads: u64,
    idle_fds: u64,
    peak_fds: u64,
    after_fds: u64,
    /// Time from closing the clients until the thread count was back to idle.
    threads_down: Option<Duration>,
    /// ... until the open descriptors were back to idle.
    fds_down: Option<Duration>,
    /// ... until the fake kernel had one CancelTask per started run.
    cancels_done: Option<Duration>,
    cancels: Option<usize>,
    breakdown: String,
}

impl HoldStats {
    fn errors(&self) -> usize {
        self.non200 + self.conn_errors + self.early_end + self.no_run_started + self.run_errors
    }
}

struct Shared {
    stop: AtomicBool,
    started: AtomicUsize,
    non200: AtomicUsize,
    conn_errors: AtomicUsize,
    early_end: AtomicUsize,
    run_errors: AtomicUsize,
    texts: AtomicUsize,
    first_error: Mutex<Option<String>>,
    sockets: Mutex<Vec<TcpStream>>,
}

impl Shared {
    fn error(&self, counter: &AtomicUsize, what: String) {
        counter.fetch_add(1, Ordering::SeqCst);
        let mut first = self.first_error.lock().unwrap();
        if first.is_none() {
            *first = Some(what);
        }
    }
}

/// One held SSE client on a raw socket (so that the bench can close it from outside).
fn hold_client(port: u16, body: Vec<u8>, shared: Arc<Shared>, hb: Arc<AtomicU32>) {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let stream = match TcpStream::connect_timeout(&addr, Duration::from_secs(10)) {
        Ok(s) => s,
        Err(e) => return shared.error(&shared.conn_errors, format!("connect: {e}")),
    };
    if let Ok(c) = stream.try_clone() {
        shared.sockets.lock().unwrap().push(c);
    }
    let mut w = &stream;
    let head = format!(
        "POST / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    if let Err(e) = w
        .write_all(head.as_bytes())
        .and_then(|_| w.write_all(&body))
    {
        return shared.error(&shared.conn_errors, format!("send: {e}"));
    }
    let mut r = BufReader::with_capacity(4096, &stream);
    let mut line = Vec::with_capacity(256);
    match r.read_until(b'\n', &mut line) {
        Ok(n) if n > 0 => {
            if !line.starts_with(b"HTTP/1.1 200") {
                let status = String::from_utf8_lossy(&line).trim().to_string();
                return shared.error(&shared.non200, format!("status line: {status}"));
            }
        }
        Ok(_) => return shared.error(&shared.conn_errors, "closed before the status line".into()),
        Err(e) => return shared.error(&shared.conn_errors, format!("status line: {e}")),
    }
    let mut started = false;
    let mut text = false;
    loop {
        line.clear();
        match r.read_until(b'\n', &mut line) {
            Ok(0) => {
                if !shared.stop.load(Ordering::SeqCst) {
                    shared.error(&shared.early_end, "the stream ended during the hold".into());
                }
                return;
            }
            Err(e) => {
                if !shared.stop.load(Ordering::SeqCst) {
                    shared.error(&shared.conn_errors, format!("read: {e}"));
                }
                return;
            }
            Ok(_) => {}
        }
        let l = line.strip_suffix(b"\n").unwrap_or(&line);
        let l = l.strip_suffix(b"\r").unwrap_or(l);
        if l == b": heartbeat" {
            if started && !shared.stop.load(Ordering::SeqCst) {
                hb.fetch_add(1, Ordering::SeqCst);
            }
        } else if l.starts_with(b"data: ") {
            if !started && contains(l, b"\"RUN_STARTED\"") {
                started = true;
                shared.started.fetch_add(1, Ordering::SeqCst);
            } else if !text && contains(l, b"\"TEXT_MESSAGE_CONTENT\"") {
                text = true;
                shared.texts.fetch_add(1, Ordering::SeqCst);
            } else if contains(l, b"\"RUN_ERROR\"") || contains(l, b"\"RUN_FINISHED\"") {
                let ev = String::from_utf8_lossy(l).chars().take(300).collect();
                shared.error(&shared.run_errors, ev);
            }
        }
    }
}

fn hold(srv: &Server, n: usize, kernel: Option<&FakeKernel>, tag: u32) -> Res<HoldStats> {
    let mut st = HoldStats {
        clients: n,
        idle_threads: srv.status("Threads"),
        idle_fds: fd_count(srv.pid),
        idle_rss_mib: mib(srv.status("VmRSS")),
        ..Default::default()
    };
    let cancels_before = kernel.map(|k| k.calls("CancelTask").len());
    let streams_before = kernel.map(|k| k.calls("SendStreamingMessage").len());
    let shared = Arc::new(Shared {
        stop: AtomicBool::new(false),
        started: AtomicUsize::new(0),
        non200: AtomicUsize::new(0),
        conn_errors: AtomicUsize::new(0),
        early_end: AtomicUsize::new(0),
        run_errors: AtomicUsize::new(0),
        texts: AtomicUsize::new(0),
        first_error: Mutex::new(None),
        sockets: Mutex::new(Vec::with_capacity(n)),
    });
    let mut hbs = Vec::with_capacity(n);
    let mut handles = Vec::with_capacity(n);
    let t0 = Instant::now();
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
    while shared.started.load(Ordering::SeqCst) + failed(&shared) < n
        && t0.elapsed() < RAMP_DEADLINE
    {
        sample(&mut st);
        std::thread::sleep(Duration::from_millis(50));
    }
    st.ramp = t0.elapsed();
    let hold_start = Instant::now();
    for hb in &hbs {
        hb.store(0, Ordering::SeqCst);
    }
    while hold_start.elapsed() < HOLD_FOR {
        sample(&mut st);
        std::thread::sleep(Duration::from_millis(250));
    }
    st.held = hold_start.elapsed();
    sample(&mut st);
    st.hwm_mib = mib(srv.status("VmHWM"));
    st.breakdown = rss_breakdown(srv.pid);
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
    // Close every client.
    shared.stop.store(true, Ordering::SeqCst);
    for s in shared.sockets.lock().unwrap().iter() {
        let _ = s.shutdown(Shutdown::Both);
    }
    for h in handles {
        let _ = h.join();
    }
    // Wait (bounded) until the adapter has let go of the runs: threads and descriptors back to
    // idle and, with the fake kernel, one CancelTask per started run.
    let closed = Instant::now();
    let cancels = |k: &FakeKernel| k.calls("CancelTask").len() - cancels_before.unwrap_or(0);
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
    st.non200 = shared.non200.load(Ordering::SeqCst);
    st.conn_errors = shared.conn_errors.load(Ordering::SeqCst);
    st.early_end = shared.early_end.load(Ordering::SeqCst);
    st.run_errors = shared.run_errors.load(Ordering::SeqCst);
    st.no_run_started = n.saturating_sub(st.started + st.non200 + st.conn_errors);
    st.first_error = shared.first_error.lock().unwrap().clone();
    Ok(st)
}

// ---- 4. start-up -------------------------------------------------------------------------

struct Startup {
    n: usize,
    median_ms: f64,
    min_ms: f64,
    max_ms: f64,
    idle_rss_mib: f64,
    threads: u64,
}

fn startup(imp: &Impl, kernel: &str, n: usize, root: &Path) -> Res<Startup> {
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

// ---- the report --------------------------------------------------------------------------

struct Report {
    summary: Vec<[String; 4]>,
    body: String,
}

impl Report {
    fn row(&mut self, what: &str, measured: String, target: &str, met: Option<bool>) {
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

    fn line(&mut self, s: impl AsRef<str>) {
        self.body.push_str(s.as_ref());
        self.body.push('\n');
    }
}

fn ms(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

const HOLD_HEAD: &str = "| adapter | clients | RUN_STARTED | ramp-up | held | peak RSS (VmHWM) | threads idle → peak → after | fds idle → peak → after | heartbeats per client in the hold (min / median / max) | errors | first text event received / upstream streams opened | after closing all clients |\n|---|---|---|---|---|---|---|---|---|---|---|---|";

fn after(d: Option<Duration>) -> String {
    match d {
        Some(d) => format!("{:.1} s", d.as_secs_f64()),
        None => format!("not within {} s", DRAIN_DEADLINE.as_secs()),
    }
}

fn hold_section(rep: &mut Report, who: &str, st: &HoldStats) {
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

fn hold_notes(rep: &mut Report, who: &str, st: &HoldStats) {
    rep.line(format!(
        "- {who}: {:.0} KiB of peak RSS per held run above idle; resident memory at the end of the hold by mapping: {}",
        (st.hwm_mib - st.idle_rss_mib) * 1024.0 / st.clients.max(1) as f64,
        st.breakdown
    ));
    if let Some(e) = &st.first_error {
        rep.line(format!("- {who}: first error: `{}`", e.replace('`', "'")));
    }
}

fn reference_available() -> Result<String, String> {
    let path = Path::new(ROOT).join("target/real-kernel-venv/bin/iac-code");
    if !path.exists() {
        return Err(format!("{} does not exist (the reference is installed there by `pip install iac-code[agui]==0.16.0` into target/real-kernel-venv)", path.display()));
    }
    let out = Command::new(&path)
        .args(["agui", "--help"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", path.display()))?;
    if !out.status.success() {
        return Err(format!(
            "`iac-code agui --help` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        ));
    }
    Ok(path.to_string_lossy().into_owned())
}

fn main() {
    // `cargo bench` passes `--bench`; nothing to parse.
    raise_fd_limit();
    let started = Instant::now();
    let bench_mark = cpu_mark();
    let mut mark = bench_mark;
    let root = std::env::temp_dir().join(format!("agui-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).expect("create the bench directory");

    let kernel = FakeKernel::start();
    kernel.script("bench-latency", latency_script());
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
    let ours = Impl::Ours(BIN.to_string());
    let mut rep = Report {
        summary: vec![],
        body: String::new(),
    };
    let mut run_no = 0u64;
    let mut next = || {
        run_no += 1;
        run_no
    };

    eprintln!("[bench] 1. throughput");
    let srv = Server::start(&ours, &kernel.url, None, &root)
        .expect("start the adapter")
        .0;
    // Warm-up (page cache, allocator, fake-kernel code paths).
    let _ = flood_adapter(&srv, 10_000, next());
    let _ = flood_direct(&kernel.url, 10_000, next());
    let mut via = vec![];
    let mut direct = vec![];
    let mut err1 = None;
    for _ in 0..3 {
        match flood_adapter(&srv, FLOOD_N, next()) {
            Ok(f) => via.push(f),
            Err(e) => err1 = Some(e),
        }
        match flood_direct(&kernel.url, FLOOD_N, next()) {
            Ok(f) => direct.push(f),
            Err(e) => err1 = Some(e),
        }
    }
    let ours_flood = (!via.is_empty()).then(|| best(&via));
    let ours_cpu = (!via.is_empty()).then(|| leanest(&via).cpu_us_per_event());
    let direct_rate = (!direct.is_empty()).then(|| best(&direct).rate());
    rep.line(format!(
        "## 1. Throughput: one run, `flood-{FLOOD_N}` (best of 3)\n"
    ));
    rep.line("| path | events | best wall time | events/s (best) | all runs, events/s | adapter CPU per event (all runs) |\n|---|---|---|---|---|---|");
    for (name, runs) in [
        ("adapter → client", &via),
        ("fake kernel → client", &direct),
    ] {
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
    if let (Some(o), Some(d)) = (ours_flood, direct_rate) {
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
            1e6 / ours_cpu.unwrap_or(f64::NAN)
        ));
    }
    if let Some(e) = &err1 {
        rep.line(format!("\nerror: `{e}`\n"));
    }
    match ours_flood {
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

    eprintln!("[bench] 2. latency");
    // Both paths at once, so that both see the same background load (the two streams are ~5 ms
    // apart and cost little).
    let (lat_via, lat_direct) = {
        let (a, b) = (next(), next());
        let url = kernel.url.clone();
        let direct = std::thread::spawn(move || latency_direct(&url, b));
        let via = latency_adapter(&srv, a);
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
    drop(srv);

    rep.line(format!("\nDuring this section {}.\n", other_cpu(&mark)));
    mark = cpu_mark();
    eprintln!("[bench] 3. {HOLD_N} concurrent runs");
    rep.line(format!(
        "## 3. {HOLD_N} concurrent held runs (one text event, then Hang; each on its own threadId; \
         `--heartbeat-interval 1`; client threads with {} KiB stacks; held {} s)\n",
        CLIENT_STACK / 1024,
        HOLD_FOR.as_secs()
    ));
    rep.line(HOLD_HEAD);
    let ours_hold = Server::start(&ours, &kernel.url, Some("1"), &root)
        .and_then(|(srv, _)| hold(&srv, HOLD_N, Some(&kernel), 3));
    match &ours_hold {
        Ok(st) => {
            hold_section(&mut rep, "iac-code-agui", st);
            rep.line("");
            hold_notes(&mut rep, "iac-code-agui", st);
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

    rep.line(format!("\nDuring this section {}.\n", other_cpu(&mark)));
    mark = cpu_mark();
    eprintln!("[bench] 4. start-up");
    rep.line(format!(
        "## 4. Start-up and footprint (exec → first 200 on /health, median of {STARTS} starts; VmRSS 200 ms later)\n"
    ));
    rep.line(STARTUP_HEAD);
    let ours_start = startup(&ours, &kernel.url, STARTS, &root);
    match &ours_start {
        Ok(s) => {
            startup_line(&mut rep, &format!("`{BIN}` (bench profile)"), s);
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
    let static_bin = Path::new(ROOT).join("target/x86_64-unknown-linux-gnu/release/iac-code-agui");
    if static_bin.exists() {
        let s_imp = Impl::Ours(static_bin.to_string_lossy().into_owned());
        match startup(&s_imp, &kernel.url, STARTS, &root) {
            Ok(s) => startup_line(
                &mut rep,
                &format!("`{}` (static)", static_bin.display()),
                &s,
            ),
            Err(e) => rep.line(format!("| static | failed: {e} |")),
        }
        let size = std::fs::metadata(&static_bin).map(|m| m.len()).unwrap_or(0);
        let file = sh("file", &[&static_bin.to_string_lossy()]);
        let is_static = file.contains("statically linked") || file.contains("static-pie linked");
        rep.line(format!(
            "\nstatic release binary: {} bytes ({:.2} MiB)\n\n`file`: `{}`\n",
            size,
            size as f64 / 1048576.0,
            file
        ));
        rep.row(
            "static binary size",
            format!(
                "{:.2} MiB{}",
                size as f64 / 1048576.0,
                if is_static {
                    ", statically linked"
                } else {
                    ", NOT statically linked"
                }
            ),
            "< 10 MiB, static",
            Some(size < 10 * 1024 * 1024 && is_static),
        );
    } else {
        rep.line(format!(
            "\nstatic binary: {} does not exist (build it with `RUSTFLAGS=\"-C target-feature=+crt-static\" \
             cargo build --release --target x86_64-unknown-linux-gnu`, or use benches/run.sh)\n",
            static_bin.display()
        ));
        rep.row("static binary size", "not built".into(), "< 10 MiB", None);
    }

    rep.line(format!("\nDuring this section {}.\n", other_cpu(&mark)));
    mark = cpu_mark();
    eprintln!("[bench] 5. reference");
    rep.line("## 5. The Python reference adapter (`iac-code agui`) side by side\n");
    let ours_fig = Figures {
        flood: ours_flood,
        cpu_us: ours_cpu,
        lat: lat_via.as_ref().ok().map(|l| (l.p(50), l.p(99))),
        start: ours_start
            .as_ref()
            .ok()
            .map(|s| (s.median_ms, s.idle_rss_mib)),
        hold: ours_hold
            .as_ref()
            .ok()
            .map(|h| (h.hwm_mib, h.errors(), h.texts)),
    };
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
        Ok(path) => reference(
            &mut rep,
            &path,
            &kernel,
            &root,
            &ours_fig,
            direct_rate,
            &mut next,
        ),
    }

    rep.line(format!("\nDuring this section {}.\n", other_cpu(&mark)));
    // Assemble.
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
        other_cpu(&bench_mark)
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
    drop(kernel);
    let _ = std::fs::remove_dir_all(&root);
}

const STARTUP_HEAD: &str =
    "| binary | starts | median | min | max | idle VmRSS | threads |\n|---|---|---|---|---|---|---|";

fn startup_line(rep: &mut Report, who: &str, s: &Startup) {
    rep.line(format!(
        "| {who} | {} | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} MiB | {} |",
        s.n, s.median_ms, s.min_ms, s.max_ms, s.idle_rss_mib, s.threads
    ));
}

/// Our figures, for the side-by-side table.
struct Figures {
    flood: Option<Flood>,
    cpu_us: Option<f64>,
    lat: Option<(u64, u64)>,
    start: Option<(f64, f64)>,
    hold: Option<(f64, usize, usize)>,
}

fn reference(
    rep: &mut Report,
    path: &str,
    kernel: &FakeKernel,
    root: &Path,
    ours: &Figures,
    direct_rate: Option<f64>,
    next: &mut impl FnMut() -> u64,
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
    // 1. Throughput: a probe, then N sized to ~8 s a run, best of up to 3 more within ~45 s.
    let mut ref_flood = None;
    let mut ref_cpu = None;
    if let Some(srv) = &srv {
        match flood_adapter(srv, 20_000, next()) {
            Ok(probe) => {
                let n = ((probe.rate() * 8.0) as usize).clamp(20_000, FLOOD_N) / 1000 * 1000;
                let mut runs = vec![probe];
                let budget = Instant::now();
                for _ in 0..3 {
                    if budget.elapsed() > Duration::from_secs(45) {
                        break;
                    }
                    match flood_adapter(srv, n, next()) {
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
    }
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
    // 2. Latency.
    if let Some(srv) = &srv {
        match latency_adapter(srv, next()) {
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
    drop(srv);
    // 4. Start-up (fewer starts: about a second each).
    let n = 10;
    match startup(&imp, &kernel.url, n, root) {
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
    rep.line(format!(
        "\nHeld runs, reference ({HOLD_N} clients; its heartbeat is fixed at 15 s, so a {} s hold sees at most one):\n",
        HOLD_FOR.as_secs()
    ));
    rep.line(HOLD_HEAD);
    match &ref_hold {
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
