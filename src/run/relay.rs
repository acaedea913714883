//! The relay's pure part, shared by a run (`Run::relay`, `Run::flush`) and the frames bench
//! (`hotpath`), so that the bench measures the very functions a run calls.

use crate::a2a;
use crate::error::Error;
use crate::feed::Feed;
use crate::history::Recorder;
use crate::projection::{End, Events, Projection};
use crate::stream::SseStream;

/// The relay's pure part, one item: projected, its events appended to `out`; `Some` is the
/// task's end for this run. The frames bench runs this very function (`hotpath`).
pub(crate) fn project_next(
    proj: &mut Projection,
    next: &a2a::Next,
    out: &mut Events,
) -> Result<Option<End>, Error> {
    #[cfg(debug_assertions)]
    panic_if_asked(next.item.head.status.obj().and_then(|s| {
        let text = s.message.obj()?.parts.as_str();
        Some(text)
    }));
    proj.on_view(&next.item, out)
}

/// The relay's pure part, its writing: the events in `out` numbered and framed by the replay
/// buffer (into `frames`, reused), the messages they close kept in the thread's conversation,
/// then sent to the client; `out` is left empty. `false` once the client is gone. The frames
/// bench runs this very function (`hotpath`).
///
/// The order matters: the replay buffer first, so a join's fold always holds what the
/// conversation holds (the join merges the two by message id); the conversation before the
/// client, so a message the client saw closed is on disk even if the adapter is killed then.
pub(crate) fn write_events(
    feed: &Feed,
    stream: &SseStream,
    out: &mut Events,
    frames: &mut Vec<u8>,
    turn: &mut Recorder,
) -> bool {
    feed.push_into(out, frames);
    turn.observe(out);
    let ok = stream.send_frames(frames, out.len());
    out.clear();
    ok
}

/// Debug builds only: an agent message of exactly this text panics the run thread, so the test
/// suite can prove a panicking run still ends with `RUN_ERROR` (tests/reliability.rs).
#[cfg(debug_assertions)]
pub(super) fn panic_if_asked(text: Option<&str>) {
    if text == Some("__iac_code_agui_test_panic__") {
        panic!("test panic requested by the upstream");
    }
}
