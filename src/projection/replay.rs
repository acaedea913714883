//! Replay trimming. After a resume the kernel may stream a message again from its start; the
//! earlier runs recorded a SHA-256 of the text each message had sent (never the text itself), so
//! the first text of each message loses the longest prefix with a recorded digest.

use sha2::{Digest, Sha256};
use std::collections::{BTreeSet, HashMap, HashSet};

#[derive(Default)]
pub(super) struct Replay {
    /// Digests recorded by earlier runs of the execution (`Durable::text_digests`).
    recorded: BTreeSet<String>,
    /// Messages whose first text was already checked against `recorded`.
    checked: HashSet<String>,
    /// A running digest of the text each message sent in this run.
    sent: HashMap<String, Sha256>,
}

impl Replay {
    /// Trims against the digests earlier runs of the execution recorded.
    pub(super) fn after(recorded: BTreeSet<String>) -> Replay {
        Replay {
            recorded,
            ..Replay::default()
        }
    }

    /// The part of `text` that was not sent before (`None`: all of it was), added to this run's
    /// digest of message `id`.
    pub(super) fn fresh<'t>(&mut self, id: &str, text: &'t str) -> Option<&'t str> {
        let text = self.trim(id, text)?;
        match self.sent.get_mut(id) {
            Some(hasher) => hasher.update(text.as_bytes()),
            None => {
                self.sent
                    .insert(id.to_string(), Sha256::new_with_prefix(text.as_bytes()));
            }
        }
        Some(text)
    }

    /// The digests to persist: the recorded ones and this run's.
    pub(super) fn digests(&self) -> BTreeSet<String> {
        let mut digests = self.recorded.clone();
        for hasher in self.sent.values() {
            digests.insert(crate::ids::hex(&hasher.clone().finalize()));
        }
        digests
    }

    /// Only a message's first text can be a replay; it loses its longest recorded prefix.
    fn trim<'t>(&mut self, id: &str, text: &'t str) -> Option<&'t str> {
        if self.recorded.is_empty() || !self.checked.insert(id.to_string()) {
            return Some(text);
        }
        match longest_recorded_prefix(text, &self.recorded) {
            Some(i) if i == text.len() => None,
            Some(i) => Some(&text[i..]),
            None => Some(text),
        }
    }
}

/// The end of the longest non-empty prefix of `text` (on a char boundary) whose SHA-256 hex is in
/// `digests`. One running hash over the text: each boundary costs a clone and a final block, so the
/// whole check is linear in the text (hashing every prefix from scratch was quadratic).
fn longest_recorded_prefix(text: &str, digests: &BTreeSet<String>) -> Option<usize> {
    let wanted: HashSet<[u8; 32]> = digests.iter().filter_map(|d| unhex32(d)).collect();
    if wanted.is_empty() {
        return None;
    }
    let mut hasher = Sha256::new();
    let mut found = None;
    let mut start = 0;
    for end in text
        .char_indices()
        .map(|(i, _)| i)
        .skip(1)
        .chain([text.len()])
        .filter(|&end| end > 0)
    {
        hasher.update(&text.as_bytes()[start..end]);
        start = end;
        let digest: [u8; 32] = hasher.clone().finalize().into();
        if wanted.contains(&digest) {
            found = Some(end);
        }
    }
    found
}

/// A 64-digit hex digest as bytes; anything else is `None` (a corrupt digest is never matched).
fn unhex32(hex: &str) -> Option<[u8; 32]> {
    let bytes = hex.as_bytes();
    if bytes.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (o, pair) in out.iter_mut().zip(bytes.chunks(2)) {
        let s = std::str::from_utf8(pair).ok()?;
        *o = u8::from_str_radix(s, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::sha256_hex;

    #[test]
    fn replay_prefix_check_is_linear_and_matches_the_naive_rule() {
        let text = "héllo wörld ".repeat(2_000);
        let cut = text.char_indices().nth(17_000).unwrap().0;
        let digests: BTreeSet<String> = [
            sha256_hex(&text.as_bytes()[..cut]),
            sha256_hex(b"h"),
            sha256_hex(b""),
            "not hex".to_string(),
        ]
        .into();
        assert_eq!(longest_recorded_prefix(&text, &digests), Some(cut));
        assert_eq!(longest_recorded_prefix("", &digests), None);
        assert_eq!(longest_recorded_prefix("x", &digests), None);
        let whole: BTreeSet<String> = [sha256_hex("é".as_bytes())].into();
        assert_eq!(longest_recorded_prefix("é", &whole), Some(2));
    }
}
