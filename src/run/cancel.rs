//! The cancel extension, `POST /extensions/iac-code/v1/executions/{executionId}/cancel`, and the one
//! way any part of a run cancels its A2A task.

use crate::a2a::A2aClient;
use crate::app::App;
use crate::app::LiveRun;
use crate::error::{Error, Msg};
use crate::input::{self, CancelRequest};
use crate::projection::{End, Projection};
use crate::store::{ActiveRun, Slot};
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Cancels an execution of the thread named in `body`, under the thread's slot mutex. An active
/// run is flagged and its task cancelled (the run thread records the end); a waiting execution is
/// cancelled and marked terminal directly.
pub(crate) fn cancel_execution(app: &App, execution_id: &str, body: &[u8]) -> Result<Value, Error> {
    let request = input::parse_cancel(body)?;
    let slot = app.store.slot(&request.thread_id);
    let result = cancel_locked(app, &slot, execution_id, &request);
    drop(slot);
    app.store.release(&request.thread_id);
    result
}

fn cancel_locked(
    app: &App,
    slot: &Arc<Mutex<Slot>>,
    execution_id: &str,
    request: &CancelRequest,
) -> Result<Value, Error> {
    let guard = slot.lock();
    let mut doc = app.store.load(&request.thread_id)?.ok_or_else(not_found)?;
    let Some(exec) = doc.execution.clone() else {
        return Err(not_found());
    };
    let reply = |status: &str| json!({"executionId": execution_id, "status": status});
    if exec.execution_id != execution_id {
        return if doc.is_terminal(execution_id) {
            Ok(reply("already_terminal"))
        } else {
            Err(not_found())
        };
    }
    if exec.ros_invocation_id != request.ros_invocation_id {
        return Err(not_found());
    }
    if let Some(active) = guard
        .active
        .as_ref()
        .filter(|a| a.execution_id == execution_id)
    {
        // The run thread owns the document; it records the end when the stream stops. The
        // answer does not wait for the kernel: CancelTask goes (and is retried) in the
        // background, and a run that does not end by itself is stopped (`stop_soon`).
        active.cancelled.store(true, Ordering::SeqCst);
        let active = active.clone();
        drop(guard);
        cancel_in_background(&app.a2a, &active);
        if let Some(live) = app.runs.find(execution_id) {
            stop_soon(live);
        }
        return Ok(reply("cancelled"));
    }
    if doc.is_terminal(execution_id) {
        return Ok(reply("already_terminal"));
    }
    if doc.running_elsewhere() {
        // The replaced process (an upgrade's drain) runs it and records its end once the
        // kernel stops the task.
        drop(guard);
        if let Some(task) = &exec.task_id {
            if let Err(e) = app.a2a.cancel_task(task) {
                log::warn!("CancelTask {task} failed: {e}");
            }
        }
        return Ok(reply("cancelled"));
    }
    // Closed durably first, so no resume can apply meanwhile; the kernel is told after the
    // thread's lock is released (CancelTask is bounded, but a hung kernel holds no one).
    doc.mark_terminal();
    app.store.save(&doc)?;
    drop(guard);
    if let Some(task) = &exec.task_id {
        if let Err(e) = app.a2a.cancel_task(task) {
            log::warn!("CancelTask {task} failed: {e}");
        }
    }
    Ok(reply("cancelled"))
}

fn not_found() -> Error {
    Msg::ExecutionNotFound.err()
}

/// Cancels the run's A2A task once, whoever asks first (a disconnect, an error, the cancel
/// extension, a shutdown).
pub(super) fn cancel_once(a2a: &A2aClient, active: &ActiveRun) {
    // Without a task id there is nothing to cancel yet; a later call (once it is known) will.
    let Some(task) = active.task_id.lock().clone() else {
        return;
    };
    if active.cancel_sent.swap(true, Ordering::SeqCst) {
        return;
    }
    // A burst of cancels (hundreds of clients leaving at once) can outlast one call's deadline,
    // and a task left running would hold its context: a transport failure is retried, bounded,
    // in the background, so the caller (a cancel request, a run's end) waits for one call only.
    if let Err(e) = a2a.cancel_task(&task) {
        log::info!("CancelTask {task} failed, retrying in the background: {e}");
        let a2a = a2a.clone();
        std::thread::spawn(move || retry_cancel(&a2a, &task));
    }
}

/// [`cancel_once`] on a thread of its own: for a caller that must not wait on a hung kernel (a
/// cancel request; a run thread that learns its task after a Stop, whose `CancelTask` could
/// otherwise hold it for the call's 5 s deadline, past [`STOP_BOUND`]).
pub(super) fn cancel_in_background(a2a: &A2aClient, active: &Arc<ActiveRun>) {
    let (a2a, active) = (a2a.clone(), active.clone());
    std::thread::spawn(move || cancel_once(&a2a, &active));
}

