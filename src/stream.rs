//! The client side of a run: the SSE response written straight to the socket, and the heartbeat
//! timer shared by every open stream.
//!
//! A run's own thread blocks on the upstream read, so it cannot notice silence. One heartbeat thread
//! wakes on a timer channel, writes `: heartbeat` to every stream idle for the interval, and is also
//! how a client that went away is noticed while the upstream is silent: its FIN (read from the TCP
//! state), a failed write, or a heartbeat the client has not taken for the write timeout
//! fires the stream's close hook, which cancels the A2A task and so unblocks the run thread.
//!
//! The heartbeat thread never waits on one stream: it skips a stream whose run thread is writing
//! (that write has the socket's write timeout), and its own writes never block (`MSG_DONTWAIT`;
//! what the socket does not take is kept and sent before anything else).

use crate::events::Serialized;
use crate::sse;
use crossbeam_channel::{tick, Receiver};
use parking_lot::Mutex;
use std::io::Write;
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

type CloseHook = Box<dyn FnOnce() + Send>;

/// SSE cursors (`id:` lines): `<epoch>.<execution tag>.<seq>`, opaque to clients. The epoch (start
/// time and a random part) differs at every start, so a cursor from before a restart is never
/// read as a position after it; the tag (a short hash of the execution id) keeps cursors of two
/// executions apart; `seq` comes from one process-wide counter, so it increases within every
/// execution and stream. A join's prelude (its snapshot of the turn so far) is numbered
/// `<epoch>.<tag>.<seq>.<k>`, its last frame plain `<epoch>.<tag>.<seq>`: the position it stands for.
pub(crate) mod cursor {
    use super::*;

    static SEQ: AtomicU64 = AtomicU64::new(0);

    pub(crate) fn epoch() -> &'static str {
        static EPOCH: OnceLock<String> = OnceLock::new();
        EPOCH.get_or_init(|| format!("{:x}{}", crate::ids::now_ms(), &crate::ids::uuid_v4()[..6]))
    }

    /// The next position (never 0).
    pub(crate) fn next_seq() -> u64 {
        SEQ.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// The short tag of an execution in its cursors.
    pub(crate) fn tag(execution_id: &str) -> String {
        crate::ids::sha256_hex(execution_id.as_bytes())[..10].to_string()
    }

    #[cfg(test)]
    pub(crate) fn format(tag: &str, seq: u64, sub: Option<usize>) -> String {
        let mut id = Vec::new();
        write_id(&mut id, tag, seq, sub);
        String::from_utf8(id).expect("cursors are ASCII")
    }

    /// Writes the cursor in place (the hot path: no `String` per frame).
    fn write_id(out: &mut Vec<u8>, tag: &str, seq: u64, sub: Option<usize>) {
        out.extend_from_slice(epoch().as_bytes());
        out.push(b'.');
        out.extend_from_slice(tag.as_bytes());
        let _ = write!(out, ".{seq}");
        if let Some(k) = sub {
            let _ = write!(out, ".{k}");
        }
    }

    /// A cursor of this process: `(tag, seq)`. `None` for anything else (another start, a
    /// join's prelude before its last frame, garbage).
    pub(crate) fn parse(s: &str) -> Option<(String, u64)> {
        let mut parts = s.trim().split('.');
        let (e, tag, seq) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || e != epoch() {
            return None;
        }
        Some((tag.to_string(), seq.parse().ok()?))
    }

    /// One SSE frame: `id:` then `data:`.
    pub(crate) fn push_frame(
        out: &mut Vec<u8>,
        (tag, seq, sub): (&str, u64, Option<usize>),
        json: &[u8],
    ) {
        out.extend_from_slice(b"id: ");
        write_id(out, tag, seq, sub);
        out.push(b'\n');
        sse::push_data_frame(out, json);
    }
}

/// One SSE response: chunk-encoded for HTTP/1.1, close-delimited for HTTP/1.0.
pub(crate) struct SseStream {
    inner: Mutex<Inner>,
    closed: AtomicBool,
    on_close: Mutex<Option<CloseHook>>,
    /// The connection itself (absent in unit tests): non-blocking heartbeats, peeks, shutdown.
    socket: Option<Arc<TcpStream>>,
    framing: Framing,
    write_timeout: Duration,
    /// The cursor tag of frames this stream numbers itself ([`SseStream::send`]).
    tag: Mutex<String>,
}

