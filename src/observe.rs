//! Re-attach after a reload: the thread lookup and the read-only observe stream. A console that reloads has only its thread id (kept in the URL) and the caller identity it
//! always presents. [`thread_status`] answers `GET /extensions/iac-code/v1/threads/{threadId}`
//! with the current execution, its state and the pending interrupts exactly as they were
//! announced, so the page can redraw an approval card and resume. [`admit_observer`] and
//! [`observe`] serve `POST /extensions/iac-code/v1/executions/{executionId}/subscribe` (the
//! reference adapter's route and body): `RUN_STARTED`, the session event, the turn so far as one
//! `MESSAGES_SNAPSHOT`, then the task's live updates through the same [`Projection`] a run uses,
//! until the first wait or end. An observer never takes the thread, never cancels anything, and
//! a client that leaves only ends its own stream. Who may look (the binding check): the caller presents either `rosInvocationId` equal to the
//! current execution's, or `userId` equal to the user id the thread is bound to (only when the
//! thread has one). Anything else, and an unknown thread, is the same 404, so a guessed thread id
//! reveals nothing. The bearer token (when configured) is checked first, as for `POST /`.

use crate::a2a::frame::TaskState;
use crate::app::App;
use crate::error::{Error, Lang, Msg};
use crate::feed::{Feed, Next, Start};
use crate::history;
use crate::interrupts;
use crate::projection::{Durable, End, Projection, RunIds};
use crate::run::{durable_of, run_ids};
use crate::store::{ActiveRun, Execution, ThreadDoc};
use crate::stream::SseStream;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod body;
pub(crate) use body::{subscribe_body, Asked, Subscribe};

/// How long an observer waits for what the run thread is about to record: the task id of a run
/// that just started, the interrupts of a run that just reached a wait.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(5);
const POLL: Duration = Duration::from_millis(20);

/// A thread as the store and the thread's slot show it right now.
pub(crate) struct Snapshot {
    doc: ThreadDoc,
    active: Option<Arc<ActiveRun>>,
}

fn look(app: &App, thread_id: &str) -> Result<Option<Snapshot>, Error> {
    let slot = app.store.slot(thread_id);
    let result = (|| {
        let guard = slot.lock();
        let doc = app.store.load(thread_id)?;
        Ok(doc.map(|doc| Snapshot {
            doc,
            active: guard.active.clone(),
        }))
    })();
    drop(slot);
    app.store.release(thread_id);
    result
}

fn thread_not_found() -> Error {
    Msg::ThreadNotFound.err()
}

fn not_found() -> Error {
    Msg::ObservedNotFound.err()
}

fn identity_changed() -> Error {
    Msg::ObservedIdentityMismatch.err()
}

/// The pending interrupts of the current execution, rebuilt from what was persisted before they
/// were announced: same ids, schemas, metadata and `expiresAt`.
fn pending_interrupts(doc: &ThreadDoc, lang: Lang) -> Vec<Value> {
    doc.execution.as_ref().map_or_else(Vec::new, |e| {
        e.pending
            .values()
            .map(|p| {
                interrupts::to_interrupt(&p.value, p.expires_at.as_deref().unwrap_or(""), lang)
            })
            .collect()
    })
}

/// Who asks about a thread: a query's `rosInvocationId` and `userId`, decoded (`None` when
/// absent or empty).
pub(crate) struct Identity {
    pub(crate) ros: Option<String>,
    pub(crate) user: Option<String>,
}

