//! The client side of a run: the SSE response written straight to the socket, and the heartbeat
//! timer shared by every open stream.
//!
//! A run's own thread blocks on the upstream read, so it cannot notice silence. One heartbeat thread
//! wakes on a timer channel, writes `: heartbeat` to every stream idle for the interval, and is also
//! how a client that went away is noticed while the upstream is silent: the failed write fires the
//! stream's close hook, which cancels the A2A task and so unblocks the run thread.

use crate::sse;
use crossbeam_channel::{select, tick, Receiver};
use parking_lot::Mutex;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

type CloseHook = Box<dyn FnOnce() + Send>;

/// One SSE response, chunk-encoded on the raw connection.
pub struct SseStream {
    inner: Mutex<Inner>,
    closed: AtomicBool,
    on_close: Mutex<Option<CloseHook>>,
}

struct Inner {
    writer: Box<dyn Write + Send>,
    last_write: Instant,
    frame: Vec<u8>,
}

const HEAD: &[u8] = b"HTTP/1.1 200 OK\r\n\
Content-Type: text/event-stream; charset=utf-8\r\n\
Cache-Control: no-cache\r\n\
X-Accel-Buffering: no\r\n\
Transfer-Encoding: chunked\r\n\r\n";

impl SseStream {
    /// Writes the response head; the stream is then ready for events.
    pub fn start(mut writer: Box<dyn Write + Send>) -> std::io::Result<Arc<SseStream>> {
        writer.write_all(HEAD)?;
        writer.flush()?;
        Ok(Arc::new(SseStream {
            inner: Mutex::new(Inner {
                writer,
                last_write: Instant::now(),
                frame: Vec::with_capacity(4096),
            }),
            closed: AtomicBool::new(false),
            on_close: Mutex::new(None),
        }))
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Runs `hook` once when the client is found gone (immediately if it already is).
    pub fn on_close(&self, hook: CloseHook) {
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

    /// Drops the close hook (the run no longer needs cancelling on disconnect).
    pub fn clear_on_close(&self) {
        self.on_close.lock().take();
    }

    fn mark_closed(&self) {
        if !self.closed.swap(true, Ordering::SeqCst) {
            let hook = self.on_close.lock().take();
            if let Some(h) = hook {
                h();
            }
        }
    }

    /// Sends events as one chunk with one flush. `false`: the client is gone.
    pub fn send(&self, events: &[serde_json::Value]) -> bool {
        if events.is_empty() {
            return !self.is_closed();
        }
        let mut body = Vec::with_capacity(256 * events.len());
        for ev in events {
            let json = serde_json::to_vec(ev).unwrap_or_default();
            sse::push_data_frame(&mut body, &json);
        }
        self.write_chunk(&body)
    }

    fn write_chunk(&self, body: &[u8]) -> bool {
        let ok = {
            let mut inner = self.inner.lock();
            // Checked under the lock: `finish` may have ended the body meanwhile.
            if self.is_closed() {
                return false;
            }
            let Inner {
                writer,
                last_write,
                frame,
            } = &mut *inner;
            frame.clear();
            frame.extend_from_slice(format!("{:x}\r\n", body.len()).as_bytes());
            frame.extend_from_slice(body);
            frame.extend_from_slice(b"\r\n");
            let ok = writer.write_all(frame).and_then(|_| writer.flush()).is_ok();
            *last_write = Instant::now();
            ok
        };
        if !ok {
            self.mark_closed();
        }
        ok
    }

    /// Writes a heartbeat if nothing was written for `interval`. `false`: the client is gone.
    pub fn heartbeat_if_idle(&self, interval: Duration) -> bool {
        let idle = self.inner.lock().last_write.elapsed() >= interval;
        if idle {
            self.write_chunk(sse::HEARTBEAT)
        } else {
            !self.is_closed()
        }
    }

    /// Ends the chunked body; the connection may then serve the next request, so nothing (no
    /// heartbeat either) may be written after this.
    pub fn finish(&self) {
        self.clear_on_close();
        let mut inner = self.inner.lock();
        if !self.closed.swap(true, Ordering::SeqCst) {
            let _ = inner
                .writer
                .write_all(b"0\r\n\r\n")
                .and_then(|_| inner.writer.flush());
        }
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
            .spawn(move || beat(streams, ticks, interval))
            .expect("spawn heartbeat thread");
        hb
    }

    pub fn register(&self, stream: &Arc<SseStream>) {
        self.streams.lock().push(Arc::downgrade(stream));
    }
}

fn beat(streams: Arc<Mutex<Vec<Weak<SseStream>>>>, ticks: Receiver<Instant>, interval: Duration) {
    loop {
        select! {
            recv(ticks) -> t => if t.is_err() { return },
        }
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
        assert!(
            text.ends_with("1e\r\ndata: {\"type\":\"RUN_STARTED\"}\n\n\r\n"),
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
