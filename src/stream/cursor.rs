//! SSE cursors (`id:` lines): `<epoch>.<execution tag>.<seq>`, opaque to clients. The epoch (start
//! time and a random part) differs at every start, so a cursor from before a restart is never
//! read as a position after it; the tag (a short hash of the execution id) keeps cursors of two
//! executions apart; `seq` comes from one process-wide counter, so it increases within every
//! execution and stream. A join's prelude (its snapshot of the turn so far) is numbered
//! `<epoch>.<tag>.<seq>.<k>`, its last frame plain `<epoch>.<tag>.<seq>`: the position it stands for.

use crate::sse;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

static SEQ: AtomicU64 = AtomicU64::new(0);

pub(crate) fn epoch() -> &'static str {
    static EPOCH: OnceLock<String> = OnceLock::new();
    EPOCH.get_or_init(|| format!("{:x}{}", crate::ids::now_ms(), &crate::ids::uuid_v4()[..6]))
}

/// The next position (never 0).
pub(crate) fn next_seq() -> u64 {
    SEQ.fetch_add(1, Ordering::Relaxed) + 1
}

/// The newest position handed out so far (a thread feed's "now").
pub(crate) fn current() -> u64 {
    SEQ.load(Ordering::Relaxed)
}

/// The short tag of an execution in its cursors.
pub(crate) fn tag(execution_id: &str) -> String {
    crate::ids::sha256_hex(execution_id.as_bytes())[..10].to_string()
}

pub(crate) fn format(tag: &str, seq: u64, sub: Option<usize>) -> String {
    let mut id = Vec::new();
    write_id(&mut id, tag, seq, sub);
    String::from_utf8(id).expect("cursors are ASCII")
}

/// Writes the cursor in place (the hot path: no `String` per frame).
fn write_id(out: &mut Vec<u8>, tag: &str, seq: u64, sub: Option<usize>) {
    out.extend_from_slice(epoch().as_bytes());
    out.push(b'.');
    out.extend_from_slice(tag.as_bytes());
    let _ = write!(out, ".{seq}");
    if let Some(k) = sub {
        let _ = write!(out, ".{k}");
    }
}

/// A cursor of this process: `(tag, seq)`. `None` for anything else (another start, a
/// join's prelude before its last frame, garbage), and for a position spelt otherwise than this
/// process writes it (`+7`, `07`): one position, one cursor (found by the `cursor` fuzz target).
pub(crate) fn parse(s: &str) -> Option<(String, u64)> {
    let mut parts = s.trim().split('.');
    let (e, tag, seq) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || e != epoch() {
        return None;
    }
    let canonical = seq.bytes().all(|b| b.is_ascii_digit()) && !seq.starts_with('0');
    Some((tag.to_string(), seq.parse().ok().filter(|_| canonical)?))
}

/// One SSE frame: `id:` then `data:`.
pub(crate) fn push_frame(
    out: &mut Vec<u8>,
    (tag, seq, sub): (&str, u64, Option<usize>),
    json: &[u8],
) {
    out.extend_from_slice(b"id: ");
    write_id(out, tag, seq, sub);
    out.push(b'\n');
    sse::push_data_frame(out, json);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_of_this_process_parses_and_any_other_does_not() {
        let id = format("abc", 42, None);
        assert_eq!(parse(&id), Some(("abc".into(), 42)));
        assert_eq!(parse(&format("abc", 42, Some(0))), None);
        let before_restart = id.replacen(epoch(), "0zz", 1);
        assert_eq!(parse(&before_restart), None);
        assert_eq!(parse("garbage"), None);
        assert!(next_seq() < next_seq());
    }

    #[test]
    fn a_position_spelt_another_way_is_not_a_cursor() {
        assert_eq!(parse(&format("abc", 8, None)), Some(("abc".into(), 8)));
        for seq in ["08", "+8", "0", " 8", "", "1e1"] {
            let id = format!("{}.abc.{seq}", epoch());
            assert_eq!(parse(&id), None, "{id:?}");
        }
        let padded = format!("  {}.abc.8\r\n", epoch());
        assert_eq!(parse(&padded), Some(("abc".into(), 8)));
    }
}
