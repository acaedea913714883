//! What every request shares: the configuration, the A2A client, the state store, the heartbeat
//! thread and the list of runs in progress. `main` builds one [`App`]; `http` and `run` borrow it.

use crate::a2a::A2aClient;
use crate::config::Config;
use crate::error::Lang;
use crate::feed::Feeds;
use crate::history::History;
use crate::projection::RunIds;
use crate::store::{ActiveRun, Store};
use crate::stream::{Heartbeats, SseStream};
use crate::threadfeed::ThreadFeeds;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

/// Everything a request needs, shared by all threads.
pub struct App {
    pub config: Config,
    pub a2a: A2aClient,
    pub store: Store,
    pub heartbeats: Heartbeats,
    /// Replay buffers of the runs (exact resume, join, detach grace).
    pub feeds: Feeds,
    /// The kept conversations (`<state-dir>/history/`).
    pub history: History,
    /// The runs held for the live feeds of threads (`GET …/threads/{threadId}/events`).
    pub threads: ThreadFeeds,
    pub runs: Runs,
    /// Set once an upgrade handed the listener to a new process: tiny_http stops accepting and
    /// closes each connection once its response is written (`Limits::draining`).
    pub draining: Arc<AtomicBool>,
}

impl App {
    /// Runs ended since start-up: a run too short for a sampler to see it active still counts.
    pub fn runs_ended(&self) -> u64 {
        crate::metrics::runs_ended_total()
    }
}

/// The runs in progress, so a shutdown can end each of them properly.
#[derive(Default)]
pub struct Runs {
    /// By thread id: an admission asks after its own thread only (`client_left`), which with
    /// thousands of runs held was a walk over all of them, each admission.
    live: Mutex<LiveRuns>,
    stopping: AtomicBool,
    /// Set while the kernel drains for a restart (`kernel_drain.rs`): new runs are refused with a
    /// retryable 503, running ones go on.
    paused: AtomicBool,
}

/// One run in progress, as the shutdown sees it.
pub(crate) struct LiveRun {
    pub(crate) stream: Arc<SseStream>,
    /// Replaced when the run repairs an unfinished execution and starts a fresh one.
    pub(crate) active: Mutex<Arc<ActiveRun>>,
    pub(crate) ids: RunIds,
    pub(crate) lang: Lang,
    /// The run's own A2A connections ([`A2aClient::for_run`]): a Stop or a client that left shuts
    /// them down when the kernel does not end the stream itself.
    pub(crate) upstream: A2aClient,
    /// Set when the kernel may still run the task once the run ends: `upstream` was shut down
    /// before the kernel ended the stream, or the task was named only after a Stop (its
    /// `CancelTask` goes in the background, unconfirmed). The thread's next turn stops it first.
    pub(crate) task_may_outlive: AtomicBool,
    /// Set once the run is done with its upstream (the kernel ended the stream, or it was cut):
    /// what is left is the run's own end (its state written, its last events), which cutting
    /// the upstream would not hasten (`cancel::stop_soon`).
    pub(crate) upstream_done: AtomicBool,
    /// Set once the run's thread is done with it (its stream ended, its thread freed).
    pub(crate) ended: AtomicBool,
}

impl LiveRun {
    pub(crate) fn new(
        stream: Arc<SseStream>,
        active: Arc<ActiveRun>,
        ids: RunIds,
        lang: Lang,
        upstream: A2aClient,
    ) -> Arc<LiveRun> {
        Arc::new(LiveRun {
            stream,
            active: Mutex::new(active),
            ids,
            lang,
            upstream,
            task_may_outlive: AtomicBool::new(false),
            upstream_done: AtomicBool::new(false),
            ended: AtomicBool::new(false),
        })
    }

    pub(crate) fn has_ended(&self) -> bool {
        self.ended.load(Ordering::SeqCst)
    }
}

impl Runs {
    /// Whether the adapter is shutting down (new runs are refused, running ones end).
    pub(crate) fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Whether new runs wait for a kernel restart (refused, retryable).
    pub(crate) fn paused(&self) -> bool {
        self.paused.load(Ordering::SeqCst)
    }

    /// Refuses new runs (`true`) until the kernel is back, or admits them again (`false`).
    pub fn pause(&self, on: bool) {
        self.paused.store(on, Ordering::SeqCst);
    }

    /// Refuses new runs from now on and returns the runs still in progress.
    pub(crate) fn stop(&self) -> Vec<Arc<LiveRun>> {
        self.stopping.store(true, Ordering::SeqCst);
        self.live.lock().all().collect()
    }

    /// Whether the client of a run of this thread has left, checked now: its close hook then
    /// runs at once (a run without a grace frees its thread), so a turn sent right after a
    /// dropped connection is not refused as busy while the heartbeat thread has yet to look.
    pub(crate) fn client_left(&self, thread_id: &str) -> bool {
        let runs: Vec<_> = (self.live.lock().by_thread.get(thread_id))
            .map(|list| list.iter().filter_map(Weak::upgrade).collect())
            .unwrap_or_default();
        runs.iter().any(|r| r.stream.check_client())
    }

    /// The run in progress of `execution_id`, if any.
    pub(crate) fn find(&self, execution_id: &str) -> Option<Arc<LiveRun>> {
        let runs: Vec<_> = self.live.lock().all().collect();
        runs.into_iter()
            .find(|r| r.active.lock().execution_id == execution_id && !r.has_ended())
    }

    /// Lists a run until its last handle is dropped.
    pub(crate) fn register(&self, live: &Arc<LiveRun>) {
        let mut runs = self.live.lock();
        if runs.by_thread.len() >= runs.prune_at {
            runs.by_thread.retain(|_, list| {
                list.retain(|w| w.strong_count() > 0);
                !list.is_empty()
            });
            runs.prune_at = (runs.by_thread.len() * 2).max(64);
        }
        let list = runs
            .by_thread
            .entry(live.ids.thread_id.clone())
            .or_default();
        list.retain(|w| w.strong_count() > 0);
        list.push(Arc::downgrade(live));
    }
}

/// The runs in progress by thread id. Ended runs leave their thread's list when it next
/// registers a run, or when the map has doubled since it was last pruned (each admission's share
/// of that walk is constant).
#[derive(Default)]
struct LiveRuns {
    by_thread: std::collections::HashMap<String, Vec<Weak<LiveRun>>>,
    prune_at: usize,
}

impl LiveRuns {
    fn all(&self) -> impl Iterator<Item = Arc<LiveRun>> + '_ {
        self.by_thread.values().flatten().filter_map(Weak::upgrade)
    }
}
