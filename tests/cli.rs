//! The command line and the managed kernel: usage errors, loopback-only upstreams, starting,
//! supervising and stopping `iac-code a2a` (here: the fake kernel binary in its place).

mod common;

use common::*;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

fn fake_kernel_bin() -> PathBuf {
    let p = std::path::Path::new(BIN)
        .parent()
        .unwrap()
        .join("examples/fake-kernel");
    assert!(
        p.exists(),
        "build the fake kernel first: cargo build --examples ({})",
        p.display()
    );
    p
}

fn output(args: &[&str]) -> (i32, String) {
    let out = Command::new(BIN).args(args).output().unwrap();
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
    let out = Command::new(BIN)
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
    let root = temp_dir(name);
    let log = root.join("log");
    let port = free_port();
    let child = Command::new(BIN)
        .args([
            "--port",
            &port.to_string(),
            "--state-dir",
            root.join("state").to_str().unwrap(),
        ])
        .args(["--a2a-command", fake_kernel_bin().to_str().unwrap()])
        .env("IAC_CODE_AGUI_ALLOWED_CWDS", root.to_str().unwrap())
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
    let _ = child.kill();
    let _ = child.wait();
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}
