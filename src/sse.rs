//! Server-sent events: an incremental reader for the A2A stream and the frame writer for ours.
//!
//! The reader follows the WHATWG event-stream rules that matter for JSON-RPC over SSE: lines end in
//! CRLF, LF or CR (a CR at the end of one chunk and an LF at the start of the next are one line end),
//! comments start with `:`, several `data:` lines of one event join with `\n`, and an event is
//! dispatched on a blank line. Chunk boundaries may fall anywhere, even inside a UTF-8 sequence.

use std::io::{self, Read};

/// Upper bound for one event's data; a larger event is a protocol error, not an allocation.
pub(crate) const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// Buffers up to this size are kept for reuse; larger ones (a large event) are freed.
const MAX_KEPT: usize = 256 * 1024;

/// The read buffer a fast stream grows to (from `FIRST_READ`, four times at each full read).
const MAX_READ: usize = 64 * 1024;
/// The first read's buffer, allocated at the first read: a held run (a few small frames, then
/// silence) rarely needs more, and keeps it, zero-filled, for its whole life (1 KiB: ~3 KiB less
/// a held run than 4 KiB); a fast stream grows to `MAX_READ` in three reads.
const FIRST_READ: usize = 1024;

/// Incremental SSE parser: feed it bytes, take complete `data` payloads out.
#[derive(Default)]
pub struct Parser {
    line: Vec<u8>,
    data: Vec<u8>,
    has_data: bool,
    after_cr: bool,
    /// Emptied buffers of events the reader is done with.
    spare: Vec<Vec<u8>>,
}

impl Parser {
    pub fn new() -> Parser {
        Parser::default()
    }

    /// Feeds `bytes`, pushing each complete event's data onto `out`. A line that is whole in
    /// `bytes` is read where it is; only a line cut by the end of `bytes` is kept to be joined.
    pub fn feed(&mut self, mut bytes: &[u8], out: &mut Vec<Vec<u8>>) -> io::Result<()> {
        while let Some(&first) = bytes.first() {
            if self.after_cr && first == b'\n' {
                self.after_cr = false;
                bytes = &bytes[1..];
                continue;
            }
            self.after_cr = false;
            let Some(i) = line_end(bytes) else {
                self.check_size(bytes.len())?;
                self.line.extend_from_slice(bytes);
                return Ok(());
            };
            self.after_cr = bytes[i] == b'\r';
            self.check_size(i)?;
            if self.line.is_empty() {
                self.end_line(&bytes[..i], out);
            } else {
                let mut line = std::mem::take(&mut self.line);
                line.extend_from_slice(&bytes[..i]);
                if !self.take_data_line(&mut line) {
                    self.end_line(&line, out);
                }
                line.clear();
                // A large line's buffer is not kept for the rest of the stream.
                if line.capacity() <= MAX_KEPT {
                    self.line = line;
                }
            }
            bytes = &bytes[i + 1..];
        }
        Ok(())
    }

    fn check_size(&self, more: usize) -> io::Result<()> {
        if self.line.len() + self.data.len() + more > MAX_EVENT_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "SSE event too large",
            ));
        }
        Ok(())
    }

    /// A large `data:` line that starts an event becomes the event's data where it is (its
    /// prefix moved out), not a second copy; `line` gets the old, empty data buffer.
    fn take_data_line(&mut self, line: &mut Vec<u8>) -> bool {
        if self.has_data || line.len() <= MAX_KEPT || !line.starts_with(b"data:") {
            return false;
        }
        let prefix = if line.get(5) == Some(&b' ') { 6 } else { 5 };
        line.drain(..prefix);
        std::mem::swap(&mut self.data, line);
        self.has_data = true;
        true
    }

    /// Gives a dispatched event's buffer back, to hold a later event without an allocation (not
    /// a large one: a single large event does not keep its memory for the rest of the stream).
    pub(crate) fn recycle(&mut self, mut buf: Vec<u8>) {
        if self.spare.len() < 64 && buf.capacity() <= MAX_KEPT {
            buf.clear();
            self.spare.push(buf);
        }
    }

    fn end_line(&mut self, line: &[u8], out: &mut Vec<Vec<u8>>) {
        if line.is_empty() {
            if self.has_data {
                let next = self.spare.pop().unwrap_or_default();
                out.push(std::mem::replace(&mut self.data, next));
                self.has_data = false;
            }
            return;
        }
        let (field, value) = match line.iter().position(|&c| c == b':') {
            Some(0) => return, // a comment
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        if field == b"data" {
            if self.has_data {
                self.data.push(b'\n');
            }
            self.data.extend_from_slice(value);
            self.has_data = true;
        }
        // `event`, `id` and `retry` do not matter for JSON-RPC streams.
    }
}

