//! The live feed of a thread: `GET /extensions/iac-code/v1/threads/{threadId}/events`, one SSE
//! response that stays open across runs and carries every run of the thread, from any client,
//! one after another, with the frames and `id:` cursors the run's own stream carries.
//!
//! Nothing is copied per feed: each run's frames are already in its replay buffer ([`Feed`],
//! one per run), and a feed tails those buffers in turn on its own request thread, as an
//! observer does, without counting as the run's watcher (it never keeps a run going past the
//! detach grace, never cancels one, never takes the thread). This module keeps, per thread with
//! a feed open (or closed less than [`LINGER`] ago), the runs a feed may still need: the runs in
//! progress and the newest ended one, so a feed that reconnects within seconds of a run's end
//! misses nothing.
//!
//! Cursors are the runs' own (`<epoch>.<tag>.<seq>`, `seq` process-wide and increasing), so a
//! `Last-Event-ID` names a position in a run, or between runs. Resuming: the frames after the
//! cursor in its run, then the runs after it that are held. What is no longer held (a restart,
//! a run dropped, frames dropped for the cap) is never skipped silently: the feed first sends a
//! gap run (`RUN_STARTED`, `CUSTOM` [`GAP_EVENT`], a `MESSAGES_SNAPSHOT` of the kept
//! conversation when one is given, `RUN_FINISHED`), then goes on with what is held, entering a
//! run whose first frames are gone by its join (the turn so far).

use crate::feed::{Feed, Next, Start};
use crate::history::History;
use crate::ids;
use crate::stream::{cursor, SseStream};
use parking_lot::{Condvar, Mutex};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a thread's runs stay held after its last feed closed (a reconnect within it
/// resumes exactly).
pub const LINGER: Duration = Duration::from_secs(30);

/// The `CUSTOM` event of a gap run: what the feed missed is no longer held.
pub const GAP_EVENT: &str = "iac-code.feed.gap";

/// The tag of a gap run's cursors: a position between runs, not in one.
const GAP_TAG: &str = "feed";

/// How long a feed waits for frames before it looks at its client again.
const WAIT: Duration = Duration::from_millis(500);

/// The kept conversation for a gap run's snapshot (`None`: the gap run has no snapshot).
pub(crate) type Past = Box<dyn Fn() -> Option<Vec<Value>> + Send>;

/// The threads with a feed open (or closed within [`LINGER`]) and the runs they hold.
pub struct ThreadFeeds {
    map: Arc<Mutex<HashMap<String, Arc<Thread>>>>,
}

struct Thread {
    held: Mutex<Held>,
    changed: Condvar,
}

struct Held {
    /// In the order they began (a run with no frame yet last).
    runs: Vec<Arc<Feed>>,
    /// Every run that began after this position was registered here.
    known_from: u64,
    /// The newest first and last positions of the runs no longer held (0: none dropped).
    dropped_first: u64,
    dropped_last: u64,
    followers: usize,
    idle_since: Instant,
}

impl ThreadFeeds {
    pub fn start() -> ThreadFeeds {
        let feeds = ThreadFeeds {
            map: Arc::new(Mutex::new(HashMap::new())),
        };
        let map = feeds.map.clone();
        std::thread::Builder::new()
            .name("thread-feeds".into())
            .spawn(move || sweep(&map, LINGER))
            .expect("spawn thread-feeds thread");
        feeds
    }

    /// A run began on `thread_id`: a thread with a feed holds it from now on.
    pub(crate) fn run_started(&self, thread_id: &str, feed: &Arc<Feed>) {
        let thread = self.map.lock().get(thread_id).cloned();
        if let Some(t) = thread {
            t.add(feed);
        }
    }

    /// A feed of `thread_id` (its identity already checked). The thread holds every run that
    /// begins from now on; the caller then [`Follower::seed`]s the run in progress, if any.
    pub(crate) fn follow(&self, thread_id: &str, history: &History) -> Follower {
        let thread = self
            .map
            .lock()
            .entry(thread_id.to_string())
            .or_insert_with(|| {
                Arc::new(Thread {
                    held: Mutex::new(Held {
                        runs: Vec::new(),
                        known_from: cursor::current(),
                        dropped_first: 0,
                        dropped_last: 0,
                        followers: 0,
                        idle_since: Instant::now(),
                    }),
                    changed: Condvar::new(),
                })
            })
            .clone();
        thread.held.lock().followers += 1;
        Follower {
            thread,
            thread_id: thread_id.to_string(),
            cursor: None,
            past: {
                let (history, id) = (history.clone(), thread_id.to_string());
                Box::new(move || Some(history.messages(&id)))
            },
        }
    }
}

