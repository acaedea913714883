//! Crash repair: the execution a killed or stopped adapter left running is stopped and closed
//! before the thread's next turn, so the kernel does not refuse it with "Task is already working".

use super::Run;
use crate::a2a::frame::TaskState;
use crate::a2a::A2aClient;
use crate::error::{Error, Msg};
use crate::store::{ActiveRun, Execution};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long the repair of an unfinished execution may wait for its task to stop (a client that
/// left frees its thread at once; the real kernel takes up to ~15 s to wind its task down).
const REPAIR_TIMEOUT: Duration = Duration::from_secs(15);

impl Run<'_> {
    /// Stops and closes the thread's unfinished execution, then installs `next` and makes it the
    /// thread's active run.
    /// Never inlined: its frame would grow the one a held run waits under.
    #[inline(never)]
    pub(super) fn repair(&mut self, next: Box<Execution>) -> Result<(), Error> {
        let old = self.execution().clone();
        log::info!(
            "thread {}: execution {} never ended; stopping it before the new turn",
            self.input.thread_id,
            old.execution_id
        );
        if let Some(task) = &old.task_id {
            // A client that leaves (or a Stop) during the wait ends this run at once: the thread
            // must not stay busy for the whole wait after its run's client is gone.
            // The close hook flags the run, so a turn sent right after the client left waits for
            // this run to end (`wait_while_stopping`) instead of a `THREAD_BUSY`.
            let flag = self.active.clone();
            let on_close = move || flag.cancelled.store(true, Ordering::SeqCst);
            self.stream.on_close(Box::new(on_close));
            let (stream, active) = (self.stream.clone(), self.active.clone());
            let gone = move || stream.check_client() || active.is_cancelled();
            stop_task(&self.app.a2a, &self.active, task, &gone)?;
            // The cut turn kept what was streamed; the kernel's task completes it.
            if let Ok(Some(task)) = self.app.a2a.get_task(task) {
                (self.app.history).complete_from_task(&self.input.thread_id, &task);
            }
        }
        self.doc.mark_terminal();
        self.doc.execution = Some(*next);
        self.save()?;
        let fresh = ActiveRun::new(&self.execution().execution_id, None);
        self.guard.replace(fresh.clone());
        *self.live.active.lock() = fresh.clone();
        self.active = fresh;
        Ok(())
    }
}

/// Cancels `task` and waits (bounded) until the kernel no longer runs it, or until `gone` says
/// the run's client left or the run was stopped (then `CANCELLED`, the old execution left as it
/// was for the next turn to repair).
fn stop_task(
    a2a: &A2aClient,
    active: &ActiveRun,
    task: &str,
    gone: &dyn Fn() -> bool,
) -> Result<(), Error> {
    let deadline = Instant::now() + REPAIR_TIMEOUT;
    let mut last_cancel: Option<Instant> = None;
    // `CancelTask` goes in the background: a hung kernel that never answers it must not hold
    // the wait past its bound, nor keep it from seeing its client leave.
    let in_flight = Arc::new(AtomicBool::new(false));
    loop {
        if gone() {
            log::info!("the client left (or stopped) during the repair of task {task}");
            return Err(Msg::Cancelled.err());
        }
        // Also an input wait nobody recorded is cancelled: no client can ever answer it.
        let due = last_cancel.is_none_or(|t| t.elapsed() >= Duration::from_secs(1));
        if due && !in_flight.swap(true, Ordering::SeqCst) {
            active.cancel_sent.store(true, Ordering::SeqCst);
            let (a2a, task, in_flight) = (a2a.clone(), task.to_string(), in_flight.clone());
            std::thread::spawn(move || {
                if let Err(e) = a2a.cancel_task(&task) {
                    log::warn!("CancelTask {task} failed: {e}");
                }
                in_flight.store(false, Ordering::SeqCst);
            });
            last_cancel = Some(Instant::now());
        }
        match a2a.task_state(task) {
            Ok(None) => return Ok(()),
            Ok(Some(state)) => {
                let state = TaskState::parse(&state);
                if !matches!(state, TaskState::Working | TaskState::Submitted) {
                    return Ok(());
                }
            }
            Err(e) => log::warn!("GetTask {task} failed: {e}"),
        }
        if Instant::now() >= deadline {
            return Err(still_running());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn still_running() -> Error {
    Msg::PreviousStillRunning.err()
}
