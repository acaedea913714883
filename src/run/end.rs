//! How a run ends: what the task's end means for the execution (closed, or waiting for input),
//! recorded before it is announced; what a cancel leaves (`settle`); a panic's end.

use super::{shutting_down, Run};
use crate::error::{Code, Error, Lang, Msg};
use crate::feed::Feed;
use crate::ids;
use crate::interrupts;
use crate::projection::{End, Projection, RunIds};
use crate::store::Pending;
use crate::stream::SseStream;
use serde_json::Value;
use std::sync::atomic::Ordering;

/// The span state went with the panic: a fresh projection closes nothing and reports it.
pub(super) fn end_after_panic(ids: RunIds, lang: Lang, stream: &SseStream, feed: &Feed) {
    log::error!("run {} panicked; ending it with RUN_ERROR", ids.run_id);
    let e = Msg::ProjectionFailed.err();
    let mut out = Vec::new();
    Projection::new(ids, lang).finish(&End::Failed(e), &mut out);
    stream.send_frames(&feed.push(&out), out.len());
    stream.finish();
}

impl Run<'_> {
    /// What a cancel leaves settled, the end recorded and announced, the thread freed and the
    /// stream closed (never inlined: its locals would stay in the frame a held run waits under).
    #[inline(never)]
    pub(super) fn close(&mut self, end: End) {
        self.stream.clear_on_close();
        self.live.upstream_done.store(true, Ordering::SeqCst);
        let end = self.settle(end);
        self.guard.close_if_freed(&self.active.execution_id);
        crate::metrics::run_ended(end.outcome());
        match end.code() {
            Some(code) => log::info!("run {} ended with {code}", self.input.run_id),
            None => log::debug!("run {} ended", self.input.run_id),
        }
        self.proj.finish(&end, &mut self.out);
        // Everything durable is on disk: free the thread before the client sees the end, so a
        // resume sent the moment RUN_FINISHED arrives is never refused as THREAD_BUSY.
        self.guard.release();
        self.flush();
        self.stream.finish();
    }

    /// What the task's end means for the execution: closed, or waiting for input. Never inlined:
    /// its locals would stay in the frame a held run waits under.
    #[inline(never)]
    pub(super) fn conclude(&mut self, end: End) -> End {
        match end {
            End::Success => self.terminal(End::Success),
            End::Interrupt(inputs) => self.interrupt(inputs),
            End::Failed(e) => {
                if e.code == Code::Cancelled {
                    self.cancel_upstream();
                }
                self.terminal(End::Failed(e))
            }
        }
    }

    /// Gives the task up: cancels it (best effort) and ends with `e`.
    #[inline(never)]
    pub(super) fn abandon(&mut self, e: Error) -> End {
        self.cancel_upstream();
        End::Failed(e)
    }

    /// Records that the execution ended (best effort: the end is announced either way).
    pub(super) fn terminal(&mut self, end: End) -> End {
        if self.left_running() {
            return end;
        }
        self.record_end();
        end
    }

    /// Marks the execution ended and saves that: durably, unless the run ends because its
    /// client left and nothing waits for input (see `Store::save_unsynced`: such an end, if a
    /// host crash takes it back, is repaired by the thread's next turn as a crash mid-run is,
    /// and nobody is there to be shown it; a pending input would be offered again, so that
    /// end stays durable). Never inlined: its locals would stay in the frame a held run waits
    /// under (inlined, it cost a held run a 4 KiB stack page more).
    #[inline(never)]
    fn record_end(&mut self) {
        let unwatched = self.active.is_cancelled() && self.stream.is_closed();
        let waited = !self.execution().pending.is_empty();
        self.doc.mark_terminal();
        let saved = if unwatched && !waited {
            self.save_unsynced()
        } else {
            self.save()
        };
        if let Err(e) = saved {
            log::error!("cannot record the end of run {}: {e}", self.input.run_id);
        }
    }

    /// Persists the input waits, then (only then) announces them, with all still pending.
    pub(super) fn interrupt(&mut self, inputs: Vec<Value>) -> End {
        self.record_pending(inputs);
        if let Err(e) = self.save() {
            // Fail closed: nothing resumable is announced, and the task must not wait forever.
            self.cancel_upstream();
            self.execution().pending.clear();
            return End::Failed(e);
        }
        let lang = self.lang;
        let list = self
            .execution()
            .pending
            .values()
            .map(|p| {
                interrupts::to_interrupt(&p.value, p.expires_at.as_deref().unwrap_or(""), lang)
            })
            .collect();
        End::Interrupt(list)
    }

    /// The input waits, with their expiry, and the pipeline facts a resume needs.
    fn record_pending(&mut self, inputs: Vec<Value>) {
        let ttl = self.app.config.interrupt_ttl.as_millis() as u64;
        let expires_ms = ids::now_ms() + ttl;
        let expires = ids::rfc3339(expires_ms);
        let durable = self.proj.durable();
        let task = self.proj.task_id().map(String::from);
        let exec = self.execution();
        for input in inputs {
            let id = input["inputId"].as_str().unwrap_or_default().to_string();
            exec.pending.entry(id).or_insert(Pending {
                sideband: interrupts::is_sideband(&input),
                value: input,
                expires_at: Some(expires.clone()),
                expires_at_ms: Some(expires_ms),
            });
        }
        exec.task_id = task;
        exec.pipeline_sequence = durable.pipeline_sequence;
        exec.pipeline_open_steps = durable.open_steps.into_iter().collect();
        exec.text_snapshot_digests = durable.text_digests.into_iter().collect();
    }

    /// A cancel (the extension, a disconnect, a shutdown) always leaves this run's execution
    /// closed: its task was told to stop, so nothing of it stays pending, whatever the run saw
    /// meanwhile (an answer refused by the cancelled task, an interrupt that raced the cancel).
    fn settle(&mut self, end: End) -> End {
        let stopping = self.app.runs.stopping();
        let own = self.active.execution_id == self.live.ids.execution_id;
        if !own || !(stopping || self.active.is_cancelled()) {
            return end;
        }
        let exec = self.execution();
        let open = !exec.pending.is_empty() || exec.task_id.is_some();
        let id = exec.execution_id.clone();
        if (open || !self.doc.is_terminal(&id)) && !self.left_running() {
            self.cancel_upstream();
            self.record_end();
        }
        match end {
            End::Success => End::Success,
            _ if stopping => End::Failed(shutting_down()),
            // Whatever else the run met (an answer the cancelled task refused), it was cancelled.
            _ => End::Failed(Msg::Cancelled.err()),
        }
    }

    /// The kernel may still run the task (its upstream cut by `cancel::stop_soon` before the
    /// kernel said the task ended, or its task named only after a Stop): the execution stays
    /// recorded as running, so the thread's next turn stops it first
    /// (`repair.rs`: cancel, wait, bounded), or answers the retryable `A2A_UNAVAILABLE` when it
    /// cannot, rather than sending a turn the kernel would refuse as "already working".
    pub(super) fn left_running(&self) -> bool {
        let known = self.proj.task_id().is_some();
        if known && self.live.task_may_outlive.load(Ordering::SeqCst) {
            log::warn!(
                "run {}: its task may still run upstream; the next turn stops it first",
                self.input.run_id
            );
            return true;
        }
        false
    }
}
