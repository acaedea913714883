//! Replacing the adapter binary under live runs (SIGUSR2), as HAProxy's `-sf` and nginx's USR2
//! do it: the running process starts the binary now at its own path with the same arguments,
//! handing it the listening socket (an inherited descriptor, so no connection is ever refused)
//! and, for a managed kernel, the kernel itself (`kernel::Handover`: the new process adopts it,
//! no second kernel starts). Once the new process serves, it says so on a pipe; the old one
//! stops accepting (tiny_http's `Limits::draining`) and drains: its streams go on to their end
//! on their open connections, bounded by `--drain-timeout`, then it exits without stopping the
//! kernel. A thread whose run is still draining in the old process is busy in the new one
//! (`store/owner.rs`); a thread waiting at an approval is only a state file, answered by the new
//! one. If the new process does not come up, it is stopped and the old one goes on serving.

use crate::app::App;
use crate::kernel::{Handover, Kernel};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// The listening socket's descriptor, inherited by the new process.
const LISTEN_FD: &str = "IAC_CODE_AGUI_HANDOVER_LISTEN_FD";
/// The write end of the pipe the new process writes one byte to once it serves.
const READY_FD: &str = "IAC_CODE_AGUI_HANDOVER_READY_FD";
/// A pipe holding the managed kernel's handover (`kernel::Handover`), token included: a pipe,
/// not the environment, so the token is never in `/proc/<pid>/environ`.
const KERNEL_FD: &str = "IAC_CODE_AGUI_HANDOVER_KERNEL_FD";

/// How long the new process gets to serve (an adopted kernel is not started again, so this is a
/// process start-up, the state dir's checks and the listen).
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// What the process that started this one handed over.
#[derive(Default)]
pub struct Inherited {
    pub listener: Option<TcpListener>,
    pub kernel: Option<Handover>,
    ready: Option<OwnedFd>,
}

/// The path the binary was started by, taken at start-up (before any `chdir`): after a package
/// upgrade replaced the file, `/proc/self/exe` names the deleted old one, while this path holds
/// the new build; and a symlink switched to a new release (`current -> v2/`) is followed again,
/// not resolved once and for all.
pub fn remember_binary() {
    binary();
}

fn binary() -> &'static PathBuf {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        let started_as = std::env::args_os().next().map(PathBuf::from);
        let by_path = |name: &PathBuf| {
            std::env::split_paths(&std::env::var_os("PATH")?)
                .map(|dir| dir.join(name))
                .find(|p| p.is_file())
        };
        match started_as {
            Some(p) if p.is_absolute() => Some(p),
            Some(p) if p.components().count() > 1 => {
                std::env::current_dir().ok().map(|d| d.join(p))
            }
            Some(p) => by_path(&p),
            None => None,
        }
        .or_else(|| std::env::current_exe().ok())
        .unwrap_or_else(|| "iac-code-agui".into())
    })
}

/// Takes what the old process handed over (before any other thread starts: it edits the
/// environment, so that a later upgrade or a kernel restart does not see these values).
pub fn take_inherited() -> Inherited {
    let fd = |name: &str| -> Option<OwnedFd> {
        let v = std::env::var(name).ok()?;
        std::env::remove_var(name);
        let fd: RawFd = v.parse().ok()?;
        // SAFETY: the old process passed this descriptor to us, open and ours alone to own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        set_cloexec(fd.as_raw_fd());
        Some(fd)
    };
    let listener = fd(LISTEN_FD).map(TcpListener::from);
    let ready = fd(READY_FD);
    let kernel = fd(KERNEL_FD).and_then(|fd| {
        let mut text = String::new();
        std::fs::File::from(fd).read_to_string(&mut text).ok()?;
        Handover::decode(&text)
    });
    Inherited {
        listener,
        kernel,
        ready,
    }
}

impl Inherited {
    /// Whether an upgrade started this process.
    pub fn from_upgrade(&self) -> bool {
        self.ready.is_some()
    }

    /// Once the old process exited (this one is re-parented), adds to the thread index what it
    /// wrote while it drained: this process's index was built from its start-up scan and its
    /// own writes.
    pub fn index_what_the_old_process_wrote(&self, app: &Arc<App>) {
        if !self.from_upgrade() {
            return;
        }
        let (old, since) = (std::os::unix::process::parent_id(), crate::ids::now_ms());
        let app = app.clone();
        let watched = std::thread::Builder::new()
            .name("upgrade-watch".into())
            .spawn(move || {
                while std::os::unix::process::parent_id() == old {
                    std::thread::sleep(Duration::from_millis(500));
                }
                app.store.rescan_since(since.saturating_sub(1000));
            });
        if let Err(e) = watched {
            log::warn!("cannot watch the previous process: {e}");
        }
    }

    /// Tells the old process that this one serves: it stops accepting and drains. Under systemd
    /// (`Type=notify`, `NotifyAccess=all`), also tells systemd that this process is the service's
    /// main one now, so the old one's exit does not end the service.
    pub fn announce_ready(&mut self) {
        if let Some(socket) = std::env::var_os("NOTIFY_SOCKET") {
            let message = format!("READY=1\nMAINPID={}\n", std::process::id());
            if let Err(e) = notify_systemd(&socket, &message) {
                log::warn!("cannot notify systemd: {e}");
            }
        }
        if let Some(fd) = self.ready.take() {
            let _ = std::fs::File::from(fd).write_all(b"R");
            log::info!("serving: the previous process drains its runs and exits");
        }
    }
}

