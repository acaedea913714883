//! The relay's hot path without sockets: an upstream SSE byte stream in, the client's SSE frames
//! out, through the same reader, JSON-RPC parsing, projection, replay buffer (numbering, ring,
//! fold), kept conversation (a log under the temporary directory) and chunked stream writer a
//! run uses: each step calls the functions `run::Run::relay`
//! and `Run::flush` call (`run::project_next`, `run::write_events`), the stream writing to
//! `io::sink()`. Only benches use it (benches/frames/main.rs), so the per-event cost they report
//! is the cost of exactly this code.

use crate::a2a::A2aStream;
use crate::error::{Error, Lang};
use crate::feed::{Feed, Feeds};
use crate::history::{History, Recorder};
use crate::projection::{End, Events, Projection, RunIds};
use crate::run;
use crate::stream::SseStream;
use std::sync::Arc;

/// One run's relay over an in-memory upstream.
pub struct Relay<R: std::io::Read> {
    upstream: A2aStream<R>,
    proj: Projection,
    out: Events,
    _feeds: Feeds,
    feed: Arc<Feed>,
    turn: Recorder,
    stream: Arc<SseStream>,
    /// The client's bytes of the last step (SSE frames, before chunking).
    pub body: Vec<u8>,
}

impl<R: std::io::Read> Relay<R> {
    /// A relay for the run `ids`, reading `upstream`; the clock is fixed (no syscall per event).
    pub fn new(upstream: R, ids: RunIds) -> Relay<R> {
        let feeds = Feeds::start(256 * 1024, std::time::Duration::ZERO);
        let feed = feeds.open(&ids.execution_id);
        let stream = SseStream::start(Box::new(std::io::sink())).expect("a sink takes the head");
        let dir =
            std::env::temp_dir().join(format!("iac-code-agui-hotpath-{}", std::process::id()));
        let turn = Recorder::new(&History::new(&dir, 1000), &ids.thread_id);
        Relay {
            upstream: A2aStream::new(upstream),
            proj: Projection::new(ids, Lang::En).with_clock(|| 1),
            out: Events::default(),
            _feeds: feeds,
            feed,
            turn,
            stream,
            body: Vec::new(),
        }
    }

    /// Relays one upstream item: the number of events written, `None` at the end of the stream.
    pub fn step(&mut self) -> Result<Option<usize>, Error> {
        let Some(next) = self.upstream.next_view()? else {
            return Ok(None);
        };
        let end: Option<End> = run::project_next(&mut self.proj, &next, &mut self.out)?;
        if let Some(end) = end {
            self.proj.finish(&end, &mut self.out);
        }
        let n = self.out.len();
        run::write_events(
            &self.feed,
            &self.stream,
            &mut self.out,
            &mut self.body,
            &mut self.turn,
        );
        Ok(Some(n))
    }

    /// Reads the next upstream event without parsing it (the floor: what reading costs).
    pub fn read_only(&mut self) -> Result<Option<usize>, Error> {
        match &mut self.upstream {
            A2aStream::Sse(events, _) => Ok(events
                .next_data()
                .map_err(|_| crate::error::Msg::StreamBroke.err())?
                .map(|(d, _)| d.len())),
            A2aStream::One(..) => Ok(None),
        }
    }

    /// Reads and views the next upstream result without projecting it.
    pub fn view_only(&mut self) -> Result<Option<usize>, Error> {
        Ok(self
            .upstream
            .next_view()?
            .map(|n| n.item.head.parts.as_str().len()))
    }
}
