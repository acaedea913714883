//! The client side of figure 10: up to 10,000 held SSE runs in one thread (epoll, nonblocking
//! sockets; a thread per client would be 10,000 more threads on a host whose pid_max is 32,768).
//! Each client POSTs a run on its own threadId, checks the 200, `RUN_STARTED` and the first text
//! event, and stamps every line it receives: a heartbeat's lateness is its arrival minus the
//! previous line's arrival minus the interval.

use crate::clients::run_body;
use crate::support::{contains, uuid};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// Runs asked for and not yet started (or failed), at most: the ramp's pace is the adapter's.
const WINDOW: usize = 512;

#[derive(Default)]
struct Client {
    line: Vec<u8>,
    status_ok: bool,
    started: bool,
    text: bool,
    failed: bool,
    last_line: Option<Instant>,
}

pub(crate) struct Held {
    socks: Vec<Option<TcpStream>>,
    clients: Vec<Client>,
    ep: i32,
    pub(crate) started: usize,
    pub(crate) texts: usize,
    pub(crate) errors: usize,
    pub(crate) first_error: Option<String>,
    /// Heartbeat lateness samples, µs, while `measuring`.
    pub(crate) lateness_us: Vec<u64>,
    pub(crate) heartbeats: u64,
    measuring: bool,
    interval: Duration,
}

impl Held {
    /// Opens `n` runs against the adapter on `port` (`WINDOW` waiting at a time); returns once
    /// every run started or failed, or at `deadline`.
    pub(crate) fn open(
        port: u16,
        n: usize,
        tag: u32,
        cwd: &str,
        interval: Duration,
        deadline: Duration,
    ) -> Held {
        // SAFETY: epoll_create1 has no preconditions.
        let ep = unsafe { libc::epoll_create1(0) };
        let mut h = Held {
            socks: Vec::with_capacity(n),
            clients: Vec::with_capacity(n),
            ep,
            started: 0,
            texts: 0,
            errors: 0,
            first_error: None,
            lateness_us: Vec::new(),
            heartbeats: 0,
            measuring: false,
            interval,
        };
        let t0 = Instant::now();
        let mut chunk = vec![0u8; 64 * 1024];
        while h.started + h.errors < n && t0.elapsed() < deadline {
            while h.socks.len() < n && h.socks.len() - h.started - h.errors < WINDOW {
                let i = h.socks.len();
                let body = run_body(&uuid(tag, i as u64), &format!("hold-{i}"), "hold", cwd);
                h.connect(port, &body);
            }
            h.poll(&mut chunk, 10);
        }
        h
    }

