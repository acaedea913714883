//! The conversation, kept: per thread, every message the client was shown, as AG-UI 1.0
//! Messages, in `<state-dir>/history/<thread key>.jsonl` (the state file's key).
//!
//! Written from what a run actually streams (`turn.rs`, fed by `run::write_events`), plus the
//! user's message when a turn is sent and each interrupt's answer when the kernel took it; read
//! back (`fold.rs`) for a join's `MESSAGES_SNAPSHOT` and for the history route's pages.
//!
//! Storage: append-only JSON lines per thread (`log.rs`), not an embedded database: no C
//! dependency in a static binary, one file per thread beside the state file and under the same
//! per-thread writer, a record is one `write()` (a kill leaves at most a torn last line, which
//! is ignored and cut), and the cost of a turn is its own records. Bounded by
//! `--history-max-messages`: when a log holds more records than the cap plus a slack, its oldest
//! turns are dropped by a rewrite (new file, rename), so rewrites are amortized O(1) per record.

mod fold;
mod kernel;
mod logfile;
mod turn;
mod user;

pub use turn::INTERRUPT_ACTIVITY;
pub(crate) use turn::{interrupt_message, Recorder};

use crate::descriptors::{waiting_out_exhaustion, OUT_OF_DESCRIPTORS_WAIT};
use crate::error::{Error, Msg};
use base64::Engine;
use fold::Folded;
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

/// The default cap of messages kept per thread.
pub const DEFAULT_MAX_MESSAGES: usize = 1000;
/// The history route's page size: default and maximum.
pub(crate) const PAGE_DEFAULT: usize = 50;
pub(crate) const PAGE_MAX: usize = 500;
/// The slack above the cap before a compaction: a quarter of it, at least 64 records.
fn slack(cap: usize) -> usize {
    (cap / 4).max(64)
}

/// The kept conversations of this process's threads (cheap to clone: shared).
#[derive(Clone)]
pub struct History {
    inner: Arc<Inner>,
}

struct Inner {
    dir: PathBuf,
    cap: usize,
    /// Writers by thread: one open log per thread, under its own lock.
    logs: Mutex<HashMap<String, Arc<Mutex<Option<logfile::Log>>>>>,
}

/// Open logs beyond which idle ones are closed.
const OPEN_LOGS: usize = 1024;

