//! The servers under test: our adapter or the Python reference, started on a free port against the
//! fake kernel, stopped (SIGTERM, then SIGKILL) when dropped.

use crate::procfs::proc_status;
use crate::support::free_port;
use crate::{Res, ROOT};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Clone)]
pub(crate) enum Impl {
    /// Our adapter: the binary path.
    Ours(String),
    /// The Python reference: path of `iac-code`.
    Reference(String),
}

impl Impl {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Impl::Ours(_) => "iac-code-agui",
            Impl::Reference(_) => "reference (Python)",
        }
    }
}

pub(crate) struct Server {
    pub(crate) child: Option<Child>,
    pub(crate) pid: u32,
    pub(crate) port: u16,
    pub(crate) url: String,
    pub(crate) log: PathBuf,
    pub(crate) cwd: String,
}

impl Server {
    /// Starts `imp` on a free port and waits for the first 200 on /health; returns the server and
    /// the time from exec to that answer.
    pub(crate) fn start(
        imp: &Impl,
        kernel: &str,
        heartbeat: Option<&str>,
        root: &Path,
    ) -> Res<(Server, Duration)> {
        Server::start_with(imp, kernel, heartbeat, root, &[])
    }

    /// `start` with more arguments for our adapter (`extra`; the reference takes none).
    pub(crate) fn start_with(
        imp: &Impl,
        kernel: &str,
        heartbeat: Option<&str>,
        root: &Path,
        extra: &[&str],
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
                c.args(extra);
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

    pub(crate) fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(5).collect();
        tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
    }

    pub(crate) fn status(&self, key: &str) -> u64 {
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
pub(crate) fn health_ok(port: u16) -> bool {
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

pub(crate) fn reference_available() -> Result<String, String> {
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
