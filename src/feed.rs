//! Replay buffers: what a run sent, kept so a client that lost its connection continues exactly
//! where it was (`Last-Event-ID`), or joins the turn so far, and the detach grace.
//!
//! The run thread numbers and writes each event once, into its execution's [`Feed`] (a ring of
//! frames capped in bytes, plus the turn folded for a join), then to its own client. Observers
//! (the subscribe route) tail the feed on their own request threads: a `Condvar` wakes them, and
//! they copy frames out under the lock and write them without it, so a slow observer never holds
//! the run. No async: one mutex and one condition variable per execution.
//!
//! The grace: with `--detach-grace` above 0, a run whose last watcher (its own client or an
//! observer) left is cancelled only if nobody re-attached when the grace ran out. A feed is
//! dropped once its run ended and the grace ran out (at once with a grace of 0).

mod fold;
mod ring;

use crate::events::{DeltaSpans, EventType, Serialized};
use crate::stream::cursor;
use fold::Fold;
use parking_lot::{Condvar, Mutex, MutexGuard as Guard};
use ring::Ring;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

type Hook = Box<dyn Fn() + Send + Sync>;

/// The most a reader copies out of a ring at once: a reader far behind (an observer, a thread's
/// feed) holds this much in transit, not the whole ring.
const COPY_MAX: usize = 64 * 1024;

/// The feeds of this process, by execution id (one per execution: a resume replaces it).
pub struct Feeds {
    map: Arc<Mutex<HashMap<String, Arc<Feed>>>>,
    cap: usize,
    grace: Duration,
}

/// One run's frames and the turn so far.
pub struct Feed {
    tag: String,
    grace: Duration,
    state: Mutex<State>,
    changed: Condvar,
    /// Cancels the run: the grace ran out with nobody watching.
    expire: Mutex<Option<Hook>>,
}

struct State {
    ring: Ring,
    cap: usize,
    /// The position the fold stands for (the newest event that is not the run's end).
    folded: u64,
    /// The turn so far, for a join; `None` once the events folded into it outgrew the cap, so
    /// memory stays bounded whatever the run does (a join then asks the kernel, as after a
    /// restart).
    fold: Option<Fold>,
    /// What the fold holds, in bytes, counted from the events folded so far ([`fold_cost`]).
    fold_bytes: usize,
    ended: Option<Instant>,
    watchers: usize,
    /// Bumped at each detach, so an older grace timer knows it is stale.
    detaches: u64,
}

/// How an observer starts.
pub(crate) enum Start {
    /// The cursor is held: frames after it follow.
    Exact(u64),
    /// A run of its own: these frames (the turn so far), then frames after the position.
    Join(Vec<u8>, usize, u64),
    /// No cursor held and the fold outgrew its cap: the join comes from the kernel.
    Kernel,
}

/// What an observer gets next.
pub(crate) enum Next {
    Frames(Vec<u8>, usize),
    /// Nothing new within the wait.
    Idle,
    /// The run ended and everything was delivered.
    Done,
    /// The observer fell behind the cap: its next frame is gone.
    Lagged,
}

impl Feeds {
    pub fn start(cap: usize, grace: Duration) -> Feeds {
        let feeds = Feeds {
            map: Arc::new(Mutex::new(HashMap::new())),
            cap: cap.max(1),
            grace,
        };
        if !grace.is_zero() {
            let map = feeds.map.clone();
            std::thread::Builder::new()
                .name("feeds".into())
                .spawn(move || sweep(map, grace))
                .expect("spawn feeds thread");
        }
        feeds
    }

    /// A new run's feed, replacing an earlier run's of the same execution.
    pub fn open(&self, execution_id: &str) -> Arc<Feed> {
        let feed = Arc::new(Feed {
            tag: cursor::tag(execution_id),
            grace: self.grace,
            state: Mutex::new(State {
                ring: Ring::new(self.cap),
                cap: self.cap,
                folded: 0,
                fold: Some(Fold::default()),
                fold_bytes: 0,
                ended: None,
                watchers: 0,
                detaches: 0,
            }),
            changed: Condvar::new(),
            expire: Mutex::new(None),
        });
        self.map
            .lock()
            .insert(execution_id.to_string(), feed.clone());
        feed
    }

    pub(crate) fn get(&self, execution_id: &str) -> Option<Arc<Feed>> {
        self.map.lock().get(execution_id).cloned()
    }

