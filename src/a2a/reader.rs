//! The stream of a streaming call: SSE events read incrementally, each JSON-RPC `result` viewed in
//! place ([`Item`]) on the hot path, or read as a `Value` where the view refuses it.

use super::failure::read_error;
use super::frame::Item;
use super::rpc::parse_rpc;
use crate::error::{Error, Msg};
use crate::sse::EventReader;
use serde_json::Value;

/// One `SendStreamingMessage` reply.
pub(crate) enum A2aStream<R = ureq::BodyReader<'static>> {
    /// The events, and room for a result that had to be read the slow way.
    Sse(Box<EventReader<R>>, String),
    /// A one-shot result, and room for its text.
    One(Option<Value>, String),
}

/// One result, viewed, and whether the next one is already buffered (the caller may batch its
/// output).
pub(crate) struct Next<'a> {
    pub(crate) item: Item<'a>,
    pub(crate) buffered: bool,
}

impl<R: std::io::Read> A2aStream<R> {
    pub(crate) fn new(reader: R) -> A2aStream<R> {
        A2aStream::Sse(Box::new(EventReader::new(reader)), String::new())
    }

    /// Whether the next result is already buffered (the caller may batch its output).
    pub(crate) fn has_buffered(&self) -> bool {
        match self {
            A2aStream::One(v, _) => v.is_some(),
            A2aStream::Sse(events, _) => events.has_ready(),
        }
    }

    /// The next JSON-RPC `result`, `Ok(None)` at the end of the stream.
    pub(crate) fn next_result(&mut self) -> Result<Option<Value>, Error> {
        match self {
            A2aStream::One(v, _) => Ok(v.take()),
            A2aStream::Sse(events, _) => match events.next_data().map_err(|e| read_error(&e))? {
                Some((data, _)) => parse_rpc(data).map(Some),
                None => Ok(None),
            },
        }
    }

    /// The next `result`, viewed in place (the run's hot path); `Ok(None)` at the end.
    pub(crate) fn next_view(&mut self) -> Result<Option<Next<'_>>, Error> {
        let (result, text, buffered) = match self {
            A2aStream::One(v, text) => match v.take() {
                Some(v) => (v, text, false),
                None => return Ok(None),
            },
            A2aStream::Sse(events, text) => {
                let Some((data, buffered)) = events.next_data().map_err(|e| read_error(&e))? else {
                    return Ok(None);
                };
                if let Some(item) = Item::of_frame(data) {
                    return Ok(Some(Next { item, buffered }));
                }
                // Not a plain result (or a shape the view refuses, such as a repeated key): the
                // `Value` reading decides, so both readings accept the same frames, but for one
                // leniency of the view: what it skips unread is not checked to the end (a lone
                // surrogate escape, a number beyond f64), where a `Value` refuses the frame.
                (parse_rpc(data)?, text, buffered)
            }
        };
        *text = result.to_string();
        let item = Item::of_result(text).map_err(|_| Msg::StreamNotJson.err())?;
        Ok(Some(Next { item, buffered }))
    }
}