impl History {
    /// The conversations under `state_dir`, at most `cap` messages each (0: none kept).
    pub fn new(state_dir: &std::path::Path, cap: usize) -> History {
        History {
            inner: Arc::new(Inner {
                dir: state_dir.join("history"),
                cap,
                logs: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Whether anything is kept (a cap of 0 keeps nothing).
    pub(crate) fn keeps(&self) -> bool {
        self.inner.cap > 0
    }

    fn path_of(&self, thread_id: &str) -> PathBuf {
        self.inner
            .dir
            .join(format!("{}.jsonl", crate::ids::thread_key(thread_id)))
    }

    fn writer(&self, thread_id: &str) -> Arc<Mutex<Option<logfile::Log>>> {
        let mut logs = self.inner.logs.lock();
        if logs.len() >= OPEN_LOGS {
            logs.retain(|_, l| Arc::strong_count(l) > 1);
        }
        logs.entry(thread_id.to_string()).or_default().clone()
    }

    /// Closes the thread's log unless someone is writing it: called when a run ends, so an idle
    /// thread holds no descriptor (the next write opens the log again, cheaply).
    pub(crate) fn release(&self, thread_id: &str) {
        let mut logs = self.inner.logs.lock();
        if logs
            .get(thread_id)
            .is_some_and(|l| Arc::strong_count(l) == 1)
        {
            logs.remove(thread_id);
        }
    }

    /// Closes the thread's log while its run waits idle, made durable first (a later `sync`
    /// finds it closed and has nothing to do); the run's next write opens it again.
    pub(crate) fn close_idle(&self, thread_id: &str) {
        let Some(writer) = self.inner.logs.lock().get(thread_id).cloned() else {
            return;
        };
        let closed = writer.lock().take();
        if let Some(log) = closed {
            if let Err(e) = log.sync() {
                log::error!("cannot sync the conversation of thread {thread_id}: {e}");
            }
        }
    }

    /// Appends records to the thread's log (opened, with `title` when it is created).
    pub(crate) fn append<'b>(
        &self,
        thread_id: &str,
        title: &str,
        bodies: impl Iterator<Item = &'b [u8]>,
    ) {
        self.write_log(thread_id, title, |log| log.append(bodies));
    }

    /// Opens the thread's log if needed, runs `write` on it, then compacts it when it outgrew
    /// the cap by the slack. A failure is logged: the run goes on.
    fn write_log(
        &self,
        thread_id: &str,
        title: &str,
        write: impl FnOnce(&mut logfile::Log) -> std::io::Result<()>,
    ) {
        if !self.keeps() {
            return;
        }
        let writer = self.writer(thread_id);
        let mut slot = writer.lock();
        let result = (|| -> std::io::Result<()> {
            // A burst of runs can find the process out of descriptors for a moment: the open and
            // the compaction (which opens the file, a new one, then the new one again) wait for
            // one, bounded, as state files do, rather than lose the records.
            if slot.is_none() {
                let path = self.path_of(thread_id);
                let open = || logfile::Log::open(&path, thread_id, title);
                *slot = Some(waiting_out_exhaustion(OUT_OF_DESCRIPTORS_WAIT, open)?);
            }
            let log = slot.as_mut().expect("opened");
            write(log)?;
            if log.records > self.inner.cap + slack(self.inner.cap) {
                let compact = || self.compact(thread_id, log);
                waiting_out_exhaustion(OUT_OF_DESCRIPTORS_WAIT, compact)?;
            }
            Ok(())
        })();
        if let Err(e) = result {
            log::error!("cannot write the conversation of thread {thread_id}: {e}");
            *slot = None;
        }
    }

    /// A whole turn kept as a run keeps it: the user's message, then the events the run wrote
    /// (the benches' way in; hidden).
    #[doc(hidden)]
    pub fn keep_turn(&self, thread_id: &str, message_id: &str, text: &str, events: &[Value]) {
        self.user(thread_id, message_id, &json!([{ "text": text }]));
        Recorder::new(self, thread_id).observe(events);
    }

    /// Makes the thread's log durable (called where its state file is saved).
    #[doc(hidden)]
    pub fn sync(&self, thread_id: &str) {
        let writer = self.writer(thread_id);
        let slot = writer.lock();
        if let Some(log) = slot.as_ref() {
            if let Err(e) = log.sync() {
                log::error!("cannot sync the conversation of thread {thread_id}: {e}");
            }
        }
    }

    /// Drops the oldest turns (a turn starts at a user message) until at most the cap of
    /// messages is left, and rewrites the log with one record per message, numbers kept.
    fn compact(&self, thread_id: &str, log: &mut logfile::Log) -> std::io::Result<()> {
        let Some((head, records)) = logfile::read(&self.path_of(thread_id))? else {
            return Ok(());
        };
        let mut kept = Folded::of(records).kept;
        let cap = self.inner.cap;
        let mut from = kept.len().saturating_sub(cap);
        // Back to the start of that turn, unless the newest turn alone is over the cap.
        if let Some(start) = kept[from..]
            .iter()
            .position(|k| k.message["role"] == "user")
        {
            from += start;
        }
        let mut rest = kept.split_off(from);
        rest.sort_by_key(|k| k.seq);
        let rows: Vec<(u64, u64, Value)> =
            rest.into_iter().map(|k| (k.seq, k.at, k.message)).collect();
        log::info!(
            "conversation of thread {thread_id}: compacted to {} messages",
            rows.len()
        );
        log.rewrite(&head, &rows)
    }

    /// The user's message of a new turn, kept before it is sent (`parts` as the A2A message
    /// carries them).
    pub(crate) fn user(&self, thread_id: &str, id: &str, parts: &Value) {
        if !self.keeps() {
            return;
        }
        let title = user::title(parts);
        self.write_log(thread_id, &title, |log| {
            log.append_one(|out| user::write_record(id, parts, out))
        });
    }

    /// An interrupt's answer, once the kernel took it: its activity message again, answered.
    pub(crate) fn answered(&self, thread_id: &str, interrupt: &Value, answer: &Value) {
        let m = interrupt_message(interrupt, Some(answer));
        self.message(thread_id, &m);
    }

    fn message(&self, thread_id: &str, m: &Value) {
        let mut body = b"\"message\":".to_vec();
        let _ = serde_json::to_writer(&mut body, m);
        self.append(thread_id, "", std::iter::once(body.as_slice()));
    }

    /// A turn a killed adapter cut: what the kernel's task holds completes the messages it
    /// streamed (same ids), and adds those the cut lost.
    pub(crate) fn complete_from_task(&self, thread_id: &str, task: &Value) {
        if !self.keeps() {
            return;
        }
        let have: HashMap<String, Value> = self
            .messages(thread_id)
            .into_iter()
            .filter_map(|m| Some((m["id"].as_str()?.to_string(), m)))
            .collect();
        for m in kernel::completions(task, &have) {
            self.message(thread_id, &m);
        }
    }

    fn folded(&self, thread_id: &str) -> Folded {
        match logfile::read(&self.path_of(thread_id)) {
            Ok(Some((_, records))) => Folded::of(records),
            Ok(None) => Folded::default(),
            Err(e) => {
                log::error!("cannot read the conversation of thread {thread_id}: {e}");
                Folded::default()
            }
        }
    }

    /// The whole kept conversation, as AG-UI messages, oldest first.
    pub(crate) fn messages(&self, thread_id: &str) -> Vec<Value> {
        self.folded(thread_id).messages()
    }

    /// One page of the history route: the `limit` messages before the cursor (oldest first
    /// within the page) and the cursor of the next older page.
    pub(crate) fn page(
        &self,
        thread_id: &str,
        limit: usize,
        before: Option<&str>,
    ) -> Result<Value, Error> {
        let before = before.map(parse_cursor).transpose()?;
        let kept = self.folded(thread_id).kept;
        let end = match before {
            None => kept.len(),
            Some(c) => kept
                .iter()
                .position(|k| k.seq == c)
                .unwrap_or_else(|| kept.iter().take_while(|k| k.seq < c).count()),
        };
        let start = end.saturating_sub(limit);
        let next = (start > 0).then(|| cursor(kept[start].seq));
        let messages: Vec<&Value> = kept[start..end].iter().map(|k| &k.message).collect();
        Ok(json!({"threadId": thread_id, "messages": messages, "nextCursor": next}))
    }
}

/// A join's snapshot from the kernel's view of this turn (`current`, text only): the kept
/// conversation in its order, a message the kernel holds longer (a turn a kill cut) completed
/// in place, those it alone holds added; the newest `limit` when given.
pub(crate) fn joined(past: &[Value], current: &[Value], limit: Option<usize>) -> Vec<Value> {
    let mut out: Vec<Value> = past.to_vec();
    for m in current {
        let text = m["content"].as_str().unwrap_or("");
        match out.iter_mut().find(|k| k["id"] == m["id"]) {
            Some(k) => {
                if k["content"]
                    .as_str()
                    .is_some_and(|kept| kept.len() < text.len())
                {
                    k["content"] = json!(text);
                }
            }
            None => out.push(m.clone()),
        }
    }
    if let Some(n) = limit {
        out.drain(..out.len().saturating_sub(n));
    }
    out
}

/// A kernel join's `MESSAGES_SNAPSHOT`: the kept conversation with the kernel's view of this
/// turn (`task`: `GetTask`, a subscription's first `Task`) completing it ([`joined`]).
pub(crate) fn join_snapshot(past: &[Value], task: Option<&Value>, limit: Option<usize>) -> Value {
    let messages = with_task(past, task, limit);
    json!({"type": "MESSAGES_SNAPSHOT", "timestamp": crate::ids::now_ms(), "messages": messages})
}

/// The kept conversation completed with the kernel's view of this turn ([`joined`]).
fn with_task(past: &[Value], task: Option<&Value>, limit: Option<usize>) -> Vec<Value> {
    let current = task.and_then(kernel::catch_up);
    let current = current.as_ref().and_then(|s| s["messages"].as_array());
    joined(past, current.map_or(&[], Vec::as_slice), limit)
}

/// A kernel join's catch-up for an execution waiting at an interrupt: the kept conversation
/// completed as for [`join_snapshot`], up to the message the interrupt waits on, which follows
/// as events (`catchup`).
pub(crate) fn waiting_join(
    past: &[Value],
    task: Option<&Value>,
    limit: Option<usize>,
) -> Vec<Value> {
    crate::catchup::snapshot_then_tail(with_task(past, task, limit), crate::ids::now_ms())
}

/// A page cursor: opaque to clients (base64url of the message's record number), stable while
/// the message is kept.
fn cursor(seq: u64) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(seq.to_string())
}

fn parse_cursor(c: &str) -> Result<u64, Error> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(c)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .and_then(|s| s.parse::<u64>().ok())
        .filter(|&n| n > 0)
        .ok_or_else(|| Msg::HistoryCursorInvalid.err())
}

/// The page size a query asks for: default 50, 1 to 500.
pub(crate) fn page_limit(raw: Option<&str>) -> Result<usize, Error> {
    match raw {
        None => Ok(PAGE_DEFAULT),
        Some(s) => s
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=PAGE_MAX).contains(n))
            .ok_or_else(|| Msg::HistoryLimitInvalid.with(&[&PAGE_MAX])),
    }
}

#[cfg(test)]
mod tests;