/// Drops the threads whose last feed closed more than `linger` ago, and the ended runs a thread
/// no longer needs.
fn sweep(map: &Mutex<HashMap<String, Arc<Thread>>>, linger: Duration) {
    loop {
        std::thread::sleep(Duration::from_secs(1));
        map.lock().retain(|_, t| {
            let mut held = t.held.lock();
            held.prune();
            held.followers > 0 || held.idle_since.elapsed() < linger
        });
    }
}

impl Thread {
    fn add(&self, feed: &Arc<Feed>) {
        let mut held = self.held.lock();
        if held.runs.iter().any(|f| Arc::ptr_eq(f, feed)) {
            return;
        }
        let first = feed.span().0;
        let at = held
            .runs
            .iter()
            .position(|f| {
                let other = f.span().0;
                first > 0 && (other == 0 || other > first)
            })
            .unwrap_or(held.runs.len());
        if first > 0 && first <= held.known_from {
            held.known_from = first - 1;
        }
        held.runs.insert(at, feed.clone());
        held.prune();
        drop(held);
        self.changed.notify_all();
    }

    /// The first held run that began after position `after` (waiting up to `wait` for one), and
    /// the first position of the newest run no longer held (a run between was dropped when it is
    /// after `after`).
    fn next_after(&self, after: u64, wait: Duration) -> Option<(Arc<Feed>, u64)> {
        let deadline = Instant::now() + wait;
        let mut held = self.held.lock();
        loop {
            // A run with no frame yet comes next, unless it ended so (nothing to follow).
            let next = held.runs.iter().find(|f| {
                let (first, _, ended) = f.span();
                (first == 0 && !ended) || first > after
            });
            if let Some(feed) = next {
                return Some((feed.clone(), held.dropped_first));
            }
            if self.changed.wait_until(&mut held, deadline).timed_out() {
                return None;
            }
        }
    }
}

impl Held {
    /// Keeps the runs in progress and the newest ended one.
    fn prune(&mut self) {
        let newest_ended = self.runs.iter().rposition(|f| f.span().2);
        let mut k = 0;
        let (mut first_max, mut last_max) = (self.dropped_first, self.dropped_last);
        self.runs.retain(|f| {
            let (first, last, ended) = f.span();
            let keep = !ended || Some(k) == newest_ended;
            k += 1;
            if !keep {
                first_max = first_max.max(first);
                last_max = last_max.max(last);
            }
            keep
        });
        (self.dropped_first, self.dropped_last) = (first_max, last_max);
    }

    /// Where a feed resumes from cursor `c`: in a held run, or between runs (and whether what
    /// came after it is no longer held).
    fn resolve(&self, c: &str) -> Resolved {
        let Some((tag, seq)) = cursor::parse(c) else {
            return Resolved::Unknown;
        };
        let within = self.runs.iter().find(|f| {
            let (first, last, _) = f.span();
            f.tag() == tag && first <= seq && seq <= last
        });
        match within {
            Some(feed) if feed.holds_after(seq) => Resolved::In(feed.clone(), seq),
            Some(feed) => Resolved::Lost(feed.clone()),
            None => Resolved::Between(seq, seq < self.known_from || self.dropped_last > seq),
        }
    }

    fn in_progress(&self) -> Option<Arc<Feed>> {
        self.runs.iter().find(|f| !f.span().2).cloned()
    }
}

enum Resolved {
    In(Arc<Feed>, u64),
    /// In a held run, but frames after it were dropped for the cap.
    Lost(Arc<Feed>),
    /// Between runs at this position; `true` when something after it is no longer held.
    Between(u64, bool),
    /// Not a cursor of this process (a restart, garbage, a join's inner frame).
    Unknown,
}

