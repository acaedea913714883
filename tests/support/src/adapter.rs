//! The adapter under test as a child process: started on a free port with its own state
//! directory and workspace, restarted or killed on demand, killed when dropped.

use crate::client::{agent, post_json, post_run, post_subscribe, read_result, RunResult};
use crate::dirs::temp_dir;
use crate::wait::eventually;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// The adapter binary Cargo built beside the running test or bench: `target/<profile>/`, the
/// parent of the `deps/` folder that holds the running executable. `IAC_CODE_AGUI_BIN` names
/// another one.
pub fn adapter_bin() -> &'static Path {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        let bin = match std::env::var_os("IAC_CODE_AGUI_BIN") {
            Some(p) => PathBuf::from(p),
            None => {
                let exe = std::env::current_exe().expect("the running executable's path");
                let profile = exe
                    .parent()
                    .and_then(Path::parent)
                    .expect("target/<profile>");
                profile.join("iac-code-agui")
            }
        };
        assert!(
            bin.is_file(),
            "no adapter binary at {} (run through `cargo test` or `cargo bench`, which build it)",
            bin.display()
        );
        bin
    })
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
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

enum Listening {
    Yes,
    PortTaken,
}

impl Adapter {
    pub fn start(kernel_url: &str) -> Adapter {
        Adapter::start_with(kernel_url, Options::default())
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
        let mut cmd = Command::new(adapter_bin());
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
            crate::procfs::limit_nofile(&mut cmd, n);
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

    /// A thread waiting on the permission interrupt of the recorded flow (the fake kernel's
    /// `scenario:permission`): the run, and its interrupt.
    pub fn interrupted(&self, thread: &str) -> (RunResult, Value) {
        let r = self.run(&self.request(thread, "run-1", "scenario:permission"));
        let interrupt = r.interrupts()[0].clone();
        (r, interrupt)
    }

    pub fn run(&self, body: &Value) -> RunResult {
        post_run(&self.url, body, &[])
    }

    /// Runs a plain turn on `thread` and checks that it ends in success.
    pub fn assert_turn_succeeds(&self, thread: &str, run: &str) {
        let r = self.run(&self.request(thread, run, "hi"));
        assert_eq!(r.last()["outcome"]["type"], "success", "{:?}", r.last());
    }

    /// A join of `execution` with `body` (the subscribe route), read to its end.
    pub fn subscribe(&self, execution: &str, body: &Value) -> RunResult {
        read_result(post_subscribe(&self.url, execution, body, None))
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

    /// `…/executions/{execution}/cancel`, the cancel extension's URL.
    pub fn cancel_url(&self, execution: &str) -> String {
        format!(
            "{}/extensions/iac-code/v1/executions/{execution}/cancel",
            self.url
        )
    }

    /// Cancels `execution` of `thread` (invocation `invocation-1`): status and JSON body.
    pub fn cancel(&self, execution: &str, thread: &str) -> (u16, Value) {
        let body = json!({"threadId": thread, "rosInvocationId": "invocation-1"});
        post_json(&self.cancel_url(execution), &body)
    }

    /// Waits (up to 10 s) until the thread's state file records a task id; the state then.
    pub fn wait_task(&self, thread: &str) -> Value {
        let path = self.state_dir.join(format!("threads/{thread}.json"));
        assert!(
            eventually(10, || path.exists()
                && self.state_file(thread)["execution"]["taskId"].is_string()),
            "no task id recorded for {thread}"
        );
        self.state_file(thread)
    }

    /// Starts a run on `thread` that hangs upstream (the fake kernel's `scenario:hang`; its
    /// client keeps reading in the background); the thread's state once the task is known.
    pub fn hanging_run(&self, thread: &str) -> Value {
        let (url, body) = (
            self.url.clone(),
            self.request(thread, "r1", "scenario:hang"),
        );
        std::thread::spawn(move || {
            let _ = agent()
                .post(format!("{url}/"))
                .header("Content-Type", "application/json")
                .send(serde_json::to_vec(&body).unwrap())
                .map(|r| r.into_body().read_to_string());
        });
        self.wait_task(thread)
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