    fn connect(&mut self, port: u16, body: &[u8]) {
        let i = self.clients.len();
        self.clients.push(Client::default());
        let head = format!(
            "POST / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        let sock = TcpStream::connect(("127.0.0.1", port)).and_then(|mut s| {
            s.write_all(&[head.as_bytes(), body].concat())?;
            s.set_nonblocking(true)?;
            Ok(s)
        });
        match sock {
            Ok(s) => {
                let mut ev = libc::epoll_event {
                    events: libc::EPOLLIN as u32,
                    u64: i as u64,
                };
                // SAFETY: registers our own socket.
                unsafe { libc::epoll_ctl(self.ep, libc::EPOLL_CTL_ADD, s.as_raw_fd(), &mut ev) };
                self.socks.push(Some(s));
            }
            Err(e) => {
                self.socks.push(None);
                self.fail(i, format!("connect/send: {e}"));
            }
        }
    }

    fn fail(&mut self, i: usize, what: String) {
        if !self.clients[i].failed {
            self.clients[i].failed = true;
            self.errors += 1;
            self.first_error.get_or_insert(what);
        }
    }

    /// Reads whatever arrived within `ms` milliseconds.
    pub(crate) fn poll(&mut self, chunk: &mut [u8], ms: i32) {
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 512];
        // SAFETY: epoll_wait fills our array.
        let n = unsafe { libc::epoll_wait(self.ep, events.as_mut_ptr(), 512, ms) };
        for ev in events.iter().take(n.max(0) as usize) {
            let i = ev.u64 as usize;
            let Some(sock) = self.socks[i].take() else {
                continue;
            };
            loop {
                match (&sock).read(chunk) {
                    Ok(0) => {
                        self.fail(i, "the stream ended during the hold".into());
                        self.unregister(&sock);
                        break;
                    }
                    Ok(k) => self.lines(i, &chunk[..k]),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) => {
                        self.fail(i, format!("read: {e}"));
                        self.unregister(&sock);
                        break;
                    }
                }
            }
            self.socks[i] = Some(sock);
        }
    }

    fn unregister(&self, sock: &TcpStream) {
        let fd = sock.as_raw_fd();
        // SAFETY: removes our own socket from our epoll set.
        unsafe { libc::epoll_ctl(self.ep, libc::EPOLL_CTL_DEL, fd, std::ptr::null_mut()) };
    }

    fn lines(&mut self, i: usize, mut bytes: &[u8]) {
        let now = Instant::now();
        while let Some(at) = bytes.iter().position(|b| *b == b'\n') {
            let mut line = std::mem::take(&mut self.clients[i].line);
            line.extend_from_slice(&bytes[..at]);
            bytes = &bytes[at + 1..];
            self.line(i, &line, now);
            line.clear();
            self.clients[i].line = line;
        }
        self.clients[i].line.extend_from_slice(bytes);
    }

    fn line(&mut self, i: usize, l: &[u8], now: Instant) {
        let l = l.strip_suffix(b"\r").unwrap_or(l);
        if l.is_empty() {
            return;
        }
        let c = &mut self.clients[i];
        if !c.status_ok {
            if l.starts_with(b"HTTP/1.1 200") {
                c.status_ok = true;
            } else {
                let what = format!("status line: {}", String::from_utf8_lossy(l));
                self.fail(i, what);
            }
            return;
        }
        // Only events and heartbeats are stamped (not the head, nor chunk sizes).
        let previous = if l == b": heartbeat" || l.starts_with(b"data: ") {
            c.last_line.replace(now)
        } else {
            return;
        };
        if l == b": heartbeat" {
            if self.measuring {
                self.heartbeats += 1;
                if let Some(p) = previous {
                    let gap = now.duration_since(p).saturating_sub(self.interval);
                    self.lateness_us.push(gap.as_micros() as u64);
                }
            }
        } else if l.starts_with(b"data: ") {
            if !c.started && contains(l, b"\"RUN_STARTED\"") {
                c.started = true;
                self.started += 1;
            } else if !c.text && contains(l, b"\"TEXT_MESSAGE_CONTENT\"") {
                c.text = true;
                self.texts += 1;
            } else if contains(l, b"\"RUN_ERROR\"") || contains(l, b"\"RUN_FINISHED\"") {
                let what = String::from_utf8_lossy(l).chars().take(300).collect();
                self.fail(i, what);
            }
        }
    }

    /// Reads for `d`, counting heartbeats and their lateness.
    pub(crate) fn hold(&mut self, d: Duration, mut each: impl FnMut()) {
        let mut chunk = vec![0u8; 64 * 1024];
        self.measuring = true;
        let t0 = Instant::now();
        let mut last_each = t0;
        while t0.elapsed() < d {
            self.poll(&mut chunk, 20);
            if last_each.elapsed() >= Duration::from_millis(250) {
                each();
                last_each = Instant::now();
            }
        }
        self.measuring = false;
    }

    /// Every client leaves: its socket shut down and closed.
    pub(crate) fn close(self) {
        for s in self.socks.iter().flatten() {
            let _ = s.shutdown(Shutdown::Both);
        }
        drop(self.socks);
        // SAFETY: our own epoll descriptor.
        unsafe { libc::close(self.ep) };
    }
}
