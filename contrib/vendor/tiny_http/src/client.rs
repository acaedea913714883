use ascii::AsciiString;

use std::io::Error as IoError;
use std::io::Result as IoResult;
use std::io::{ErrorKind, Read, Write};

use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Instant;

use crate::common::{HTTPVersion, Method};
use crate::util::conn_ctl::error_response;

/// How long a connection of a draining server waits for a next request once its response is
/// written (iac-code-agui patch).
const DRAIN_POLL: std::time::Duration = std::time::Duration::from_millis(100);
use crate::util::{ConnCtl, LeanReader, LeanWriter, RefinedTcpStream};
use crate::util::{SequentialReader, SequentialReaderBuilder, SequentialWriterBuilder};
use crate::{Limits, Request};

/// Room for the method, the version and the separators around the request target: a request
/// line longer than `max_url_bytes` plus this is refused (414) before it is all read.
const REQUEST_LINE_SLACK: usize = 64;

/// A ClientConnection is an object that will store a socket to a client
/// and return Request objects.
pub struct ClientConnection {
    // address of the client
    remote_addr: Option<SocketAddr>,

    // sequence of Readers to the stream, so that the data is not read in
    //  the wrong order
    source: SequentialReaderBuilder<LeanReader<RefinedTcpStream>>,

    // sequence of Writers to the stream, to avoid writing response #2 before
    //  response #1
    sink: SequentialWriterBuilder<LeanWriter<RefinedTcpStream>>,

    // Reader to read the next header from
    next_header_source: SequentialReader<LeanReader<RefinedTcpStream>>,

    // set to true if we know that the previous request is the last one
    no_more_requests: bool,

    // true if the connection goes through SSL
    secure: bool,

    // iac-code-agui patch: the connection's shared state, and the limits it enforces
    ctl: Arc<ConnCtl>,
    limits: Arc<Limits>,

    // iac-code-agui patch: `next` ended because a response is still being written and the
    // connection parks until it is (`Limits::park_connections`)
    parked: bool,
}

/// Error that can happen when reading a request.
#[derive(Debug)]
enum ReadError {
    WrongRequestLine,
    WrongHeader(HTTPVersion),
    /// the client sent an unrecognized `Expect` header
    ExpectationFailed(HTTPVersion),
    ReadIoError(IoError),
    /// iac-code-agui patch: no request began within the keep-alive timeout (closed silently)
    Idle,
    /// iac-code-agui patch: a response is still being written; the thread leaves the connection
    /// parked instead of waiting for the next request beside it
    Park,
    /// iac-code-agui patch: the request is refused with this status, then the connection closed
    Refuse(u16),
}

