//! The relay's hot path without sockets: an upstream SSE byte stream in, the client's SSE frames
//! out, through the same reader, JSON-RPC parsing, projection and frame writer a run uses
//! (`run::Run::pump`). Only benches use it (benches/frames.rs), so the per-event cost they report is
//! the cost of exactly this code.

use crate::a2a::A2aStream;
use crate::error::{Error, Lang};
use crate::projection::{End, Projection, RunIds};
use crate::sse::EventReader;

/// One run's relay over an in-memory upstream.
pub struct Relay<R: std::io::Read> {
    upstream: A2aStream<R>,
    proj: Projection,
    out: Vec<serde_json::Value>,
    /// The client's bytes of the last step (SSE frames).
    pub body: Vec<u8>,
}

impl<R: std::io::Read> Relay<R> {
    /// A relay for the run `ids`, reading `upstream`; the clock is fixed (no syscall per event).
    pub fn new(upstream: R, ids: RunIds) -> Relay<R> {
        Relay {
            upstream: A2aStream::Sse(Box::new(EventReader::new(upstream))),
            proj: Projection::new(ids, Lang::En).with_clock(|| 1),
            out: Vec::new(),
            body: Vec::new(),
        }
    }

    /// Relays one upstream item: the number of events written, `None` at the end of the stream.
    pub fn step(&mut self) -> Result<Option<usize>, Error> {
        let Some(item) = self.upstream.next_result()? else {
            return Ok(None);
        };
        let end: Option<End> = self.proj.on_item(&item, &mut self.out)?;
        if let Some(end) = end {
            self.proj.finish(&end, &mut self.out);
        }
        self.body.clear();
        for ev in &self.out {
            let json = serde_json::to_vec(ev).unwrap_or_default();
            crate::sse::push_data_frame(&mut self.body, &json);
        }
        let n = self.out.len();
        self.out.clear();
        Ok(Some(n))
    }
}
