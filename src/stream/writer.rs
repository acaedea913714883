//! One SSE response on the client's connection: the response head, chunked (HTTP/1.1) or
//! close-delimited (HTTP/1.0) framing, blocking writes bounded by the socket's write timeout, and
//! the disconnect hook, run once when the client is found gone (its FIN read from the TCP state,
//! or a failed write).

use super::cursor;
use crate::events::Serialized;
use parking_lot::Mutex;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tiny_http::SharedSocket;

type CloseHook = Box<dyn FnOnce() + Send>;

/// One SSE response: chunk-encoded for HTTP/1.1, close-delimited for HTTP/1.0.
pub(crate) struct SseStream {
    pub(super) inner: Mutex<Inner>,
    closed: AtomicBool,
    on_close: Mutex<Option<CloseHook>>,
    /// The connection itself (absent in unit tests): non-blocking heartbeats, peeks, shutdown.
    pub(super) socket: Option<SharedSocket>,
    framing: Framing,
    pub(super) write_timeout: Duration,
    /// The cursor tag of frames this stream numbers itself ([`SseStream::send`]).
    tag: Mutex<String>,
}

pub(super) struct Inner {
    /// Where bytes go: the socket when there is one, else the response writer.
    pub(super) out: Box<dyn Write + Send>,
    /// tiny_http's response writer: dropping it hands the connection back for the next request.
    response: Option<Box<dyn Write + Send>>,
    pub(super) last_write: Instant,
    frame: Vec<u8>,
    /// Heartbeat bytes the socket has not taken yet; they go out before anything else.
    pub(super) backlog: Vec<u8>,
    /// Since when `backlog` has been waiting.
    pub(super) stalled_since: Option<Instant>,
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
        // The connection's own socket, shared with tiny_http: one descriptor per held stream.
        let socket = req.shared_socket();
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
        socket: Option<SharedSocket>,
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
                // Grown by the first large frame and kept: a held run writes a few small ones.
                frame: Vec::with_capacity(256),
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
    pub(super) fn mark_closed(&self) {
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

    /// Whether a write holds the stream at this instant (never waits); one seen holding it for a
    /// while is a client that takes no bytes. Heartbeats never hold it (they only try the lock).
    pub(crate) fn write_in_progress(&self) -> bool {
        !self.is_closed() && self.inner.try_lock().is_none()
    }

    /// Shuts the connection down now (a Stop for a client that does not read): a write blocked
    /// on it fails at once, and the close hook runs.
    pub(crate) fn shut(&self) {
        self.mark_closed();
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

    pub(super) fn frame_into(&self, frame: &mut Vec<u8>, body: &[u8]) {
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

    /// Whether the client closed (or reset) its end. Read from the TCP state, not with a
    /// `MSG_PEEK` recv: tiny_http shuts our read side once it expects no further request
    /// (HTTP/1.0, `Connection: close`), after which a peek reads end of file from a client that
    /// is still there.
    pub(super) fn peer_closed(&self) -> bool {
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
        // An ended body's connection may carry the client's next request by now: left alone.
        if self.is_closed() {
            return;
        }
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
struct SocketWriter(SharedSocket);

impl Write for SocketWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        (&*self.0).write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        (&*self.0).flush()
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