fn is_timeout(e: &IoError) -> bool {
    // SO_RCVTIMEO expiry is EAGAIN (WouldBlock) on Unix, TimedOut on Windows
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

impl ClientConnection {
    /// Creates a new `ClientConnection` that takes ownership of the `TcpStream`.
    pub fn new(
        write_socket: RefinedTcpStream,
        mut read_socket: RefinedTcpStream,
        ctl: Arc<ConnCtl>,
        limits: Arc<Limits>,
    ) -> ClientConnection {
        // a client that reset the connection at once has no peer address: no reason to panic
        let remote_addr = read_socket.peer_addr().ok().flatten();
        let secure = read_socket.secure();

        let mut source = SequentialReaderBuilder::new(LeanReader::with_capacity(1024, read_socket));
        let first_header = source.next().unwrap();

        ClientConnection {
            source,
            sink: SequentialWriterBuilder::new(LeanWriter::with_capacity(1024, write_socket)),
            remote_addr,
            next_header_source: first_header,
            no_more_requests: false,
            secure,
            ctl,
            limits,
            parked: false,
        }
    }

    /// iac-code-agui patch: whether the last `next` parked the connection (and clears it).
    pub(crate) fn take_parked(&mut self) -> bool {
        std::mem::replace(&mut self.parked, false)
    }

    /// iac-code-agui patch: where this connection parks (its responses in flight).
    pub(crate) fn parking(&self) -> Arc<crate::util::Parking> {
        self.sink.parking()
    }

    /// iac-code-agui patch: whether the client ended the connection with nothing of a next
    /// request left to read: no byte buffered, and its socket at its end (or reset). Never
    /// blocks. A parked connection found so is closed where its last response ended rather than
    /// resumed on a pool thread to read that end: when thousands of clients leave at once, that
    /// was thousands of tasks and pool threads spawned (PATCHES.md 15).
    pub(crate) fn ended_by_peer(&mut self) -> bool {
        if self.next_header_source.unread() != Some(0) {
            return false;
        }
        let Some(socket) = self.ctl.shared_socket() else {
            return false;
        };
        // Nobody else reads this socket now: its responses are done and this thread has it.
        if socket.set_nonblocking(true).is_err() {
            return false;
        }
        let peeked = socket.peek(&mut [0u8; 1]);
        let _ = socket.set_nonblocking(false);
        match peeked {
            Ok(n) => n == 0,
            Err(e) => !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted),
        }
    }

    /// true if the connection is HTTPS
    pub fn secure(&self) -> bool {
        self.secure
    }

    /// Waits for the first byte of the next request, at most `keepalive_timeout` of idleness.
    fn wait_first_byte(&mut self) -> Result<u8, ReadError> {
        self.ctl.set_read_timeout(self.limits.keepalive_timeout);
        self.wait_shorter_when_draining();
        // iac-code-agui patch: a response still being written may be a long stream, and this
        // thread then waits as long: the application may give back its unused stack first
        if self.sink.in_flight() > 0 {
            // the thread need not wait at all: the connection is resumed, on a pool thread, when
            // the response is done (a held stream then costs no connection thread)
            if self.limits.park_connections && !self.secure {
                return Err(ReadError::Park);
            }
            if let Some(hook) = self.limits.on_stream_wait {
                hook();
            }
        }
        let mut byte = [0u8];
        loop {
            return match self.next_header_source.read(&mut byte) {
                Ok(0) => Err(ReadError::Idle), // the client closed between requests
                Ok(_) => Ok(byte[0]),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                // a response still being written (a long stream) means the connection is busy,
                // not idle: keep waiting
                Err(e) if is_timeout(&e) && self.sink.in_flight() > 0 => {
                    self.wait_shorter_when_draining();
                    continue;
                }
                Err(e) if is_timeout(&e) => Err(ReadError::Idle),
                Err(e) => Err(ReadError::ReadIoError(e)),
            };
        }
    }

    /// iac-code-agui patch: once the server drains, an idle connection is closed soon after its
    /// response ends (within `DRAIN_POLL`), not at the keep-alive timeout: its client's next
    /// request then goes to the process that took over.
    fn wait_shorter_when_draining(&self) {
        if self
            .limits
            .draining
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            self.ctl.set_read_timeout(Some(DRAIN_POLL));
        }
    }

    /// Reads a request head, within the size limits, given its first byte.
    fn read_head(&mut self, first: u8) -> Result<RequestHead, ReadError> {
        read_head(&mut self.next_header_source, &self.limits, first)
    }

    /// Reads a request from the stream.
    /// Blocks until the header has been read.
    fn read(&mut self) -> Result<Request, ReadError> {
        // the previous request must be done with the body before its socket options change
        self.next_header_source
            .wait_turn()
            .map_err(ReadError::ReadIoError)?;
        if self.ctl.must_close() {
            // the previous request left a body that could not be skipped
            return Err(ReadError::Idle);
        }
        let skip = self.ctl.take_skip();
        if skip > 0 {
            self.skip_body(skip).map_err(ReadError::ReadIoError)?;
        }
        let first = self.wait_first_byte()?;

        // from the first byte on, the head (and a small body read with it) has a total deadline
        let deadline = self.limits.head_timeout.map(|t| Instant::now() + t);
        self.ctl.set_deadline(deadline);
        let request = self.read_request(first);
        self.ctl.set_deadline(None);
        // the application reads the body under its own total limit; each read waits this long
        self.ctl.set_read_timeout(self.limits.body_timeout);
        request
    }

    /// Skips the short rest of a body the application did not read, within `body_timeout` in
    /// total: the connection's thread does it, never the application's.
    // iac-code-agui patch: never inlined, so that its 8 KiB buffer is not part of the frame that
    // waits for the next request (a large frame's pages are all touched on entry, stack probes)
    #[inline(never)]
    fn skip_body(&mut self, mut left: u64) -> IoResult<()> {
        let deadline = self.limits.body_timeout.map(|t| Instant::now() + t);
        self.ctl.set_deadline(deadline);
        let mut buf = [0u8; 8192];
        let result = loop {
            if left == 0 {
                break Ok(());
            }
            let n = (buf.len() as u64).min(left) as usize;
            match self.next_header_source.read(&mut buf[..n]) {
                Ok(0) => break Err(IoError::new(ErrorKind::UnexpectedEof, "body cut short")),
                Ok(n) => left -= n as u64,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => break Err(e),
            }
        };
        self.ctl.set_deadline(None);
        result
    }

    fn read_request(&mut self, first: u8) -> Result<Request, ReadError> {
        let (method, path, version, headers) = self.read_head(first)?;

        // building the writer for the request
        let writer = self.sink.next().unwrap();

        // follow-up for next potential request
        let mut data_source = self.source.next().unwrap();
        std::mem::swap(&mut self.next_header_source, &mut data_source);

        // building the next reader
        let request = crate::request::new_request(
            self.secure,
            method,
            path,
            version.clone(),
            headers,
            self.remote_addr,
            data_source,
            writer,
        )
        .map_err(|e| creation_error(e, version))?;

        let mut request = request;
        request.set_ctl(self.ctl.clone());

        // return the request
        Ok(request)
    }

    /// Answers `status` by itself (body from `Limits::error_body`, `Connection: close`), after the
    /// responses to earlier requests, and ends the connection.
    fn refuse(&mut self, status: u16) {
        let mut writer = self.sink.next().unwrap();
        let answer = error_response(status, &self.limits.error_body);
        let _ = writer.write_all(&answer).and_then(|_| writer.flush());
        drop(writer);
        self.ctl.linger(self.sink.in_flight() > 0);
    }
}

