//! The heartbeat: one thread for every open stream. It wakes on a timer channel, writes
//! `: heartbeat` to each stream idle for the interval, and so notices a client that went away
//! while the upstream is silent (its FIN, a failed write, or a heartbeat not taken for the write
//! timeout), which fires the stream's close hook.
//!
//! It never waits on one stream: it skips a stream whose run thread is writing (that write has
//! the socket's write timeout), and its own writes never block (`MSG_DONTWAIT`; what the socket
//! does not take is kept and sent before anything else).

use super::writer::{Inner, SseStream};
use crate::sse;
use crossbeam_channel::{tick, Receiver};
use parking_lot::Mutex;
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// The heartbeat timer: one thread for all streams.
#[derive(Clone)]
pub struct Heartbeats {
    streams: Arc<Mutex<Registry>>,
}

/// The streams, each with its probe slot: the number it was registered under, so that a
/// stream's turn to be probed stays the same as others leave the list (an index in the list
/// shifted with every removal, and a mass leave was then noticed over seconds, not one).
#[derive(Default)]
struct Registry {
    next_slot: u64,
    streams: Vec<(u64, Weak<SseStream>)>,
}

impl Heartbeats {
    pub fn start(interval: Duration) -> Heartbeats {
        let hb = Heartbeats {
            streams: Arc::new(Mutex::new(Registry::default())),
        };
        let streams = hb.streams.clone();
        let (period, probe_every) = schedule(interval);
        let ticks = tick(period);
        std::thread::Builder::new()
            .name("heartbeat".into())
            .stack_size(HEARTBEAT_STACK)
            .spawn(move || beat(&streams, &ticks, interval, probe_every))
            .expect("spawn heartbeat thread");
        hb
    }

    pub(crate) fn register(&self, stream: &Arc<SseStream>) {
        let mut r = self.streams.lock();
        let slot = r.next_slot;
        r.next_slot = slot.wrapping_add(1);
        r.streams.push((slot, Arc::downgrade(stream)));
    }
}

/// The heartbeat thread's stack: a loop over the streams, no recursion, log lines at most.
const HEARTBEAT_STACK: usize = 256 * 1024;
/// The longest a due heartbeat waits for the next tick (its lateness, beyond the scan itself).
const MAX_TICK: Duration = Duration::from_millis(100);

/// The tick period, and every how many ticks each stream is probed for a client that left. A
/// heartbeat is due `interval` after the stream's last write and goes out at the next tick, so
/// ticks come at most `MAX_TICK` apart (at 15 s, 100 ms late at most, not a quarter of a
/// second or a whole one). The probe (a `getsockopt` per stream) keeps its own period, a quarter
/// of the interval (10 ms to 1 s): with 10,000 streams it is the costly part of a tick.
fn schedule(interval: Duration) -> (Duration, u64) {
    let probe = (interval / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
    let period = probe.min(MAX_TICK);
    let every = (probe.as_micros() / period.as_micros().max(1)).max(1) as u64;
    (period, every)
}

fn beat(
    streams: &Mutex<Registry>,
    ticks: &Receiver<Instant>,
    interval: Duration,
    probe_every: u64,
) {
    let mut n: u64 = 0;
    while ticks.recv().is_ok() {
        n = n.wrapping_add(1);
        let live: Vec<(u64, Arc<SseStream>)> = {
            let mut r = streams.lock();
            r.streams.retain(|(_, w)| w.strong_count() > 0);
            let upgraded = r
                .streams
                .iter()
                .filter_map(|(slot, w)| Some((*slot, w.upgrade()?)));
            upgraded.collect()
        };
        // Each stream is probed on one tick in `probe_every`, the streams spread over them.
        for (slot, s) in &live {
            if !s.is_closed() {
                s.visit(interval, probed_on(n, *slot, probe_every));
            }
        }
    }
}

/// Whether tick `n` probes the stream registered under `slot`: once every `probe_every` ticks.
fn probed_on(n: u64, slot: u64, probe_every: u64) -> bool {
    n.wrapping_add(slot) % probe_every == 0
}

impl SseStream {
    /// One heartbeat-thread visit: notices a client that closed its end, writes a heartbeat if
    /// nothing was written for `interval`, never blocks. `false`: the client is gone.
    #[cfg(test)]
    pub(crate) fn heartbeat_if_idle(&self, interval: Duration) -> bool {
        self.visit(interval, true)
    }

    /// A heartbeat-thread visit; `probe`: also ask the socket whether the client closed its end.
    fn visit(&self, interval: Duration, probe: bool) -> bool {
        if self.is_closed() {
            return false;
        }
        if probe && self.peer_closed() {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_due_heartbeat_waits_at_most_a_tenth_of_a_second_and_probes_keep_their_period() {
        let ms = Duration::from_millis;
        // 15 s: ticks every 100 ms, each stream probed every 10th tick (once a second).
        assert_eq!(schedule(Duration::from_secs(15)), (ms(100), 10));
        // 1 s: ticks every 100 ms, probes every other tick.
        assert_eq!(schedule(Duration::from_secs(1)), (ms(100), 2));
        // Short intervals (tests): a tick and a probe every quarter of the interval, 10 ms at least.
        assert_eq!(schedule(ms(200)), (ms(50), 1));
        assert_eq!(schedule(ms(8)), (ms(10), 1));
    }

    #[test]
    fn every_stream_is_probed_within_its_period_while_the_others_leave() {
        // A mass leave: each stream is found closed at its probe and leaves the list. Probed by
        // its place in the list, a stream moved past its turn whenever one before it left, and
        // half of 1,000 were still unnoticed a second later.
        let mut left: Vec<u64> = (0..1000).collect();
        for n in 1..=10 {
            left.retain(|&slot| !probed_on(n, slot, 10));
        }
        assert!(left.is_empty(), "{} not probed in 10 ticks", left.len());
    }
}