/// One datagram to systemd's notification socket (a path, or `@name` in the abstract
/// namespace), as sd_notify(3) sends it.
fn notify_systemd(socket: &std::ffi::OsStr, message: &str) -> std::io::Result<()> {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::net::{SocketAddr, UnixDatagram};
    let bytes = socket.as_bytes();
    let addr = match bytes.strip_prefix(b"@") {
        Some(name) => SocketAddr::from_abstract_name(name)?,
        None => SocketAddr::from_pathname(std::path::Path::new(socket))?,
    };
    UnixDatagram::unbound()?.send_to_addr(message.as_bytes(), &addr)?;
    Ok(())
}

/// Starts the new process on the same listener (and kernel) and waits until it serves. `Err`:
/// it did not, and was stopped; this process goes on serving.
pub fn hand_over(listener: RawFd, kernel: Option<&Arc<Kernel>>) -> Result<u32, String> {
    let handed = start_successor(listener, kernel);
    if handed.is_err() {
        if let Some(k) = kernel {
            k.take_back();
        }
    }
    handed
}

fn start_successor(listener: RawFd, kernel: Option<&Arc<Kernel>>) -> Result<u32, String> {
    let started = Instant::now();
    let (ready_r, ready_w) = pipe()?;
    let mut inherit = vec![listener, ready_w.as_raw_fd()];
    let mut cmd = Command::new(binary());
    cmd.args(std::env::args_os().skip(1))
        .env(LISTEN_FD, listener.to_string())
        .env(READY_FD, ready_w.as_raw_fd().to_string());
    let mut kernel_pipe = None;
    if let Some(k) = kernel {
        let handover = k.hand_over();
        let (r, w) = pipe()?;
        std::fs::File::from(w)
            .write_all(handover.encode().as_bytes())
            .map_err(|e| format!("cannot pass the kernel on: {e}"))?;
        inherit.extend([r.as_raw_fd(), handover.owners_fd]);
        inherit.extend(&handover.outputs);
        cmd.env(KERNEL_FD, r.as_raw_fd().to_string());
        kernel_pipe = Some(r);
    }
    // SAFETY: only fcntl(2), async-signal-safe, between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            for &fd in &inherit {
                libc::fcntl(fd, libc::F_SETFD, 0);
            }
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", binary().display()))?;
    drop((ready_w, kernel_pipe));
    log::info!(
        "upgrade: started pid {} ({}); waiting until it serves",
        child.id(),
        binary().display()
    );
    match wait_ready(&ready_r, &mut child) {
        Ok(()) => {
            log::info!(
                "upgrade: pid {} serves after {:?}; this process stops accepting and drains",
                child.id(),
                started.elapsed()
            );
            Ok(child.id())
        }
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(e)
        }
    }
}

/// The new process's one byte, or why it did not come (it exited, or the time ran out).
fn wait_ready(ready: &OwnedFd, child: &mut Child) -> Result<(), String> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        let mut poll = libc::pollfd {
            fd: ready.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll(2) on one descriptor we own.
        let n = unsafe { libc::poll(&mut poll, 1, 200) };
        if n > 0 {
            let mut byte = [0u8];
            // SAFETY: read(2) of one byte into a local buffer.
            let got = unsafe { libc::read(ready.as_raw_fd(), byte.as_mut_ptr().cast(), 1) };
            if got == 1 {
                return Ok(());
            }
            let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
            return Err(format!(
                "the new process exited ({status}) before it served"
            ));
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the new process did not serve within {READY_TIMEOUT:?}"
            ));
        }
    }
}

/// Stops accepting (the new process accepts from the shared queue from now on), then waits
/// until no run is active, `timeout` passes, or `stop` (SIGTERM) is set. Returns the runs still
/// active then (0: drained).
pub fn drain(app: &App, timeout: Duration, stop: &dyn Fn() -> bool) -> usize {
    let started = Instant::now();
    app.draining.store(true, Ordering::SeqCst);
    log::info!(
        "draining: {} active run(s), up to {timeout:?}",
        app.store.active_runs()
    );
    while app.store.active_runs() > 0 && started.elapsed() < timeout && !stop() {
        std::thread::sleep(Duration::from_millis(50));
    }
    let left = app.store.active_runs();
    log::info!(
        "drained after {:?}: {left} run(s) still active",
        started.elapsed()
    );
    left
}

fn pipe() -> Result<(OwnedFd, OwnedFd), String> {
    let mut fds = [0; 2];
    // SAFETY: pipe2(2) into a local array; both ends are owned right after.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(format!("pipe: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: pipe2 just opened both.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn set_cloexec(fd: RawFd) {
    // SAFETY: fcntl(2) on a descriptor we own.
    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn systemd_hears_the_new_main_pid_on_a_path_or_an_abstract_socket() {
        let dir = std::env::temp_dir().join(format!("agui-notify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify");
        let server = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
        notify_systemd(path.as_os_str(), "READY=1\nMAINPID=42\n").unwrap();
        let mut buf = [0u8; 64];
        let n = server.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1\nMAINPID=42\n");
        std::fs::remove_dir_all(&dir).unwrap();

        use std::os::linux::net::SocketAddrExt;
        let name = format!("agui-notify-test-{}", std::process::id());
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let server = std::os::unix::net::UnixDatagram::bind_addr(&addr).unwrap();
        notify_systemd(std::ffi::OsStr::new(&format!("@{name}")), "READY=1\n").unwrap();
        let n = server.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1\n");
    }
}