impl Iterator for ClientConnection {
    type Item = Request;

    /// Blocks until the next Request is available.
    /// Returns None when no new Requests will come from the client.
    fn next(&mut self) -> Option<Request> {
        // the client sent a "connection: close" header in this previous request
        //  or is using HTTP 1.0, meaning that no new request will come
        if self.no_more_requests {
            return None;
        }

        // iac-code-agui patch: every answer given here closes the connection (the rest of what the
        // client sent cannot be trusted to start a request)
        let rq = match self.read() {
            Ok(rq) => rq,
            Err(ReadError::WrongRequestLine) | Err(ReadError::WrongHeader(_)) => {
                self.refuse(400);
                return None;
            }
            Err(ReadError::ExpectationFailed(_)) => {
                self.refuse(417);
                return None;
            }
            Err(ReadError::Refuse(status)) => {
                self.refuse(status);
                return None;
            }
            Err(ReadError::Idle) => {
                if self.ctl.must_close() {
                    // let the client read the answer before the close
                    self.ctl.linger(self.sink.in_flight() > 0);
                }
                return None;
            }
            Err(ReadError::ReadIoError(_)) => return None,
            Err(ReadError::Park) => {
                self.parked = true;
                return None;
            }
        };

        // updating the status of the connection
        let connection_header = rq
            .headers()
            .iter()
            .find(|h| h.field.equiv("Connection"))
            .map(|h| h.value.as_str());

        let lowercase = connection_header.map(|h| h.to_ascii_lowercase());

        match lowercase {
            Some(ref val) if val.contains("close") => self.no_more_requests = true,
            Some(ref val) if val.contains("upgrade") => self.no_more_requests = true,
            Some(ref val)
                if !val.contains("keep-alive") && *rq.http_version() == HTTPVersion(1, 0) =>
            {
                self.no_more_requests = true
            }
            None if *rq.http_version() == HTTPVersion(1, 0) => self.no_more_requests = true,
            _ => (),
        };

        // returning the request
        Some(rq)
    }
}

/// Why a request head read without error could not become a request.
fn creation_error(e: crate::request::RequestCreationError, version: HTTPVersion) -> ReadError {
    use crate::request::RequestCreationError;
    match e {
        RequestCreationError::CreationIoError(e) if is_timeout(&e) => ReadError::Refuse(408),
        RequestCreationError::CreationIoError(e) => ReadError::ReadIoError(e),
        RequestCreationError::ExpectationFailed => ReadError::ExpectationFailed(version),
        RequestCreationError::BadFraming(why) => {
            log::debug!("refusing a request: {}", why);
            ReadError::Refuse(400)
        }
    }
}

/// iac-code-agui patch: the request-head parser and the request framing over bytes in memory,
/// for the coverage-guided fuzz targets (tests/fuzz_targets in iac-code-agui): what a connection
/// makes of the first bytes a client sends, without a socket. `Err` is the status the connection
/// answers before it closes (`0`: the bytes ended first, closed without an answer).
#[doc(hidden)]
pub fn parse_request(bytes: &[u8], limits: &Limits) -> Result<Request, u16> {
    let status = |e: ReadError| match e {
        ReadError::WrongRequestLine | ReadError::WrongHeader(_) => 400,
        ReadError::ExpectationFailed(_) => 417,
        ReadError::Refuse(status) => status,
        ReadError::Idle | ReadError::ReadIoError(_) | ReadError::Park => 0,
    };
    let mut src = std::io::Cursor::new(bytes.to_vec());
    let first = read_head_byte(&mut src).map_err(status)?;
    let (method, path, version, headers) = read_head(&mut src, limits, first).map_err(status)?;
    let request = crate::request::new_request(
        false,
        method,
        path,
        version.clone(),
        headers,
        None,
        src,
        std::io::sink(),
    );
    request.map_err(|e| status(creation_error(e, version)))
}

