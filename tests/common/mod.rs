//! Shared test support: the adapter as a child process, and a small AG-UI client over real HTTP.

#![allow(dead_code)]

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

pub mod raw;

pub const BIN: &str = env!("CARGO_BIN_EXE_iac-code-agui");

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A fresh directory under this test process's own root, `$TMPDIR/agui-it-<pid>/`, which is
/// removed when the process exits (pass or fail); roots left by killed runs (their pid gone) are
/// removed by the next run.
pub fn temp_dir(name: &str) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let d = run_root().join(format!("{name}-{n}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

const ROOT_PREFIX: &str = "agui-it-";

fn run_root() -> &'static Path {
    static ROOT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    ROOT.get_or_init(|| {
        remove_stale_roots();
        let root = std::env::temp_dir().join(format!("{ROOT_PREFIX}{}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        // SAFETY: registers a plain extern "C" function; libtest's main returns (or calls
        // exit) when the tests are done, which runs it.
        unsafe { libc::atexit(remove_run_root) };
        root
    })
}

extern "C" fn remove_run_root() {
    let root = std::env::temp_dir().join(format!("{ROOT_PREFIX}{}", std::process::id()));
    if std::env::var_os("AGUI_KEEP_TEST_DIRS").is_none() {
        let _ = std::fs::remove_dir_all(root);
    }
}

/// `agui-it-<pid>` roots whose process is gone (a killed or crashed earlier run).
fn remove_stale_roots() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in entries.flatten().take(100_000) {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(ROOT_PREFIX) else {
            continue;
        };
        // `agui-it-<pid>`, or the older per-test `agui-it-<name>-<pid>-<port>`.
        let pid = match rest.rsplitn(3, '-').collect::<Vec<_>>()[..] {
            [_port, pid, _name] => pid,
            _ => rest,
        };
        if pid.parse::<u32>().is_ok() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Fault injection that needs privileges: `chattr +i` (CAP_LINUX_IMMUTABLE) or a tmpfs mount
/// (CAP_SYS_ADMIN).
#[derive(Clone, Copy, Debug)]
pub enum Fault {
    Immutable,
    Tmpfs,
}

/// Whether `fault` can be injected here (probed once). Where it cannot, the test is skipped with
/// one line on stderr, except under `CI=true`, where it must run: there it fails loudly.
pub fn can_inject(fault: Fault, test: &str) -> bool {
    static PROBES: std::sync::OnceLock<(bool, bool)> = std::sync::OnceLock::new();
    let (immutable, tmpfs) = *PROBES.get_or_init(|| (probe_immutable(), probe_tmpfs()));
    let ok = match fault {
        Fault::Immutable => immutable,
        Fault::Tmpfs => tmpfs,
    };
    if ok || std::env::var("CI").is_ok_and(|v| v == "true") {
        return true;
    }
    // Straight to stderr, not `eprintln!`: libtest captures the macros' output of passing tests,
    // and this line must be seen.
    let _ = writeln!(
        std::io::stderr(),
        "skipped {test}: it needs root for {} (set CI=true to make it required)",
        match fault {
            Fault::Immutable => "`chattr +i` (CAP_LINUX_IMMUTABLE)",
            Fault::Tmpfs => "a tmpfs mount (CAP_SYS_ADMIN)",
        }
    );
    false
}

fn probe_immutable() -> bool {
    let dir = temp_dir("probe-chattr");
    let run = |flag: &str| {
        Command::new("chattr")
            .arg(flag)
            .arg(&dir)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let ok = run("+i");
    run("-i");
    ok
}

fn probe_tmpfs() -> bool {
    let dir = temp_dir("probe-tmpfs");
    let ok = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
        .arg(&dir)
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        let _ = Command::new("umount").arg(&dir).status();
    }
    ok
}

/// The adapter under test, killed when dropped.
pub struct Adapter {
    child: Option<Child>,
    pub url: String,
    pub state_dir: PathBuf,
    pub workspace: PathBuf,
    pub log: PathBuf,
    args: Vec<String>,
    envs: Vec<(String, String)>,
    port: u16,
    nofile: Option<u64>,
    auth_token: Option<String>,
}

#[derive(Default)]
pub struct Options {
    pub args: Vec<String>,
    pub envs: Vec<(String, String)>,
    pub state_dir: Option<PathBuf>,
    /// `RLIMIT_NOFILE` (soft and hard) for the adapter process, to provoke EMFILE on `accept`.
    pub nofile: Option<u64>,
    /// `IAC_CODE_AGUI_AUTH_TOKEN` for the adapter (`spawn` clears any inherited value).
    pub auth_token: Option<String>,
}

impl Adapter {
    pub fn start(kernel_url: &str) -> Adapter {
        Adapter::start_with(kernel_url, Options::default())
    }

    /// `GET /extensions/iac-code/v1/threads/{thread}?{query}`: status and JSON body.
    pub fn thread_lookup(&self, thread: &str, query: &str) -> (u16, Value) {
        let url = format!(
            "{}/extensions/iac-code/v1/threads/{thread}?{query}",
            self.url
        );
        let resp = agent().get(url).call().unwrap();
        let status = resp.status().as_u16();
        let text = resp.into_body().read_to_string().unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// An adapter with extra command-line `args`.
    pub fn start_args(kernel_url: &str, args: &[&str]) -> Adapter {
        let args = args.iter().map(|s| s.to_string()).collect();
        Adapter::start_with(
            kernel_url,
            Options {
                args,
                ..Default::default()
            },
        )
    }

    pub fn start_with(kernel_url: &str, opts: Options) -> Adapter {
        let root = temp_dir("adapter");
        let workspace = root.join("workspace");
        std::fs::create_dir_all(&workspace).unwrap();
        let state_dir = opts.state_dir.clone().unwrap_or_else(|| root.join("state"));
        let mut args = vec![
            "--a2a-url".to_string(),
            kernel_url.to_string(),
            "--state-dir".into(),
            state_dir.to_string_lossy().into_owned(),
            "--heartbeat-interval".into(),
            "0.2".into(),
        ];
        args.extend(opts.args);
        let mut envs = vec![(
            "IAC_CODE_AGUI_ALLOWED_CWDS".to_string(),
            root.to_string_lossy().into_owned(),
        )];
        envs.extend(opts.envs);
        let mut a = Adapter {
            child: None,
            url: String::new(),
            state_dir,
            workspace,
            log: root.join("adapter.log"),
            args,
            envs,
            port: 0, // chosen at the first start

            nofile: opts.nofile,
            auth_token: opts.auth_token,
        };
        a.spawn();
        a
    }

    fn command(&self) -> Command {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let mut cmd = Command::new(BIN);
        cmd.args(&self.args)
            .arg("--debug")
            .envs(self.envs.iter().cloned())
            .env_remove("IAC_CODE_AGUI_AUTH_TOKEN")
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        if let Some(token) = &self.auth_token {
            cmd.env("IAC_CODE_AGUI_AUTH_TOKEN", token);
        }
        if let Some(n) = self.nofile {
            raw::limit_nofile(&mut cmd, n);
        }
        cmd
    }

    fn spawn(&mut self) {
        // A port from `free_port()` can be taken by another test's adapter before ours binds it,
        // and /health would then answer from the wrong process: each start waits for its own
        // "listening on" line, and a first start that lost the race tries a fresh port.
        let first_start = self.port == 0;
        for _ in 0..5 {
            if first_start {
                self.port = free_port();
            }
            let logged_before = std::fs::metadata(&self.log).map_or(0, |m| m.len() as usize);
            let mut cmd = self.command();
            cmd.args(["--port", &self.port.to_string()]);
            self.child = Some(cmd.spawn().expect("spawn adapter"));
            match self.wait_listening(logged_before) {
                Listening::Yes => {
                    self.url = format!("http://127.0.0.1:{}", self.port);
                    wait_health(&self.url);
                    return;
                }
                Listening::PortTaken if first_start => continue,
                Listening::PortTaken => panic!("port {} was taken during a restart", self.port),
            }
        }
        panic!("five free ports in a row were taken before the adapter bound them");
    }

    /// Waits for this start's "listening on" line, written after byte `from` of the log.
    fn wait_listening(&mut self, from: usize) -> Listening {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            let log = std::fs::read(&self.log).unwrap_or_default();
            let new = String::from_utf8_lossy(log.get(from..).unwrap_or_default()).into_owned();
            if new.contains("listening on http://") {
                return Listening::Yes;
            }
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                if new.contains("in use") {
                    return Listening::PortTaken;
                }
                panic!("the adapter exited ({status}) before listening:\n{new}");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("the adapter did not log \"listening on\" within 10 s");
    }

    /// SIGKILL: no clean-up runs.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Sends `sig` (e.g. `libc::SIGTERM`) to the adapter.
    pub fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.pid() as libc::pid_t, sig) };
    }

    /// Waits up to `limit` for the adapter to exit; `None` if it is still running.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Ok(Some(status)) = self.child.as_mut()?.try_wait() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Whether the adapter process still runs (not exited, not a zombie).
    pub fn alive(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn cwd(&self) -> String {
        self.workspace.to_string_lossy().into_owned()
    }

    /// A minimal normal request on `thread`/`run` with text `text`.
    pub fn request(&self, thread: &str, run: &str, text: &str) -> Value {
        json!({
            "threadId": thread, "runId": run, "state": {}, "tools": [], "context": [],
            "messages": [{"id": format!("msg-{run}"), "role": "user", "content": text}],
            "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "invocation-1", "cwd": self.cwd()}}
        })
    }

    pub fn resume_request(&self, thread: &str, run: &str, resume: Value) -> Value {
        json!({
            "threadId": thread, "runId": run, "state": {}, "tools": [], "context": [], "messages": [],
            "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "invocation-1", "cwd": self.cwd()}},
            "resume": resume
        })
    }

    pub fn run(&self, body: &Value) -> RunResult {
        post_run(&self.url, body, &[])
    }

    pub fn state_file(&self, thread: &str) -> Value {
        let path = self
            .state_dir
            .join("threads")
            .join(format!("{thread}.json"));
        serde_json::from_slice(
            &std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
        )
        .unwrap()
    }
}

impl Drop for Adapter {
    fn drop(&mut self) {
        self.kill();
    }
}

pub fn wait_health(url: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if agent()
            .get(format!("{url}/health"))
            .call()
            .is_ok_and(|r| r.status() == 200)
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("no /health at {url}");
}

pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into()
}

/// For streams held longer than `agent`'s 30 s overall limit: bounded per read instead.
pub fn long_agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_per_read(Some(Duration::from_secs(30)))
        .build()
        .into()
}

/// What a POST / answered: the HTTP status and either the JSON error or the SSE events.
#[derive(Debug)]
pub struct RunResult {
    pub status: u16,
    pub content_type: String,
    pub json: Value,
    pub events: Vec<Value>,
    pub heartbeats: usize,
}

impl RunResult {
    pub fn types(&self) -> Vec<String> {
        self.events
            .iter()
            .map(|e| e["type"].as_str().unwrap_or("").to_string())
            .collect()
    }

    pub fn last(&self) -> &Value {
        self.events.last().expect("no events")
    }

    pub fn custom(&self, name: &str) -> Vec<&Value> {
        self.events
            .iter()
            .filter(|e| e["type"] == "CUSTOM" && e["name"] == name)
            .collect()
    }

    pub fn session(&self) -> &Value {
        &self.custom("iac-code.session.v1")[0]["value"]
    }

    pub fn error_code(&self) -> &str {
        if self.status != 200 {
            return self.json["error"]["code"].as_str().unwrap_or("");
        }
        let last = self.last();
        assert_eq!(last["type"], "RUN_ERROR", "not an error: {last}");
        last["code"].as_str().unwrap_or("")
    }

    pub fn interrupts(&self) -> Vec<Value> {
        let last = self.last();
        assert_eq!(
            last["outcome"]["type"], "interrupt",
            "not an interrupt: {last}"
        );
        last["outcome"]["interrupts"].as_array().unwrap().clone()
    }

    pub fn text(&self) -> String {
        self.events
            .iter()
            .filter(|e| e["type"] == "TEXT_MESSAGE_CONTENT")
            .map(|e| e["delta"].as_str().unwrap_or(""))
            .collect()
    }
}

pub fn post_run(url: &str, body: &Value, headers: &[(&str, &str)]) -> RunResult {
    let mut req = agent()
        .post(format!("{url}/"))
        .header("Content-Type", "application/json")
        .header("Accept", "text/event-stream");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send(serde_json::to_vec(body).unwrap()).expect("POST /");
    read_result(resp)
}

pub fn read_result(resp: ureq::http::Response<ureq::Body>) -> RunResult {
    let status = resp.status().as_u16();
    let content_type = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let mut body = resp.into_body();
    if !content_type.starts_with("text/event-stream") {
        let text = body.read_to_string().unwrap_or_default();
        return RunResult {
            status,
            content_type,
            json: serde_json::from_str(&text).unwrap_or(Value::Null),
            events: vec![],
            heartbeats: 0,
        };
    }
    let mut events = vec![];
    let mut raw = vec![];
    let mut heartbeats = 0;
    let reader = BufReader::new(body.into_reader());
    for line in reader.lines() {
        let line = line.expect("SSE read");
        if let Some(data) = line.strip_prefix("data: ") {
            events.push(serde_json::from_str(data).expect("event JSON"));
            raw.push(data.to_string());
        } else if line == ": heartbeat" {
            heartbeats += 1;
        }
    }
    capture(&raw);
    RunResult {
        status,
        content_type,
        json: Value::Null,
        events,
        heartbeats,
    }
}

/// With `AGUI_CAPTURE_DIR` set, every stream a test reads is appended there as JSON lines
/// (`{stream, index, raw}`), for the Python `ag-ui-protocol` validation in `tests/run-all.sh`.
fn capture(raw: &[String]) {
    let Some(dir) = std::env::var_os("AGUI_CAPTURE_DIR") else {
        return;
    };
    let _ = std::fs::create_dir_all(&dir);
    let label = std::thread::current().name().unwrap_or("main").to_string();
    let mut lines = String::new();
    for (index, r) in raw.iter().enumerate() {
        lines.push_str(&json!({"stream": label, "index": index, "raw": r}).to_string());
        lines.push('\n');
    }
    let path = Path::new(&dir).join(format!("{}.jsonl", std::process::id()));
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = std::io::Write::write_all(&mut f, lines.as_bytes());
    }
}

