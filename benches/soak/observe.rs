//! The observer episode: a run's owner reads it to its end while an observer follows it on the
//! subscribe route with the owner's cursor (`exact`), is cut, resumes with its own cursor
//! (`exact` again), and a second observer joins without a cursor (`join`). The observer's
//! events after the cursor must be the owner's, ids and data, nothing missing and nothing twice.

use crate::client::Client;
use crate::stream::{Call, End, Ev, Read};
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// The invariant of an observer's cursor.
const JOINS: &str = "a cursor still held gets the exact resume";

impl Client {
    pub(crate) fn observe(&mut self) {
        let tap = Mutex::new(Vec::new());
        let epoch = self.w.epoch();
        let run = self.next_run();
        let body = self.turn_body(&run, "scenario:paced-40");
        let done = std::sync::atomic::AtomicBool::new(false);
        let joins = Mutex::new(Vec::new());
        let me = &*self;
        let (owner, followed) = std::thread::scope(|s| {
            let owner = s.spawn(|| {
                let mut call = me.call("turn (observed)", &run);
                call.tap = Some(&tap);
                let sent = Instant::now();
                let a = call.post(&me.agent, "/", &body, None, Read::All);
                me.check_busy(&run, sent, &a);
                done.store(true, std::sync::atomic::Ordering::SeqCst);
                a
            });
            let followed = me.follow(&tap, &done, &joins);
            (owner.join().unwrap(), followed)
        });
        if self.w.epoch() == epoch {
            self.check_joins(&run, &owner, &joins.into_inner());
        }
        if owner.is_stream() {
            self.w.count("runs");
            self.count_end(&owner);
            self.last_end = Some((owner.ended_at, run.clone()));
        }
        if let Some((cursor_at, seen)) = followed {
            if self.w.epoch() == epoch && owner.end != End::AdapterKilled {
                self.compare(&run, &owner.events, cursor_at, &seen);
            }
        }
    }