/// One open feed: it counts as a follower of its thread until dropped.
pub(crate) struct Follower {
    thread: Arc<Thread>,
    thread_id: String,
    cursor: Option<String>,
    /// What a gap run's `MESSAGES_SNAPSHOT` carries; nothing until the thread's conversation is
    /// kept (the history module then gives it here).
    past: Past,
}

impl Drop for Follower {
    fn drop(&mut self) {
        let mut held = self.thread.held.lock();
        held.followers -= 1;
        if held.followers == 0 {
            held.idle_since = Instant::now();
        }
    }
}

impl Follower {
    /// The thread's current (or newest) run, from the replay buffers, as the feed opens: a run
    /// that began before the feed did.
    pub(crate) fn seed(&self, feed: Option<Arc<Feed>>) {
        if let Some(f) = feed {
            self.thread.add(&f);
        }
    }

    /// The client's `Last-Event-ID`.
    pub(crate) fn resuming(mut self, cursor: Option<&str>) -> Follower {
        self.cursor = cursor.map(String::from);
        self
    }
}

/// Where a feed stands.
enum At {
    /// In a run: the frames after this position follow.
    Run(Arc<Feed>, u64),
    /// Between runs: the next is the first held run that began after this position.
    After(u64),
}

/// Streams the feed until its client leaves (or falls behind a run's buffer: then the stream
/// ends, and the client's reconnection resumes by its cursor).
pub(crate) fn follow(f: Follower, stream: &SseStream) {
    // Runs dropped before the feed opened are not missed by it: its opening said so (a gap run)
    // when its cursor needed them.
    let mut told = f.thread.held.lock().dropped_first;
    let Some(mut at) = opening(&f, stream) else {
        return;
    };
    while !stream.is_closed() {
        at = match at {
            At::Run(feed, mut after) => match feed.next(&mut after, WAIT) {
                Next::Frames(body, count) => {
                    if !stream.send_frames(&body, count) {
                        return;
                    }
                    At::Run(feed, after)
                }
                Next::Idle => At::Run(feed, after),
                Next::Done => At::After(feed.span().0),
                Next::Lagged => {
                    log::info!("a thread feed fell behind the replay buffer; ending its stream");
                    break;
                }
            },
            At::After(after) => match f.thread.next_after(after, WAIT) {
                Some((feed, dropped_first)) => {
                    let dropped = dropped_first > after.max(told);
                    if dropped && !send_gap(&f, stream, feed.span().0.saturating_sub(1)) {
                        return;
                    }
                    told = told.max(dropped_first);
                    match enter(&f, &feed, stream) {
                        Some(at) => at,
                        None => return,
                    }
                }
                None => At::After(after),
            },
        };
    }
    stream.finish();
}

/// Where the feed starts: by the client's cursor, else in the run in progress (or waiting for
/// the next run). `None`: the client left.
fn opening(f: &Follower, stream: &SseStream) -> Option<At> {
    let resolved = f.cursor.as_deref().map(|c| f.thread.held.lock().resolve(c));
    match resolved {
        Some(Resolved::In(feed, seq)) => Some(At::Run(feed, seq)),
        Some(Resolved::Lost(feed)) => {
            let first = feed.span().0;
            if !send_gap(f, stream, first.saturating_sub(1)) {
                return None;
            }
            enter(f, &feed, stream)
        }
        Some(Resolved::Between(seq, dropped)) => {
            (!dropped || send_gap(f, stream, seq)).then_some(At::After(seq))
        }
        Some(Resolved::Unknown) | None => {
            let now = cursor::current();
            if resolved.is_some() && !send_gap(f, stream, now) {
                return None;
            }
            let live = f.thread.held.lock().in_progress();
            match live {
                Some(feed) => enter(f, &feed, stream),
                None => Some(At::After(now)),
            }
        }
    }
}

/// Enters a run from its start: its frames when all are held, else its join (the turn so
/// far, then the rest), else a gap run and the next run.
fn enter(f: &Follower, feed: &Arc<Feed>, stream: &SseStream) -> Option<At> {
    if feed.holds_after(0) {
        return Some(At::Run(feed.clone(), 0));
    }
    let past = (f.past)().unwrap_or_default();
    match feed.join(&past) {
        Start::Join(body, count, at) => stream
            .send_frames(&body, count)
            .then(|| At::Run(feed.clone(), at)),
        Start::Exact(at) => Some(At::Run(feed.clone(), at)),
        Start::Kernel => {
            let first = feed.span().0;
            send_gap(f, stream, first).then_some(At::After(first))
        }
    }
}

