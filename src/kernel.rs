//! Supervision of a managed `iac-code a2a` kernel: start it on a free loopback port, wait for its
//! `/health`, restart it if it dies, stop it (SIGTERM, bounded grace, SIGKILL) when we exit.
//!
//! It is started as the reference adapter starts it: `<command> --host 127.0.0.1 --port <port>
//! --thinking-exposure all`, with a random bearer token in `IACCODE_A2A_HTTP_TOKEN` (the kernel then
//! refuses any call without it; ours send it, see [`Kernel::token`]) and the allowed workspace roots
//! in `IACCODE_A2A_ALLOWED_CWDS` unless that is set already.
//!
//! The kernel is started through its guard (`kernel/guard.rs`, our own binary), which gives it
//! `PR_SET_PDEATHSIG = SIGKILL` and stops it once no adapter owns it any more, so even a SIGKILL
//! of the adapter, which runs no clean-up, never leaves it orphaned, while an upgrade can hand it
//! to the new adapter process ([`Kernel::hand_over`], [`Kernel::adopt`]).

mod guard;
mod handover;

pub use guard::{guard_main, GUARD_ENV};
pub use handover::Handover;

use crate::config::Config;
use base64::Engine;
use parking_lot::Mutex;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) const INSTALL_HINT: &str =
    "install the kernel with: pip install \"iac-code[a2a]==0.16.0\" \
\"a2a-sdk[http-server,signing]==1.1.5\" (pinned: `bash contrib/kernel/install.sh`, or run \
`bash contrib/run-adapter.sh`, which does it once; or point --a2a-url at a running `iac-code a2a`, \
or set --a2a-command)";

/// The kernel release this adapter is built and tested against (contrib/kernel/requirements.lock).
pub(crate) const PINNED_KERNEL: &str = "0.16";

const STOP_GRACE: Duration = Duration::from_secs(5);
/// Bound of `iac-code --version`: a Python start-up, about a second, but 15 s was seen on a
/// machine at load 100; the kernel's own start is allowed 60 s by default as well.
const VERSION_TIMEOUT: Duration = Duration::from_secs(60);

pub struct Kernel {
    command: Vec<String>,
    port: u16,
    token: String,
    allowed_cwds: String,
    child: Mutex<Option<Child>>,
    stopping: AtomicBool,
    start_timeout: Duration,
    /// What `iac-code --version` said, when the command is an `iac-code` program.
    version: Mutex<Option<String>>,
    /// `--log-format json`: the kernel's output is re-logged line by line (target `kernel`), so
    /// the adapter's stream stays one JSON object a line; else it is inherited as is.
    relog_output: bool,
    /// This process's write end of the guard's owners pipe (`guard.rs`).
    owners: Mutex<Option<OwnedFd>>,
    /// The guard of a kernel another adapter process started and handed to this one (not our
    /// child: watched through /proc); `None` once it exited or for a kernel of our own.
    adopted: Mutex<Option<libc::pid_t>>,
    /// Set while an upgrade hands the kernel to the new process: this one neither restarts nor
    /// stops it any more.
    handed_over: AtomicBool,
    /// Set while [`Kernel::restart`] replaces the kernel: the supervisor leaves it alone.
    restarting: AtomicBool,
    /// With `relog_output`, copies of the read ends of the kernel's stdout and stderr pipes, for
    /// an upgrade to hand over (the new process re-logs them once this one is gone).
    outputs: Mutex<Vec<OwnedFd>>,
}

impl Kernel {
    /// Starts the kernel and waits until it answers `/health`.
    pub fn start(config: &Config) -> Result<Arc<Kernel>, String> {
        let port = free_port().map_err(|e| format!("cannot find a free loopback port: {e}"))?;
        let allowed = std::env::join_paths(&config.allowed_cwds)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let token = random_token().map_err(|e| format!("cannot read /dev/urandom: {e}"))?;
        let kernel = Arc::new(Kernel {
            command: config.a2a_command.clone(),
            port,
            token,
            allowed_cwds: allowed,
            child: Mutex::new(None),
            stopping: AtomicBool::new(false),
            start_timeout: config.kernel_start_timeout,
            version: Mutex::new(None),
            relog_output: config.log_format == crate::config::LogFormat::Json,
            owners: Mutex::new(None),
            adopted: Mutex::new(None),
            handed_over: AtomicBool::new(false),
            restarting: AtomicBool::new(false),
            outputs: Mutex::new(Vec::new()),
        });
        // The version check runs beside the kernel's start-up (both are Python start-ups); its
        // warning comes before any start-up error, which it may explain.
        let check = check_version(&config.a2a_command);
        let started = kernel.spawn_and_wait();
        if let Some(check) = check {
            *kernel.version.lock() = check.join().ok().flatten();
        }
        started?;
        Ok(kernel)
    }