struct Inner {
    /// Where bytes go: the socket when there is one, else the response writer.
    out: Box<dyn Write + Send>,
    /// tiny_http's response writer: dropping it hands the connection back for the next request.
    response: Option<Box<dyn Write + Send>>,
    last_write: Instant,
    frame: Vec<u8>,
    /// Heartbeat bytes the socket has not taken yet; they go out before anything else.
    backlog: Vec<u8>,
    /// Since when `backlog` has been waiting.
    stalled_since: Option<Instant>,
}

/// How the body of a response is delimited.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// HTTP/1.1: chunks, and a last chunk ends the body (the connection may serve another request).
    Chunked,
    /// HTTP/1.0 has no chunked encoding: the body ends when the connection closes.
    Close,
}

impl Framing {
    fn head(self) -> &'static [u8] {
        match self {
            Framing::Chunked => HEAD_CHUNKED,
            Framing::Close => HEAD_CLOSE,
        }
    }
}

const HEAD_CHUNKED: &[u8] = b"HTTP/1.1 200 OK\r\n\
Content-Type: text/event-stream; charset=utf-8\r\n\
Cache-Control: no-cache\r\n\
X-Accel-Buffering: no\r\n\
Transfer-Encoding: chunked\r\n\r\n";

/// HTTP/1.0 has no chunked encoding: the body ends when the connection closes.
const HEAD_CLOSE: &[u8] = b"HTTP/1.1 200 OK\r\n\
Content-Type: text/event-stream; charset=utf-8\r\n\
Cache-Control: no-cache\r\n\
X-Accel-Buffering: no\r\n\
Connection: close\r\n\r\n";

impl SseStream {
    /// Takes over an admitted request's connection and writes the response head, with `extra`
    /// header lines (each ending in CRLF): chunked for HTTP/1.1, close-delimited for HTTP/1.0. A
    /// client that accepts no bytes for `write_timeout` is dropped.
    pub(crate) fn open_with(
        req: tiny_http::Request,
        write_timeout: Duration,
        extra: &str,
    ) -> std::io::Result<Arc<SseStream>> {
        let version = req.http_version();
        let framing = if (version.0, version.1) >= (1, 1) {
            Framing::Chunked
        } else {
            Framing::Close
        };
        let socket = req.socket().map(Arc::new);
        if let Some(s) = &socket {
            s.set_write_timeout(Some(write_timeout))?;
            let _ = s.set_nodelay(true);
        }
        SseStream::with(req.into_writer(), socket, framing, write_timeout, extra)
    }

    /// A chunked stream on a plain writer (no socket: no peeking, heartbeats may block): unit
    /// tests and the hot-path bench.
    pub(crate) fn start(writer: Box<dyn Write + Send>) -> std::io::Result<Arc<SseStream>> {
        SseStream::with(writer, None, Framing::Chunked, Duration::from_secs(60), "")
    }

