//! SIGTERM/SIGINT: every run in progress ends with `RUN_ERROR` and a proper end of stream.

use super::cancel::cancel_once;
use super::shutting_down;
use crate::app::{App, LiveRun};
use crate::projection::{End, Projection};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// Refuses new runs, cancels every active run's task and lets the run end itself
/// (`RUN_ERROR A2A_UNAVAILABLE`, spans closed, end of stream); a run still open after `grace`
/// (no task id yet, a hung kernel) gets its `RUN_ERROR` and end of stream written for it.
pub fn shutdown(app: &App, grace: Duration) {
    let live = app.runs.stop();
    if live.is_empty() {
        return;
    }
    log::info!("shutting down: ending {} active run(s)", live.len());
    let deadline = Instant::now() + grace;
    for run in &live {
        cancel_in_background(app, run);
    }
    let weak: Vec<Weak<LiveRun>> = live.iter().map(Arc::downgrade).collect();
    drop(live);
    while Instant::now() < deadline && weak.iter().any(|w| w.strong_count() > 0) {
        std::thread::sleep(Duration::from_millis(20));
    }
    for run in weak.iter().filter_map(Weak::upgrade) {
        end_stream_for(&run);
    }
}

/// Flags the run and cancels its task; each CancelTask is bounded (`CANCEL_TIMEOUT`), and they
/// run side by side.
fn cancel_in_background(app: &App, run: &LiveRun) {
    let active = run.active.lock().clone();
    active.cancelled.store(true, Ordering::SeqCst);
    let a2a = app.a2a.clone();
    let _ = std::thread::Builder::new()
        .name("shutdown-cancel".into())
        .spawn(move || cancel_once(&a2a, &active));
}

/// Writes `RUN_ERROR` and the end of stream for a run that did not end in time.
fn end_stream_for(run: &LiveRun) {
    if run.stream.is_closed() {
        return;
    }
    log::warn!(
        "run {} did not end in time; ending its stream",
        run.ids.run_id
    );
    let mut out = Vec::new();
    Projection::new(run.ids.clone(), run.lang).finish(&End::Failed(shutting_down()), &mut out);
    run.stream.abort(&out, Duration::from_secs(1));
}