/// The thread, when `who` may see it: the current execution's `rosInvocationId`, or the bound
/// `userId`. An unknown thread and a wrong identity are the same 404.
pub(crate) fn identified(app: &App, thread_id: &str, who: &Identity) -> Result<Snapshot, Error> {
    if who.ros.is_none() && who.user.is_none() {
        return Err(Msg::LookupNeedsIdentity.err());
    }
    let snap = look(app, thread_id)?.ok_or_else(thread_not_found)?;
    let exec = snap.doc.execution.as_ref();
    let by_ros = who.ros.is_some() && exec.map(|e| &e.ros_invocation_id) == who.ros.as_ref();
    let by_user = who.user.is_some() && snap.doc.user_id.is_some() && snap.doc.user_id == who.user;
    if !by_ros && !by_user {
        return Err(thread_not_found());
    }
    Ok(snap)
}

/// `GET /extensions/iac-code/v1/threads/{threadId}?rosInvocationId=…|userId=…`, its query's
/// identities already decoded (`None` when absent or empty). An idle thread names its newest
/// execution and run too: a join of them answers the kept conversation.
pub(crate) fn thread_status(
    app: &App,
    thread_id: &str,
    ros: Option<String>,
    user: Option<String>,
    lang: Lang,
) -> Result<Value, Error> {
    let Snapshot { doc, active } = identified(app, thread_id, &Identity { ros, user })?;
    let exec = doc.execution.as_ref();
    let mut out = json!({"threadId": doc.thread_id, "state": "idle", "interrupts": []});
    let Some(exec) = exec else {
        return Ok(out);
    };
    out["executionId"] = json!(exec.execution_id);
    out["rosInvocationId"] = json!(exec.ros_invocation_id);
    let state = match &active {
        Some(a) => {
            out["executionId"] = json!(a.execution_id);
            "running"
        }
        None if !exec.pending.is_empty() => {
            out["interrupts"] = Value::Array(pending_interrupts(&doc, lang));
            "waiting"
        }
        None if doc.running_elsewhere() => "running", // in an upgrade's old process
        None => "idle",
    };
    out["state"] = json!(state);
    if let Some(run) = doc.run_digests.newest() {
        out["runId"] = json!(run);
    }
    Ok(out)
}

/// What an admitted observer watches.
pub(crate) struct Observer {
    /// The run is live (or just ended) in this process: its replay buffer answers, and how.
    local: Option<(Arc<Feed>, Start)>,
    ids: RunIds,
    lang: Lang,
    task_id: String,
    session_id: Option<String>,
    durable: Durable,
    /// `Some`: the execution waits for these interrupts (nothing runs upstream).
    waiting: Option<Vec<Value>>,
    /// A local run whose fold outgrew its cap, joined from the kernel: this observer still
    /// counts as its watcher (the detach grace) until it is dropped.
    _watching: Option<Watching>,
    /// The thread's kept conversation, the start of a join's snapshot (read before the feed
    /// was attached, so this turn's part is the feed's or the kernel's).
    past: Vec<Value>,
    history_limit: Option<usize>,
    /// The execution ended: the join is the kept conversation alone.
    idle: bool,
}

/// Holds a run's feed watched; leaving it (however the observer ends) is the unwatch.
struct Watching(Arc<Feed>);

impl Drop for Watching {
    fn drop(&mut self) {
        self.0.unwatch();
    }
}

/// Checks a subscribe request against the thread (the reference's rules) before any byte of
/// the stream: 400 for a bad body, 404 without a current execution, 409 when the execution,
/// `rosInvocationId` or `runId` is not the thread's current one. An ended execution is joined
/// with the kept conversation alone.
pub(crate) fn admit_observer(
    app: &App,
    execution_id: &str,
    asked: Asked<'_>,
    lang: Lang,
) -> Result<Observer, Error> {
    let mut sub = subscribe_body(asked.body)?;
    if let Some(q) = asked.history_limit {
        sub.history_limit = Some(q.parse().map_err(|_| Msg::ObserveIdentityInvalid.err())?);
    }
    let (snap, exec) = current_execution(app, execution_id, &sub)?;
    let past = app.history.messages(&sub.thread_id);
    let ids = run_ids(
        &snap.doc,
        &exec.execution_id,
        &sub.run_id,
        None,
        &sub.ros_invocation_id,
    );
    let mut watching = None;
    if let Some(feed) = app.feeds.get(execution_id) {
        // Exactly what this process sent: no kernel call, the same ids and text.
        match feed.attach(asked.last_event_id, &past, sub.history_limit) {
            Start::Kernel => watching = Some(Watching(feed)),
            start => return Ok(Observer::local(feed, start, ids, lang)),
        }
    }
    let mut obs = kernel_observer(snap, exec, ids, lang, watching)?;
    obs.past = past;
    obs.history_limit = sub.history_limit;
    Ok(obs)
}