fn line_end(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let has = |v: u64, b: u8| {
        let x = v ^ (ONES * b as u64);
        x.wrapping_sub(ONES) & !x & HIGH != 0
    };
    let mut words = bytes.chunks_exact(8);
    let mut start = 0;
    for w in &mut words {
        let v = u64::from_le_bytes(w.try_into().unwrap_or_default());
        if has(v, b'\n') || has(v, b'\r') {
            break;
        }
        start += 8;
    }
    let rest = &bytes[start..];
    rest.iter()
        .position(|&b| b == b'\n' || b == b'\r')
        .map(|i| start + i)
}

/// Reads SSE events from a blocking reader.
pub(crate) struct EventReader<R> {
    inner: R,
    parser: Parser,
    ready: std::collections::VecDeque<Vec<u8>>,
    /// The event last handed out (borrowed by the caller until the next call).
    current: Vec<u8>,
    dispatched: Vec<Vec<u8>>,
    buf: Box<[u8]>,
    eof: bool,
}

impl<R: Read> EventReader<R> {
    pub(crate) fn new(inner: R) -> EventReader<R> {
        EventReader {
            inner,
            parser: Parser::new(),
            ready: Default::default(),
            current: Vec::new(),
            dispatched: Vec::new(),
            buf: Box::default(),
            eof: false,
        }
    }

    /// Whether an event is already parsed and waiting: the next call returns without reading.
    pub(crate) fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }

    /// The next event's data, or `None` at the end of the stream.
    #[cfg(test)]
    pub(crate) fn next_event(&mut self) -> io::Result<Option<Vec<u8>>> {
        Ok(self.next_data()?.map(|(d, _)| d.to_vec()))
    }

    /// The next event's data that is not blank, borrowed until the next call, and whether another
    /// event is ready after it; `None` at the end of the stream. The buffers go round (parser →
    /// queue → caller → parser), so a steady stream allocates nothing per event.
    pub(crate) fn next_data(&mut self) -> io::Result<Option<(&[u8], bool)>> {
        loop {
            if let Some(ev) = self.ready.pop_front() {
                if ev.iter().all(u8::is_ascii_whitespace) {
                    self.parser.recycle(ev);
                    continue;
                }
                let done = std::mem::replace(&mut self.current, ev);
                self.parser.recycle(done);
                return Ok(Some((&self.current, !self.ready.is_empty())));
            }
            if self.eof {
                return Ok(None);
            }
            if self.buf.is_empty() {
                self.buf = vec![0; FIRST_READ].into_boxed_slice();
            }
            let n = match self.inner.read(&mut self.buf) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if n == 0 {
                self.eof = true;
                continue;
            }
            self.parser.feed(&self.buf[..n], &mut self.dispatched)?;
            if n == self.buf.len() && n < MAX_READ {
                // A fast stream: fewer, larger reads (and so fewer writes to the client). A
                // slow or idle stream keeps the small buffer.
                self.buf = vec![0; n * 4].into_boxed_slice();
            }
            self.ready.extend(self.dispatched.drain(..));
        }
    }
}

/// Appends one `data:` frame for a JSON payload that contains no newline (serde_json never writes one).
pub(crate) fn push_data_frame(out: &mut Vec<u8>, json: &[u8]) {
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(json);
    out.extend_from_slice(b"\n\n");
}

