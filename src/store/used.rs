//! `usedRunIds`: every run id a thread used beyond the newest [`MAX_RUN_DIGESTS`] kept whole in
//! `runDigests`, so that a used run id is never usable again (the spec), in a compact, bounded
//! form: one 16-byte record per run, SHA-256(runId)[..8] then SHA-256(request digest)[..8] (the
//! second half tells a retry, `DUPLICATE_RUN_ID`, from another request, `RUN_ID_CONFLICT`), oldest
//! first, the records back to back as one standard base64 string.
//!
//! A new run id falsely taken for a used one needs a 64-bit hash collision with one of at most
//! [`MAX_USED_RUN_IDS`] records: a chance below 2 × 10⁻¹⁵ per run. The cap (32,768 records,
//! 512 KiB, 683 KiB as base64, reached after 33,024 runs on one thread) is far beyond any real
//! thread (a turn takes seconds to minutes of model time); past it the oldest records go first.
//! The reference ignores the key when it loads a file (`_restore_thread_state` reads only the
//! keys it knows) and leaves it out when it writes one (it keeps every run in `runDigests`
//! instead, unbounded), so a file moved back and forth stays loadable by both.
//!
//! [`MAX_RUN_DIGESTS`]: super::doc::MAX_RUN_DIGESTS

use base64::Engine;
use sha2::{Digest, Sha256};

/// How many evicted runs a thread remembers.
pub(crate) const MAX_USED_RUN_IDS: usize = 32_768;

const RECORD: usize = 16;
const HALF: usize = RECORD / 2;

#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct UsedRunIds(Vec<u8>);

/// What a run id's record says about a new request with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seen {
    /// The same request again (a retry).
    Same,
    /// Another request under a used run id.
    Other,
}

fn half(text: &str) -> [u8; HALF] {
    let hash = Sha256::digest(text.as_bytes());
    let mut out = [0u8; HALF];
    out.copy_from_slice(&hash[..HALF]);
    out
}

impl UsedRunIds {
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len() / RECORD
    }

    /// Remembers a run evicted from `runDigests`, dropping the oldest beyond the cap.
    pub(crate) fn push(&mut self, run_id: &str, digest: &str) {
        self.0.extend_from_slice(&half(run_id));
        self.0.extend_from_slice(&half(digest));
        let excess = self.len().saturating_sub(MAX_USED_RUN_IDS);
        self.0.drain(..excess * RECORD);
    }

    /// Whether `run_id` was used, and with this request (`digest`) or another.
    pub(crate) fn seen(&self, run_id: &str, digest: &str) -> Option<Seen> {
        let id = half(run_id);
        let record = self
            .0
            .chunks_exact(RECORD)
            .rev()
            .find(|r| r[..HALF] == id)?;
        Some(if record[HALF..] == half(digest) {
            Seen::Same
        } else {
            Seen::Other
        })
    }
}

impl serde::Serialize for UsedRunIds {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(&self.0))
    }
}

impl<'de> serde::Deserialize<'de> for UsedRunIds {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text.as_bytes())
            .map_err(|_| D::Error::custom("usedRunIds is not base64"))?;
        if bytes.len() % RECORD != 0 {
            return Err(D::Error::custom("usedRunIds is not whole records"));
        }
        Ok(UsedRunIds(bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_tell_a_retry_from_another_request_and_the_oldest_go_past_the_cap() {
        let mut used = UsedRunIds::default();
        used.push("run-1", "digest-1");
        assert_eq!(used.seen("run-1", "digest-1"), Some(Seen::Same));
        assert_eq!(used.seen("run-1", "digest-2"), Some(Seen::Other));
        assert_eq!(used.seen("run-2", "digest-1"), None);
        for i in 0..MAX_USED_RUN_IDS {
            used.push(&format!("r{i}"), "d");
        }
        assert_eq!(used.len(), MAX_USED_RUN_IDS);
        assert_eq!(
            used.seen("run-1", "digest-1"),
            None,
            "the oldest went first"
        );
        assert_eq!(used.seen("r0", "d"), Some(Seen::Same));
        let text = serde_json::to_string(&used).unwrap();
        assert_eq!(text.len(), 2 + (MAX_USED_RUN_IDS * RECORD).div_ceil(3) * 4);
        let back: UsedRunIds = serde_json::from_str(&text).unwrap();
        assert_eq!(back, used);
        assert!(serde_json::from_str::<UsedRunIds>("\"AAAA\"").is_err());
        assert!(serde_json::from_str::<UsedRunIds>("\"!!\"").is_err());
    }
}
