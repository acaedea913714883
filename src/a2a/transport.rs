//! The kernel connection's transport (ureq's `Transport`, plain TCP to the loopback kernel),
//! whose buffers are given back while the connection is silent.
//!
//! Why: ureq's own TCP transport keeps its input and output buffers (zero-filled, 40 KiB here)
//! for the connection's whole life, and a held run's upstream stream is silent for minutes: at
//! 10,000 held runs that is 400 MiB of buffers nobody reads into. This transport waits for input
//! with `poll` first; when nothing came within `IDLE_RELEASE` and nothing is left unread, it gives
//! both buffers' pages back to the system (`memory::release_pages`: freeing them would only leave
//! holes in glibc's arenas, still resident) and waits on; the next read touches fresh zero pages.
//! A fast stream never waits that long, so its reads go as before (one `poll` more per read).

use crate::descriptors::{waiting_out_exhaustion, OUT_OF_DESCRIPTORS_WAIT};
use crate::memory::PageBuf;
use std::io::{self, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, NextTimeout, ShutdownHandle, Transport,
};
use ureq::Error;

/// How long a connection waits for input with its buffers kept; past it, they are freed.
const IDLE_RELEASE: Duration = Duration::from_millis(500);
/// Room `tmp_and_output` guarantees for a request body chunk (as ureq's own buffers do).
const MIN_TMP: usize = 10 * 1024;

/// Connects to the kernel (the loopback addresses the URL resolved to) with a [`LeanTransport`].
#[derive(Debug)]
pub(crate) struct LeanConnector;

impl Connector<()> for LeanConnector {
    type Out = LeanTransport;

    fn connect(
        &self,
        details: &ConnectionDetails,
        _chained: Option<()>,
    ) -> Result<Option<Self::Out>, Error> {
        let limit = details.timeout.not_zero().map(|d| *d);
        let mut last = io::Error::new(io::ErrorKind::ConnectionRefused, "no address");
        for addr in details.addrs.iter() {
            match connect_one(addr, limit) {
                Ok(stream) => {
                    if details.config.no_delay() {
                        stream.set_nodelay(true)?;
                    }
                    let stream = Arc::new(stream);
                    let handle: Weak<dyn ShutdownHandle> =
                        Arc::downgrade(&stream) as Weak<dyn ShutdownHandle>;
                    (details.register_shutdown)(handle)?;
                    let (input, output) = (
                        details.config.input_buffer_size(),
                        details.config.output_buffer_size(),
                    );
                    return Ok(Some(LeanTransport::new(stream, input, output)));
                }
                Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                    return Err(Error::Timeout(details.timeout.reason))
                }
                Err(e) => last = e,
            }
        }
        Err(last.into())
    }
}

/// A connect that finds the process out of descriptors (a burst of runs starting or ending)
/// waits for one, bounded as a state file's open is (`descriptors.rs`), within the connect's
/// own deadline: the run was admitted and shown `RUN_STARTED`, descriptors come back within
/// moments, and failing it at once would show the user an error for a passing shortage. One
/// that stays out of descriptors still ends with the spec's retryable `A2A_UNAVAILABLE`.
fn connect_one(addr: &SocketAddr, limit: Option<Duration>) -> io::Result<TcpStream> {
    let wait = limit.map_or(OUT_OF_DESCRIPTORS_WAIT, |d| d.min(OUT_OF_DESCRIPTORS_WAIT));
    waiting_out_exhaustion(wait, || match limit {
        Some(d) => TcpStream::connect_timeout(addr, d),
        None => TcpStream::connect(addr),
    })
}

/// One kernel connection: the socket and buffers that exist only while it is in use.
#[derive(Debug)]
pub(crate) struct LeanTransport {
    stream: Arc<TcpStream>,
    bufs: LeanBuffers,
    write_timeout: Option<Duration>,
}

impl LeanTransport {
    fn new(stream: Arc<TcpStream>, input: usize, output: usize) -> LeanTransport {
        LeanTransport {
            stream,
            bufs: LeanBuffers {
                input_size: input.max(1),
                output_size: output.max(1),
                ..LeanBuffers::default()
            },
            write_timeout: None,
        }
    }