    /// The run ended: its feed stays for the grace (observers already attached keep theirs).
    pub(crate) fn ended(&self, execution_id: &str, feed: &Arc<Feed>) {
        feed.end();
        if self.grace.is_zero() {
            let mut map = self.map.lock();
            if map.get(execution_id).is_some_and(|f| Arc::ptr_eq(f, feed)) {
                map.remove(execution_id);
            }
        }
    }

    /// Whether the execution's run goes on with nobody watching (within its grace).
    pub(crate) fn detached(&self, execution_id: &str) -> bool {
        self.get(execution_id).is_some_and(|f| {
            let st = f.state.lock();
            st.watchers == 0 && st.ended.is_none()
        })
    }

    /// Held feeds and their buffered bytes (the bench's figure).
    pub fn held(&self) -> (usize, usize) {
        let map = self.map.lock();
        let bytes = map
            .values()
            .map(|f| {
                let st = f.state.lock();
                st.ring.bytes + st.fold.as_ref().map_or(0, |_| st.fold_bytes)
            })
            .sum();
        (map.len(), bytes)
    }
}

/// Drops the feeds whose run ended more than the grace ago.
fn sweep(map: Arc<Mutex<HashMap<String, Arc<Feed>>>>, grace: Duration) {
    let period = (grace / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
    loop {
        std::thread::sleep(period);
        map.lock()
            .retain(|_, f| f.state.lock().ended.is_none_or(|t| t.elapsed() < grace));
    }
}

impl Feed {
    /// What cancels the run when the grace runs out unwatched.
    pub(crate) fn on_expire(&self, hook: Hook) {
        *self.expire.lock() = Some(hook);
    }

    /// The user's message of the turn, for a join's snapshot.
    /// It counts towards the fold's cap like the events: a message larger than the replay
    /// buffer is not kept for the rest of the run (a join then asks the kernel, as for a turn
    /// that outgrew the cap), so a 12 MiB paste is not held twice while the run streams.
    pub(crate) fn set_user(&self, message: Value) {
        let mut st = self.state.lock();
        let bytes = message["content"].as_str().map_or(0, str::len);
        st.fold_bytes += bytes;
        if st.fold_bytes > st.cap && st.fold.is_some() {
            log::info!(
                "the user's message outgrew the replay buffer cap; a join will ask the kernel"
            );
            st.fold = None;
        }
        if let Some(fold) = st.fold.as_mut() {
            fold.set_user(message);
        }
    }

    /// Numbers `events`, keeps them (dropping the oldest beyond the cap) and returns their frames.
    pub fn push(&self, events: &(impl Serialized + ?Sized)) -> Vec<u8> {
        let mut body = Vec::with_capacity(256 * events.count());
        self.push_into(events, &mut body);
        body
    }

    /// [`Feed::push`] into the caller's buffer (cleared first): a run reuses one, so a frame
    /// costs no allocation.
    pub fn push_into(&self, events: &(impl Serialized + ?Sized), body: &mut Vec<u8>) {
        body.clear();
        let mut st = self.state.lock();
        events.each_event(&mut |json, spans| {
            let seq = cursor::next_seq();
            let start = body.len();
            cursor::push_frame(body, (&self.tag, seq, None), json);
            st.ring.push(seq, &body[start..]);
            if fold_event(&mut st, json, spans) {
                st.folded = seq;
            }
        });
        if st.fold_bytes > st.cap && st.fold.is_some() {
            log::info!("the turn outgrew the replay buffer cap; a join will ask the kernel");
            st.fold = None;
        }
        drop(st);
        self.changed.notify_all();
    }

    fn end(&self) {
        self.state.lock().ended = Some(Instant::now());
        self.changed.notify_all();
    }

    /// One more client reads this run (its own, or an observer).
    pub(crate) fn watch(&self) {
        self.state.lock().watchers += 1;
        self.changed.notify_all();
    }

    /// A client left. With a grace, the last one leaving starts it: unless someone re-attaches
    /// or the run ends first, the run is cancelled when it runs out.
    pub(crate) fn unwatch(self: &Arc<Self>) {
        let mut st = self.state.lock();
        st.watchers = st.watchers.saturating_sub(1);
        if st.watchers > 0 || st.ended.is_some() || self.grace.is_zero() {
            return;
        }
        st.detaches += 1;
        let gen = st.detaches;
        drop(st);
        log::info!(
            "client left; the run goes on for {:?} (detach grace)",
            self.grace
        );
        let feed = self.clone();
        std::thread::spawn(move || feed.grace_timer(gen));
    }

    fn grace_timer(&self, gen: u64) {
        let deadline = Instant::now() + self.grace;
        let mut st = self.state.lock();
        let alone = |st: &State| st.watchers == 0 && st.ended.is_none() && st.detaches == gen;
        while alone(&st) && !self.changed.wait_until(&mut st, deadline).timed_out() {}
        if alone(&st) {
            drop(st);
            log::info!("nobody re-attached within the detach grace; cancelling the run");
            if let Some(hook) = &*self.expire.lock() {
                hook();
            }
        }
    }

    /// Attaches an observer: an exact resume when `cursor` is a position still held, else a
    /// join, whose snapshot starts with the thread's kept conversation (`past`; the newest `lim`
    /// messages when given). The observer counts as a watcher until [`Feed::unwatch`].
    pub(crate) fn attach(&self, cursor: Option<&str>, past: &[Value], lim: Option<usize>) -> Start {
        let mut st = self.state.lock();
        st.watchers += 1;
        let held = cursor.and_then(cursor::parse).filter(|(tag, seq)| {
            let ring = &st.ring;
            *tag == self.tag
                && ring.first > 0
                && *seq >= ring.first.max(ring.evicted)
                && *seq <= ring.last
        });
        if let Some((_, seq)) = held {
            return Start::Exact(seq);
        }
        self.join_locked(st, past, lim)
    }

    /// A join of this run (the thread's kept conversation `past`, the turn so far, then the live
    /// tail) that does not count as a watcher: a thread's live feed (`threadfeed`) never keeps a
    /// run going nor lets it stop.
    pub(crate) fn join(&self, past: &[Value]) -> Start {
        self.join_locked(self.state.lock(), past, None)
    }

    fn join_locked(&self, mut st: Guard<'_, State>, past: &[Value], lim: Option<usize>) -> Start {
        // A run that has just started: its first events are about to be pushed.
        let deadline = Instant::now() + Duration::from_secs(5);
        while st.fold.as_ref().is_some_and(|f| f.run_started.is_none())
            && !self.changed.wait_until(&mut st, deadline).timed_out()
        {}
        let Some(fold) = st.fold.as_ref() else {
            return Start::Kernel;
        };
        let events = fold.prelude(crate::ids::now_ms(), past, lim, st.ended);
        let at = st.folded;
        let mut body = Vec::new();
        for (k, ev) in events.iter().enumerate() {
            let sub = (k + 1 < events.len()).then_some(k);
            let json = serde_json::to_vec(ev).unwrap_or_default();
            cursor::push_frame(&mut body, (&self.tag, at, sub), &json);
        }
        Start::Join(body, events.len(), at)
    }

    /// The tag of this run's cursors (a short hash of its execution id).
    pub(crate) fn tag(&self) -> &str {
        &self.tag
    }

    /// This run's first and last frames' positions (`(0, 0)` before the first); whether it ended.
    pub(crate) fn span(&self) -> (u64, u64, bool) {
        let st = self.state.lock();
        (st.ring.first, st.ring.last, st.ended.is_some())
    }

    /// Whether the frames after `after` are all still held (none dropped for the cap).
    pub(crate) fn holds_after(&self, after: u64) -> bool {
        self.state.lock().ring.evicted <= after
    }

    /// The frames after position `after` (which it advances), waiting up to `wait` for some.
    pub(crate) fn next(&self, after: &mut u64, wait: Duration) -> Next {
        let deadline = Instant::now() + wait;
        let mut st = self.state.lock();
        loop {
            if st.ring.evicted > *after {
                return Next::Lagged;
            }
            if st.ring.last > *after {
                let mut body = Vec::new();
                let (count, last) = st.ring.copy_after(*after, &mut body, COPY_MAX);
                *after = last;
                return Next::Frames(body, count);
            }
            if st.ended.is_some() {
                return Next::Done;
            }
            if self.changed.wait_until(&mut st, deadline).timed_out() {
                return Next::Idle;
            }
        }
    }
}

/// Folds one event into the turn kept for a join (while there is one) and counts what that
/// holds; `false` for the events a join never folds (the run's end: a join ends with its own).
/// The deltas, most of a stream, are read through a borrowed view of their JSON (no tree, no
/// copy but the escaped text appended); other events are parsed whole. What is counted: a
/// delta's text, a whole event where the fold keeps the event (custom, activity, tool result,
/// run start), else a span's ids and names (a fixed 128 bytes, above what they take).
fn fold_event(st: &mut State, json: &[u8], spans: Option<DeltaSpans>) -> bool {
    if let Some(DeltaSpans { message_id, delta }) = spans {
        // A text or reasoning delta whose parts the projection marked: nothing to read.
        if let Some(fold) = st.fold.as_mut() {
            let id = std::str::from_utf8(&json[message_id.0..message_id.1]).unwrap_or("");
            let literal = std::str::from_utf8(&json[delta.0..delta.1]).unwrap_or("");
            fold.apply_delta(fold::DeltaKind::Text, id, literal);
            st.fold_bytes += literal.len();
        }
        return true;
    }
    let text = std::str::from_utf8(json).unwrap_or("");
    if let Ok(view) = serde_json::from_str::<EventView>(text) {
        if view.kind.ends_run() {
            // Nothing follows the run's last event: readers take the run as ended from now.
            st.ended.get_or_insert_with(Instant::now);
            return false;
        }
        let Some(fold) = st.fold.as_mut() else {
            return true;
        };
        let delta = view.delta.filter(|d| d.get().starts_with('"'));
        if let (Some(kind), Some(delta)) = (fold::DeltaKind::of(view.kind), delta) {
            let id = view.tool_call_id.or(view.message_id);
            fold.apply_delta(kind, id.unwrap_or(""), delta.get());
            st.fold_bytes += delta.get().len();
            return true;
        }
    }
    let ev: Value = serde_json::from_slice(json).unwrap_or_default();
    let kind = EventType::of(&ev);
    if kind.is_some_and(EventType::ends_run) {
        return false;
    }
    let Some(fold) = st.fold.as_mut() else {
        return true;
    };
    fold.apply(&ev);
    st.fold_bytes += match kind {
        Some(
            EventType::Custom
            | EventType::ActivitySnapshot
            | EventType::ToolCallResult
            | EventType::RunStarted,
        ) => json.len(),
        _ => 128,
    };
    true
}

/// The fields of an event the fold reads without a `Value` or a copy (what else it has is
/// skipped): the delta stays a JSON literal. An id with an escape can't be borrowed, and a type
/// this adapter does not know can't be read, so such an event fails this view and is read whole.
#[derive(serde::Deserialize)]
struct EventView<'a> {
    #[serde(rename = "type")]
    kind: EventType,
    #[serde(rename = "messageId", default)]
    message_id: Option<&'a str>,
    #[serde(rename = "toolCallId", default)]
    tool_call_id: Option<&'a str>,
    #[serde(borrow, default)]
    delta: Option<&'a serde_json::value::RawValue>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The events of a join of `feed`.
    fn join_events(feed: &Feed) -> Vec<Value> {
        let Start::Join(body, _, _) = feed.attach(None, &[], None) else {
            panic!("a join")
        };
        String::from_utf8_lossy(&body)
            .lines()
            .filter_map(|l| serde_json::from_str(l.strip_prefix("data: ")?).ok())
            .collect()
    }

    fn ids_of(body: &[u8]) -> Vec<String> {
        String::from_utf8_lossy(body)
            .lines()
            .filter_map(|l| l.strip_prefix("id: ").map(String::from))
            .collect()
    }

    #[test]
    fn a_held_cursor_resumes_exactly_and_an_evicted_one_joins() {
        let feeds = Feeds::start(400, Duration::ZERO);
        let feed = feeds.open("exec-1");
        let first = feed.push(&[json!({"type": "RUN_STARTED", "runId": "r"})]);
        let ids = ids_of(&first);
        let more = feed
            .push(&[json!({"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"})]);
        let Start::Exact(mut after) = feed.attach(Some(&ids[0]), &[], None) else {
            panic!("the cursor is held")
        };
        let Next::Frames(body, 1) = feed.next(&mut after, Duration::ZERO) else {
            panic!("one frame follows")
        };
        assert_eq!(body, more);
        // Another execution's cursor, garbage, or none: a join opening with RUN_STARTED.
        let other = cursor::format(&cursor::tag("exec-2"), 1, None);
        for c in [Some(other.as_str()), Some("x.y.1"), None] {
            let Start::Join(body, n, _) = feed.attach(c, &[], None) else {
                panic!("a join")
            };
            assert!(String::from_utf8_lossy(&body).contains("RUN_STARTED"));
            assert_eq!(ids_of(&body).len(), n);
        }
        for _ in 0..10 {
            feed.push(&[
                json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "0123456789"}),
            ]);
        }
        assert!(matches!(
            feed.attach(Some(&ids[0]), &[], None),
            Start::Join(..)
        ));
        let mut stale = after;
        assert!(matches!(
            feed.next(&mut stale, Duration::ZERO),
            Next::Lagged
        ));
        feeds.ended("exec-1", &feed);
        assert!(feeds.get("exec-1").is_none());
    }

    #[test]
    fn a_turn_larger_than_the_cap_drops_its_fold_so_a_held_execution_stays_under_twice_the_cap() {
        let cap = 4096;
        let feeds = Feeds::start(cap, Duration::ZERO);
        let feed = feeds.open("exec-big");
        feed.push(&[
            json!({"type": "RUN_STARTED", "runId": "r"}),
            json!({"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"}),
        ]);
        let delta = "x".repeat(100);
        for _ in 0..20 {
            feed.push(&[json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": delta})]);
        }
        // 2,000 bytes of text: the fold still answers a join.
        assert!(matches!(feed.attach(None, &[], None), Start::Join(..)));
        for _ in 0..1000 {
            feed.push(&[json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": delta})]);
        }
        // 100 KB of text: the fold is gone, a join asks the kernel, and what is held is the ring.
        assert!(matches!(feed.attach(None, &[], None), Start::Kernel));
        let (count, bytes) = feeds.held();
        assert_eq!(count, 1);
        assert!(bytes <= cap, "{bytes} bytes held for a cap of {cap}");
    }

    #[test]
    fn a_join_carries_the_text_and_tool_arguments_streamed_so_far_and_not_the_end() {
        let feeds = Feeds::start(1 << 20, Duration::ZERO);
        let feed = feeds.open("exec-fold");
        feed.push(&[
            json!({"type": "RUN_STARTED", "runId": "r"}),
            json!({"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"}),
            json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "Hel"}),
            json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "lo \"w\"\n"}),
            json!({"type": "TOOL_CALL_START", "toolCallId": "c", "toolCallName": "write_file"}),
            json!({"type": "TOOL_CALL_ARGS", "toolCallId": "c", "delta": "{\"pa"}),
            json!({"type": "TOOL_CALL_ARGS", "toolCallId": "c", "delta": "th\":1}"}),
            json!({"type": "RUN_FINISHED", "runId": "r"}),
        ]);
        let events = join_events(&feed);
        let text: String = events
            .iter()
            .filter(|e| e["type"] == "TEXT_MESSAGE_CONTENT")
            .filter_map(|e| e["delta"].as_str())
            .collect();
        let args: String = events
            .iter()
            .filter(|e| e["type"] == "TOOL_CALL_ARGS")
            .filter_map(|e| e["delta"].as_str())
            .collect();
        // Both are still open: re-opened with everything streamed so far, escapes intact.
        assert_eq!(text, "Hello \"w\"\n", "{events:?}");
        assert_eq!(args, "{\"path\":1}", "{events:?}");
        assert!(
            events.iter().all(|e| e["type"] != "RUN_FINISHED"),
            "{events:?}"
        );
    }

    #[test]
    fn a_join_carries_the_text_of_deltas_the_projection_marked_even_with_escapes() {
        use crate::error::Lang;
        use crate::projection::{Events, Projection, RunIds};
        let ids = RunIds {
            context_id: "ctx".into(),
            ..Default::default()
        };
        let mut p = Projection::new(ids, Lang::En);
        let mut out = Events::default();
        p.start(&mut out);
        // The first message is closed when the second starts; the second stays open.
        for id in ["m\\1", "m2"] {
            for t in ["Say \"hi\"", "\n\tand ", "é 😀"] {
                let item = json!({"statusUpdate": {"taskId": "task", "contextId": "ctx",
                    "status": {"state": "TASK_STATE_WORKING", "message": {"messageId": id,
                    "role": "ROLE_AGENT", "parts": [{"text": t}]}}}});
                p.on_item(&item, &mut out).unwrap();
            }
        }
        let feeds = Feeds::start(1 << 20, Duration::ZERO);
        let feed = feeds.open("exec-marked");
        feed.push(&out);
        let events = join_events(&feed);
        let text_of = |id: &str| -> String {
            let mut text: String = events
                .iter()
                .filter(|e| e["type"] == "TEXT_MESSAGE_CONTENT" && e["messageId"] == id)
                .filter_map(|e| e["delta"].as_str())
                .collect();
            for m in events
                .iter()
                .filter_map(|e| e["messages"].as_array())
                .flatten()
            {
                if m["id"] == id {
                    text.push_str(m["content"].as_str().unwrap_or(""));
                }
            }
            text
        };
        // The id with an escape was read back; the plain one came from the marked spans.
        assert_eq!(text_of("m\\1"), "Say \"hi\"\n\tand é 😀", "{events:?}");
        assert_eq!(text_of("m2"), "Say \"hi\"\n\tand é 😀", "{events:?}");
    }
}
