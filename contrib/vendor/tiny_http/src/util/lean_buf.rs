//! iac-code-agui patch: a connection's read and write buffers, held only while they hold bytes.
//!
//! `BufReader` and `BufWriter` keep their buffer for the connection's whole life. A server of long
//! responses (SSE) keeps many connections open whose buffers sit empty: the request was read,
//! the response goes out through the socket. These hold theirs only while bytes are in them: the
//! read buffer is freed once everything read into it was taken, the write buffer once flushed
//! (a connection between requests, or parked, holds none). One allocation per fill or flush.

use std::io::{Read, Result as IoResult, Write};

/// Like `BufReader`: reads smaller than `cap` go through a buffer of `cap` bytes, freed when empty.
pub struct LeanReader<R> {
    inner: R,
    cap: usize,
    buf: Vec<u8>,
    pos: usize,
}

impl<R> LeanReader<R> {
    pub fn with_capacity(cap: usize, inner: R) -> LeanReader<R> {
        LeanReader {
            inner,
            cap,
            buf: Vec::new(),
            pos: 0,
        }
    }

    pub fn get_ref(&self) -> &R {
        &self.inner
    }

    /// The bytes read from the source and not yet taken.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.pos
    }
}

impl<R: Read> Read for LeanReader<R> {
    fn read(&mut self, out: &mut [u8]) -> IoResult<usize> {
        if self.buffered() == 0 {
            if out.len() >= self.cap {
                return self.inner.read(out);
            }
            self.buf.resize(self.cap, 0);
            let n = match self.inner.read(&mut self.buf) {
                Ok(n) => n,
                Err(e) => {
                    self.buf = Vec::new();
                    return Err(e);
                }
            };
            self.buf.truncate(n);
            self.pos = 0;
        }
        let n = out.len().min(self.buffered());
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        if self.buffered() == 0 {
            self.buf = Vec::new();
            self.pos = 0;
        }
        Ok(n)
    }
}

/// Like `BufWriter`: writes smaller than `cap` gather in a buffer, freed once flushed.
pub struct LeanWriter<W: Write> {
    inner: W,
    cap: usize,
    buf: Vec<u8>,
}

impl<W: Write> LeanWriter<W> {
    pub fn with_capacity(cap: usize, inner: W) -> LeanWriter<W> {
        LeanWriter {
            inner,
            cap,
            buf: Vec::new(),
        }
    }

    pub fn get_ref(&self) -> &W {
        &self.inner
    }

    /// Writes out what is gathered (kept on an error, as `BufWriter` keeps it), then frees it.
    fn flush_buf(&mut self) -> IoResult<()> {
        let mut written = 0;
        let mut result = Ok(());
        while written < self.buf.len() {
            match self.inner.write(&self.buf[written..]) {
                Ok(0) => {
                    result = Err(std::io::ErrorKind::WriteZero.into());
                    break;
                }
                Ok(n) => written += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        self.buf.drain(..written);
        if self.buf.is_empty() {
            self.buf = Vec::new();
        }
        result
    }
}

impl<W: Write> Write for LeanWriter<W> {
    fn write(&mut self, data: &[u8]) -> IoResult<usize> {
        if self.buf.len() + data.len() > self.cap {
            self.flush_buf()?;
        }
        if data.len() >= self.cap {
            return self.inner.write(data);
        }
        if self.buf.capacity() == 0 {
            self.buf.reserve_exact(self.cap);
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> IoResult<()> {
        self.flush_buf()?;
        self.inner.flush()
    }
}

impl<W: Write> Drop for LeanWriter<W> {
    fn drop(&mut self) {
        // As `BufWriter`: what is gathered goes out, an error is ignored.
        let _ = self.flush_buf();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_reads_are_buffered_and_the_buffer_is_freed_when_taken() {
        let mut r = LeanReader::with_capacity(8, &b"hello world"[..]);
        let mut b = [0u8; 3];
        assert_eq!(r.read(&mut b).unwrap(), 3);
        assert_eq!(&b, b"hel");
        assert_eq!(r.buffered(), 5);
        let mut rest = Vec::new();
        r.read_to_end(&mut rest).unwrap();
        assert_eq!(rest, b"lo world");
        assert_eq!(r.buf.capacity(), 0);
    }

    #[test]
    fn small_writes_gather_until_flushed_and_the_buffer_is_freed() {
        let mut w = LeanWriter::with_capacity(8, Vec::new());
        w.write_all(b"ab").unwrap();
        w.write_all(b"cd").unwrap();
        assert!(w.get_ref().is_empty());
        w.write_all(b"efghij").unwrap();
        assert_eq!(w.get_ref(), b"abcd");
        w.write_all(b"0123456789").unwrap();
        assert_eq!(w.get_ref(), b"abcdefghij0123456789");
        w.write_all(b"x").unwrap();
        w.flush().unwrap();
        assert_eq!(w.get_ref(), b"abcdefghij0123456789x");
        assert_eq!(w.buf.capacity(), 0);
    }
}
