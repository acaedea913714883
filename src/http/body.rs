//! Reading a request body: its content type, its size limit and the deadline for the whole of it.

use super::header;
use crate::error::{Error, Msg};
use std::time::{Duration, Instant};
use tiny_http::Request;

/// The limit of a body that is not a run request (the cancel and subscribe extensions).
pub(super) const MAX_CANCEL_BODY: usize = 64 * 1024;
const READ_CHUNK: usize = 64 * 1024;

/// What becomes of the connection when a refusal is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Connection {
    /// tiny_http's rule: it discards the unread rest of the body, or closes the connection after
    /// the answer (closing at once would make a client still sending its body miss the answer in
    /// a reset).
    AsUsual,
    /// Nothing more is read from the client, and the connection is closed right after the
    /// answer: the client is too slow or its socket failed.
    CloseAtOnce,
}

/// A body that could not be read: the error to answer and what becomes of the connection.
#[derive(Debug)]
pub(super) struct BodyError {
    pub(super) error: Error,
    pub(super) connection: Connection,
}

pub(super) fn check_json_content_type(req: &Request) -> Result<(), Error> {
    let is_json = header(req, "Content-Type").is_some_and(|v| {
        v.split(';')
            .next()
            .unwrap_or("")
            .trim()
            .eq_ignore_ascii_case("application/json")
    });
    if is_json {
        return Ok(());
    }
    Err(Msg::UnsupportedMediaType.err())
}

/// Reads the body with a fixed buffer, at most `limit` bytes and within `deadline` in total. A
/// body over the limit is a 413 that leaves the connection to tiny_http; a deadline passed or a
/// failed socket closes it at once.
pub(super) fn read_body(
    req: &mut Request,
    limit: usize,
    deadline: Duration,
) -> Result<Vec<u8>, BodyError> {
    let too_large = || BodyError {
        error: Msg::BodyTooLarge.with(&[&limit]),
        connection: Connection::AsUsual,
    };
    if req.body_length().is_some_and(|n| n > limit) {
        return Err(too_large());
    }
    let started = Instant::now();
    let timed_out = || BodyError {
        error: Msg::BodyTimeout.with(&[&deadline.as_secs_f64()]),
        connection: Connection::CloseAtOnce,
    };
    let socket = req.socket();
    let mut body = Vec::with_capacity(req.body_length().unwrap_or(0).min(limit));
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        let left = deadline.saturating_sub(started.elapsed());
        if left.is_zero() {
            return Err(timed_out());
        }
        if let Some(s) = &socket {
            // Each read waits at most for what is left of the whole body's deadline.
            let _ = s.set_read_timeout(Some(left.max(Duration::from_millis(1))));
        }
        let n = match req.as_reader().read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(timed_out())
            }
            Err(_) => {
                return Err(BodyError {
                    error: Msg::BodyUnreadable.err(),
                    connection: Connection::CloseAtOnce,
                });
            }
        };
        if body.len() + n > limit {
            return Err(too_large());
        }
        body.extend_from_slice(&buf[..n]);
    }
    Ok(body)
}