pub(crate) const HEARTBEAT: &[u8] = b": heartbeat\n\n";

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_in_chunks(input: &[u8], chunk: usize) -> Vec<String> {
        let mut p = Parser::new();
        let mut out = Vec::new();
        for c in input.chunks(chunk) {
            p.feed(c, &mut out).unwrap();
        }
        out.into_iter()
            .map(|d| String::from_utf8(d).unwrap())
            .collect()
    }

    #[test]
    fn every_line_ending_and_every_chunk_boundary_give_the_same_events() {
        let lf = b"data: {\"a\":1}\n\n: comment\ndata: x\ndata: y\n\n";
        let crlf = b"data: {\"a\":1}\r\n\r\n: comment\r\ndata: x\r\ndata: y\r\n\r\n";
        let cr = b"data: {\"a\":1}\r\r: comment\rdata: x\rdata: y\r\r";
        for input in [&lf[..], &crlf[..], &cr[..]] {
            for chunk in 1..input.len() {
                assert_eq!(
                    parse_in_chunks(input, chunk),
                    vec!["{\"a\":1}".to_string(), "x\ny".to_string()],
                    "chunk size {chunk}"
                );
            }
        }
    }

    #[test]
    fn utf8_split_across_chunks_survives() {
        let input = "data: {\"t\":\"你好\"}\n\n".as_bytes();
        for chunk in 1..input.len() {
            assert_eq!(parse_in_chunks(input, chunk), vec!["{\"t\":\"你好\"}"]);
        }
    }

    #[test]
    fn fields_without_space_and_unknown_fields() {
        let input = b"event: message\nid: 7\ndata:{}\nretry: 10\n\ndata\n\n";
        assert_eq!(
            parse_in_chunks(input, 3),
            vec!["{}".to_string(), String::new()]
        );
    }

    #[test]
    fn unterminated_event_at_eof_is_dropped() {
        let mut r = EventReader::new(&b"data: 1\n\ndata\n\ndata:  \n\ndata: 2\n\n"[..]);
        assert_eq!(r.next_data().unwrap(), Some((&b"1"[..], true)));
        assert_eq!(
            r.next_data().unwrap(),
            Some((&b"2"[..], false)),
            "blank events are skipped"
        );
        let mut r = EventReader::new(&b"data: 1\n\ndata: 2"[..]);
        assert_eq!(r.next_event().unwrap(), Some(b"1".to_vec()));
        assert_eq!(r.next_event().unwrap(), None);
    }

    #[test]
    fn an_event_beyond_the_cap_is_refused_whether_its_lines_are_cut_or_whole() {
        let chunk = vec![b'x'; 1 << 20];
        let mut p = Parser::new();
        let mut out = Vec::new();
        p.feed(b"data: ", &mut out).unwrap();
        let cut = (0..17).try_for_each(|_| p.feed(&chunk, &mut out));
        assert_eq!(cut.unwrap_err().kind(), io::ErrorKind::InvalidData);
        let mut p = Parser::new();
        let mut line = b"data: ".to_vec();
        line.extend_from_slice(&chunk);
        line.push(b'\n');
        let whole = (0..17).try_for_each(|_| p.feed(&line, &mut out));
        assert_eq!(whole.unwrap_err().kind(), io::ErrorKind::InvalidData);
        assert!(out.is_empty());
    }

    #[test]
    fn a_fast_stream_grows_its_read_buffer_and_loses_no_event() {
        let stream: Vec<u8> = (0..60_000)
            .flat_map(|i| format!("data: {{\"n\":{i}}}\n\n").into_bytes())
            .collect();
        let mut reader = EventReader::new(&stream[..]);
        let mut n = 0;
        while let Some((data, _)) = reader.next_data().unwrap() {
            assert_eq!(data, format!("{{\"n\":{n}}}").as_bytes());
            n += 1;
        }
        assert_eq!(n, 60_000);
        assert_eq!(reader.buf.len(), MAX_READ);
    }
}
