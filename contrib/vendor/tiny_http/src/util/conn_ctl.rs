//! iac-code-agui patch: per-connection state for the connection limits (see PATCHES.md).

use std::io::{Error as IoError, ErrorKind, Read, Result as IoResult, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::connection::Connection;
use crate::StatusCode;

/// What a connection's reader, writer, connection thread and requests share.
pub(crate) struct ConnCtl {
    /// The socket, for its options and `Request::socket` (for TLS: a handle on the TCP socket under
    /// it). `None` when no such handle could be had; the limits that need it are then not applied.
    socket: Option<Arc<Connection>>,
    /// While set, each socket read gets the time left as its timeout and fails once it is over: a
    /// client trickling one byte at a time cannot stretch a total deadline.
    deadline: Mutex<Option<Instant>>,
    /// Set when a request left its body unread and it could not be skipped: the next bytes on the
    /// connection are not a request head, so the connection must end.
    must_close: AtomicBool,
    /// Bytes of an unread body to skip before the next request head.
    skip: AtomicU64,
    /// Frees a place under `Limits::max_connections` when the last user of the connection is gone.
    _slot: Option<ConnSlot>,
}

impl ConnCtl {
    pub(crate) fn new(socket: Option<Arc<Connection>>, slot: Option<ConnSlot>) -> Arc<ConnCtl> {
        Arc::new(ConnCtl {
            socket,
            deadline: Mutex::new(None),
            must_close: AtomicBool::new(false),
            skip: AtomicU64::new(0),
            _slot: slot,
        })
    }

    /// A control block for a connection that is not a socket (tests, `TestRequest`).
    pub(crate) fn detached() -> Arc<ConnCtl> {
        ConnCtl::new(None, None)
    }

    fn deadline(&self) -> MutexGuard<'_, Option<Instant>> {
        // a poisoned lock only means a reader panicked; the Option inside is still whole
        self.deadline.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts (`Some`) or ends (`None`) a total deadline for the reads that follow.
    pub(crate) fn set_deadline(&self, deadline: Option<Instant>) {
        *self.deadline() = deadline;
    }

    /// Called before every socket read of the connection.
    pub(crate) fn before_read(&self) -> IoResult<()> {
        let deadline = *self.deadline();
        if let (Some(deadline), Some(socket)) = (deadline, &self.socket) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(IoError::new(ErrorKind::TimedOut, "request head deadline"));
            }
            socket.set_read_timeout(Some(left))?;
        }
        Ok(())
    }

    /// Sets the timeout of every following socket read (`None`: wait forever).
    pub(crate) fn set_read_timeout(&self, timeout: Option<Duration>) {
        if let Some(socket) = &self.socket {
            // a zero duration is an error for the socket API; treat it as "no limit given"
            let _ = socket.set_read_timeout(timeout.filter(|t| !t.is_zero()));
        }
    }

    pub(crate) fn mark_must_close(&self) {
        self.must_close.store(true, Ordering::SeqCst);
    }

    pub(crate) fn set_skip(&self, n: u64) {
        self.skip.store(n, Ordering::SeqCst);
    }

    pub(crate) fn take_skip(&self) -> u64 {
        self.skip.swap(0, Ordering::SeqCst)
    }

    pub(crate) fn must_close(&self) -> bool {
        self.must_close.load(Ordering::SeqCst)
    }

    /// The TCP socket itself, shared, for `Request::shared_socket`.
    pub(crate) fn shared_socket(&self) -> Option<crate::SharedSocket> {
        self.socket.as_ref().and_then(crate::SharedSocket::of)
    }

    /// A new handle on the TCP socket, for `Request::socket`.
    pub(crate) fn tcp_clone(&self) -> Option<TcpStream> {
        self.socket.as_ref().and_then(|s| s.tcp_clone())
    }

    /// Answers 503 on the raw socket (plain HTTP only) when no thread could serve the connection.
    pub(crate) fn refuse(&self, error_body: &crate::ErrorBody) {
        if let Some(socket) = &self.socket {
            refuse_on(socket, error_body);
        }
    }

    /// Ends a connection politely after an error answer or an unread body: stop sending (unless a
    /// response is still being written), then read and discard what the client is still sending
    /// until it stops, at most `LINGER_TIME`, so that closing does not reset the connection before
    /// the client has read the answer (a client that uploads a large body before reading, as most
    /// do, would otherwise get EPIPE/ECONNRESET instead of the answer). nginx's "lingering close".
    // iac-code-agui patch: never inlined (its 8 KiB buffer stays out of the callers' frames)
    #[inline(never)]
    pub(crate) fn linger(&self, responses_in_flight: bool) {
        let Some(socket) = &self.socket else { return };
        if !responses_in_flight {
            let _ = socket.shutdown(Shutdown::Write);
        }
        self.set_deadline(None);
        let _ = socket.set_read_timeout(Some(LINGER_READ));
        let started = Instant::now();
        let mut buf = [0u8; 8192];
        while started.elapsed() < LINGER_TIME {
            match (&**socket).read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    }
}

/// Longest pause in the client's sending during a lingering close.
const LINGER_READ: Duration = Duration::from_millis(500);
/// Longest lingering close (memory stays one fixed buffer whatever is sent).
const LINGER_TIME: Duration = Duration::from_secs(5);

/// A place under `Limits::max_connections`; dropping it frees the place.
pub(crate) struct ConnSlot(Arc<AtomicUsize>);

