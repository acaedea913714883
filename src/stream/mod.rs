//! The client side of a run: the SSE response written straight to the socket, and the heartbeat
//! timer shared by every open stream.
//!
//! A run's own thread blocks on the upstream read, so it cannot notice silence: the heartbeat
//! thread does, and a client found gone fires its stream's close hook, which cancels the A2A task
//! and so unblocks the run thread. One job per file: `cursor` numbers the frames (`id:` lines),
//! `writer` is one response (head, framing, writes, the disconnect hook), `heartbeat` the timer
//! thread and its non-blocking visits.

pub(crate) mod cursor;
mod heartbeat;
mod writer;

pub use heartbeat::Heartbeats;
pub(crate) use writer::SseStream;
