//! The thread list's cursor: opaque to clients (base64url of a small JSON object), it carries the
//! listing's snapshot instant, the place of the last thread returned, and a digest of the user it
//! was issued for, so a cursor is never read against another user's list.

use super::index::CURSOR_TTL;
use crate::error::{Error, Msg};
use crate::ids;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::sync::Arc;

/// A thread's place in a listing: its newest activity as of the snapshot (newest first), then its
/// key.
pub(crate) type Place = (Reverse<u64>, Arc<str>);

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Cursor {
    /// The snapshot instant (ms) of the listing's first page.
    pub(crate) snapshot: u64,
    /// The last thread returned.
    pub(crate) place: Place,
}

/// The wire form. Short keys: the cursor travels in every "more" link.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    v: u8,
    s: u64,
    a: u64,
    k: String,
    u: String,
}

/// The part of a user id's digest a cursor carries.
fn user_tag(user: &str) -> String {
    ids::sha256_hex(user.as_bytes())[..16].to_string()
}

impl Cursor {
    pub(crate) fn encode(&self, user: &str) -> String {
        let wire = Wire {
            v: 1,
            s: self.snapshot,
            a: self.place.0 .0,
            k: self.place.1.to_string(),
            u: user_tag(user),
        };
        URL_SAFE_NO_PAD.encode(serde_json::to_vec(&wire).unwrap_or_default())
    }

    /// Reads a cursor `user` was given; 400 when it is not one of ours (or another user's), or
    /// when it is older than [`CURSOR_TTL`] (the listing must start again).
    pub(crate) fn decode(text: &str, user: &str, now: u64) -> Result<Cursor, Error> {
        let wire: Wire = URL_SAFE_NO_PAD
            .decode(text)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .filter(|w: &Wire| w.v == 1 && w.a <= w.s && w.u == user_tag(user))
            .ok_or_else(|| Msg::ThreadListCursorInvalid.err())?;
        if wire.s.saturating_add(CURSOR_TTL) < now {
            return Err(Msg::ThreadListCursorExpired.with(&[&(CURSOR_TTL / 60_000)]));
        }
        Ok(Cursor {
            snapshot: wire.s,
            place: (Reverse(wire.a), Arc::from(wire.k)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Code;

    fn cursor() -> Cursor {
        Cursor {
            snapshot: 5_000,
            place: (Reverse(4_000), Arc::from("t-1")),
        }
    }

    #[test]
    fn a_cursor_reads_back_for_its_user_only() {
        let text = cursor().encode("alice");
        assert!(text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        assert_eq!(Cursor::decode(&text, "alice", 6_000).unwrap(), cursor());
        let e = Cursor::decode(&text, "bob", 6_000).unwrap_err();
        assert_eq!(e.code, Code::InvalidInput);
    }

    #[test]
    fn a_bad_cursor_is_invalid_input() {
        let forged = URL_SAFE_NO_PAD.encode(br#"{"v":1,"s":1,"a":9,"k":"x","u":"y"}"#);
        for bad in ["", "!!", "bm90IGpzb24", forged.as_str()] {
            let e = Cursor::decode(bad, "alice", 6_000).unwrap_err();
            assert_eq!(e.code, Code::InvalidInput, "{bad}");
        }
    }

    #[test]
    fn an_old_cursor_is_refused_as_expired() {
        let text = cursor().encode("alice");
        let late = 5_000 + CURSOR_TTL + 1;
        let e = Cursor::decode(&text, "alice", late).unwrap_err();
        assert_eq!(e.code, Code::InvalidInput);
        assert!(e.to_string().contains("60"), "{e}");
        assert!(Cursor::decode(&text, "alice", late - 1).is_ok());
    }
}
