//! A kernel's stream: the SSE reader, the frame view and the pipeline envelope view.

use crate::a2a::frame::{Field, Item, LStr};
use crate::a2a::{A2aStream, Envelope};
use crate::sse::Parser;
use serde_json::value::RawValue;
use serde_json::Value;
use std::io::Read;

/// Chunk sizes (1 to 64 bytes) taken from the first bytes of a fuzz input, and the rest.
fn chunking(data: &[u8]) -> (Vec<usize>, &[u8]) {
    let Some((&first, rest)) = data.split_first() else {
        return (Vec::new(), data);
    };
    let (sizes, rest) = rest.split_at(usize::from(first % 4).min(rest.len()));
    (
        sizes.iter().map(|b| usize::from(b % 64) + 1).collect(),
        rest,
    )
}

/// A reader that hands out `bytes` in the given chunk sizes, round and round.
struct Chunked<'a> {
    bytes: &'a [u8],
    sizes: Vec<usize>,
    at: usize,
}

impl<'a> Chunked<'a> {
    fn new(bytes: &'a [u8], sizes: &[usize]) -> Chunked<'a> {
        let sizes = if sizes.is_empty() {
            vec![usize::MAX]
        } else {
            sizes.to_vec()
        };
        Chunked {
            bytes,
            sizes,
            at: 0,
        }
    }
}

impl Read for Chunked<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let want = self.sizes[self.at % self.sizes.len()];
        self.at += 1;
        let n = want.min(buf.len()).min(self.bytes.len());
        buf[..n].copy_from_slice(&self.bytes[..n]);
        self.bytes = &self.bytes[n..];
        Ok(n)
    }
}

fn events_fed(parser_input: &[u8], sizes: &[usize]) -> Vec<Vec<u8>> {
    let mut parser = Parser::new();
    let mut out = Vec::new();
    let mut chunks = Chunked::new(parser_input, sizes);
    let mut buf = [0u8; 64];
    loop {
        let n = chunks.read(&mut buf).unwrap_or(0);
        if n == 0 {
            return out;
        }
        parser
            .feed(&buf[..n], &mut out)
            .expect("no event is that large here");
    }
}

/// The event stream rules of the WHATWG HTML standard (9.2.6), read naively line by line: the
/// events' data (`event`, `id` and `retry` do not matter to a JSON-RPC stream). No BOM is
/// stripped: a kernel sends none, and the reader strips none.
fn events_by_the_standard(bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut events = Vec::new();
    let mut data: Option<Vec<u8>> = None;
    let mut rest = bytes;
    // A line ends at CRLF, LF or CR; the bytes after the last line end are no line.
    while let Some(i) = rest.iter().position(|&b| b == b'\n' || b == b'\r') {
        let line = &rest[..i];
        let crlf = rest[i] == b'\r' && rest.get(i + 1) == Some(&b'\n');
        rest = &rest[i + if crlf { 2 } else { 1 }..];
        if line.is_empty() {
            // The data buffer ends with the LF its last line added; it goes.
            events.extend(data.take().map(|mut d| {
                d.pop();
                d
            }));
            continue;
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(0) => continue,
            Some(c) => (
                &line[..c],
                line[c + 1..].strip_prefix(b" ").unwrap_or(&line[c + 1..]),
            ),
            None => (line, &[][..]),
        };
        if field == b"data" {
            let d = data.get_or_insert_with(Vec::new);
            d.extend_from_slice(value);
            d.push(b'\n');
        }
    }
    events
}

/// The SSE reader: the same bytes in any chunking give the same events (a chunk may end inside a
/// CRLF or a UTF-8 sequence), the events the standard's rules give; an event's data holds no CR.
pub fn check_sse(data: &[u8]) {
    let (sizes, bytes) = chunking(data);
    let mut whole = Vec::new();
    Parser::new()
        .feed(bytes, &mut whole)
        .expect("no event is that large here");
    assert_eq!(
        whole,
        events_by_the_standard(bytes),
        "not the standard's events"
    );
    assert_eq!(
        whole,
        events_fed(bytes, &sizes),
        "chunking changed the events"
    );
    assert_eq!(
        whole,
        events_fed(bytes, &[1]),
        "byte by byte changed the events"
    );
    for ev in &whole {
        assert!(!ev.contains(&b'\r'), "a CR inside an event's data");
    }
}

/// A view's reading, for comparing two readings of one result.
fn summary(item: &Item) -> String {
    let s = |l: &LStr| format!("{}{:?}", l.is_present(), l.get());
    let raw = |r: Option<&RawValue>| r.map(|r| serde_json::from_str::<Value>(r.get()).ok());
    let h = &item.head;
    let status = match &h.status {
        Field::Obj(st) => {
            let msg = match &st.message {
                Field::Obj(m) => {
                    format!("{} {} {:?}", s(&m.role), s(&m.message_id), m.parts.as_str())
                }
                other => format!("{}", other.is_present()),
            };
            format!("{} {msg}", s(&st.state))
        }
        other => format!("{}", other.is_present()),
    };
    let thinking = match &h.iac.thinking {
        Field::Obj(t) => format!("{} {}", s(&t.kind), s(&t.text)),
        other => format!("{}", other.is_present()),
    };
    format!(
        "{:?} id={} task={} ctx={} status=({status}) msg={} parts={:?} history={:?} artifact={:?} \
         session={} final={} thinking=({thinking}) rare={} pipeline={:?} batch={:?} tool={:?}",
        item.kind,
        s(&h.id),
        s(&h.task_id),
        s(&h.context_id),
        s(&h.message_id),
        h.parts.as_str(),
        raw(h.history),
        raw(h.artifact),
        s(&h.iac.session_id),
        h.iac.final_complete,
        h.iac.rare,
        raw(h.iac.pipeline_raw),
        raw(h.iac.batch_raw),
        raw(h.iac.tool_raw),
    )
}