/// Sends a gap run standing at position `at`: its frames' cursors are `<epoch>.feed.<at>.<k>`,
/// the last one `<epoch>.feed.<at>`, a position between runs. `false`: the client left.
fn send_gap(f: &Follower, stream: &SseStream, at: u64) -> bool {
    log::info!("a thread feed missed frames no longer held; sending a gap run");
    let events = gap_run(&f.thread_id, (f.past)());
    let mut body = Vec::new();
    for (k, ev) in events.iter().enumerate() {
        let sub = (k + 1 < events.len()).then_some(k);
        let json = serde_json::to_vec(ev).unwrap_or_default();
        cursor::push_frame(&mut body, (GAP_TAG, at, sub), &json);
    }
    stream.send_frames(&body, events.len())
}

/// The gap run: a run of its own, so a client's checker and reducer take it as any other.
pub(crate) fn gap_run(thread_id: &str, past: Option<Vec<Value>>) -> Vec<Value> {
    let run_id = format!("feed-gap-{}", ids::uuid_v4());
    let now = ids::now_ms();
    let mut events = vec![
        json!({"type": "RUN_STARTED", "threadId": thread_id, "runId": run_id, "timestamp": now}),
        json!({"type": "CUSTOM", "name": GAP_EVENT, "timestamp": now,
               "value": {"threadId": thread_id, "reason": "not held"}}),
    ];
    if let Some(messages) = past {
        events.push(json!({"type": "MESSAGES_SNAPSHOT", "messages": messages, "timestamp": now}));
    }
    events.push(
        json!({"type": "RUN_FINISHED", "threadId": thread_id, "runId": run_id,
                       "timestamp": now}),
    );
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::feed::Feeds;

    fn ids_of(body: &[u8]) -> Vec<String> {
        String::from_utf8_lossy(body)
            .lines()
            .filter_map(|l| l.strip_prefix("id: ").map(String::from))
            .collect()
    }

    /// A run of two frames, ended: its feed and its cursors.
    fn ended_run(feeds: &Feeds, thread: &Thread, exec: &str) -> (Arc<Feed>, Vec<String>) {
        let feed = feeds.open(exec);
        thread.add(&feed);
        let body = feed.push(&[
            json!({"type": "RUN_STARTED", "threadId": "t", "runId": exec}),
            json!({"type": "RUN_FINISHED", "threadId": "t", "runId": exec}),
        ]);
        feeds.ended(exec, &feed);
        (feed, ids_of(&body))
    }

    #[test]
    fn a_thread_keeps_the_newest_ended_run_and_says_when_a_cursor_is_no_longer_held() {
        let feeds = Feeds::start(1 << 16, Duration::ZERO);
        let thread = ThreadFeeds::start()
            .follow("t", &History::new(&std::env::temp_dir(), 0))
            .thread
            .clone();
        let (_, c1) = ended_run(&feeds, &thread, "e1");
        let (f2, c2) = ended_run(&feeds, &thread, "e2");
        let (f3, c3) = ended_run(&feeds, &thread, "e3");
        let mut held = thread.held.lock();
        held.prune(); // as the sweep does every second
                      // Only the newest ended run is held; the ones before are counted as dropped.
        assert_eq!(held.runs.len(), 1);
        assert!(Arc::ptr_eq(&held.runs[0], &f3));
        assert!(matches!(held.resolve(&c3[0]), Resolved::In(_, _)));
        // The end of run 2: run 3 (held) follows, nothing missed.
        assert!(matches!(held.resolve(&c2[1]), Resolved::Between(_, false)));
        // Inside run 2, or at the end of run 1 (run 2 dropped since): a gap.
        assert!(matches!(held.resolve(&c2[0]), Resolved::Between(_, true)));
        assert!(matches!(held.resolve(&c1[1]), Resolved::Between(_, true)));
        assert!(matches!(held.resolve("garbage"), Resolved::Unknown));
        drop(held);
        assert!(
            Arc::strong_count(&f2) == 1,
            "a dropped run's buffer is freed"
        );
    }
}