/// A request head: the request line's parts and the headers.
type RequestHead = (Method, String, HTTPVersion, Vec<crate::Header>);

/// Reads one byte of the request head (the head deadline applies to the socket reads).
fn read_head_byte(src: &mut impl Read) -> Result<u8, ReadError> {
    let mut byte = [0u8];
    loop {
        return match src.read(&mut byte) {
            Ok(0) => Err(ReadError::ReadIoError(IoError::new(
                ErrorKind::ConnectionAborted,
                "Unexpected EOF",
            ))),
            Ok(_) => Ok(byte[0]),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) if is_timeout(&e) => Err(ReadError::Refuse(408)),
            Err(e) => Err(ReadError::ReadIoError(e)),
        };
    }
}

/// Reads the next line from `src`, until `CRLF`, which it drops. The line,
/// CRLF included, may take at most `max` bytes: beyond, `Refuse(too_long)` without reading
/// further. Returns the line and the bytes it took.
fn read_next_line(
    src: &mut impl Read,
    mut first: Option<u8>,
    max: usize,
    too_long: u16,
) -> Result<(AsciiString, usize), ReadError> {
    let mut buf = Vec::new();
    let mut prev_byte_was_cr = false;

    loop {
        let byte = match first.take() {
            Some(b) => b,
            None => read_head_byte(src)?,
        };

        if byte == b'\n' && prev_byte_was_cr {
            let used = buf.len() + 1;
            buf.pop(); // removing the '\r'
            return AsciiString::from_ascii(buf)
                .map(|line| (line, used))
                .map_err(|_| ReadError::Refuse(400));
        }
        // iac-code-agui patch: a bare LF or a bare CR ends nothing here; it is refused at once
        // (400) instead of waiting for a CRLF until the head deadline (PATCHES.md, 8)
        if byte == b'\n' || prev_byte_was_cr {
            return Err(ReadError::Refuse(400));
        }

        prev_byte_was_cr = byte == b'\r';

        buf.push(byte);
        if buf.len() >= max {
            return Err(ReadError::Refuse(too_long));
        }
    }
}

/// Reads a request head, within the size limits, given its first byte.
fn read_head(src: &mut impl Read, limits: &Limits, first: u8) -> Result<RequestHead, ReadError> {
    let max_head = limits.max_head_bytes;
    let max_url = limits.max_url_bytes;
    let line_max = max_url.saturating_add(REQUEST_LINE_SLACK);

    // iac-code-agui patch: one empty line (CRLF) before the request line is skipped, as
    // RFC 9112 §2.2 asks of a server (a client that ends a body with an extra CRLF); a second
    // one, or a bare LF, is refused (PATCHES.md, 8)
    let first = if first == b'\r' {
        if read_head_byte(src)? != b'\n' {
            return Err(ReadError::Refuse(400));
        }
        read_head_byte(src)?
    } else {
        first
    };
    if first == b'\r' || first == b'\n' {
        return Err(ReadError::Refuse(400));
    }

    // reading the request line
    let (line, used) = if line_max < max_head {
        read_next_line(src, Some(first), line_max, 414)?
    } else {
        read_next_line(src, Some(first), max_head, 431)?
    };
    let (method, path, version) = parse_request_line(
        line.as_str().trim(), // TODO: remove this conversion
    )?;
    if path.len() > max_url {
        return Err(ReadError::Refuse(414));
    }
    // HTTP/0.9 has no status line or headers to answer with, and HTTP/2+ is not spoken here:
    // both get an HTTP/1.1 505 rather than a response that echoes their version.
    if version > (1, 1) || version < (1, 0) {
        return Err(ReadError::Refuse(505));
    }

    // getting all headers
    let mut left = max_head - used;
    let mut headers = Vec::new();
    loop {
        let (line, used) = read_next_line(src, None, left, 431)?;
        left -= used;

        if line.is_empty() {
            break;
        };
        if headers.len() >= limits.max_headers {
            return Err(ReadError::Refuse(431));
        }
        headers.push(match FromStr::from_str(line.as_str().trim()) {
            // TODO: remove this conversion
            Ok(h) => h,
            _ => return Err(ReadError::WrongHeader(version)),
        });
    }

    Ok((method, path, version, headers))
}