/// What the slow way (a `Value`, then the view of its text) reads of one frame.
fn slow_reading(data: &[u8]) -> Result<String, String> {
    let v = crate::a2a::parse_rpc(data).map_err(|e| e.to_string())?;
    let text = v.to_string();
    Item::of_result(&text)
        .map(|item| summary(&item))
        .map_err(|e| e.to_string())
}

/// One frame: what the in-place view accepts, the slow way accepts and reads the same; the
/// pipeline envelope view reads each field as a `Value` lookup does. Where a `Value` cannot hold
/// the JSON (a number beyond f64 in a field the views skip) there is nothing to compare: the
/// views skip it unread, as they should.
pub fn check_a2a_frame(data: &[u8]) {
    if beyond_value(data) {
        let _ = Item::of_frame(data);
        if let Ok(raw) = serde_json::from_slice::<&RawValue>(data) {
            let _ = Envelope::of(raw).map(|e| (e.data_value(), e.delta().text.is_present()));
        }
        return;
    }
    if let Some(item) = Item::of_frame(data) {
        let fast = summary(&item);
        assert_eq!(
            Ok(fast),
            slow_reading(data),
            "the two readings of a frame differ"
        );
    }
    let Ok(raw) = serde_json::from_slice::<&RawValue>(data) else {
        return;
    };
    check_envelope(raw);
}

fn check_envelope(raw: &RawValue) {
    let Some(e) = Envelope::of(raw) else {
        return;
    };
    let v: Value = serde_json::from_str(raw.get()).expect("the view read it");
    let str_of = |k: &str| v.get(k).and_then(Value::as_str);
    assert_eq!(e.event_type.get(), str_of("eventType"));
    assert_eq!(e.event_id.get(), str_of("eventId"));
    assert_eq!(e.scope.get(), str_of("scope"));
    assert_eq!(e.session_id.get(), str_of("iacCodeSessionId"));
    assert_eq!(e.sequence.0, v.get("sequence").and_then(Value::as_f64));
    for (coord, key) in [
        (&e.step, "step"),
        (&e.candidate_step, "candidateStep"),
        (&e.candidate, "candidate"),
    ] {
        let want = v.get(key).and_then(Value::as_object);
        assert_eq!(coord.obj().is_some(), want.is_some(), "{key}");
        if let (Some(c), Some(w)) = (coord.obj(), want) {
            let get = |k: &str| w.get(k).and_then(Value::as_str);
            assert_eq!(c.id.get(), get("id"));
            assert_eq!(c.run_id.get(), get("runId"));
            assert_eq!(c.sub_pipeline_id.get(), get("subPipelineId"));
        }
    }
    assert_eq!(e.data_value(), v.get("data").cloned().unwrap_or_default());
    let d = e.delta();
    let data = v.get("data").filter(|d| d.is_object());
    let dstr = |k: &str| data.and_then(|d| d.get(k)).and_then(Value::as_str);
    assert_eq!(d.kind.get(), dstr("type"));
    assert_eq!(d.text.get(), dstr("text"));
}

/// JSON that a `Value` cannot hold (a lone surrogate escape, a number beyond f64), which the
/// views skip unread where it is in a field they do not read
/// (`a_frame_with_an_unreadable_value_in_a_skipped_field_is_still_read`).
fn beyond_value(json: &[u8]) -> bool {
    serde_json::from_slice::<Value>(json).is_err()
        && serde_json::from_slice::<serde::de::IgnoredAny>(json).is_ok()
}

/// A kernel's stream in any chunking: the hot path's view and the `Value` reading take the same
/// items and stop at the same error.
pub fn check_a2a_stream(data: &[u8]) {
    let (sizes, bytes) = chunking(data);
    let mut fast = A2aStream::new(Chunked::new(bytes, &sizes));
    if events_fed(bytes, &[]).iter().any(|e| beyond_value(e)) {
        // The view reads such a frame, the `Value` reading refuses it: nothing to compare.
        while let Ok(Some(_)) = fast.next_view() {}
        return;
    }
    let mut slow = A2aStream::new(Chunked::new(bytes, &[]));
    loop {
        let a = fast.next_view().map(|n| n.map(|n| summary(&n.item)));
        let b = slow.next_result().and_then(|v| match v {
            None => Ok(None),
            Some(v) => Ok(Some(summary(
                &Item::of_result(&v.to_string())
                    .map_err(|_| crate::error::Msg::StreamNotJson.err())?,
            ))),
        });
        match (a, b) {
            (Ok(Some(a)), Ok(Some(b))) => assert_eq!(a, b, "the two readings differ"),
            (Ok(None), Ok(None)) => return,
            (Err(a), Err(b)) => {
                assert_eq!(a.to_string(), b.to_string());
                return;
            }
            (a, b) => panic!("the two readings disagree: {a:?} / {b:?}"),
        }
    }
}
