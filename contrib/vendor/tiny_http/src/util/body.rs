//! iac-code-agui patch: the reader of a request body, and what happens to the part of it the
//! application did not read (see PATCHES.md). Replaces `EqualReader` and `FusedReader`.

use std::io::{Read, Result as IoResult};

/// At most this much of an unread body is skipped to keep the connection; beyond it the connection
/// is closed instead (Go's net/http makes the same trade at 256 KiB).
pub(crate) const MAX_DISCARD: u64 = 64 * 1024;

/// A request body. Once its end is reached the inner reader is dropped at once, which hands the
/// connection to the next request (pipelining).
pub(crate) struct Body {
    inner: Option<Box<dyn Read + Send + 'static>>,
    /// Bytes not read yet of a `Content-Length` body; `None` when the end is not known in advance
    /// (chunked, or the raw stream of an upgrade request).
    left: Option<u64>,
    /// True when the whole body was read from the socket in advance (small bodies).
    buffered: bool,
}

/// What must happen to the part of a body the application did not read.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Rest {
    /// Nothing is left on the connection.
    Nothing,
    /// This many bytes are to be skipped before the next request head.
    Skip(u64),
    /// The connection cannot carry another request: too much or an unknown amount is left, or the
    /// client waits for `100 Continue` and will send nothing.
    Close,
}

impl Body {
    pub(crate) fn empty() -> Body {
        Body {
            inner: None,
            left: Some(0),
            buffered: true,
        }
    }

    /// A body already read from the socket.
    pub(crate) fn buffered(data: Vec<u8>) -> Body {
        let len = data.len() as u64;
        Body {
            buffered: true,
            ..Body::sized(std::io::Cursor::new(data), len)
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
            buffered: false,
        }
    }

    /// A body whose end the reader itself finds (chunked decoder, upgrade stream).
    pub(crate) fn until_end<R: Read + Send + 'static>(reader: R) -> Body {
        Body {
            inner: Some(Box::new(reader)),
            left: None,
            buffered: false,
        }
    }

    /// What is left on the connection of this body if it is dropped now. `may_read` is false when
    /// the client still waits for `100 Continue`. Nothing is read here: skipping is left to the
    /// connection's own thread, so that a client slow to send a body never holds the application's.
    pub(crate) fn rest(&self, may_read: bool) -> Rest {
        match (&self.inner, self.left) {
            (None, _) => Rest::Nothing,
            (Some(_), _) if self.buffered => Rest::Nothing,
            (Some(_), Some(left)) if may_read && left <= MAX_DISCARD => Rest::Skip(left),
            _ => Rest::Close,
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
        assert_eq!(body.rest(true), Rest::Nothing);
    }

    #[test]
    fn small_rest_is_to_be_skipped() {
        let src = shared("hello world");
        let mut body = Body::sized(src.clone(), 5);
        let mut one = [0u8];
        body.read_exact(&mut one).unwrap();
        assert_eq!(body.rest(true), Rest::Skip(4));
        assert_eq!(
            Body::sized(src, MAX_DISCARD).rest(true),
            Rest::Skip(MAX_DISCARD)
        );
    }

    #[test]
    fn huge_length_is_not_allocated_nor_drained() {
        // upstream issue #252: dropping such a body allocated `vec![0; remaining]`
        for len in [
            MAX_DISCARD + 1,
            100_000_000_000u64,
            i64::MAX as u64,
            u64::MAX,
        ] {
            let src = shared("abc");
            let body = Body::sized(src.clone(), len);
            assert_eq!(body.rest(true), Rest::Close);
            drop(body);
            assert_eq!(rest(&src), "abc", "nothing read for {len}");
        }
    }

    #[test]
    fn buffered_rest_is_nothing() {
        let body = Body::buffered(b"hello".to_vec());
        assert_eq!(body.rest(true), Rest::Nothing);
    }

    #[test]
    fn not_skipped_while_client_waits_for_continue() {
        assert_eq!(Body::sized(shared("hello"), 5).rest(false), Rest::Close);
    }

    #[test]
    fn unsized_rest_means_close() {
        let body = Body::until_end(chunked_transfer::Decoder::new(shared(
            "5\r\nhello\r\n0\r\n\r\n",
        )));
        assert_eq!(body.rest(true), Rest::Close);
    }

    #[test]
    fn unsized_body_read_to_the_end_is_finished() {
        let mut body = Body::until_end(chunked_transfer::Decoder::new(shared(
            "5\r\nhello\r\n0\r\n\r\n",
        )));
        let mut out = String::new();
        body.read_to_string(&mut out).unwrap();
        assert_eq!(out, "hello");
        assert_eq!(body.rest(true), Rest::Nothing);
    }
}
