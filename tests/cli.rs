//! The command line and the managed kernel: usage errors, loopback-only upstreams, starting,
//! supervising and stopping `iac-code a2a` (here: the fake kernel binary in its place).

use fake_kernel::FakeKernel;
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;
use test_support::*;

fn fake_kernel_bin() -> PathBuf {
    let p = adapter_bin().parent().unwrap().join("examples/fake-kernel");
    assert!(
        p.exists(),
        "build the fake kernel first: cargo build --examples ({})",
        p.display()
    );
    p
}

fn output(args: &[&str]) -> (i32, String) {
    let out = Command::new(adapter_bin()).args(args).output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn help_and_version_exit_zero() {
    let (code, text) = output(&["--help"]);
    assert_eq!(code, 0);
    for flag in [
        "--host",
        "--port",
        "--a2a-url",
        "--state-dir",
        "--idle-shutdown",
        "--debug",
        "--log-stdout",
        "--config",
        "--a2a-command",
    ] {
        assert!(text.contains(flag), "{flag} in help");
    }
    let (code, text) = output(&["--version"]);
    assert_eq!(code, 0);
    assert!(text.starts_with("iac-code-agui "));
}

#[test]
fn unknown_flags_are_usage_errors() {
    let (code, text) = output(&["--frobnicate"]);
    assert_eq!(code, 2);
    assert!(text.contains("unknown option '--frobnicate'") && text.contains("Usage:"));
}

#[test]
fn a_non_loopback_a2a_url_is_refused_at_start_up() {
    let (code, text) = output(&["--a2a-url", "http://10.1.2.3:41242"]);
    assert_eq!(code, 2);
    assert!(text.contains("loopback"), "{text}");
}

/// Starts the adapter with a managed kernel of `command` and waits for it to exit.
fn with_kernel_command(name: &str, command: &str) -> (Option<i32>, String) {
    let state = temp_dir(name);
    let port = free_port().to_string();
    let out = Command::new(adapter_bin())
        .args([
            "--port",
            &port,
            "--state-dir",
            state.to_str().unwrap(),
            "--a2a-command",
            command,
        ])
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_missing_kernel_exits_non_zero_and_says_how_to_install_it() {
    let (code, err) = with_kernel_command("nokernel", "/nonexistent/iac-code a2a");
    assert_eq!(code, Some(1));
    assert!(
        err.contains("pip install \"iac-code[a2a]==0.16.0\""),
        "{err}"
    );
}

#[test]
fn a_kernel_that_dies_at_start_up_is_reported() {
    let (code, err) = with_kernel_command("badkernel", "false");
    assert_eq!(code, Some(1));
    assert!(err.contains("exited"), "{err}");
}

fn kernel_pid(log: &str) -> Option<(u32, u16)> {
    let line = log.lines().find(|l| l.contains("started A2A kernel"))?;
    let pid = line
        .split("(pid ")
        .nth(1)?
        .split(')')
        .next()?
        .parse()
        .ok()?;
    let port = line.split("on port ").nth(1)?.trim().parse().ok()?;
    Some((pid, port))
}

fn alive(pid: u32) -> bool {
    // A zombie still has /proc/<pid>; its state letter is Z.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.split(") ").nth(1).unwrap_or("").starts_with('Z'))
        .unwrap_or(false)
}

fn start_managed(name: &str) -> (std::process::Child, String, PathBuf, String) {
    start_managed_with(name, &[])
}

fn start_managed_with(
    name: &str,
    extra: &[&str],
) -> (std::process::Child, String, PathBuf, String) {
    start_managed_env(name, extra, &[])
}

fn start_managed_env(
    name: &str,
    extra: &[&str],
    envs: &[(&str, &str)],
) -> (std::process::Child, String, PathBuf, String) {
    let root = temp_dir(name);
    // No LLM settings anywhere: the start-up warning must say so.
    let config_dir = root.join("config");
    let log = root.join("log");
    let port = free_port();
    let child = Command::new(adapter_bin())
        .args([
            "--port",
            &port.to_string(),
            "--state-dir",
            root.join("state").to_str().unwrap(),
        ])
        .args(["--a2a-command", fake_kernel_bin().to_str().unwrap()])
        .args(extra)
        .env("IAC_CODE_AGUI_ALLOWED_CWDS", root.to_str().unwrap())
        .env("IAC_CODE_CONFIG_DIR", &config_dir)
        .env_remove("IAC_CODE_API_KEY")
        .envs(envs.iter().copied())
        .stderr(std::fs::File::create(&log).unwrap())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}");
    wait_health(&url);
    (child, url, log, root.to_string_lossy().into_owned())
}

#[test]
fn the_managed_kernel_serves_runs_and_stops_with_the_adapter() {
    let (mut child, url, log, cwd) = start_managed("managed");
    let body = serde_json::json!({"threadId": "t", "runId": "r", "state": {}, "tools": [], "context": [],
        "messages": [{"id": "m", "role": "user", "content": "hi"}],
        "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "i", "cwd": cwd}}});
    let r = post_run(&url, &body, &[]);
    assert_eq!(r.last()["outcome"]["type"], "success");
    let (pid, _) =
        kernel_pid(&std::fs::read_to_string(&log).unwrap()).expect("kernel start logged");
    assert!(alive(pid));
    unsafe { libc_kill(child.id() as i32, 15) };
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    assert!(eventually(10, || !alive(pid)), "kernel {pid} left running");
}

/// A process's environment as it started (what `/proc/<pid>/environ` holds).
fn environ(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/environ"))
        .unwrap()
        .split(|b| *b == 0)
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .collect()
}

/// The adapter runs without glibc's per-thread caches (executed again with the tunable, added to
/// the caller's), and the kernel it starts gets the caller's `GLIBC_TUNABLES` back, unchanged.
#[test]
fn the_adapter_runs_without_thread_caches_and_its_kernel_keeps_the_callers_tunables() {
    let (mut child, _url, log, _) = start_managed_env(
        "tunables",
        &[],
        &[("GLIBC_TUNABLES", "glibc.malloc.mxfast=64")],
    );
    // Executed again, marked with the caller's value (glibc's loader rewrites the tunables
    // variable itself as it reads it, so the mark is what shows the second start).
    let ours = environ(child.id());
    assert!(
        ours.contains(&"IAC_CODE_AGUI_MALLOC_TUNED==glibc.malloc.mxfast=64".to_string()),
        "{ours:?}"
    );
    let (pid, _) =
        kernel_pid(&std::fs::read_to_string(&log).unwrap()).expect("kernel start logged");
    let kernel = environ(pid);
    assert!(
        kernel.contains(&"GLIBC_TUNABLES=glibc.malloc.mxfast=64".to_string()),
        "{kernel:?}"
    );
    assert!(!kernel.iter().any(|v| v.starts_with("IAC_CODE_AGUI_MALLOC")));
    unsafe { libc_kill(child.id() as i32, 15) };
    let _ = child.wait();
}

#[test]
fn a_sigkilled_adapter_leaves_no_orphaned_kernel() {
    let (mut child, _url, log, _) = start_managed("orphan");
    let (pid, _) = kernel_pid(&std::fs::read_to_string(&log).unwrap()).unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(eventually(10, || !alive(pid)), "kernel {pid} orphaned");
}

#[test]
fn a_crashed_kernel_is_restarted() {
    let (mut child, url, log, cwd) = start_managed("restart");
    let (pid, _) = kernel_pid(&std::fs::read_to_string(&log).unwrap()).unwrap();
    unsafe { libc_kill(pid as i32, 9) };
    assert!(eventually(15, || std::fs::read_to_string(&log)
        .unwrap()
        .matches("started A2A kernel")
        .count()
        == 2));
    std::thread::sleep(Duration::from_millis(200));
    let body = serde_json::json!({"threadId": "t2", "runId": "r", "state": {}, "tools": [], "context": [],
        "messages": [{"id": "m", "role": "user", "content": "hi"}],
        "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "i", "cwd": cwd}}});
    assert_eq!(
        post_run(&url, &body, &[]).last()["outcome"]["type"],
        "success"
    );
    let (_, text) = metrics(&url, None);
    assert_eq!(sample(&text, "iac_code_agui_kernel_restarts_total"), 1.0);
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn a_managed_start_logs_the_kernel_and_warns_about_missing_llm_settings() {
    let (mut child, _url, log, _) = start_managed("startlog");
    let text = std::fs::read_to_string(&log).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let kernel = text
        .lines()
        .find(|l| l.contains("A2A kernel: managed `"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(kernel.contains("on 127.0.0.1:"), "{kernel}");
    let warn = text
        .lines()
        .find(|l| l.contains("no LLM configuration"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(warn.contains("WARN"), "{warn}");
    for var in [
        "IAC_CODE_API_KEY",
        "IAC_CODE_PROVIDER",
        "IAC_CODE_MODEL",
        "settings.yml",
    ] {
        assert!(warn.contains(var), "{var} in {warn}");
    }
}

#[test]
fn json_logs_stay_json_with_a_managed_kernel_whose_output_is_relogged() {
    let (mut child, _url, log, _) = start_managed_with("jsonkernel", &["--log-format", "json"]);
    let read = || std::fs::read_to_string(&log).unwrap();
    // The kernel's lines come through a thread of their own: wait for its first.
    assert!(eventually(5, || read().contains("\"target\":\"kernel\"")));
    let text = read();
    let _ = child.kill();
    let _ = child.wait();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(
        lines.iter().any(|l| l["target"] == "kernel"
            && l["message"].as_str().unwrap_or("").contains("listening on")),
        "{text}"
    );
}

#[test]
fn start_up_logs_the_listen_address_kernel_roots_and_state_dir() {
    let k = FakeKernel::start();
    let a = Adapter::start(&k.url);
    // The listen line comes after the listener already answers /health.
    eventually(5, || a.logs().contains("listening on"));
    let logs = a.logs();
    let roots = format!(
        "allowed workspace roots: {} (from IAC_CODE_AGUI_ALLOWED_CWDS)",
        a.workspace.parent().unwrap().display()
    );
    for line in [
        format!("listening on http://127.0.0.1:{}", a.port()),
        format!("A2A kernel: external at {}/", k.url.trim_end_matches('/')),
        roots,
        format!("state dir: {}", a.state_dir.display()),
    ] {
        assert_eq!(
            logs.lines()
                .filter(|l| l.contains(" INFO ") && l.contains(&line))
                .count(),
            1,
            "{line} in\n{logs}"
        );
    }
    assert!(
        !logs.contains("no LLM configuration"),
        "only for a managed kernel"
    );
}

#[test]
fn yaml_auth_token_protects_the_endpoint_and_metrics() {
    // The kernel refuses calls without the YAML a2a-token.
    let k = FakeKernel::with_token("up-secret");
    let dir = temp_dir("yaml-token");
    let file = dir.join("agui.yaml");
    std::fs::write(
        &file,
        "auth-token: yaml-secret-1\na2a-token: up-secret\ndebug: true\n",
    )
    .unwrap();
    let a = Adapter::start_with(
        &k.url,
        Options {
            args: vec!["--config".into(), file.to_string_lossy().into_owned()],
            ..Default::default()
        },
    );
    let body = a.request("t-yaml", "r1", "hi");
    let refused = post_run(&a.url, &body, &[("Authorization", "Bearer wrong-secret-2")]);
    assert_eq!(refused.status, 401);
    let ok = post_run(&a.url, &body, &[("Authorization", "Bearer yaml-secret-1")]);
    assert_eq!(ok.last()["type"], "RUN_FINISHED");
    assert_eq!(metrics(&a.url, None).0, 401);
    let (status, text) = metrics(&a.url, Some("yaml-secret-1"));
    assert_eq!(status, 200);
    assert!(
        text.contains("iac_code_agui_runs_total{outcome=\"success\"} 1"),
        "{text}"
    );
    let sent = k.calls("SendStreamingMessage");
    assert_eq!(sent[0]["headers"]["authorization"], "Bearer up-secret");
}

#[test]
fn a_rejected_request_is_one_info_line_without_secrets() {
    let k = FakeKernel::start();
    let a = Adapter::start_with(
        &k.url,
        Options {
            auth_token: Some("the-real-token".into()),
            ..Default::default()
        },
    );
    let body = a.request("t-rej", "r1", "hi");
    let url = format!("{}/?key=query-secret-3", a.url);
    let r = agent()
        .post(&url)
        .header("Content-Type", "application/json")
        .header("Authorization", "Bearer presented-secret-4")
        .send(serde_json::to_vec(&body).unwrap())
        .unwrap();
    assert_eq!(r.status(), 401);
    assert!(eventually(5, || a.logs().contains("rejected POST")));
    let logs = a.logs();
    let lines: Vec<&str> = logs.lines().filter(|l| l.contains("rejected ")).collect();
    assert_eq!(lines.len(), 1, "{logs}");
    assert!(
        lines[0].contains(" INFO ") && lines[0].contains("rejected POST / -> 401 "),
        "{}",
        lines[0]
    );
    for secret in ["presented-secret-4", "the-real-token", "query-secret-3"] {
        assert!(!logs.contains(secret), "{secret} logged:\n{logs}");
    }
}

/// `GET /metrics` with an optional bearer token: status and body.
fn metrics(url: &str, token: Option<&str>) -> (u16, String) {
    let mut req = agent().get(format!("{url}/metrics"));
    if let Some(t) = token {
        req = req.header("Authorization", format!("Bearer {t}"));
    }
    let resp = req.call().unwrap();
    let status = resp.status().as_u16();
    (
        status,
        resp.into_body().read_to_string().unwrap_or_default(),
    )
}

/// The value of one sample line (`name{labels} value`) of an exposition.
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("{series} in\n{text}"))
}

#[test]
fn metrics_count_runs_events_errors_and_latencies_after_runs() {
    let k = FakeKernel::start();
    let a = Adapter::start(&k.url);
    assert_eq!(
        a.run(&a.request("t-m1", "r1", "hi")).last()["type"],
        "RUN_FINISHED"
    );
    let failed = a.run(&a.request("t-m2", "r1", "scenario:die"));
    let code = failed.error_code().to_string();
    let (status, text) = metrics(&a.url, None);
    assert_eq!(status, 200);
    assert_eq!(
        sample(&text, "iac_code_agui_runs_total{outcome=\"success\"}"),
        1.0
    );
    assert_eq!(
        sample(&text, "iac_code_agui_runs_total{outcome=\"error\"}"),
        1.0
    );
    let series = format!("iac_code_agui_run_errors_total{{code=\"{code}\"}}");
    assert_eq!(sample(&text, &series), 1.0);
    assert!(
        sample(&text, "iac_code_agui_events_sent_total") >= 6.0,
        "{text}"
    );
    assert_eq!(sample(&text, "iac_code_agui_active_runs"), 0.0);
    assert!(
        sample(&text, "iac_code_agui_open_connections") >= 1.0,
        "this request's own"
    );
    assert!(sample(&text, "iac_code_agui_upstream_request_seconds_count") >= 2.0);
    assert!(sample(&text, "iac_code_agui_state_write_seconds_count") >= 2.0);
    assert_eq!(sample(&text, "iac_code_agui_kernel_restarts_total"), 0.0);
    assert!(
        sample(&text, "iac_code_agui_heap_in_use_bytes") > 0.0,
        "{text}"
    );
    assert!(text.contains("\niac_code_agui_heap_free_bytes "), "{text}");
    // A refusal is counted by status and code.
    let (s, _) = post_json(&format!("{}/nowhere", a.url), &serde_json::json!({}));
    assert_eq!(s, 404);
    let (_, text) = metrics(&a.url, None);
    assert!(
        text.contains("iac_code_agui_http_rejected_total{status=\"404\""),
        "{text}"
    );
}

/// Found by the chaos soak: glibc keeps what a burst freed in its arenas, so the resident size
/// at rest stepped up with each larger burst. Once no run has been active for 2 s the free pages
/// go back to the system: once per rest, not before the first run, again after the next one.
#[test]
fn the_allocator_gives_back_a_bursts_free_memory_once_per_rest() {
    let k = FakeKernel::start();
    let a = Adapter::start(&k.url);
    let trims = || a.logs().matches("at rest: allocator trimmed").count();
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(trims(), 0, "a trim before any run: {}", a.logs());
    a.assert_turn_succeeds("t-rest", "r1");
    assert!(
        eventually(10, || trims() == 1),
        "no trim at rest: {}",
        a.logs()
    );
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(trims(), 1, "trimmed again without a run: {}", a.logs());
    a.assert_turn_succeeds("t-rest", "r2");
    assert!(
        eventually(10, || trims() == 2),
        "no trim after the next run"
    );
}

#[test]
fn json_logs_are_one_object_a_line_with_the_run_ids_as_fields() {
    let k = FakeKernel::start();
    let a = Adapter::start_args(&k.url, &["--log-format", "json"]);
    let r = a.run(&a.request("t-json", "r-json", "hi"));
    let execution = r.session()["executionId"].as_str().unwrap().to_string();
    assert!(eventually(5, || a.logs().contains("r-json")));
    let lines: Vec<Value> = a
        .logs()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(lines
        .iter()
        .all(|l| l["ts"].is_string() && l["level"].is_string()));
    let with_ids = lines
        .iter()
        .find(|l| l["runId"] == "r-json" && l["executionId"] == execution.as_str())
        .unwrap_or_else(|| panic!("no line with the run's ids: {lines:?}"));
    assert_eq!(with_ids["threadId"], "t-json");
    assert!(lines.iter().any(|l| l["message"]
        .as_str()
        .is_some_and(|m| m.contains("listening on"))
        && l.get("runId").is_none()));
}

#[test]
fn the_state_dir_is_owner_only_and_a_loose_one_is_reported_at_start_up() {
    let k = FakeKernel::start();
    let state = temp_dir("perm").join("state");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o755)).unwrap();
    let a = Adapter::start_with(
        &k.url,
        Options {
            state_dir: Some(state.clone()),
            ..Default::default()
        },
    );
    let logs = a.logs();
    let warn = logs
        .lines()
        .find(|l| l.contains("WARN") && l.contains("mode 0755"))
        .unwrap_or_else(|| panic!("{logs}"));
    assert!(warn.contains(&state.display().to_string()), "{warn}");
    a.run(&a.request("t-perm", "r1", "hi"));
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&state), 0o700);
    assert_eq!(mode(&state.join("threads")), 0o700);
    assert_eq!(mode(&state.join("threads/t-perm.json")), 0o600);
}

#[test]
fn reference_flags_and_urls_are_accepted() {
    let k = FakeKernel::start();
    let mapped = k.url.replace("127.0.0.1", "[::ffff:127.0.0.1]");
    let a = Adapter::start_args(&mapped, &["-d", "--no-log-stdout"]);
    assert!(a
        .logs()
        .contains("A2A kernel: external at http://[::ffff:127.0.0.1]:"));
    assert_eq!(
        a.run(&a.request("t-ref", "r1", "hi")).last()["type"],
        "RUN_FINISHED"
    );
    let (code, text) = output(&["--a2a-url", "https://127.0.0.1:1"]);
    assert_eq!(code, 2);
    assert!(
        text.contains("no TLS client") && text.contains("use http://"),
        "{text}"
    );
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}
