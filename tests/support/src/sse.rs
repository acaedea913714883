//! The one SSE reader of the tests and benches: the adapter's streams (an `id:` line, a `data:`
//! line and a blank line per event; `:` comments such as heartbeats) and the recorded streams
//! under tests/data. Lines end with LF or CRLF; only the exact `data: ` and `id: ` prefixes the
//! adapter writes are fields, so a stray line (a chunk-size line read from a raw socket, say)
//! shows up as [`Item::Other`].

use serde_json::Value;
use std::io::BufRead;

/// One event: its `data:` line, and the `id:` line before it, if any.
#[derive(Clone, Debug)]
pub struct Event {
    pub id: Option<String>,
    pub data: String,
}

impl Event {
    /// The data as JSON; panics (naming the data) if it is not.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data)
            .unwrap_or_else(|e| panic!("event data is not JSON ({e}): {}", self.data))
    }
}

/// What a non-empty line of a stream is.
#[derive(Clone, Debug)]
pub enum Item {
    Event(Event),
    /// A comment, the text after `:` (and one space): `heartbeat` for `: heartbeat`.
    Comment(String),
    /// Any other line.
    Other(String),
}

/// The items of `input`, as they arrive. A read error (invalid UTF-8 included) is returned once
/// and ends the items.
pub fn read<R: BufRead>(input: R) -> Items<R> {
    Items {
        input,
        id: None,
        line: Vec::new(),
        done: false,
    }
}

pub struct Items<R> {
    input: R,
    /// The `id:` line waiting for its `data:` line.
    id: Option<String>,
    line: Vec<u8>,
    done: bool,
}

impl<R: BufRead> Iterator for Items<R> {
    type Item = std::io::Result<Item>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            let line = match self.read_line() {
                Ok(Some(line)) => line,
                Ok(None) => return None,
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            };
            if line.is_empty() {
                continue;
            }
            if let Some(id) = line.strip_prefix("id: ") {
                self.id = Some(id.to_string());
            } else if let Some(data) = line.strip_prefix("data: ") {
                let (id, data) = (self.id.take(), data.to_string());
                return Some(Ok(Item::Event(Event { id, data })));
            } else if let Some(text) = line.strip_prefix(':') {
                let text = text.strip_prefix(' ').unwrap_or(text);
                return Some(Ok(Item::Comment(text.to_string())));
            } else {
                return Some(Ok(Item::Other(line)));
            }
        }
        None
    }
}

impl<R: BufRead> Items<R> {
    /// The next line without its LF or CRLF; `None` at the end of the input.
    fn read_line(&mut self) -> std::io::Result<Option<String>> {
        self.line.clear();
        if self.input.read_until(b'\n', &mut self.line)? == 0 {
            self.done = true;
            return Ok(None);
        }
        if self.line.ends_with(b"\n") {
            self.line.pop();
            if self.line.ends_with(b"\r") {
                self.line.pop();
            }
        }
        String::from_utf8(std::mem::take(&mut self.line))
            .map(Some)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
    }
}

/// The events of a whole stream, each of its `data:` lines as JSON (panics on a line that is
/// not).
pub fn data_lines(text: &str) -> Vec<Value> {
    read(text.as_bytes())
        .filter_map(|item| match item.expect("reading a string") {
            Item::Event(e) => Some(e.json()),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_comments_and_other_lines() {
        let text = "id: 1\r\ndata: {\"a\":1}\r\n\r\n: heartbeat\n1f\ndata: 2\n\n";
        let items: Vec<Item> = read(text.as_bytes()).map(Result::unwrap).collect();
        assert!(
            matches!(&items[0], Item::Event(e) if e.id.as_deref() == Some("1") && e.data == "{\"a\":1}")
        );
        assert!(matches!(&items[1], Item::Comment(c) if c == "heartbeat"));
        assert!(matches!(&items[2], Item::Other(l) if l == "1f"));
        assert!(matches!(&items[3], Item::Event(e) if e.id.is_none() && e.data == "2"));
        assert_eq!(items.len(), 4);
    }

    #[test]
    fn invalid_utf8_is_an_error_that_ends_the_items() {
        let mut items = read(&b"data: 1\n\xff\ndata: 2\n"[..]);
        assert!(matches!(items.next(), Some(Ok(Item::Event(_)))));
        assert!(items.next().unwrap().is_err());
        assert!(items.next().is_none());
    }
}