impl ConnSlot {
    /// Takes a place if fewer than `max` are taken. Only the accept thread calls this, so the count
    /// cannot grow past `max` between the check and the increment.
    pub(crate) fn try_take(open: &Arc<AtomicUsize>, max: usize) -> Option<ConnSlot> {
        if open.load(Ordering::SeqCst) >= max {
            return None;
        }
        open.fetch_add(1, Ordering::SeqCst);
        Some(ConnSlot(open.clone()))
    }
}

impl Drop for ConnSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The bytes of an answer the server gives by itself: `Connection: close`, a Content-Length, and the
/// body `error_body` builds (never anything taken from the request, such as its URL).
pub(crate) fn error_response(status: u16, error_body: &crate::ErrorBody) -> Vec<u8> {
    let (body, content_type) = error_body(status);
    // iac-code-agui patch: a 503 (the connection cap) is worth retrying at once
    let retry = if status == 503 { "Retry-After: 1\r\n" } else { "" };
    let mut out = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n{}Connection: close\r\n\r\n",
        status,
        StatusCode(status).default_reason_phrase(),
        content_type,
        body.len(),
        retry
    )
    .into_bytes();
    out.extend_from_slice(&body);
    out
}

/// Over the connection cap: answer 503 from the accept thread without blocking it, then hand the
/// socket to the lingerer, which closes it a moment later.
pub(crate) fn refuse_connection(conn: Connection, error_body: &crate::ErrorBody) {
    let _ = conn.set_write_timeout(Some(Duration::from_millis(100)));
    let _ = conn.write_all_ref(&error_response(503, error_body));
    let _ = conn.shutdown(Shutdown::Write);
    if conn.set_nonblocking(true).is_ok() {
        linger_refused(conn);
    }
}

/// The 503 on a connection the caller keeps (a failed spawn): read what already arrived, so that
/// closing is less likely to reset; never wait for more.
fn refuse_on(conn: &Connection, error_body: &crate::ErrorBody) {
    let _ = conn.set_write_timeout(Some(Duration::from_millis(100)));
    let _ = conn.write_all_ref(&error_response(503, error_body));
    let _ = conn.shutdown(Shutdown::Write);
    if conn.set_nonblocking(true).is_ok() {
        still_sending(conn);
    }
}

/// Refused connections are kept open up to this long after their 503, reading and discarding, so
/// that a request that arrives after the answer does not turn the close into a reset (Linux drops
/// unread received data on a reset, the 503 with it).
const REFUSED_LINGER: Duration = Duration::from_secs(1);
/// At most this many refused connections linger; beyond it they are closed at once.
const REFUSED_LINGER_MAX: usize = 256;

fn linger_refused(conn: Connection) {
    static LINGERER: std::sync::OnceLock<Option<SyncSender<Connection>>> =
        std::sync::OnceLock::new();
    let tx = LINGERER.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::sync_channel(REFUSED_LINGER_MAX);
        std::thread::Builder::new()
            .name("tiny-http-linger".into())
            .spawn(move || linger_loop(&rx))
            .ok()
            .map(|_| tx)
    });
    if let Some(tx) = tx {
        let _ = tx.try_send(conn); // full: closed now, as before
    }
}

fn linger_loop(rx: &Receiver<Connection>) {
    let mut held: Vec<(Connection, Instant)> = Vec::new();
    loop {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(conn) if held.len() < REFUSED_LINGER_MAX => {
                held.push((conn, Instant::now() + REFUSED_LINGER))
            }
            Ok(_) | Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        let now = Instant::now();
        held.retain(|(conn, until)| now < *until && still_sending(conn));
    }
}

/// Discards what a lingering client sent; false once it closed its end or failed.
fn still_sending(conn: &Connection) -> bool {
    let mut buf = [0u8; 4096];
    loop {
        match (&*conn).read(&mut buf) {
            Ok(0) => return false,
            Ok(_) => continue,
            Err(e) => return e.kind() == ErrorKind::WouldBlock,
        }
    }
}

/// Pause before retrying a failed `accept` (EMFILE, ENFILE, ENOMEM, ECONNABORTED...): 10 ms after
/// the first failure, doubling up to 1 s while failures go on.
pub(crate) fn accept_backoff(previous: Option<Duration>) -> Duration {
    const FIRST: Duration = Duration::from_millis(10);
    const MAX: Duration = Duration::from_secs(1);
    match previous {
        None => FIRST,
        Some(d) => (d * 2).min(MAX),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_one_second() {
        let mut d = None;
        let mut seen = Vec::new();
        for _ in 0..10 {
            let next = accept_backoff(d);
            seen.push(next.as_millis());
            d = Some(next);
        }
        assert_eq!(seen, [10, 20, 40, 80, 160, 320, 640, 1000, 1000, 1000]);
    }

    #[test]
    fn slots_are_capped_and_freed() {
        let open = Arc::new(AtomicUsize::new(0));
        let a = ConnSlot::try_take(&open, 2).unwrap();
        let _b = ConnSlot::try_take(&open, 2).unwrap();
        assert!(ConnSlot::try_take(&open, 2).is_none());
        drop(a);
        assert!(ConnSlot::try_take(&open, 2).is_some());
    }

    #[test]
    fn error_response_is_closed_and_sized() {
        let body: crate::ErrorBody = Arc::new(|s| (format!("{{\"s\":{s}}}").into_bytes(), "x/y"));
        let text = String::from_utf8(error_response(431, &body)).unwrap();
        assert!(text.starts_with("HTTP/1.1 431 "));
        assert!(text.contains("\r\nConnection: close\r\n"));
        assert!(text.contains("\r\nContent-Length: 9\r\n"));
        assert!(text.contains("\r\nContent-Type: x/y\r\n"));
        assert!(text.ends_with("\r\n\r\n{\"s\":431}"));
    }
}