/// The thread as it is now and its current execution, which must be the one the request names,
/// from the same invocation, with the request's run admitted on the thread.
fn current_execution(
    app: &App,
    execution_id: &str,
    sub: &Subscribe,
) -> Result<(Snapshot, Execution), Error> {
    let snap = look(app, &sub.thread_id)?.ok_or_else(not_found)?;
    let exec = snap.doc.execution.clone().ok_or_else(not_found)?;
    if exec.execution_id != execution_id
        || exec.ros_invocation_id != sub.ros_invocation_id
        || snap.doc.run_digests.get(&sub.run_id).is_none()
    {
        return Err(identity_changed());
    }
    Ok((snap, exec))
}

/// An observer of the kernel's task: the execution waits for input (its interrupts are
/// announced again), or runs (in this process, or left running by a killed adapter) and is
/// followed there. `watching` holds a local run's feed watched while the kernel answers for it.
fn kernel_observer(
    snap: Snapshot,
    exec: Execution,
    ids: RunIds,
    lang: Lang,
    watching: Option<Watching>,
) -> Result<Observer, Error> {
    let Snapshot { doc, active } = snap;
    let live = active.filter(|a| a.execution_id == exec.execution_id);
    let waiting =
        (live.is_none() && !exec.pending.is_empty()).then(|| pending_interrupts(&doc, lang));
    // A run a killed adapter left streaming: the kernel's task runs on without a client (the
    // A2A SDK keeps consuming it in the background), so it is followed there, as a live one is.
    let left_running = live.is_none()
        && exec.pending.is_empty()
        && !doc.terminal_execution_ids.contains(&exec.execution_id);
    let task_id = match (&live, &exec.task_id) {
        (Some(a), _) => wait_for_task(a).ok_or_else(not_found)?,
        (None, Some(t)) if waiting.is_some() || left_running => t.clone(),
        // Ended (or never started upstream): nothing runs; the join is the conversation.
        _ => {
            let mut obs = Observer::local_less(ids, lang);
            obs.idle = true;
            return Ok(obs);
        }
    };
    // Nothing is trimmed as sent by an earlier run: this client's text so far is the catch-up,
    // taken from the kernel's task itself.
    let durable = Durable {
        text_digests: Default::default(),
        ..durable_of(&exec)
    };
    let mut obs = Observer::local_less(ids, lang);
    obs.task_id = task_id;
    obs.session_id = doc.iac_code_session_id.clone();
    obs.durable = durable;
    obs.waiting = waiting;
    obs._watching = watching;
    Ok(obs)
}

/// The task id of a run that has just started (bounded wait).
fn wait_for_task(active: &ActiveRun) -> Option<String> {
    let deadline = Instant::now() + SETTLE_TIMEOUT;
    loop {
        if let Some(t) = active.task_id.lock().clone() {
            return Some(t);
        }
        if Instant::now() >= deadline || active.is_cancelled() {
            return None;
        }
        std::thread::sleep(POLL);
    }
}

impl Observer {
    /// An observer of a run this process streams: its replay buffer answers, from `start`.
    fn local(feed: Arc<Feed>, start: Start, ids: RunIds, lang: Lang) -> Observer {
        let mut obs = Observer::local_less(ids, lang);
        obs.local = Some((feed, start));
        obs
    }