    /// Waits until the socket is readable (or closed) within `limit` (`None`: forever);
    /// `Ok(false)`: the time ran out.
    fn wait_readable(&self, limit: Option<Duration>) -> io::Result<bool> {
        let start = Instant::now();
        loop {
            let left = limit.map(|l| l.saturating_sub(start.elapsed()));
            let ms = left.map_or(-1, |d| d.as_millis().min(i32::MAX as u128) as i32);
            let mut fd = libc::pollfd {
                fd: self.stream.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one pollfd on this connection's open socket, for the length of the call.
            let n = unsafe { libc::poll(&mut fd, 1, ms) };
            if n > 0 {
                return Ok(true);
            }
            if n == 0 {
                return Ok(false);
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// Reads what is there without blocking; `Ok(None)`: nothing yet.
    fn read_ready(&mut self) -> io::Result<Option<usize>> {
        let fd = self.stream.as_raw_fd();
        let buf = self.bufs.input_append_buf();
        // SAFETY: `buf` is valid for writes of its length; MSG_DONTWAIT never blocks.
        let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
        if n >= 0 {
            return Ok(Some(n as usize));
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
            _ => Err(e),
        }
    }
}

impl Transport for LeanTransport {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.bufs
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), Error> {
        let timeout = timeout.for_write();
        if timeout.after.is_zero() {
            return Err(Error::Timeout(timeout.reason));
        }
        let limit = timeout.not_zero().map(|d| *d);
        if limit != self.write_timeout {
            self.stream.set_write_timeout(limit)?;
            self.write_timeout = limit;
        }
        let output = &self.bufs.output()[..amount];
        match (&*self.stream).write_all(output) {
            Ok(()) => Ok(()),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
                ) =>
            {
                Err(Error::Timeout(timeout.reason))
            }
            Err(e) => Err(e.into()),
        }
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, Error> {
        let timeout = timeout.for_read();
        if timeout.after.is_zero() {
            return Err(Error::Timeout(timeout.reason));
        }
        let limit = timeout.not_zero().map(|d| *d);
        let start = Instant::now();
        loop {
            let left = limit.map(|l| l.saturating_sub(start.elapsed()));
            let first = left.map_or(IDLE_RELEASE, |l| l.min(IDLE_RELEASE));
            let mut ready = self.wait_readable(Some(first))?;
            if !ready && left.is_none_or(|l| l > first) {
                // Silent for a while: what it would read into is given back until bytes come,
                // and what the thread registered for its idle waits (its conversation log).
                self.bufs.release_idle();
                crate::memory::idle();
                // What the idle callbacks touched below this frame goes back too: the thread may
                // now wait for minutes with only its live frames resident.
                crate::memory::release_unused_stack();
                ready = self.wait_readable(left.map(|l| l - first))?;
            }
            if !ready {
                return Err(Error::Timeout(timeout.reason));
            }
            if let Some(n) = self.read_ready()? {
                self.bufs.input_appended(n);
                return Ok(n > 0);
            }
        }
    }

    fn is_open(&mut self) -> bool {
        let mut byte = [0u8; 1];
        // SAFETY: a one-byte buffer on the stack; MSG_DONTWAIT never blocks.
        let n = unsafe {
            libc::recv(
                self.stream.as_raw_fd(),
                byte.as_mut_ptr().cast(),
                1,
                libc::MSG_DONTWAIT,
            )
        };
        // Open means nothing to read: bytes nobody asked for, or an end, make it unusable.
        n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::WouldBlock
    }
}

/// ureq's buffers, allocated when first needed, their pages given back by
/// [`LeanBuffers::release_idle`].
#[derive(Debug, Default)]
struct LeanBuffers {
    input_size: usize,
    output_size: usize,
    /// Both on whole pages of their own, so that `release_idle` gives back every page of them.
    input: PageBuf,
    filled: usize,
    consumed: usize,
    progress: bool,
    output: PageBuf,
}

impl LeanBuffers {
    /// Gives both buffers' pages back when nothing in them is unread (a silent connection):
    /// they stay allocated, and read as zeros when next touched.
    fn release_idle(&mut self) {
        if self.consumed == self.filled {
            crate::memory::release_pages(&mut self.input);
            crate::memory::release_pages(&mut self.output);
            (self.filled, self.consumed) = (0, 0);
        }
    }

    /// The input's unread bytes moved to its start, and the buffer at its size (at least).
    fn make_room(&mut self, at_least: usize) {
        if self.consumed > 0 {
            self.input.copy_within(self.consumed..self.filled, 0);
            self.filled -= self.consumed;
            self.consumed = 0;
        }
        let want = self.input_size.max(self.filled + at_least);
        self.input.grow_to(want);
    }

    fn ensure_output(&mut self) {
        self.output.grow_to(self.output_size);
    }
}

impl Buffers for LeanBuffers {
    fn output(&mut self) -> &mut [u8] {
        self.ensure_output();
        &mut self.output
    }

    fn input(&self) -> &[u8] {
        &self.input[self.consumed..self.filled]
    }

    fn input_append_buf(&mut self) -> &mut [u8] {
        self.make_room(1);
        &mut self.input[self.filled..]
    }

    fn input_appended(&mut self, amount: usize) {
        self.filled = (self.filled + amount).min(self.input.len());
    }

    fn input_consume(&mut self, amount: usize) {
        self.progress = amount > 0;
        self.consumed = (self.consumed + amount).min(self.filled);
    }

    fn tmp_and_output(&mut self) -> (&mut [u8], &mut [u8]) {
        self.make_room(MIN_TMP);
        self.ensure_output();
        (&mut self.input[self.filled..], &mut self.output)
    }

    fn can_use_input(&self) -> bool {
        self.filled > self.consumed && self.progress
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Answers one JSON-RPC request on `listener` with an empty result.
    fn answer_one(listener: std::net::TcpListener) -> std::thread::JoinHandle<()> {
        std::thread::spawn(move || {
            use std::io::Read;
            // Linux takes the new descriptor before it waits: out of them, accept fails at once.
            let accept = || listener.accept();
            let (mut s, _) =
                crate::descriptors::waiting_out_exhaustion(Duration::from_secs(10), accept)
                    .unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = s.read(&mut buf).unwrap();
                assert!(n > 0, "the request ended early");
                got.extend_from_slice(&buf[..n]);
            }
            let body = br#"{"jsonrpc":"2.0","id":"1","result":{}}"#;
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            s.write_all(head.as_bytes()).unwrap();
            s.write_all(body).unwrap();
        })
    }

    /// A call to the kernel made while the process has no descriptor left (a burst of runs)
    /// waits for one and goes through once descriptors come back, instead of failing at once.
    /// Exhausted for real, in a child process (`descriptors::exhaustion`).
    #[test]
    fn a_kernel_connect_while_descriptors_are_exhausted_waits_for_one() {
        use crate::descriptors::exhaustion::{exhaust, give_back_after, in_child};
        let name =
            "a2a::transport::tests::a_kernel_connect_while_descriptors_are_exhausted_waits_for_one";
        in_child(name, || {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let url = format!("http://{}", listener.local_addr().unwrap());
            let server = answer_one(listener);
            let client = crate::a2a::A2aClient::new(&url, None, Duration::from_secs(10));
            give_back_after(exhaust(), Duration::from_millis(300));
            let answer = client.call("GetTask", &serde_json::json!({"id": "x"}));
            assert!(answer.is_ok(), "{:?}", answer.err());
            server.join().unwrap();
        });
    }

    #[test]
    fn buffers_keep_unread_input_and_are_freed_only_when_all_is_read() {
        let mut b = LeanBuffers {
            input_size: 8,
            output_size: 4,
            ..LeanBuffers::default()
        };
        b.input_append_buf()[..5].copy_from_slice(b"hello");
        b.input_appended(5);
        b.input_consume(2);
        assert_eq!(b.input(), b"llo");
        b.release_idle();
        assert_eq!(b.input(), b"llo", "unread bytes are kept");
        // Appending moves the unread bytes to the front first.
        let room = b.input_append_buf();
        assert_eq!(room.len(), 5);
        room[..2].copy_from_slice(b"!!");
        b.input_appended(2);
        assert_eq!(b.input(), b"llo!!");
        assert!(b.can_use_input());
        b.input_consume(5);
        assert!(!b.can_use_input());
        b.output()[0] = 1;
        b.release_idle();
        assert_eq!(b.input(), b"");
        // Their sizes are kept for the next use.
        assert_eq!(b.input_append_buf().len(), 8);
        assert_eq!(b.output().len(), 4);
        let (tmp, out) = b.tmp_and_output();
        assert!(tmp.len() >= MIN_TMP && out.len() == 4);
    }
}
