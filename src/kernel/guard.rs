//! The kernel's guard: a small process of our own binary between the adapter and the kernel, so
//! that the kernel can outlive the adapter that started it (an upgrade hands it to the new
//! process) yet never outlives every adapter (a SIGKILLed one runs no clean-up).
//!
//! The kernel used to get `PR_SET_PDEATHSIG` from the adapter itself, which kills it when that
//! process exits, upgrade or not. Now the guard starts it with that signal tied to the guard,
//! and the guard watches its stdin, the read end of the "owners" pipe: each adapter that owns
//! the kernel holds a write end (the old one, and the new one it was handed to). When the last
//! one closes (every owner exited, however), the guard stops the kernel (SIGTERM to its process
//! group, 5 s, SIGKILL) and exits. When the kernel exits, the guard exits with its status, so
//! the adapter's supervisor sees the kernel's exit as before. The guard ignores SIGTERM, SIGINT,
//! SIGHUP and SIGUSR2 (`FOLLOWED`).

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Set in the guard's environment: `main` runs [`guard_main`] instead of the adapter.
pub const GUARD_ENV: &str = "IAC_CODE_AGUI_KERNEL_GUARD";

/// How often the guard looks at the kernel and at its owners.
const TICK_MS: i32 = 200;

/// Signals the guard ignores: a stop of the group (SIGTERM, SIGINT) reaches the kernel and the
/// guard follows it out; the adapter's own signals (SIGHUP, SIGUSR2), when sent to the whole
/// service (`systemctl kill` without `--kill-whom=main`), must not end the guard, which would
/// take the kernel with it.
const FOLLOWED: [libc::c_int; 4] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGUSR2];

/// The guard's whole life: its arguments are the kernel's command line.
pub fn guard_main() -> ! {
    std::env::remove_var(GUARD_ENV);
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    let Some((program, rest)) = args.split_first() else {
        std::process::exit(2);
    };
    // SAFETY: setting dispositions before any thread starts.
    unsafe {
        for sig in FOLLOWED {
            libc::signal(sig, libc::SIG_IGN);
        }
    }
    let mut cmd = Command::new(program);
    cmd.args(rest).stdin(Stdio::null());
    // SAFETY: only async-signal-safe calls between fork and exec; an ignored signal stays
    // ignored across exec, so the kernel gets the default actions back.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            for sig in FOLLOWED {
                libc::signal(sig, libc::SIG_DFL);
            }
            Ok(())
        });
    }
    let mut kernel = match cmd.spawn() {
        Ok(k) => k,
        Err(e) => {
            eprintln!("iac-code-agui: cannot start the A2A kernel: {e}");
            std::process::exit(127);
        }
    };
    loop {
        if let Ok(Some(status)) = kernel.try_wait() {
            std::process::exit(status.code().unwrap_or(1));
        }
        if owners_gone() {
            stop_group(&mut kernel);
            std::process::exit(0);
        }
    }
}

/// Waits up to one tick on stdin; true once every owner's write end is closed (end of file).
fn owners_gone() -> bool {
    let mut poll = libc::pollfd {
        fd: 0,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll(2) and read(2) on our own stdin, into a local buffer.
    unsafe {
        if libc::poll(&mut poll, 1, TICK_MS) <= 0 {
            return false;
        }
        let mut buf = [0u8; 64];
        libc::read(0, buf.as_mut_ptr().cast(), buf.len()) == 0
    }
}

/// SIGTERM to the group (the guard ignores it), 5 s, then SIGKILL.
fn stop_group(kernel: &mut std::process::Child) {
    // SAFETY: kill(2) on our own process group.
    unsafe { libc::kill(0, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = kernel.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // SAFETY: as above.
    unsafe { libc::kill(0, libc::SIGKILL) };
}