    /// An observer with nothing attached yet.
    fn local_less(ids: RunIds, lang: Lang) -> Observer {
        Observer {
            local: None,
            ids,
            lang,
            task_id: String::new(),
            session_id: None,
            durable: Durable::default(),
            waiting: None,
            _watching: None,
            past: Vec::new(),
            history_limit: None,
            idle: false,
        }
    }

    /// The join's `MESSAGES_SNAPSHOT` (`history::join_snapshot`).
    fn snapshot(&self, task: Option<&Value>) -> Value {
        history::join_snapshot(&self.past, task, self.history_limit)
    }

    /// Which answer this is (`X-AGUI-Resume`): `exact` (the events after the client's cursor)
    /// or `join` (a run of its own: the turn so far, then the live tail).
    pub(crate) fn resume_kind(&self) -> &'static str {
        match &self.local {
            Some((_, Start::Exact(_))) => "exact",
            _ => "join",
        }
    }

    /// The observer will not stream after all (its client left before the head was written).
    pub(crate) fn abandon(self) {
        if let Some((feed, _)) = self.local {
            feed.unwatch();
        }
    }
}

/// Runs an observer to its end on the calling thread, writing to `stream`.
pub(crate) fn observe(app: &App, mut obs: Observer, stream: &SseStream) {
    stream.set_tag(&obs.ids.execution_id);
    if let Some((feed, start)) = obs.local.take() {
        tail(&feed, start, stream);
        feed.unwatch();
        return;
    }
    if obs.idle {
        let mut proj = Projection::new(obs.ids.clone(), obs.lang);
        let mut out = Vec::new();
        proj.start(&mut out);
        out.push(obs.snapshot(None));
        proj.finish(&End::Success, &mut out);
        stream.send(&out);
        stream.finish();
        return;
    }
    let mut proj = Projection::new(obs.ids.clone(), obs.lang).resuming(
        &obs.task_id,
        obs.session_id.as_deref(),
        obs.durable.clone(),
    );
    let mut out = Vec::new();
    proj.start(&mut out);
    let finish = match &obs.waiting {
        Some(interrupts) => {
            let task = app.a2a.get_task(&obs.task_id).ok().flatten();
            out.extend(history::waiting_join(
                &obs.past,
                task.as_ref(),
                obs.history_limit,
            ));
            End::Interrupt(interrupts.clone())
        }
        None => {
            if !stream.send(&out) {
                return;
            }
            out.clear();
            match follow(app, &obs, &mut proj, stream) {
                Some(finish) => finish,
                None => return, // the client left: its stream is closed, the run goes on
            }
        }
    };
    proj.finish(&finish, &mut out);
    stream.send(&out);
    stream.finish();
}

/// Streams a local run's replay buffer: the join's prelude or nothing (an exact resume), then
/// every frame after the position until the run's end. An observer that fell behind the buffer's
/// cap gets the end of the body without the run's end: its client re-attaches and joins.
fn tail(feed: &Feed, start: Start, stream: &SseStream) {
    let mut after = match start {
        Start::Exact(at) => at,
        Start::Kernel => return, // never local: admit_observer asks the kernel instead
        Start::Join(body, count, at) => {
            if !stream.send_frames(&body, count) {
                return;
            }
            at
        }
    };
    while !stream.is_closed() {
        match feed.next(&mut after, TAIL_WAIT) {
            Next::Frames(body, count) => {
                if !stream.send_frames(&body, count) {
                    return;
                }
            }
            Next::Idle => {}
            Next::Done => break,
            Next::Lagged => {
                log::info!("observer fell behind the replay buffer; ending its stream");
                break;
            }
        }
    }
    stream.finish();
}

/// How long an observer waits for frames before it checks its own client again.
const TAIL_WAIT: Duration = Duration::from_millis(500);

