//! iac-code-agui patch: the reader of a request body, and what happens to the part of it the
//! application did not read (see PATCHES.md). Replaces `EqualReader` and `FusedReader`.

use std::io::{ErrorKind, Read, Result as IoResult};

/// At most this much of an unread body is read and thrown away to keep the connection; beyond it
/// the connection is closed instead (nginx's `lingering` logic and h11 make the same trade).
pub(crate) const MAX_DISCARD: u64 = 64 * 1024;

/// A request body. Once its end is reached the inner reader is dropped at once, which hands the
/// connection to the next request (pipelining).
pub(crate) struct Body {
    inner: Option<Box<dyn Read + Send + 'static>>,
    /// Bytes not read yet of a `Content-Length` body; `None` when the end is not known in advance
    /// (chunked, or the raw stream of an upgrade request).
    left: Option<u64>,
}

impl Body {
    pub(crate) fn empty() -> Body {
        Body {
            inner: None,
            left: Some(0),
        }
    }

    /// A body of exactly `len` bytes (never allocates in proportion to `len`).
    pub(crate) fn sized<R: Read + Send + 'static>(reader: R, len: u64) -> Body {
        if len == 0 {
            return Body::empty();
        }
        Body {
            inner: Some(Box::new(reader)),
            left: Some(len),
        }
    }

    /// A body whose end the reader itself finds (chunked decoder, upgrade stream).
    pub(crate) fn until_end<R: Read + Send + 'static>(reader: R) -> Body {
        Body {
            inner: Some(Box::new(reader)),
            left: None,
        }
    }

    /// True if the rest of the body can be skipped without waiting on the client for long:
    /// nothing is left, or a known, small rest that the client is already sending (`may_read`
    /// false when the client still waits for `100 Continue` and will send nothing).
    pub(crate) fn skippable(&self, may_read: bool) -> bool {
        match (&self.inner, self.left) {
            (None, _) => true,
            (Some(_), Some(left)) => may_read && left <= MAX_DISCARD,
            (Some(_), None) => false,
        }
    }

    /// Reads and drops the rest of the body with a fixed buffer. Returns false when the
    /// connection cannot carry another request (the rest was too long, unknown, or failed).
    pub(crate) fn discard(&mut self, may_read: bool) -> bool {
        if !self.skippable(may_read) {
            return false;
        }
        let mut buf = [0u8; 8192];
        loop {
            match self.read(&mut buf) {
                Ok(0) => return !matches!(self.left, Some(l) if l > 0),
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
    }
}

impl Read for Body {
    fn read(&mut self, buf: &mut [u8]) -> IoResult<usize> {
        let inner = match self.inner.as_mut() {
            Some(inner) => inner,
            None => return Ok(0),
        };
        let buf = match self.left {
            // `min` in u64 first: `left` may exceed usize on 32-bit targets
            Some(left) => {
                let n = (buf.len() as u64).min(left) as usize;
                &mut buf[..n]
            }
            None => buf,
        };
        if buf.is_empty() {
            return Ok(0);
        }
        let n = inner.read(buf)?;
        if n == 0 {
            // end of the stream (for a sized body: the client closed early; `left` stays > 0)
            self.inner = None;
            return Ok(0);
        }
        if let Some(left) = self.left.as_mut() {
            *left -= n as u64;
            if *left == 0 {
                self.inner = None;
            }
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;
    use std::sync::{Arc, Mutex};

    /// A reader over shared bytes, to see what a body left for the next request.
    #[derive(Clone)]
    struct Shared(Arc<Mutex<Cursor<Vec<u8>>>>);
    impl Read for Shared {
        fn read(&mut self, buf: &mut [u8]) -> IoResult<usize> {
            self.0.lock().unwrap().read(buf)
        }
    }
    fn shared(s: &str) -> Shared {
        Shared(Arc::new(Mutex::new(Cursor::new(s.as_bytes().to_vec()))))
    }
    fn rest(s: &Shared) -> String {
        let mut out = String::new();
        s.clone().read_to_string(&mut out).unwrap();
        out
    }

    #[test]
    fn reads_exactly_its_length() {
        let src = shared("hello world");
        let mut body = Body::sized(src.clone(), 5);
        let mut out = String::new();
        body.read_to_string(&mut out).unwrap();
        assert_eq!(out, "hello");
        assert_eq!(rest(&src), " world");
    }

    #[test]
    fn small_rest_is_discarded() {
        let src = shared("hello world");
        let mut body = Body::sized(src.clone(), 5);
        let mut one = [0u8];
        body.read_exact(&mut one).unwrap();
        assert!(body.discard(true));
        assert_eq!(rest(&src), " world");
    }

    #[test]
    fn huge_length_is_not_allocated_nor_drained() {
        // upstream issue #252: dropping such a body allocated `vec![0; remaining]`
        for len in [100_000_000_000u64, i64::MAX as u64, u64::MAX] {
            let src = shared("abc");
            let mut body = Body::sized(src.clone(), len);
            assert!(!body.skippable(true));
            assert!(!body.discard(true));
            assert_eq!(rest(&src), "abc", "nothing read for {len}");
        }
    }

    #[test]
    fn early_eof_means_no_reuse() {
        let mut body = Body::sized(shared("abc"), 10);
        assert!(!body.discard(true));
    }

    #[test]
    fn not_read_while_client_waits_for_continue() {
        let src = shared("hello");
        let mut body = Body::sized(src.clone(), 5);
        assert!(!body.discard(false));
        assert_eq!(rest(&src), "hello");
    }

    #[test]
    fn unsized_rest_is_never_drained() {
        let src = shared("5\r\nhello\r\n0\r\n\r\n");
        let mut body = Body::until_end(chunked_transfer::Decoder::new(src.clone()));
        assert!(!body.discard(true));
        assert_eq!(rest(&src), "5\r\nhello\r\n0\r\n\r\n");
    }

    #[test]
    fn unsized_body_read_to_the_end_is_finished() {
        let mut body = Body::until_end(chunked_transfer::Decoder::new(shared(
            "5\r\nhello\r\n0\r\n\r\n",
        )));
        let mut out = String::new();
        body.read_to_string(&mut out).unwrap();
        assert_eq!(out, "hello");
        assert!(body.discard(true));
    }
}
