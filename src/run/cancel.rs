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
    let sent = a2a.cancel_task(&task);
    active.cancel_returned.store(true, Ordering::SeqCst);
    if let Err(e) = sent {
        log::info!("CancelTask {task} failed, retrying in the background: {e}");
        queue_cancel(a2a, Cancel::Again { task, attempt: 2 }, retry_delay(2));
    }
}

/// [`cancel_once`] off the caller's thread: for a caller that must not wait on a hung kernel (a
/// cancel request; a client that left; a run thread that learns its task after a Stop, whose
/// `CancelTask` could otherwise hold it for the call's 5 s deadline, past [`STOP_BOUND`]).
/// The calls queue for at most [`CANCELS_AT_ONCE`] sender threads, which leave when the queue
/// is empty: when thousands of clients leave at once, a thread and a connection each (as
/// before) meant thousands of connects to the kernel at the same instant and as many spare
/// descriptors, and the cancels were all seen 10–25 s later; a few senders in turn take each a
/// loopback round trip.
pub(super) fn cancel_in_background(a2a: &A2aClient, active: &Arc<ActiveRun>) {
    queue_cancel(a2a, Cancel::First(active.clone()), Duration::ZERO);
}

/// Queues a call, due after `delay`, and starts a sender if fewer than [`CANCELS_AT_ONCE`] run.
/// A failed call's retries queue here too: when the kernel is down or hung as thousands of
/// clients leave, a thread a retry (as before) meant thousands of threads and connects again.
fn queue_cancel(a2a: &A2aClient, cancel: Cancel, delay: Duration) {
    let mut queue = CANCELS.lock();
    let due = Instant::now() + delay;
    queue.jobs.push_back((a2a.clone(), cancel, due));
    if queue.senders < CANCELS_AT_ONCE {
        queue.senders += 1;
        drop(queue);
        if std::thread::Builder::new()
            .name("cancel".into())
            .spawn(send_cancels)
            .is_err()
        {
            // No thread to be had (the host's limits): the calls already queued wait for a sender
            // still running, or the next cancel's.
            CANCELS.lock().senders -= 1;
        }
    }
}

/// `CancelTask` calls sent at once (each a connection to the kernel while it is in flight).
pub(crate) const CANCELS_AT_ONCE: usize = 32;

/// A queued `CancelTask`: a run's first (once, whoever asks first), or a failed one's retry.
enum Cancel {
    First(Arc<ActiveRun>),
    Again { task: String, attempt: u32 },
}

struct CancelQueue {
    /// Calls in the order queued, each with the instant it is due.
    jobs: std::collections::VecDeque<(A2aClient, Cancel, Instant)>,
    senders: usize,
}

static CANCELS: Mutex<CancelQueue> = Mutex::new(CancelQueue {
    jobs: std::collections::VecDeque::new(),
    senders: 0,
});

/// A sender: the queued calls in turn (a retry not yet due waited for), until none is left.
fn send_cancels() {
    loop {
        let (a2a, cancel, due) = {
            let mut queue = CANCELS.lock();
            match queue.jobs.pop_front() {
                Some(job) => job,
                None => {
                    queue.senders -= 1;
                    return;
                }
            }
        };
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
        match cancel {
            Cancel::First(active) => cancel_once(&a2a, &active),
            Cancel::Again { task, attempt } => retry_cancel(&a2a, task, attempt),
        }
    }
}

/// Attempt `attempt` of a failed `CancelTask`; the next one is queued if it fails too.
fn retry_cancel(a2a: &A2aClient, task: String, attempt: u32) {
    match a2a.cancel_task(&task) {
        Ok(()) => {}
        Err(e) if attempt >= CANCEL_ATTEMPTS => log::warn!("CancelTask {task} failed: {e}"),
        Err(e) => {
            log::info!("CancelTask {task} failed (attempt {attempt}): {e}");
            let next = attempt + 1;
            queue_cancel(
                a2a,
                Cancel::Again {
                    task,
                    attempt: next,
                },
                retry_delay(next),
            );
        }
    }
}

/// How long after a failure attempt `attempt` is made (1 s, then 1.5 s).
fn retry_delay(attempt: u32) -> Duration {
    Duration::from_millis(500 * u64::from(attempt))
}

/// How many times a failed `CancelTask` is tried (each within the A2A client's cancel deadline).
const CANCEL_ATTEMPTS: u32 = 3;

/// How long a cancelled run's kernel may take to end the stream by itself (its last status comes
/// through) once it answered `CancelTask`, before the run's upstream connection is shut down.
pub(crate) const UPSTREAM_GRACE: Duration = Duration::from_millis(500);
/// A write to the client blocked this long after a Stop: the client is not reading, and its
/// socket is shut down (the run's last events cannot reach it anyway).
const STUCK_WRITE: Duration = Duration::from_millis(200);
/// The bound: by then both connections are shut down, whatever the run is doing.
pub(crate) const STOP_BOUND: Duration = Duration::from_secs(3);