/// Reads `SubscribeToTask` into the client until the task reaches a wait or an end. `None`:
/// the client left.
fn follow(app: &App, obs: &Observer, proj: &mut Projection, stream: &SseStream) -> Option<End> {
    let mut out = Vec::new();
    let mut upstream = match app.a2a.subscribe_to_task(&obs.task_id) {
        Ok(s) => s,
        Err(_) => return Some(settled(app, obs)),
    };
    let mut first = true;
    loop {
        if stream.is_closed() {
            return None;
        }
        let item = match upstream.next_result() {
            Ok(Some(item)) => item,
            // Not running any more, or the subscription ended before an end: ask the store
            // and the kernel what became of it.
            Ok(None) | Err(_) => return Some(settled(app, obs)),
        };
        let item = if first && item.get("task").is_some() {
            // The task as it is now: its text so far is the catch-up; the projection then
            // only sees what follows.
            out.push(obs.snapshot(Some(&item["task"])));
            without_text(item)
        } else {
            if first {
                out.push(obs.snapshot(None));
            }
            item
        };
        first = false;
        let end = match proj.on_item(&item, &mut out) {
            Ok(end) => end,
            Err(e) => Some(End::Failed(e)),
        };
        if !upstream.has_buffered() || end.is_some() {
            if !stream.send(&out) {
                return None;
            }
            out.clear();
        }
        match end {
            None => {}
            Some(End::Interrupt(_)) => return Some(settled(app, obs)),
            Some(End::Success) => return Some(End::Success),
            Some(End::Failed(e)) => return Some(End::Failed(e)),
        }
    }
}

/// A task snapshot without its text (history and status message): what the projection sees of
/// the subscription's first item once its text went into the catch-up.
fn without_text(mut item: Value) -> Value {
    if let Some(task) = item.get_mut("task").and_then(Value::as_object_mut) {
        task.remove("history");
        if let Some(status) = task.get_mut("status").and_then(Value::as_object_mut) {
            status.remove("message");
        }
    }
    item
}

/// How the observed execution ended, once the run thread recorded it: the interrupts it
/// persisted (exactly as it announced them), else the kernel's final state of the task.
fn settled(app: &App, obs: &Observer) -> End {
    let deadline = Instant::now() + SETTLE_TIMEOUT;
    let mut last = None;
    while Instant::now() < deadline {
        match look(app, &obs.ids.thread_id) {
            Ok(Some(snap)) => {
                let busy = snap
                    .active
                    .as_ref()
                    .is_some_and(|a| a.execution_id == obs.ids.execution_id);
                if !busy {
                    last = Some(snap.doc);
                    break;
                }
            }
            Ok(None) => break,
            Err(e) => return End::Failed(e),
        }
        std::thread::sleep(POLL);
    }
    if let Some(doc) = &last {
        let same = doc
            .execution
            .as_ref()
            .is_some_and(|e| e.execution_id == obs.ids.execution_id && !e.pending.is_empty());
        if same {
            return End::Interrupt(pending_interrupts(doc, obs.lang));
        }
    }
    let state = app
        .a2a
        .task_state(&obs.task_id)
        .ok()
        .flatten()
        .map_or(TaskState::Other, |s| TaskState::parse(&s));
    match state {
        TaskState::Completed | TaskState::InputRequired => End::Success,
        TaskState::Canceled => End::Failed(Msg::Cancelled.err()),
        TaskState::Failed | TaskState::Rejected | TaskState::AuthRequired => {
            End::Failed(Msg::ObservedFailed.err())
        }
        TaskState::Submitted | TaskState::Working | TaskState::Other => {
            End::Failed(Msg::ObservedLost.err())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_task_item_reaches_the_projection_without_its_text() {
        let item =
            json!({"task": {"id": "t", "history": [1], "status": {"state": "W", "message": {}}}});
        assert_eq!(
            without_text(item),
            json!({"task": {"id": "t", "status": {"state": "W"}}})
        );
    }
}
