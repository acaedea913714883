//! Raw HTTP/1.x over `std::net::TcpStream`, for clients that misbehave on purpose (the hostile
//! suite, the stream tests and the request-head fuzzer). Every socket has read and write
//! timeouts, so no test built on these can hang.

use crate::sse::{self, Item};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

/// Default bound on any single blocking read or write.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// `http://127.0.0.1:PORT` → `127.0.0.1:PORT`.
pub fn addr(url: &str) -> String {
    url.trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string()
}

/// A connection with read/write timeouts of `IO_TIMEOUT`.
pub fn connect(url: &str) -> TcpStream {
    try_connect(url).unwrap_or_else(|e| panic!("connect {url}: {e}"))
}

pub fn try_connect(url: &str) -> std::io::Result<TcpStream> {
    let s = TcpStream::connect_timeout(&addr(url).parse().unwrap(), IO_TIMEOUT)?;
    s.set_read_timeout(Some(IO_TIMEOUT))?;
    s.set_write_timeout(Some(IO_TIMEOUT))?;
    s.set_nodelay(true)?;
    Ok(s)
}

/// One parsed response. `body` holds at most `MAX_BODY` bytes (the rest is not read).
#[derive(Debug, Default)]
pub struct Response {
    pub status: u16,
    pub head: String,
    pub body: Vec<u8>,
    /// The body was cut at `MAX_BODY`.
    pub truncated: bool,
}

pub const MAX_BODY: usize = 1 << 20;

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }

    pub fn error_code(&self) -> String {
        self.json()["error"]["code"]
            .as_str()
            .unwrap_or("")
            .to_string()
    }
}

/// Reads until `\r\n\r\n`; `Ok(None)` when the peer closed (or reset) before any byte.
pub fn read_head(s: &mut TcpStream) -> std::io::Result<Option<String>> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(0) => break,
            Ok(_) => head.push(byte[0]),
            Err(e) if head.is_empty() && is_reset(&e) => return Ok(None),
            Err(e) => return Err(e),
        }
        if head.len() > 64 * 1024 {
            return Err(std::io::Error::other("response head over 64 KiB"));
        }
    }
    if head.is_empty() {
        return Ok(None);
    }
    Ok(Some(String::from_utf8_lossy(&head).into_owned()))
}

pub fn is_reset(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::BrokenPipe
    )
}

/// Reads one whole response (Content-Length, chunked, or to the close). `Ok(None)`: closed first.
pub fn read_response(s: &mut TcpStream) -> std::io::Result<Option<Response>> {
    let Some(head) = read_head(s)? else {
        return Ok(None);
    };
    let status = status_of(head.as_bytes())
        .ok_or_else(|| std::io::Error::other(format!("not a status line: {head:?}")))?;
    let mut r = Response {
        status,
        head,
        ..Default::default()
    };
    let chunked = r
        .header("Transfer-Encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
    if chunked {
        read_chunked(s, &mut r)?;
    } else if let Some(n) = r
        .header("Content-Length")
        .and_then(|v| v.parse::<usize>().ok())
    {
        let take = n.min(MAX_BODY);
        r.body = vec![0; take];
        s.read_exact(&mut r.body)?;
        r.truncated = n > MAX_BODY;
    } else if status != 204 && status != 304 && status >= 200 {
        let _ = s.take(MAX_BODY as u64).read_to_end(&mut r.body);
    }
    Ok(Some(r))
}

fn read_chunked(s: &mut TcpStream, r: &mut Response) -> std::io::Result<()> {
    loop {
        let mut line = Vec::new();
        let mut b = [0u8; 1];
        while !line.ends_with(b"\r\n") {
            if s.read(&mut b)? == 0 {
                return Err(std::io::Error::other("EOF inside chunked body"));
            }
            line.push(b[0]);
        }
        let size = usize::from_str_radix(
            String::from_utf8_lossy(&line)
                .trim()
                .split(';')
                .next()
                .unwrap(),
            16,
        )
        .map_err(|_| std::io::Error::other("bad chunk size"))?;
        let mut chunk = vec![0; size + 2];
        s.read_exact(&mut chunk)?;
        if size == 0 {
            return Ok(());
        }
        if r.body.len() + size > MAX_BODY {
            r.truncated = true;
            return Ok(());
        }
        r.body.extend_from_slice(&chunk[..size]);
    }
}

/// The status code if `bytes` start with a valid `HTTP/1.x NNN` status line.
pub fn status_of(bytes: &[u8]) -> Option<u16> {
    if bytes.len() < 12 || !(bytes.starts_with(b"HTTP/1.1 ") || bytes.starts_with(b"HTTP/1.0 ")) {
        return None;
    }
    let code = &bytes[9..12];
    if !code.iter().all(u8::is_ascii_digit) || !matches!(bytes.get(12), Some(b' ' | b'\r')) {
        return None;
    }
    std::str::from_utf8(code).ok()?.parse().ok()
}

/// Sends `request` on a fresh connection and reads one response.
pub fn exchange(url: &str, request: &[u8]) -> std::io::Result<Option<Response>> {
    let mut s = try_connect(url)?;
    s.write_all(request)?;
    read_response(&mut s)
}

/// Writes `data` from another thread (ignoring errors: the server may close first) while the
/// caller reads, so a server that answers before reading everything is seen answering.
pub fn write_in_background(s: &TcpStream, data: Vec<u8>) -> std::thread::JoinHandle<()> {
    let mut w = s.try_clone().unwrap();
    std::thread::spawn(move || {
        for piece in data.chunks(64 * 1024) {
            if w.write_all(piece).is_err() {
                return;
            }
        }
    })
}

/// Whether the peer closes `s` within `limit` (EOF or reset); bytes received meanwhile go to `got`.
pub fn closes_within(s: &mut TcpStream, limit: Duration, got: &mut Vec<u8>) -> bool {
    let deadline = Instant::now() + limit;
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        s.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .unwrap();
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if is_reset(&e) => return true,
            Err(_) => return false,
        }
    }
}

