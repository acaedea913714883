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

    /// The next `result`, viewed in place (the run's hot path); `Ok(None)` at the end. A held
    /// run waits for the kernel under this frame (in `next_data`): the viewing, whose frame is
    /// large, is a function of its own, entered once the bytes are there (its pages are not
    /// kept resident for as long as the kernel is silent).
    pub(crate) fn next_view(&mut self) -> Result<Option<Next<'_>>, Error> {
        match self {
            A2aStream::One(v, text) => match v.take() {
                Some(v) => view_value(v, text, false),
                None => Ok(None),
            },
            // The view is returned as it is built, in the caller's slot (no copy of it here).
            A2aStream::Sse(events, text) => match events.next_data() {
                Ok(Some((data, buffered))) => view(data, text, buffered),
                Ok(None) => Ok(None),
                Err(e) => Err(read_failed(&e)),
            },
        }
    }
}

/// One SSE event's `result`, viewed in place where it can be, else read as a `Value` (`text`
/// holds its text).
#[inline(never)]
fn view<'a>(
    data: &'a [u8],
    text: &'a mut String,
    buffered: bool,
) -> Result<Option<Next<'a>>, Error> {
    if let Some(item) = Item::of_frame(data) {
        return Ok(Some(Next { item, buffered }));
    }
    // Not a plain result (or a shape the view refuses, such as a repeated key): the `Value`
    // reading decides, so both readings accept the same frames, but for one leniency of the
    // view: what it skips unread is not checked to the end (a lone surrogate escape, a number
    // beyond f64), where a `Value` refuses the frame.
    view_value(parse_rpc(data)?, text, buffered)
}

/// A `result` read as a `Value`, viewed through its text (kept in `text`).
fn view_value(result: Value, text: &mut String, buffered: bool) -> Result<Option<Next<'_>>, Error> {
    *text = result.to_string();
    let item = Item::of_result(text).map_err(|_| Msg::StreamNotJson.err())?;
    Ok(Some(Next { item, buffered }))
}

/// A failed read (rare: never inlined into the frame a held run waits under).
#[cold]
#[inline(never)]
fn read_failed(e: &std::io::Error) -> Error {
    read_error(e)
}