fn retry_cancel(a2a: &A2aClient, task: &str) {
    for attempt in 2..=CANCEL_ATTEMPTS {
        std::thread::sleep(std::time::Duration::from_millis(500 * u64::from(attempt)));
        match a2a.cancel_task(task) {
            Ok(()) => return,
            Err(e) if attempt == CANCEL_ATTEMPTS => log::warn!("CancelTask {task} failed: {e}"),
            Err(e) => log::info!("CancelTask {task} failed (attempt {attempt}): {e}"),
        }
    }
}

/// How many times a failed `CancelTask` is tried (each within the A2A client's cancel deadline).
const CANCEL_ATTEMPTS: u32 = 3;

/// How long a cancelled run's kernel may take to end the stream by itself (its last status comes
/// through) before the run's upstream connection is shut down.
pub(crate) const UPSTREAM_GRACE: Duration = Duration::from_millis(500);
/// A write to the client blocked this long after a Stop: the client is not reading, and its
/// socket is shut down (the run's last events cannot reach it anyway).
const STUCK_WRITE: Duration = Duration::from_millis(200);
/// The bound: by then both connections are shut down, whatever the run is doing.
pub(crate) const STOP_BOUND: Duration = Duration::from_secs(3);

/// Makes sure a cancelled run ends soon, whether or not its kernel answers and its client reads:
/// [`UPSTREAM_GRACE`] after its task is known (the cancel, or the moment the kernel names the
/// task) its upstream connection is shut down (a kernel that ignores `CancelTask` and never ends
/// the stream no longer holds the run), a client whose write is blocked is cut at once, and at
/// [`STOP_BOUND`] both are. While the task is unknown the upstream stays open (up to the bound):
/// cut then, the run could never learn the task to cancel, and the kernel would work on; the run
/// thread sends `CancelTask` the moment the id arrives. The run then ends on its own thread
/// (`RUN_ERROR CANCELLED` for a client still reading) and frees the AG-UI thread.
pub(super) fn stop_soon(live: Arc<LiveRun>) {
    std::thread::spawn(move || {
        let started = Instant::now();
        let mut upstream_stopped = false;
        let task_known = || live.active.lock().task_id.lock().is_some();
        let mut grace_from = task_known().then_some(started);
        while !live.has_ended() && started.elapsed() < STOP_BOUND {
            if grace_from.is_none() && task_known() {
                grace_from = Some(Instant::now());
            }
            let grace_over = grace_from.is_some_and(|t| t.elapsed() >= UPSTREAM_GRACE);
            if !upstream_stopped && grace_over {
                log::info!(
                    "run {}: the kernel did not end the cancelled stream within {:?}; closing it",
                    live.ids.run_id,
                    UPSTREAM_GRACE
                );
                cut_upstream(&live);
                upstream_stopped = true;
            }
            if live.stream.write_blocked_for(STUCK_WRITE) {
                log::info!(
                    "run {}: its client takes no bytes; closing its stream",
                    live.ids.run_id
                );
                live.stream.shut();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if !live.has_ended() {
            log::warn!(
                "run {} did not end within {:?} of its cancel; closing both connections",
                live.ids.run_id,
                STOP_BOUND
            );
            cut_upstream(&live);
            end_stream_at_bound(&live);
        }
    });
}

/// The client's stream at the bound: the run thread, its upstream now cut, usually ends it
/// itself within moments (its spans closed); if not (a thread held elsewhere, or starved on a
/// loaded machine), its `RUN_ERROR CANCELLED` and the end of the body are written for it, so a
/// stopped stream always ends with `RUN_ERROR` (a client that takes no bytes is just cut). The
/// run thread's own end then goes to the replay buffer and the conversation only.
fn end_stream_at_bound(live: &LiveRun) {
    let until = Instant::now() + STUCK_WRITE;
    while !live.has_ended() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
    if live.has_ended() || live.stream.is_closed() {
        return;
    }
    let mut out = Vec::new();
    let end = End::Failed(Msg::Cancelled.err());
    Projection::new(live.ids.clone(), live.lang).finish(&end, &mut out);
    live.stream.abort(&out, STUCK_WRITE);
}

/// Shuts the run's own upstream connections down, marked so the run knows the kernel may still
/// be running its task.
fn cut_upstream(live: &LiveRun) {
    live.task_may_outlive.store(true, Ordering::SeqCst);
    live.upstream.stop();
}