    /// The command as started (without the arguments we append).
    pub fn command(&self) -> String {
        self.command.join(" ")
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The kernel's release, when its `--version` could be read.
    pub fn version(&self) -> Option<String> {
        self.version.lock().clone()
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The bearer token the kernel requires on every call (`IACCODE_A2A_HTTP_TOKEN`): 43 URL-safe
    /// characters from 32 random bytes, the same for the kernel's whole life, restarts included.
    pub fn token(&self) -> &str {
        &self.token
    }

    fn spawn_and_wait(&self) -> Result<(), String> {
        let name = self.command.join(" ");
        // The guard starts the kernel: a command that is not there is said here, as before.
        if which(&self.command[0]).is_none_or(|p| !p.exists()) {
            return Err(format!(
                "cannot start the A2A kernel `{name}`: command not found; {INSTALL_HINT}"
            ));
        }
        let (owners_r, owners_w) = pipe().map_err(|e| format!("pipe: {e}"))?;
        // `/proc/self/exe`: this very binary, even when an upgrade replaced its file.
        let mut cmd = Command::new("/proc/self/exe");
        cmd.env(GUARD_ENV, "1")
            .args(&self.command)
            .args(["--host", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--thinking-exposure", "all"])
            .env("IACCODE_A2A_HTTP_TOKEN", &self.token)
            .stdin(Stdio::from(owners_r));
        if self.relog_output {
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        }
        if std::env::var_os("IACCODE_A2A_ALLOWED_CWDS").is_none() {
            cmd.env("IACCODE_A2A_ALLOWED_CWDS", &self.allowed_cwds);
        }
        // SAFETY: only async-signal-safe calls between fork and exec. No parent-death signal
        // for the guard: it outlives this process when an upgrade hands the kernel on.
        unsafe {
            cmd.pre_exec(|| {
                libc::setpgid(0, 0);
                Ok(())
            });
        }
        let mut child = cmd.spawn().map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                format!("cannot start the A2A kernel `{name}`: command not found; {INSTALL_HINT}")
            } else {
                format!("cannot start the A2A kernel `{name}`: {e}; {INSTALL_HINT}")
            }
        })?;
        let outputs = [
            child.stdout.take().map(OwnedFd::from),
            child.stderr.take().map(OwnedFd::from),
        ];
        self.relog_all(outputs.into_iter().flatten().collect());
        let guard = child.id();
        log::info!(
            "started A2A kernel `{name}` (pid {}) on port {}",
            kernel_under(guard).unwrap_or(guard),
            self.port
        );
        log::info!("A2A kernel guard: pid {guard}");
        *self.child.lock() = Some(child);
        *self.owners.lock() = Some(owners_w);
        self.wait_healthy(&name)
    }

    /// Waits for the kernel's `/health`, bounded by `--kernel-start-timeout`.
    fn wait_healthy(&self, name: &str) -> Result<(), String> {
        let health = ureq::Agent::from(
            ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(Duration::from_millis(500)))
                .build(),
        );
        let deadline = Instant::now() + self.start_timeout;
        loop {
            if let Some(status) = self
                .child
                .lock()
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                return Err(format!("the A2A kernel `{name}` exited ({status}) before it answered /health; {INSTALL_HINT}"));
            }
            if healthy(&health, &self.url(), &self.token) {
                return Ok(());
            }
            if Instant::now() > deadline {
                self.stop();
                return Err(format!(
                    "the A2A kernel `{name}` did not answer /health within {:?}",
                    self.start_timeout
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Whether the kernel exited (`Some(how)`), for a kernel of ours or an adopted one.
    fn exited(&self) -> Option<String> {
        if let Some(pid) = *self.adopted.lock() {
            return (!process_alive(pid)).then(|| format!("guard pid {pid} gone"));
        }
        self.child
            .lock()
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
            .map(|s| s.to_string())
    }

    /// Restarts the kernel whenever it exits unexpectedly (on this long-lived thread, because the
    /// parent-death signal follows the spawning thread).
    pub fn supervise(self: &Arc<Kernel>) {
        let kernel = self.clone();
        std::thread::Builder::new()
            .name("kernel-supervisor".into())
            .spawn(move || loop {
                std::thread::sleep(Duration::from_millis(500));
                if kernel.stopping.load(Ordering::SeqCst) {
                    return;
                }
                if kernel.restarting.load(Ordering::SeqCst) {
                    continue;
                }
                if kernel.handed_over.load(Ordering::SeqCst) {
                    // The new process supervises it; a guard that exits is only reaped here.
                    if let Some(c) = kernel.child.lock().as_mut() {
                        let _ = c.try_wait();
                    }
                    continue;
                }
                if let Some(status) = kernel.exited() {
                    log::error!("the A2A kernel exited ({status}); restarting it");
                    *kernel.adopted.lock() = None;
                    crate::metrics::kernel_restarted();
                    std::thread::sleep(Duration::from_secs(1));
                    if let Err(e) = kernel.spawn_and_wait() {
                        log::error!("{e}");
                    }
                }
            })
            .expect("spawn kernel supervisor");
    }

    /// SIGTERM to the kernel's process group, a bounded grace period, then SIGKILL. A kernel
    /// handed over to a new process is left to it.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        if self.handed_over.load(Ordering::SeqCst) {
            return;
        }
        self.terminate();
    }

    /// Stops the kernel and starts it again on the same port with the same token (a kernel
    /// drain, `kernel_drain.rs`: no turn is running on it then). The kernel takes its state
    /// from its persistence dir, input-required tasks included.
    pub fn restart(&self) -> Result<(), String> {
        self.restarting.store(true, Ordering::SeqCst);
        self.terminate();
        let started = self.spawn_and_wait();
        self.restarting.store(false, Ordering::SeqCst);
        started
    }

    fn terminate(&self) {
        let adopted = self.adopted.lock().take();
        let mut child = self.child.lock().take();
        let pgid = match (adopted, &child) {
            (Some(pid), _) => pid,
            (None, Some(c)) => c.id() as libc::pid_t,
            (None, None) => return,
        };
        let mut gone = || match &mut child {
            Some(c) => matches!(c.try_wait(), Ok(Some(_))),
            None => !process_alive(pgid),
        };
        // SAFETY: plain kill(2) on the group we created.
        unsafe { libc::kill(-pgid, libc::SIGTERM) };
        let deadline = Instant::now() + STOP_GRACE;
        while Instant::now() < deadline {
            if gone() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        log::warn!("the A2A kernel ignored SIGTERM for {STOP_GRACE:?}; killing it");
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
        if let Some(c) = &mut child {
            let _ = c.wait();
        }
    }
}

/// The kernel the guard `guard` started (its one child), once it appears (1 s at most).
fn kernel_under(guard: u32) -> Option<u32> {
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        let children = std::fs::read_to_string(format!("/proc/{guard}/task/{guard}/children"));
        let first = children
            .ok()
            .and_then(|c| c.split_whitespace().next()?.parse().ok());
        if first.is_some() || Instant::now() > deadline {
            return first;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Whether `pid` runs (a zombie, exited but not yet reaped by its parent, does not).
fn process_alive(pid: libc::pid_t) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2(2) into a local array; both ends are owned right after.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: pipe2 just opened both.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

impl Kernel {
    /// Re-logs each of the kernel's output pipes, keeping a copy of each for an upgrade.
    fn relog_all(&self, pipes: Vec<OwnedFd>) {
        let mut kept = self.outputs.lock();
        kept.clear();
        for pipe in pipes {
            if let Ok(copy) = pipe.try_clone() {
                kept.push(copy);
            }
            relog(std::fs::File::from(pipe));
        }
    }
}

/// Logs each line of the kernel's `output` at INFO, target `kernel`, until it closes (the
/// kernel exited); a thread per stream, as long-lived as the kernel.
fn relog(output: impl Read + Send + 'static) {
    let spawned = std::thread::Builder::new()
        .name("kernel-output".into())
        .spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(output)
                .split(b'\n')
                .map_while(Result::ok)
            {
                let line = String::from_utf8_lossy(&line);
                log::info!(target: "kernel", "{}", line.trim_end());
            }
        });
    if let Err(e) = spawned {
        log::warn!("cannot start the kernel output thread: {e}");
    }
}

fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// `GET <url>/health` with the kernel's bearer token answers 200.
fn healthy(agent: &ureq::Agent, url: &str, token: &str) -> bool {
    agent
        .get(format!("{url}/health"))
        .header("Authorization", format!("Bearer {token}"))
        .call()
        .is_ok_and(|r| r.status().as_u16() == 200)
}

/// `secrets.token_urlsafe(32)`: 32 bytes of /dev/urandom, base64url without padding (43 chars).
fn random_token() -> std::io::Result<String> {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

/// When the kernel command is an `iac-code` program, runs `iac-code --version` on a thread and
/// logs what it is, warning when it is not the pinned release; the thread returns the version.
fn check_version(command: &[String]) -> Option<std::thread::JoinHandle<Option<String>>> {
    let program = command.first()?.clone();
    if Path::new(&program).file_name()? != "iac-code" {
        return None;
    }
    let shown = which(&program).unwrap_or_else(|| PathBuf::from(&program));
    std::thread::Builder::new()
        .name("kernel-version".into())
        .spawn(move || {
            let out = program_version(&program);
            report_version(&shown, &out);
            out.ok().and_then(|o| parse_version(&o).map(String::from))
        })
        .ok()
}

fn report_version(shown: &Path, out: &std::io::Result<String>) {
    match out {
            Ok(out) => match parse_version(out) {
                Some(v) if is_pinned(v) => {
                    log::info!("A2A kernel: {} (iac-code {v})", shown.display())
                }
                Some(v) => log::warn!(
                    "the A2A kernel {} is iac-code {v}, not the {PINNED_KERNEL}.x this adapter is \
                     tested with; expect differences (`bash contrib/kernel/install.sh` installs the \
                     pinned release into target/real-kernel-venv, and contrib/run-adapter.sh uses it)",
                    shown.display()
                ),
                None => log::warn!(
                    "cannot read the version of the A2A kernel {} from `--version` ({:?}); this \
                     adapter is tested with iac-code {PINNED_KERNEL}.x",
                    shown.display(),
                    out.trim()
                ),
            },
            // A missing program is reported by the start itself.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => log::warn!(
                "cannot check the A2A kernel's version (`{} --version`): {e}",
                shown.display()
            ),
    }
}

/// Output of `<program> --version`, bounded by [`VERSION_TIMEOUT`].
fn program_version(program: &str) -> std::io::Result<String> {
    let mut child = Command::new(program)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let mut stdout = child.stdout.take().expect("piped stdout");
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        let _ = stdout.read_to_string(&mut out);
        out
    });
    let deadline = Instant::now() + VERSION_TIMEOUT;
    loop {
        if let Some(status) = child.try_wait()? {
            let out = reader.join().unwrap_or_default();
            return if status.success() {
                Ok(out)
            } else {
                Err(std::io::Error::other(format!("exited with {status}")))
            };
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(std::io::Error::other(format!(
                "no answer within {VERSION_TIMEOUT:?}"
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The first `X.Y.Z`-looking word of `iac-code --version` (`iac-code v0.16.0 (2026-09-17)`).
fn parse_version(out: &str) -> Option<&str> {
    out.split_whitespace()
        .map(|w| w.trim_start_matches(['v', 'V']))
        .find(|w| {
            let mut parts = w.split('.');
            parts.next().is_some_and(|p| p.parse::<u32>().is_ok())
                && parts.next().is_some_and(|p| p.parse::<u32>().is_ok())
        })
}

fn is_pinned(version: &str) -> bool {
    version == PINNED_KERNEL || version.starts_with(&format!("{PINNED_KERNEL}."))
}

/// The program `Command::new` would run: a path as given, a bare name searched on PATH.
fn which(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        return Some(PathBuf::from(program));
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_43_url_safe_characters_and_random() {
        let a = random_token().unwrap();
        let b = random_token().unwrap();
        assert_eq!(a.len(), 43);
        assert!(a
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_'));
        assert_ne!(a, b);
    }

    #[test]
    fn versions_are_read_and_compared_with_the_pin() {
        assert_eq!(
            parse_version("iac-code v0.16.0 (2026-09-17)\n"),
            Some("0.16.0")
        );
        assert_eq!(parse_version("iac-code 0.17.2"), Some("0.17.2"));
        assert_eq!(parse_version("Usage: iac-code [OPTIONS]"), None);
        assert!(is_pinned("0.16.0") && is_pinned("0.16.3"));
        assert!(!is_pinned("0.17.0") && !is_pinned("0.160.1") && !is_pinned("1.16.0"));
    }

    #[test]
    fn only_an_iac_code_program_is_version_checked() {
        assert!(check_version(&["python3".into(), "-m".into(), "x".into()]).is_none());
        assert!(check_version(&[]).is_none());
    }
}