    /// Follows the owner's run: the owner's cursor at its 5th event; returns that index and what
    /// the observer read after it (over a cut and an exact resume).
    fn follow(
        &self,
        tap: &Mutex<Vec<Ev>>,
        done: &std::sync::atomic::AtomicBool,
        joins: &Mutex<Vec<Instant>>,
    ) -> Option<(usize, Vec<Ev>)> {
        let deadline = Instant::now() + Duration::from_secs(15);
        let (cursor_at, cursor) = loop {
            let got = tap
                .lock()
                .iter()
                .enumerate()
                .skip(4)
                .find_map(|(i, e)| Some((i, e.0.clone()?)));
            if let Some(found) = got {
                break found;
            }
            if Instant::now() > deadline || done.load(std::sync::atomic::Ordering::SeqCst) {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let session = tap
            .lock()
            .iter()
            .find(|e| e.1["name"] == "iac-code.session.v1")
            .map(|e| e.1["value"].clone())?;
        let (exec, run) = (
            session["executionId"].as_str()?.to_string(),
            session["aguiRunId"].as_str()?.to_string(),
        );
        let path = format!("/extensions/iac-code/v1/executions/{exec}/subscribe");
        let body =
            json!({"threadId": &self.thread, "runId": run, "rosInvocationId": "invocation-1"});
        std::thread::scope(|s| {
            s.spawn(|| self.join_observer(&path, &body, &run));
            let (first, cut) =
                self.observer(&path, &body, &run, Some(&cursor), Read::CutAfter(5), joins)?;
            if !cut {
                // The run ended within those events (a kernel killed, say): a client re-attaches
                // after a cut only; from the run's last event an exact resume is, rightly, empty
                // (tests/resume_streams.rs), which this client once counted as a stream without
                // an end.
                self.w
                    .count("observers that read the run's end before their cut");
                return Some((cursor_at, first));
            }
            let last = first.last().and_then(|e| e.0.clone())?;
            self.w.count("observer cuts");
            let (rest, _) = self.observer(&path, &body, &run, Some(&last), Read::All, joins)?;
            Some((cursor_at, first.into_iter().chain(rest).collect()))
        })
    }

    /// One exact re-attach: its events, and whether the client cut it (rather than reading the
    /// run's end); `None` when it was not (a fault explains it, or it was answered `join`: when
    /// its head came, noted in `joins` for [`Client::check_joins`]).
    fn observer(
        &self,
        path: &str,
        body: &Value,
        run: &str,
        cursor: Option<&str>,
        read: Read,
        joins: &Mutex<Vec<Instant>>,
    ) -> Option<(Vec<Ev>, bool)> {
        let w = &*self.w;
        let epoch = w.epoch();
        let call = Call {
            world: w,
            what: "observer (exact)",
            thread: &self.thread,
            run,
            patience: Duration::from_secs(10),
            tap: None,
        };
        let a = call.post(&self.agent, path, body, cursor, read);
        if a.status != 200 {
            // The run ended before the observer came (404), or the adapter is down.
            w.count(&format!("observers refused: {} {}", a.status, a.code));
            return None;
        }
        w.count("observers (exact)");
        if a.resume == "exact" {
            w.checked(JOINS);
            w.count("exact resumes");
        } else if w.epoch() == epoch {
            joins.lock().push(a.head_at);
            return None;
        }
        let cut = a.end == End::Cut;
        (a.end != End::AdapterKilled).then_some((a.events, cut))
    }

    /// A `join` for a cursor is right once the run has ended (without a detach grace its buffer
    /// is freed with its last event: a kernel SIGKILL ends a run between the owner's cursor and
    /// the observer's request); while the owner's stream still runs, the cursor is held and the
    /// answer must be `exact`. The owner's client reads the end a moment after the adapter sent
    /// it (this machine is loaded): a join whose head came at most 2 s before the owner's end was
    /// read is taken as after it. A run wrongly joined mid-stream ends seconds after (the owner's
    /// paced run lasts 4 s, the observer comes at its 5th event).
    fn check_joins(&self, run: &str, owner: &crate::stream::Answer, joins: &[Instant]) {
        for &head_at in joins {
            if owner.is_stream() && owner.ended_at < head_at + Duration::from_secs(2) {
                self.w.checked(JOINS);
                self.w.count("cursors answered join after their run ended");
            } else {
                let detail = format!(
                    "thread={} run={run}: X-AGUI-Resume join {:.1} s before the owner's end",
                    &self.thread,
                    owner
                        .ended_at
                        .saturating_duration_since(head_at)
                        .as_secs_f64()
                );
                self.w.violation(JOINS, detail);
            }
        }
    }

    fn join_observer(&self, path: &str, body: &Value, run: &str) {
        let w = &*self.w;
        let call = Call {
            world: w,
            what: "observer (join)",
            thread: &self.thread,
            run,
            patience: Duration::from_secs(10),
            tap: None,
        };
        let a = call.post(&self.agent, path, body, None, Read::All);
        if a.status == 200 {
            w.count(&format!(
                "observers ({})",
                if a.resume.is_empty() {
                    "no X-AGUI-Resume"
                } else {
                    &a.resume
                }
            ));
        } else {
            w.count(&format!("observers refused: {} {}", a.status, a.code));
        }
    }

    /// The observer's events are exactly the owner's after the cursor.
    fn compare(&self, run: &str, owner: &[Ev], cursor_at: usize, seen: &[Ev]) {
        const NAME: &str = "an exact resume (over a cut) is the owner's stream after the cursor";
        let expected = &owner[cursor_at + 1..];
        let n = seen.len().min(expected.len());
        let same = seen[..n]
            .iter()
            .zip(&expected[..n])
            .all(|(a, b)| a.0 == b.0 && a.1 == b.1);
        if same && seen.len() == expected.len() {
            self.w.checked(NAME);
        } else {
            let first_diff = seen
                .iter()
                .zip(expected)
                .position(|(a, b)| a.0 != b.0 || a.1 != b.1);
            let detail = format!(
                "thread={} run={run}: observer {} events, owner {} after the cursor; first difference at {first_diff:?}",
                &self.thread,
                seen.len(),
                expected.len()
            );
            self.w.violation(NAME, detail);
        }
    }
}
