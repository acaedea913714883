use std::io::Result as IoResult;
use std::io::{Read, Write};

use std::io::{Error as IoError, ErrorKind};
use std::sync::mpsc::channel;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex, MutexGuard};

use std::mem;

pub struct SequentialReaderBuilder<R>
where
    R: Read + Send,
{
    inner: SequentialReaderBuilderInner<R>,
}

enum SequentialReaderBuilderInner<R>
where
    R: Read + Send,
{
    First(R),
    NotFirst(Receiver<R>),
}

pub struct SequentialReader<R>
where
    R: Read + Send,
{
    inner: SequentialReaderInner<R>,
    next: Sender<R>,
}

enum SequentialReaderInner<R>
where
    R: Read + Send,
{
    MyTurn(R),
    Waiting(Receiver<R>),
    Empty,
}

pub struct SequentialWriterBuilder<W>
where
    W: Write + Send,
{
    writer: Arc<Mutex<W>>,
    next_trigger: Option<Receiver<()>>,
    // iac-code-agui patch: the responses in flight, and what resumes a parked connection
    parking: Arc<Parking>,
}

/// iac-code-agui patch: a connection whose thread left while a response was still being written
/// (a long stream) is parked here, as a task, and resumed by the last response's writer when it
/// is dropped. One lock covers the count and the slot, so a park never misses its resume.
#[derive(Default)]
pub struct Parking {
    state: Mutex<ParkState>,
}

#[derive(Default)]
struct ParkState {
    open: usize,
    parked: Option<Box<dyn FnOnce() + Send>>,
}

impl Parking {
    fn state(&self) -> MutexGuard<'_, ParkState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps `resume` until the responses in flight are done (`Ok`), or gives it back when none
    /// is (`Err`: the caller goes on reading itself).
    pub fn park(&self, resume: Box<dyn FnOnce() + Send>) -> Result<(), Box<dyn FnOnce() + Send>> {
        let mut state = self.state();
        if state.open == 0 {
            return Err(resume);
        }
        state.parked = Some(resume);
        Ok(())
    }

    fn opened(&self) {
        self.state().open += 1;
    }

    fn finished(&self) {
        let resume = {
            let mut state = self.state();
            state.open -= 1;
            if state.open == 0 {
                state.parked.take()
            } else {
                None
            }
        };
        if let Some(resume) = resume {
            resume();
        }
    }
}

pub struct SequentialWriter<W>
where
    W: Write + Send,
{
    trigger: Option<Receiver<()>>,
    writer: Arc<Mutex<W>>,
    on_finish: Sender<()>,
    parking: Arc<Parking>,
}

impl<R: Read + Send> SequentialReaderBuilder<R> {
    pub fn new(reader: R) -> SequentialReaderBuilder<R> {
        SequentialReaderBuilder {
            inner: SequentialReaderBuilderInner::First(reader),
        }
    }
}

impl<W: Write + Send> SequentialWriterBuilder<W> {
    pub fn new(writer: W) -> SequentialWriterBuilder<W> {
        SequentialWriterBuilder {
            writer: Arc::new(Mutex::new(writer)),
            next_trigger: None,
            parking: Arc::default(),
        }
    }
}

impl<R: Read + Send> Iterator for SequentialReaderBuilder<R> {
    type Item = SequentialReader<R>;

    fn next(&mut self) -> Option<SequentialReader<R>> {
        let (tx, rx) = channel();

        let inner = mem::replace(&mut self.inner, SequentialReaderBuilderInner::NotFirst(rx));

        match inner {
            SequentialReaderBuilderInner::First(reader) => Some(SequentialReader {
                inner: SequentialReaderInner::MyTurn(reader),
                next: tx,
            }),

            SequentialReaderBuilderInner::NotFirst(previous) => Some(SequentialReader {
                inner: SequentialReaderInner::Waiting(previous),
                next: tx,
            }),
        }
    }
}

