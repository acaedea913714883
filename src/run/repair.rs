//! Crash repair: the execution a killed or stopped adapter left running is stopped and closed
//! before the thread's next turn, so the kernel does not refuse it with "Task is already working".

use super::Run;
use crate::a2a::frame::TaskState;
use crate::a2a::A2aClient;
use crate::error::{Error, Msg};
use crate::store::{ActiveRun, Execution};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How long the repair of an unfinished execution may wait for its task to stop (a client that
/// left frees its thread at once; the real kernel takes up to ~15 s to wind its task down).
const REPAIR_TIMEOUT: Duration = Duration::from_secs(15);

impl Run<'_> {
    /// Stops and closes the thread's unfinished execution, then installs `next` and makes it the
    /// thread's active run.
    pub(super) fn repair(&mut self, next: Execution) -> Result<(), Error> {
        let old = self.execution().clone();
        log::info!(
            "thread {}: execution {} never ended; stopping it before the new turn",
            self.input.thread_id,
            old.execution_id
        );
        if let Some(task) = &old.task_id {
            stop_task(&self.app.a2a, &self.active, task)?;
            // The cut turn kept what was streamed; the kernel's task completes it.
            if let Ok(Some(task)) = self.app.a2a.get_task(task) {
                (self.app.history).complete_from_task(&self.input.thread_id, &task);
            }
        }
        self.doc.mark_terminal();
        self.doc.execution = Some(next);
        self.save()?;
        let fresh = ActiveRun::new(&self.execution().execution_id, None);
        self.guard.replace(fresh.clone());
        *self.live.active.lock() = fresh.clone();
        self.active = fresh;
        Ok(())
    }
}

/// Cancels `task` and waits (bounded) until the kernel no longer runs it.
fn stop_task(a2a: &A2aClient, active: &ActiveRun, task: &str) -> Result<(), Error> {
    let deadline = Instant::now() + REPAIR_TIMEOUT;
    let mut last_cancel: Option<Instant> = None;
    loop {
        // Also an input wait nobody recorded is cancelled: no client can ever answer it.
        if last_cancel.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
            active.cancel_sent.store(true, Ordering::SeqCst);
            if let Err(e) = a2a.cancel_task(task) {
                log::warn!("CancelTask {task} failed: {e}");
            }
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