/// Posts a run and returns the raw body reader after the head, for disconnect tests.
pub fn open_stream(url: &str, body: &Value) -> impl Read {
    let resp = agent()
        .post(format!("{url}/"))
        .header("Content-Type", "application/json")
        .header("Accept", "text/event-stream")
        .send(serde_json::to_vec(body).unwrap())
        .unwrap();
    assert_eq!(resp.status(), 200);
    resp.into_body().into_reader()
}

pub fn post_json(url: &str, body: &Value) -> (u16, Value) {
    let resp = agent()
        .post(url)
        .header("Content-Type", "application/json")
        .send(serde_json::to_vec(body).unwrap())
        .unwrap();
    let status = resp.status().as_u16();
    let text = resp.into_body().read_to_string().unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// Every START has its END (by id) and nothing is open at the run's end.
pub fn assert_balanced(events: &[Value]) {
    if let Err(e) = iac_code_agui::testing::check_spans(events) {
        panic!("{e}");
    }
}

/// Waits until `f` holds, up to `secs`.
pub fn eventually(secs: u64, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Every file under `dir`, concatenated.
pub fn read_tree(dir: &Path) -> String {
    let mut all = String::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                all.push_str(&read_tree(&p));
            } else {
                all.push_str(&String::from_utf8_lossy(
                    &std::fs::read(&p).unwrap_or_default(),
                ));
            }
        }
    }
    all
}