/// `GET /health` on a fresh connection: the latency of a 200, or why not.
pub fn health(url: &str, limit: Duration) -> Result<Duration, String> {
    let t0 = Instant::now();
    let mut s = try_connect(url).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(limit)).unwrap();
    s.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .map_err(|e| format!("write: {e}"))?;
    match read_response(&mut s) {
        Ok(Some(r)) if r.status == 200 => Ok(t0.elapsed()),
        Ok(Some(r)) => Err(format!("status {}", r.status)),
        Ok(None) => Err("closed without an answer".into()),
        Err(e) => Err(format!("after {:?}: {e}", t0.elapsed())),
    }
}

/// A request head with `Host: 127.0.0.1` and `extra` header lines (each without CRLF).
pub fn head(method: &str, path: &str, extra: &[&str]) -> Vec<u8> {
    let mut h = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n");
    for line in extra {
        h.push_str(line);
        h.push_str("\r\n");
    }
    h.push_str("\r\n");
    h.into_bytes()
}

/// `v` as a request body.
pub fn body_of(v: &serde_json::Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap()
}

/// A `POST /` run request with `body`, as an SSE client sends it.
pub fn run_request(body: &[u8], extra: &[&str]) -> Vec<u8> {
    let cl = format!("Content-Length: {}", body.len());
    let mut lines = vec![
        "Content-Type: application/json",
        "Accept: text/event-stream",
        cl.as_str(),
    ];
    lines.extend_from_slice(extra);
    let mut req = head("POST", "/", &lines);
    req.extend_from_slice(body);
    req
}

/// Opens a run and returns the connection after a `200` head (the SSE body follows).
pub fn open_run(url: &str, body: &[u8]) -> TcpStream {
    let mut s = connect(url);
    s.write_all(&run_request(body, &[])).unwrap();
    let head = read_head(&mut s).unwrap().expect("closed before the head");
    assert_eq!(status_of(head.as_bytes()), Some(200), "{head}");
    s
}

/// Reads an open run until its first text event; the session event's `(executionId, taskId)`
/// and the bytes read.
pub fn read_session(s: &mut TcpStream) -> (String, String, Vec<u8>) {
    let got = read_until(s, b"TEXT_MESSAGE_CONTENT", Duration::from_secs(10))
        .unwrap_or_else(|g| panic!("no text event: {}", String::from_utf8_lossy(&g)));
    let session = events(&got)
        .into_iter()
        .find(|e| e["name"] == "iac-code.session.v1")
        .expect("session event");
    let v = &session["value"];
    (
        v["executionId"].as_str().unwrap().to_string(),
        v["taskId"].as_str().unwrap_or("").to_string(),
        got,
    )
}

/// Reads `s` until `needle` shows up (within `limit`); returns everything read.
pub fn read_until(s: &mut TcpStream, needle: &[u8], limit: Duration) -> Result<Vec<u8>, Vec<u8>> {
    let deadline = Instant::now() + limit;
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    while !got.windows(needle.len()).any(|w| w == needle) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(got);
        }
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return Err(got),
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    Ok(got)
}

pub fn count(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len()).filter(|w| *w == needle).count()
}

/// The `data:` events found in raw SSE bytes, chunked or cut anywhere: a line that is not whole
/// JSON (cut by a chunk boundary or by the end of what was read) is left out.
pub fn events(raw: &[u8]) -> Vec<serde_json::Value> {
    let text = String::from_utf8_lossy(raw);
    sse::read(text.as_bytes())
        .filter_map(|item| match item.expect("reading a string") {
            Item::Event(e) => serde_json::from_str(&e.data).ok(),
            _ => None,
        })
        .collect()
}

/// The body carried by a whole chunked body (through its last, empty chunk); `None` if `raw`
/// stops before that or is not chunked.
pub fn dechunk(raw: &[u8]) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    let mut rest = raw;
    loop {
        let end = rest.windows(2).position(|w| w == b"\r\n")?;
        let line = std::str::from_utf8(&rest[..end]).ok()?;
        let size = usize::from_str_radix(line.split(';').next()?.trim(), 16).ok()?;
        rest = &rest[end + 2..];
        if size == 0 {
            return rest.starts_with(b"\r\n").then_some(body);
        }
        body.extend_from_slice(rest.get(..size)?);
        rest = rest.get(size..)?.strip_prefix(b"\r\n")?;
    }
}

/// Shuts both directions; errors ignored (the peer may be gone).
pub fn close(s: &TcpStream) {
    let _ = s.shutdown(Shutdown::Both);
}

#[cfg(test)]
mod tests {
    use super::dechunk;

    #[test]
    fn a_chunked_body_is_whole_only_with_its_last_chunk() {
        let whole = b"5\r\nhello\r\n3;x=y\r\n, w\r\n0\r\n\r\n";
        assert_eq!(dechunk(whole).as_deref(), Some(&b"hello, w"[..]));
        assert_eq!(dechunk(&whole[..whole.len() - 2]), None);
        assert_eq!(dechunk(b"5\r\nhel"), None);
        assert_eq!(dechunk(b"data: x\n\n"), None);
    }
}