    fn with(
        mut response: Box<dyn Write + Send>,
        socket: Option<Arc<TcpStream>>,
        framing: Framing,
        write_timeout: Duration,
        extra: &str,
    ) -> std::io::Result<Arc<SseStream>> {
        // The head goes through tiny_http's writer, which waits until earlier (pipelined)
        // responses on this connection are out; from then on the socket is ours.
        let head = framing.head();
        let mut bytes = head[..head.len() - 2].to_vec();
        bytes.extend_from_slice(extra.as_bytes());
        bytes.extend_from_slice(b"\r\n");
        response.write_all(&bytes)?;
        response.flush()?;
        let (out, response): (Box<dyn Write + Send>, _) = match &socket {
            Some(s) => (Box::new(SocketWriter(s.clone())), Some(response)),
            None => (response, None),
        };
        Ok(Arc::new(SseStream {
            inner: Mutex::new(Inner {
                out,
                response,
                last_write: Instant::now(),
                frame: Vec::with_capacity(4096),
                backlog: Vec::new(),
                stalled_since: None,
            }),
            closed: AtomicBool::new(false),
            on_close: Mutex::new(None),
            socket,
            framing,
            write_timeout,
            tag: Mutex::new("0".into()),
        }))
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Runs `hook` once when the client is found gone (immediately if it already is).
    pub(crate) fn on_close(&self, hook: CloseHook) {
        if self.is_closed() {
            hook();
            return;
        }
        *self.on_close.lock() = Some(hook);
        if self.is_closed() {
            if let Some(h) = self.on_close.lock().take() {
                h();
            }
        }
    }

    /// Checks the client now instead of at the next heartbeat tick: a client that closed its
    /// end is marked gone (its close hook runs). `true`: the client is gone.
    pub(crate) fn check_client(&self) -> bool {
        if !self.is_closed() && self.peer_closed() {
            log::debug!("client closed its end of the stream (seen at admission)");
            self.mark_closed();
        }
        self.is_closed()
    }

    /// Drops the close hook (the run no longer needs cancelling on disconnect).
    pub(crate) fn clear_on_close(&self) {
        self.on_close.lock().take();
    }

    /// The client is gone: nothing more is written, the connection is shut (so neither we nor
    /// tiny_http wait on it again) and the close hook runs.
    fn mark_closed(&self) {
        if !self.closed.swap(true, Ordering::SeqCst) {
            if let Some(s) = &self.socket {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
            let hook = self.on_close.lock().take();
            if let Some(h) = hook {
                h();
            }
        }
    }

    /// The execution this stream's own cursors name.
    pub(crate) fn set_tag(&self, execution_id: &str) {
        *self.tag.lock() = cursor::tag(execution_id);
    }

    /// Frames `events` with fresh cursors (positions no replay buffer holds).
    pub(crate) fn frames(&self, events: &(impl Serialized + ?Sized)) -> Vec<u8> {
        let tag = self.tag.lock().clone();
        let mut body = Vec::with_capacity(256 * events.count());
        events.each_json(&mut |json| {
            cursor::push_frame(&mut body, (&tag, cursor::next_seq(), None), json);
        });
        body
    }

    /// Sends events as one chunk with one flush, each with a fresh cursor. `false`: the client
    /// is gone.
    pub(crate) fn send(&self, events: &(impl Serialized + ?Sized)) -> bool {
        if events.count() == 0 {
            return !self.is_closed();
        }
        self.send_frames(&self.frames(events), events.count())
    }

    /// Sends `count` frames already numbered (a replay buffer's) as one chunk.
    pub(crate) fn send_frames(&self, body: &[u8], count: usize) -> bool {
        if body.is_empty() {
            return !self.is_closed();
        }
        let ok = self.write_chunk(body);
        if ok {
            crate::metrics::events_sent(count);
        }
        ok
    }

    fn frame_into(&self, frame: &mut Vec<u8>, body: &[u8]) {
        frame.clear();
        if self.framing == Framing::Chunked {
            let _ = write!(frame, "{:x}\r\n", body.len());
            frame.extend_from_slice(body);
            frame.extend_from_slice(b"\r\n");
        } else {
            frame.extend_from_slice(body);
        }
    }

    /// A blocking write (bounded by the socket's write timeout), after any heartbeat backlog.
    fn write_chunk(&self, body: &[u8]) -> bool {
        let ok = {
            let mut inner = self.inner.lock();
            // Checked under the lock: `finish` may have ended the body meanwhile.
            if self.is_closed() {
                return false;
            }
            let Inner {
                out,
                last_write,
                frame,
                backlog,
                stalled_since,
                ..
            } = &mut *inner;
            self.frame_into(frame, body);
            let mut ok = true;
            if !backlog.is_empty() {
                ok = out.write_all(backlog).is_ok();
                backlog.clear();
                *stalled_since = None;
            }
            ok = ok && out.write_all(frame).and_then(|_| out.flush()).is_ok();
            *last_write = Instant::now();
            ok
        };
        if !ok {
            self.mark_closed();
        }
        ok
    }

    /// One heartbeat-thread visit: notices a client that closed its end, writes a heartbeat if
    /// nothing was written for `interval`, never blocks. `false`: the client is gone.
    pub(crate) fn heartbeat_if_idle(&self, interval: Duration) -> bool {
        if self.is_closed() {
            return false;
        }
        if self.peer_closed() {
            log::debug!("client closed its end of the stream");
            self.mark_closed();
            return false;
        }
        // A busy stream is being written by its run thread, whose write has its own timeout.
        let Some(mut inner) = self.inner.try_lock() else {
            return true;
        };
        if self.is_closed() {
            return false;
        }
        let ok = if !inner.backlog.is_empty() {
            self.drain(&mut inner)
        } else if inner.last_write.elapsed() >= interval {
            let mut frame = Vec::with_capacity(32);
            self.frame_into(&mut frame, sse::HEARTBEAT);
            inner.backlog = frame;
            inner.stalled_since = Some(Instant::now());
            inner.last_write = Instant::now();
            crate::metrics::heartbeat_sent();
            self.drain(&mut inner)
        } else {
            true
        };
        drop(inner);
        if !ok {
            self.mark_closed();
        }
        ok
    }

    /// Sends what the socket takes of the backlog now. `false`: the client is gone, or has taken
    /// nothing for the write timeout.
    fn drain(&self, inner: &mut Inner) -> bool {
        let Some(socket) = &self.socket else {
            // No socket (unit tests): a plain write.
            let ok = inner
                .out
                .write_all(&inner.backlog)
                .and_then(|_| inner.out.flush());
            inner.backlog.clear();
            inner.stalled_since = None;
            return ok.is_ok();
        };
        while !inner.backlog.is_empty() {
            match send_nonblocking(socket, &inner.backlog) {
                Ok(0) => break,
                Ok(n) => {
                    inner.backlog.drain(..n);
                    inner.stalled_since = Some(Instant::now());
                }
                Err(_) => return false,
            }
        }
        if inner.backlog.is_empty() {
            inner.stalled_since = None;
            return true;
        }
        let stalled = inner
            .stalled_since
            .is_some_and(|t| t.elapsed() >= self.write_timeout);
        if stalled {
            log::info!(
                "client took no bytes for {:?}; dropping it",
                self.write_timeout
            );
        }
        !stalled
    }

    /// Whether the client closed (or reset) its end. Read from the TCP state, not with a
    /// `MSG_PEEK` recv: tiny_http shuts our read side once it expects no further request
    /// (HTTP/1.0, `Connection: close`), after which a peek reads end of file from a client that
    /// is still there.
    fn peer_closed(&self) -> bool {
        let Some(socket) = &self.socket else {
            return false;
        };
        // SAFETY: a zeroed plain-data struct filled by getsockopt(2) on our own socket.
        let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        let rc = unsafe {
            libc::getsockopt(
                socket.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_INFO,
                (&mut info as *mut libc::tcp_info).cast(),
                &mut len,
            )
        };
        // CLOSE_WAIT: the client's FIN arrived; CLOSE: reset; LAST_ACK/CLOSING/TIME_WAIT: both
        // ends are closing.
        const GONE: [u8; 5] = [7, 8, 9, 11, 6];
        rc == 0 && GONE.contains(&info.tcpi_state)
    }

    /// Ends the body: the last chunk for HTTP/1.1 (the connection may then serve the next
    /// request, so nothing, no heartbeat either, may be written after this), the connection's
    /// end for HTTP/1.0.
    pub(crate) fn finish(&self) {
        self.clear_on_close();
        let mut inner = self.inner.lock();
        if !self.closed.swap(true, Ordering::SeqCst) {
            let Inner { out, backlog, .. } = &mut *inner;
            let mut ok = backlog.is_empty() || out.write_all(backlog).is_ok();
            if self.framing == Framing::Chunked {
                ok = ok && out.write_all(b"0\r\n\r\n").is_ok();
            }
            let _ = out.flush();
            if self.framing == Framing::Close || !ok {
                if let Some(s) = &self.socket {
                    let _ = s.shutdown(std::net::Shutdown::Both);
                }
            }
        }
        // Hands the connection back to tiny_http (or lets it close it).
        inner.response.take();
    }

    /// Shutdown: `events` then the end of the body, in one go, unless the run thread holds the
    /// stream beyond `within` (a client not reading); then the connection is just shut. Whatever
    /// the run thread writes afterwards is dropped.
    pub(crate) fn abort(&self, events: &[serde_json::Value], within: Duration) {
        if let Some(s) = &self.socket {
            let _ = s.set_write_timeout(Some(within.max(Duration::from_millis(1))));
        }
        let Some(mut inner) = self.inner.try_lock_for(within) else {
            self.mark_closed();
            return;
        };
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        self.clear_on_close();
        let body = self.frames(events);
        let Inner {
            out,
            frame,
            backlog,
            response,
            ..
        } = &mut *inner;
        self.frame_into(frame, &body);
        if self.framing == Framing::Chunked {
            frame.extend_from_slice(b"0\r\n\r\n");
        }
        let written = out
            .write_all(backlog)
            .and_then(|_| out.write_all(frame))
            .and_then(|_| out.flush());
        if written.is_ok() {
            crate::metrics::events_sent(events.len());
        }
        if let Some(s) = &self.socket {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        response.take();
    }
}

/// Blocking writes on the shared socket (one descriptor per stream, not two).
struct SocketWriter(Arc<TcpStream>);

impl Write for SocketWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        (&*self.0).write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        (&*self.0).flush()
    }
}

/// `send(2)` with `MSG_DONTWAIT`: `Ok(0)` when the socket takes nothing now.
fn send_nonblocking(socket: &TcpStream, buf: &[u8]) -> std::io::Result<usize> {
    // SAFETY: send(2) from a live slice on our own socket; MSG_NOSIGNAL: no SIGPIPE.
    let n = unsafe {
        libc::send(
            socket.as_raw_fd(),
            buf.as_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
    if n >= 0 {
        return Ok(n as usize);
    }
    let e = std::io::Error::last_os_error();
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted => Ok(0),
        _ => Err(e),
    }
}

/// The heartbeat timer: one thread for all streams.
#[derive(Clone)]
pub struct Heartbeats {
    streams: Arc<Mutex<Vec<Weak<SseStream>>>>,
}

impl Heartbeats {
    pub fn start(interval: Duration) -> Heartbeats {
        let hb = Heartbeats {
            streams: Arc::new(Mutex::new(Vec::new())),
        };
        let streams = hb.streams.clone();
        let period = (interval / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
        let ticks = tick(period);
        std::thread::Builder::new()
            .name("heartbeat".into())
            .spawn(move || beat(&streams, &ticks, interval))
            .expect("spawn heartbeat thread");
        hb
    }

    pub(crate) fn register(&self, stream: &Arc<SseStream>) {
        self.streams.lock().push(Arc::downgrade(stream));
    }
}

fn beat(streams: &Mutex<Vec<Weak<SseStream>>>, ticks: &Receiver<Instant>, interval: Duration) {
    while ticks.recv().is_ok() {
        let live: Vec<Arc<SseStream>> = {
            let mut list = streams.lock();
            list.retain(|w| w.strong_count() > 0);
            list.iter().filter_map(Weak::upgrade).collect()
        };
        for s in live {
            if !s.is_closed() {
                s.heartbeat_if_idle(interval);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Shared(Arc<Mutex<Vec<u8>>>, Arc<AtomicBool>);
    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            if self.1.load(Ordering::SeqCst) {
                return Err(std::io::ErrorKind::BrokenPipe.into());
            }
            self.0.lock().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn events_are_chunked_data_frames_and_a_broken_pipe_fires_the_hook_once() {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let broken = Arc::new(AtomicBool::new(false));
        let s = SseStream::start(Box::new(Shared(buf.clone(), broken.clone()))).unwrap();
        assert!(s.send(&[serde_json::json!({"type": "RUN_STARTED"})]));
        let text = String::from_utf8(buf.lock().clone()).unwrap();
        let id = cursor::format("0", 1, None);
        assert!(id.starts_with(cursor::epoch()), "{id}");
        let frame = text.split_once("\r\n\r\n").unwrap().1;
        let frame = frame.split_once("\r\n").unwrap().1;
        assert!(frame.starts_with("id: "), "{text}");
        assert!(
            frame.ends_with("\ndata: {\"type\":\"RUN_STARTED\"}\n\n\r\n"),
            "{text}"
        );
        let fired = Arc::new(Mutex::new(0));
        let f = fired.clone();
        s.on_close(Box::new(move || *f.lock() += 1));
        broken.store(true, Ordering::SeqCst);
        assert!(!s.heartbeat_if_idle(Duration::ZERO));
        assert!(!s.send(&[serde_json::json!({})]));
        assert_eq!(*fired.lock(), 1);
    }

    #[test]
    fn a_cursor_of_this_process_parses_and_any_other_does_not() {
        let id = cursor::format("abc", 42, None);
        assert_eq!(cursor::parse(&id), Some(("abc".into(), 42)));
        assert_eq!(cursor::parse(&cursor::format("abc", 42, Some(0))), None);
        let before_restart = id.replacen(cursor::epoch(), "0zz", 1);
        assert_eq!(cursor::parse(&before_restart), None);
        assert_eq!(cursor::parse("garbage"), None);
        assert!(cursor::next_seq() < cursor::next_seq());
    }

    #[test]
    fn nothing_is_written_after_the_final_chunk() {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let s = SseStream::start(Box::new(Shared(
            buf.clone(),
            Arc::new(AtomicBool::new(false)),
        )))
        .unwrap();
        s.finish();
        let len = buf.lock().len();
        assert!(!s.heartbeat_if_idle(Duration::ZERO));
        assert!(!s.send(&[serde_json::json!({"type": "X"})]));
        assert_eq!(buf.lock().len(), len);
        assert!(String::from_utf8(buf.lock().clone())
            .unwrap()
            .ends_with("0\r\n\r\n"));
    }
}