impl<W: Write + Send> Iterator for SequentialWriterBuilder<W> {
    type Item = SequentialWriter<W>;
    fn next(&mut self) -> Option<SequentialWriter<W>> {
        let (tx, rx) = channel();
        let mut next_next_trigger = Some(rx);
        ::std::mem::swap(&mut next_next_trigger, &mut self.next_trigger);

        self.parking.opened();
        Some(SequentialWriter {
            trigger: next_next_trigger,
            writer: self.writer.clone(),
            on_finish: tx,
            parking: self.parking.clone(),
        })
    }
}

impl<R: Read + Send> SequentialReader<R> {
    /// iac-code-agui patch: blocks until the previous reader is done with the stream, without
    /// reading from it, so that the caller can set socket options for what it reads next.
    pub fn wait_turn(&mut self) -> IoResult<()> {
        let received = match self.inner {
            SequentialReaderInner::Waiting(ref recv) => recv.recv(),
            _ => return Ok(()),
        };
        match received {
            Ok(reader) => {
                self.inner = SequentialReaderInner::MyTurn(reader);
                Ok(())
            }
            // the previous reader always passes the stream on when dropped; if it was lost (a
            // panic on its way), end this connection with an error instead of panicking too
            Err(_) => {
                self.inner = SequentialReaderInner::Empty;
                Err(IoError::new(
                    ErrorKind::BrokenPipe,
                    "previous request lost the stream",
                ))
            }
        }
    }
}

impl<R: Read + Send> Read for SequentialReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> IoResult<usize> {
        self.wait_turn()?;
        match self.inner {
            SequentialReaderInner::MyTurn(ref mut reader) => reader.read(buf),
            _ => Err(IoError::new(ErrorKind::BrokenPipe, "stream lost")),
        }
    }
}

impl<W: Write + Send> SequentialWriterBuilder<W> {
    /// iac-code-agui patch: number of writers handed out and not dropped yet (responses that are
    /// not finished).
    pub fn in_flight(&self) -> usize {
        self.parking.state().open
    }

    /// iac-code-agui patch: where the connection parks while its responses are written.
    pub fn parking(&self) -> Arc<Parking> {
        self.parking.clone()
    }
}

impl<W: Write + Send> SequentialWriter<W> {
    fn lock(&mut self) -> MutexGuard<'_, W> {
        if let Some(v) = self.trigger.take() {
            // Err: the previous writer is gone (it sends on drop, or is dropped), our turn anyway
            let _ = v.recv();
        }
        // iac-code-agui patch: a panic while writing a previous response must not poison every
        // later response on the connection
        self.writer.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<W: Write + Send> Write for SequentialWriter<W> {
    fn write(&mut self, buf: &[u8]) -> IoResult<usize> {
        self.lock().write(buf)
    }

    fn flush(&mut self) -> IoResult<()> {
        self.lock().flush()
    }
}

impl<R: Read + Send> SequentialReader<crate::util::LeanReader<R>> {
    /// iac-code-agui patch: the bytes this reader holds unread, once it is its turn (taken now
    /// if the previous reader was given back); `None` while the previous one is still out.
    pub(crate) fn unread(&mut self) -> Option<usize> {
        if let SequentialReaderInner::Waiting(previous) = &self.inner {
            let reader = previous.try_recv().ok()?;
            self.inner = SequentialReaderInner::MyTurn(reader);
        }
        match &self.inner {
            SequentialReaderInner::MyTurn(reader) => Some(reader.buffered()),
            _ => None,
        }
    }
}

impl<R> Drop for SequentialReader<R>
where
    R: Read + Send,
{
    fn drop(&mut self) {
        let inner = mem::replace(&mut self.inner, SequentialReaderInner::Empty);

        match inner {
            SequentialReaderInner::MyTurn(reader) => {
                self.next.send(reader).ok();
            }
            SequentialReaderInner::Waiting(recv) => {
                if let Ok(reader) = recv.recv() {
                    self.next.send(reader).ok();
                }
            }
            SequentialReaderInner::Empty => (),
        }
    }
}

impl<W> Drop for SequentialWriter<W>
where
    W: Write + Send,
{
    fn drop(&mut self) {
        self.on_finish.send(()).ok();
        self.parking.finished();
    }
}
