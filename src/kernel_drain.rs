//! Replacing the kernel under live runs (SIGHUP): a kernel restart loses the tasks it is running,
//! so the adapter first drains: new turns and resumes are refused with a retryable 503
//! (`A2A_UNAVAILABLE`, `Retry-After: 5`) while the running turns finish, bounded by
//! `--drain-timeout`. Then a managed kernel is restarted on the same port with the same token
//! (`Kernel::restart`); an external one (`--a2a-url`) is waited for: its operator replaces it
//! once the adapter logs that it drained, and the adapter admits turns again when the kernel
//! answers `/health` after having been seen gone (or, when it never goes, after
//! `--drain-timeout` more, or at a second SIGHUP: a kernel replaced faster than the 50 ms
//! poll is not seen gone). A turn still running at the bound meets the restart as any kernel
//! failure: `RUN_ERROR A2A_UNAVAILABLE`, its thread repaired before its next turn. Pending
//! approvals are the kernel's to keep: the 0.16.0 kernel restores input-required tasks from its
//! persistence dir.

use crate::app::App;
use crate::kernel::Kernel;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the drain looks at the runs and the kernel.
const TICK: Duration = Duration::from_millis(50);

/// What ends a wait early: SIGTERM (`stop`: the shutdown that follows ends what is left), or a
/// second SIGHUP (`again`: the operator says the external kernel was replaced).
pub struct Signals<'a> {
    pub stop: &'a dyn Fn() -> bool,
    pub again: &'a dyn Fn() -> bool,
}

/// The kernel drain, from the signal to turns admitted again.
pub fn drain_kernel(app: &App, kernel: Option<&Arc<Kernel>>, signals: &Signals) {
    let stop = signals.stop;
    let started = Instant::now();
    app.runs.pause(true);
    let bound = app.config.drain_timeout;
    log::info!(
        "SIGHUP: kernel drain: new turns are refused (503, Retry-After) while {} running turn(s) \
         finish, up to {bound:?}",
        app.store.active_runs()
    );
    while app.store.active_runs() > 0 && started.elapsed() < bound && !stop() {
        std::thread::sleep(TICK);
    }
    let left = app.store.active_runs();
    log::info!(
        "kernel drain: drained after {:?} ({left} turn(s) still running)",
        started.elapsed()
    );
    if !stop() {
        match kernel {
            Some(k) => restart_managed(k),
            None => wait_for_replacement(app, bound, signals),
        }
    }
    app.runs.pause(false);
    log::info!(
        "kernel drain: turns admitted again, {:?} after the signal",
        started.elapsed()
    );
}

fn restart_managed(kernel: &Kernel) {
    log::info!("kernel drain: restarting the managed kernel");
    if let Err(e) = kernel.restart() {
        // The supervisor goes on trying; turns meanwhile fail as with any kernel outage.
        log::error!("kernel drain: the kernel did not come back: {e}");
    }
}

/// An external kernel: waits until it has gone and answers again (its replacement), at most
/// `bound` for it to go and `bound` again to come back.
fn wait_for_replacement(app: &App, bound: Duration, signals: &Signals) {
    log::info!(
        "kernel drain: replace the kernel at {} now; turns are admitted again once it answers \
         (or at a second SIGHUP)",
        app.config.a2a_url.as_deref().unwrap_or("")
    );
    let cut_short = || (signals.stop)() || (signals.again)();
    let waited = Instant::now();
    while app.a2a.healthy() {
        if cut_short() {
            return;
        }
        if waited.elapsed() > bound {
            log::warn!("kernel drain: the kernel never went away within {bound:?}");
            return;
        }
        std::thread::sleep(TICK);
    }
    let gone = Instant::now();
    while !app.a2a.healthy() && gone.elapsed() < bound && !cut_short() {
        std::thread::sleep(TICK);
    }
    log::info!("kernel drain: the kernel was away for {:?}", gone.elapsed());
}
