//! Supervision of a managed `iac-code a2a` kernel: start it on a free loopback port, wait for its
//! `/health`, restart it if it dies, stop it (SIGTERM, bounded grace, SIGKILL) when we exit.
//!
//! The kernel also gets `PR_SET_PDEATHSIG = SIGKILL`, so even a SIGKILL of the adapter, which runs
//! no clean-up, never leaves it orphaned.

use crate::a2a::A2aClient;
use crate::config::Config;
use parking_lot::Mutex;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const INSTALL_HINT: &str = "install the kernel with: pip install \"iac-code[a2a]==0.16.0\" \
\"a2a-sdk[http-server,signing]==1.1.5\" (or point --a2a-url at a running `iac-code a2a`, or set \
--a2a-command)";

const STOP_GRACE: Duration = Duration::from_secs(5);

pub struct Kernel {
    command: Vec<String>,
    port: u16,
    allowed_cwds: String,
    child: Mutex<Option<Child>>,
    stopping: AtomicBool,
    start_timeout: Duration,
}

impl Kernel {
    /// Starts the kernel and waits until it answers `/health`.
    pub fn start(config: &Config) -> Result<Arc<Kernel>, String> {
        let port = free_port().map_err(|e| format!("cannot find a free loopback port: {e}"))?;
        let allowed = std::env::join_paths(&config.allowed_cwds)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let kernel = Arc::new(Kernel {
            command: config.a2a_command.clone(),
            port,
            allowed_cwds: allowed,
            child: Mutex::new(None),
            stopping: AtomicBool::new(false),
            start_timeout: config.kernel_start_timeout,
        });
        kernel.spawn_and_wait()?;
        Ok(kernel)
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn spawn_and_wait(&self) -> Result<(), String> {
        let mut cmd = Command::new(&self.command[0]);
        cmd.args(&self.command[1..])
            .args(["--host", "127.0.0.1", "--port", &self.port.to_string()])
            .stdin(Stdio::null());
        if std::env::var_os("IACCODE_A2A_ALLOWED_CWDS").is_none() {
            cmd.env("IACCODE_A2A_ALLOWED_CWDS", &self.allowed_cwds);
        }
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                libc::setpgid(0, 0);
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let name = self.command.join(" ");
        let child = cmd.spawn().map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                format!("cannot start the A2A kernel `{name}`: command not found; {INSTALL_HINT}")
            } else {
                format!("cannot start the A2A kernel `{name}`: {e}; {INSTALL_HINT}")
            }
        })?;
        log::info!(
            "started A2A kernel `{name}` (pid {}) on port {}",
            child.id(),
            self.port
        );
        *self.child.lock() = Some(child);
        let client = A2aClient::new(&self.url(), None, Duration::from_secs(2));
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
            if client.healthy() {
                return Ok(());
            }
            if Instant::now() > deadline {
                self.stop();
                return Err(format!(
                    "the A2A kernel `{name}` did not answer /health within {:?}",
                    self.start_timeout
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
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
                let exited = kernel
                    .child
                    .lock()
                    .as_mut()
                    .and_then(|c| c.try_wait().ok().flatten());
                if let Some(status) = exited {
                    log::error!("the A2A kernel exited ({status}); restarting it");
                    std::thread::sleep(Duration::from_secs(1));
                    if let Err(e) = kernel.spawn_and_wait() {
                        log::error!("{e}");
                    }
                }
            })
            .expect("spawn kernel supervisor");
    }

    /// SIGTERM to the kernel's process group, a bounded grace period, then SIGKILL.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        let Some(mut child) = self.child.lock().take() else {
            return;
        };
        let pgid = child.id() as libc::pid_t;
        // SAFETY: plain kill(2) on the group we created.
        unsafe { libc::kill(-pgid, libc::SIGTERM) };
        let deadline = Instant::now() + STOP_GRACE;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        log::warn!("the A2A kernel ignored SIGTERM for {STOP_GRACE:?}; killing it");
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
        let _ = child.wait();
    }
}

fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}