/// Parses a "HTTP/1.1" string.
fn parse_http_version(version: &str) -> Result<HTTPVersion, ReadError> {
    let (major, minor) = match version {
        "HTTP/0.9" => (0, 9),
        "HTTP/1.0" => (1, 0),
        "HTTP/1.1" => (1, 1),
        "HTTP/2.0" => (2, 0),
        "HTTP/3.0" => (3, 0),
        _ => return Err(ReadError::WrongRequestLine),
    };

    Ok(HTTPVersion(major, minor))
}

/// Parses the request line of the request.
/// eg. GET / HTTP/1.1
fn parse_request_line(line: &str) -> Result<(Method, String, HTTPVersion), ReadError> {
    let mut parts = line.split(' ');

    let method = parts.next().and_then(|w| w.parse().ok());
    let path = parts.next().map(ToOwned::to_owned);
    let version = parts.next().and_then(|w| parse_http_version(w).ok());

    method
        .and_then(|method| Some((method, path?, version?)))
        .ok_or(ReadError::WrongRequestLine)
}

#[cfg(test)]
mod test {
    #[test]
    fn test_parse_request_line() {
        let (method, path, ver) = super::parse_request_line("GET /hello HTTP/1.1").unwrap();

        assert!(method == crate::Method::Get);
        assert!(path == "/hello");
        assert!(ver == crate::common::HTTPVersion(1, 1));

        assert!(super::parse_request_line("GET /hello").is_err());
        assert!(super::parse_request_line("qsd qsd qsd").is_err());
    }

    #[test]
    fn parse_request_reads_a_head_as_a_connection_does() {
        use std::io::Read;
        let limits = crate::Limits {
            max_headers: 2,
            ..crate::Limits::default()
        };
        let head = b"POST /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n";
        let mut rq = super::parse_request(head, &limits).unwrap();
        assert_eq!((rq.method(), rq.url()), (&crate::Method::Post, "/x"));
        let mut body = String::new();
        rq.as_reader().read_to_string(&mut body).unwrap();
        assert_eq!(body, "hi");
        let refused = |bytes: &[u8]| super::parse_request(bytes, &limits).err();
        assert_eq!(refused(b"GET / HTTP/1.1\nHost: h\r\n\r\n"), Some(400));
        assert_eq!(
            refused(b"GET / HTTP/1.1\r\na: 1\r\nb: 2\r\nc: 3\r\n\r\n"),
            Some(431)
        );
        assert_eq!(refused(b"GET / HTTP/2.0\r\n\r\n"), Some(505));
        assert_eq!(refused(b"GET / HTTP/1.1\r\nExpect: x\r\n\r\n"), Some(417));
        assert_eq!(refused(b"GET / HTTP/1.1\r\nHost"), Some(0));
    }
}

#[cfg(test)]
mod ended_by_peer_tests {
    use super::ClientConnection;
    use crate::connection::Connection;
    use crate::util::{ConnCtl, RefinedTcpStream};
    use crate::Limits;
    use std::io::Write;
    use std::net::{Shutdown, TcpListener, TcpStream};
    use std::sync::Arc;
    use std::time::Duration;

    /// A server side connection as the accept loop builds it, and its client.
    fn accepted() -> (ClientConnection, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let sock = Arc::new(Connection::Tcp(listener.accept().unwrap().0));
        let ctl = ConnCtl::new(Some(sock.clone()), None);
        let (read, write) = RefinedTcpStream::new(sock, ctl.clone());
        let conn = ClientConnection::new(write, read, ctl, Arc::new(Limits::default()));
        (conn, client)
    }

    fn settle() {
        std::thread::sleep(Duration::from_millis(50));
    }

    #[test]
    fn a_connection_is_ended_by_its_client_only_once_closed_with_nothing_left_to_read() {
        let (mut open, _client) = accepted();
        assert!(
            !open.ended_by_peer(),
            "open and silent: a next request may come"
        );

        let (mut closed, client) = accepted();
        drop(client);
        settle();
        assert!(closed.ended_by_peer(), "closed with nothing sent");

        let (mut pipelined, mut client) = accepted();
        client.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        client.shutdown(Shutdown::Write).unwrap();
        settle();
        assert!(
            !pipelined.ended_by_peer(),
            "a request sent before the close is still to be read and answered"
        );
    }
}
