//! Following a resumed task to its next end: the answer's stream read on, or, when it stops
//! short (or the answers were side waits), the task followed with `GetTask` and
//! `SubscribeToTask`. A resumed run held by a silent kernel waits under `read_to_end`.

use super::{lost, Run, Write};
use crate::a2a::A2aStream;
use crate::error::{Error, Msg};
use crate::projection::End;
use std::ops::ControlFlow::Break;

impl Run<'_> {
    /// Follows a task that runs on (the reference's `_stream_after_sideband`): `GetTask` first
    /// (closing the send/subscribe race), then `SubscribeToTask`, then one more `GetTask` when
    /// the subscription stops short of an end; the pipeline events missed meanwhile are
    /// recovered before the end is announced. Never inlined: its locals stay out of the frames
    /// of `resume` and `send_answers`, which a resumed run waits under.
    #[inline(never)]
    pub(super) fn follow(&mut self, task_id: &str, since: u64) -> End {
        let end = match self.task_end(task_id) {
            Ok(Some(end)) => Some(end),
            Ok(None) => match self.live.upstream.subscribe_to_task(task_id) {
                Ok(mut upstream) => self.read_to_end(&mut upstream),
                Err(e) => {
                    log::warn!("subscription to task {task_id} failed: {e}");
                    None
                }
            },
            Err(end) => return end,
        };
        let end = match end {
            Some(end) => end,
            None => match self.task_end(task_id) {
                Ok(Some(end)) => end,
                Ok(None) => return self.abandon(Msg::StreamEndedEarly.err()),
                Err(end) => return end,
            },
        };
        if let Break(end) = self.recover_pipeline(task_id, since) {
            return end;
        }
        self.conclude(end)
    }

    /// `GetTask`, projected: `Some` when the task is at an end (or a new wait) for this run.
    fn task_end(&mut self, task_id: &str) -> Result<Option<End>, End> {
        match self.live.upstream.get_task(task_id) {
            Ok(Some(task)) => Ok(self.project(&task, Write::Now)),
            Ok(None) => Err(self.terminal(End::Failed(lost()))),
            Err(e) => Err(self.abandon(e)),
        }
    }

    /// Reads a stream to the task's next end; `None` when it stops short (closed, broken). A
    /// resumed run waits under this frame: the view is matched in place (not moved), and the
    /// log line is out of line.
    #[inline(never)]
    pub(super) fn read_to_end(&mut self, upstream: &mut A2aStream) -> Option<End> {
        loop {
            if self.active.is_cancelled() {
                return Some(End::Failed(Msg::Cancelled.err()));
            }
            let read = upstream.next_view();
            let next = match read {
                Ok(Some(ref next)) => next,
                Ok(None) => return None,
                Err(e) => {
                    stream_stopped(&e);
                    return None;
                }
            };
            if let Some(end) = self.relay(next) {
                return Some(end);
            }
        }
    }
}

#[cold]
#[inline(never)]
fn stream_stopped(e: &Error) {
    log::warn!("the A2A stream stopped: {e}");
}