/// Makes sure a cancelled run ends soon, whether or not its kernel answers and its client reads:
/// [`UPSTREAM_GRACE`] after its `CancelTask` came back (the kernel, which ends the cancelled
/// task's stream with its last status right then, is not cut in the middle of it) its upstream
/// connection is shut down (a kernel that ignores `CancelTask` and never ends the stream no
/// longer holds the run), a client whose write is blocked is cut at once, and at [`STOP_BOUND`]
/// both are. The grace does not count from the Stop: when thousands of clients leave at once,
/// their `CancelTask` calls queue at the kernel for longer than the grace, and each run would
/// be cut before its kernel could end it. A `CancelTask` that hangs is covered by the bound.
/// While the task is unknown the upstream stays open (up to the bound): cut then, the run could
/// never learn the task to cancel, and the kernel would work on; the run thread sends
/// `CancelTask` the moment the id arrives. The run then ends on its own thread (`RUN_ERROR
/// CANCELLED` for a client still reading) and frees the AG-UI thread.
pub(super) fn stop_soon(live: Arc<LiveRun>) {
    let mut stopping = STOPPING.lock();
    stopping.runs.push(Stopping {
        live,
        started: Instant::now(),
        grace_from: None,
        upstream_stopped: false,
        writing_since: None,
    });
    if !stopping.watched {
        stopping.watched = std::thread::Builder::new()
            .name("stop-watch".into())
            .spawn(watch_stops)
            .is_ok();
    }
}

/// A run being stopped, as [`watch_stops`] follows it.
struct Stopping {
    live: Arc<LiveRun>,
    started: Instant,
    /// When its `CancelTask` came back (the grace runs from then).
    grace_from: Option<Instant>,
    upstream_stopped: bool,
    /// Since when a write to its client was seen in progress at every look.
    writing_since: Option<Instant>,
}

struct StopList {
    runs: Vec<Stopping>,
    /// Whether the watcher thread runs (it leaves when no run is left to watch).
    watched: bool,
}

static STOPPING: Mutex<StopList> = Mutex::new(StopList {
    runs: Vec::new(),
    watched: false,
});

/// How often the watcher looks at the runs being stopped.
const WATCH_TICK: Duration = Duration::from_millis(50);

/// One thread follows every run being stopped (it was a thread a run, each waking every 50 ms:
/// with thousands of clients leaving at once, that was most of the two cores while the cancels
/// and the runs' ends waited for them).
fn watch_stops() {
    loop {
        std::thread::sleep(WATCH_TICK);
        let runs = std::mem::take(&mut STOPPING.lock().runs);
        let left: Vec<Stopping> = runs.into_iter().filter_map(watch_one).collect();
        let mut stopping = STOPPING.lock();
        stopping.runs.extend(left);
        if stopping.runs.is_empty() {
            stopping.watched = false;
            return;
        }
    }
}

/// One look at a run being stopped; `None` once the watcher is done with it.
fn watch_one(mut s: Stopping) -> Option<Stopping> {
    let live = &s.live;
    if live.has_ended() {
        return None;
    }
    if s.started.elapsed() >= STOP_BOUND {
        log::warn!(
            "run {} did not end within {:?} of its cancel; closing both connections",
            live.ids.run_id,
            STOP_BOUND
        );
        cut_upstream(live);
        // Its `RUN_ERROR` is for a client still reading (one that left needs nothing more). It
        // may wait for the run thread (and a client's write) a moment: not on the watcher.
        if !live.stream.is_closed() {
            let live = live.clone();
            std::thread::spawn(move || end_stream_at_bound(&live));
        }
        return None;
    }
    if s.grace_from.is_none() && cancel_came_back(live) {
        s.grace_from = Some(Instant::now());
    }
    let grace_over = s.grace_from.is_some_and(|t| t.elapsed() >= UPSTREAM_GRACE);
    let upstream_done = live.upstream_done.load(Ordering::SeqCst);
    if !s.upstream_stopped && grace_over && !upstream_done {
        log::info!(
            "run {}: the kernel did not end the cancelled stream within {:?}; closing it",
            live.ids.run_id,
            UPSTREAM_GRACE
        );
        cut_upstream(live);
        s.upstream_stopped = true;
    }
    // Sampled each tick, never waited on (the watcher serves every run): a write seen in
    // progress at each look for `STUCK_WRITE` is a client that takes no bytes.
    let writing = live.stream.write_in_progress();
    s.writing_since = if writing {
        s.writing_since.or(Some(Instant::now()))
    } else {
        None
    };
    if s.writing_since.is_some_and(|t| t.elapsed() >= STUCK_WRITE) {
        log::info!(
            "run {}: its client takes no bytes; closing its stream",
            live.ids.run_id
        );
        live.stream.shut();
    }
    Some(s)
}

/// Whether the run's task is known and its `CancelTask` came back.
fn cancel_came_back(live: &LiveRun) -> bool {
    let active = live.active.lock();
    let known = active.task_id.lock().is_some();
    known && active.cancel_returned.load(Ordering::SeqCst)
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