/// Makes `dir` refuse new files even for root (`chattr +i`), until the guard is dropped. Needs
/// CAP_LINUX_IMMUTABLE: tests check [`can_inject`] first.
pub struct Immutable(PathBuf);

impl Immutable {
    pub fn new(dir: &Path) -> Immutable {
        std::fs::create_dir_all(dir).unwrap();
        let ok = Command::new("chattr")
            .arg("+i")
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            ok,
            "chattr +i {} failed: these fault-injection tests need root with CAP_LINUX_IMMUTABLE",
            dir.display()
        );
        Immutable(dir.to_path_buf())
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        let _ = Command::new("chattr").arg("-i").arg(&self.0).status();
    }
}

/// A tiny deterministic PRNG (xorshift64*), so randomized tests reproduce.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// The `data:` payloads of a recorded SSE stream, as JSON.
pub fn data_lines(text: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// AG-UI events with what legitimately differs between two runs removed: timestamps, thread/run
/// ids, the ids inside the session event, and `task` (the A2A task id) inside message ids, so two
/// streams compare event by event.
pub fn without_ids(events: &[Value], task: &str) -> Vec<Value> {
    events
        .iter()
        .map(|e| {
            let mut e = e.clone();
            let o = e.as_object_mut().unwrap();
            o.remove("timestamp");
            for k in ["threadId", "runId"] {
                if o.contains_key(k) {
                    o.insert(k.into(), json!("$id"));
                }
            }
            if let Some(v) = o.get_mut("value").and_then(Value::as_object_mut) {
                for k in [
                    "threadId",
                    "aguiRunId",
                    "executionId",
                    "contextId",
                    "taskId",
                    "sessionId",
                ] {
                    if v.contains_key(k) {
                        v.insert(k.into(), json!("$id"));
                    }
                }
            }
            if let Some(Value::String(m)) = o.get("messageId") {
                if !task.is_empty() {
                    let m = m.replace(task, "$TASK");
                    o.insert("messageId".into(), json!(m));
                }
            }
            e
        })
        .collect()
}

enum Listening {
    Yes,
    PortTaken,
}
