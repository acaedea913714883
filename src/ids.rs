//! Identifiers, digests and clocks: the small pure helpers every other module uses.

use sha2::{Digest, Sha256};
use std::time::{SystemTime, UNIX_EPOCH};

pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Lower-case hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// The A2A context of an AG-UI thread: `agui-` + the first 40 hex digits of SHA-256(threadId),
/// the same derivation as the reference adapter (checked against its captures).
pub(crate) fn context_id(thread_id: &str) -> String {
    let mut hex = sha256_hex(thread_id.as_bytes());
    hex.truncate(40);
    format!("agui-{hex}")
}

/// Canonical digest of a JSON value: serde_json's map is ordered by key, so equal values serialize
/// to equal bytes.
pub(crate) fn json_digest(value: &serde_json::Value) -> String {
    sha256_hex(&serde_json::to_vec(value).unwrap_or_default())
}

/// A random (v4) UUID from the OS random source: `getrandom(2)`, one call and no descriptor
/// (each admission and each `CancelTask` takes ids; opening `/dev/urandom` for each was three
/// calls and a descriptor while the open-file limit is what bounds the held runs).
pub(crate) fn uuid_v4() -> String {
    let mut b = [0u8; 16];
    // SAFETY: fills our own 16-byte buffer.
    let filled = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if filled != b.len() as isize {
        // Never expected on Linux; still unique enough for ids (not for secrets).
        let seed = format!(
            "{:?}{}{:?}",
            SystemTime::now(),
            std::process::id(),
            std::thread::current().id()
        );
        b.copy_from_slice(&Sha256::digest(seed.as_bytes())[..16]);
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = hex(&b);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// RFC 3339 UTC time (`2026-08-27T03:00:00Z`) of a Unix time in milliseconds.
pub(crate) fn rfc3339(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil-from-days.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// RFC 3339 UTC time with milliseconds (`2026-08-27T03:00:00.250Z`): times that order events
/// within a second, such as a thread's activity.
pub(crate) fn rfc3339_millis(ms: u64) -> String {
    let whole = rfc3339(ms);
    format!("{}.{:03}Z", whole.trim_end_matches('Z'), ms % 1000)
}

/// The file name (without `.json`) of a thread's state, the same as the reference adapter's so an
/// operator can swap adapters and keep the state directory: a lower-case id of `[a-z0-9_.-]` is its
/// own key (except `.`, `..`, a trailing `.` and Windows device names); any other id becomes
/// `aguiid~<hex of its UTF-8>`, and when that is longer than 200 bytes, `aguihash~<SHA-256>`. No
/// key can contain a path separator or be `.`/`..`, and the three forms never collide.
///
/// The 200-byte cap also applies to a plain id (the reference does not cap it and fails with
/// ENAMETOOLONG from 251 characters on, so no reference state file can exist for such an id): any
/// threadId the spec allows gets a file name of at most 209 bytes with `.json`.
pub(crate) fn thread_key(thread_id: &str) -> String {
    if thread_id.len() <= MAX_KEY_STEM && is_plain_key(thread_id) {
        return thread_id.to_string();
    }
    let stem = format!("aguiid~{}", hex(thread_id.as_bytes()));
    if stem.len() <= MAX_KEY_STEM {
        stem
    } else {
        format!("aguihash~{}", sha256_hex(thread_id.as_bytes()))
    }
}

const MAX_KEY_STEM: usize = 200;

fn is_plain_key(id: &str) -> bool {
    const RESERVED: &[&str] = &["CON", "PRN", "AUX", "NUL"];
    let charset = !id.is_empty()
        && id.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'.' | b'-')
        });
    if !charset || id == "." || id == ".." || id.ends_with('.') {
        return false;
    }
    let base = id.split('.').next().unwrap_or("").to_ascii_uppercase();
    let device = RESERVED.contains(&base.as_str())
        || ((base.starts_with("COM") || base.starts_with("LPT"))
            && base.len() == 4
            && matches!(base.as_bytes()[3], b'1'..=b'9'));
    !device
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_id_matches_the_reference_captures() {
        assert_eq!(
            context_id("thread-tap-1"),
            "agui-58633450475f377504ca56b46b5a293d95591ee7"
        );
        assert_eq!(
            context_id("8473547e-c8ed-4aef-a84c-603a6a8d42da"),
            "agui-1770b0bf824e9baef15a0dd4d95308def8aad5a5"
        );
    }

    #[test]
    fn thread_keys_cannot_escape_the_directory() {
        assert_eq!(thread_key("8473547e-c8ed-4aef"), "8473547e-c8ed-4aef");
        assert_eq!(thread_key("thread-tap-1"), "thread-tap-1");
        assert_eq!(thread_key("Thread"), "aguiid~546872656164");
        for evil in [
            "..",
            ".",
            "../../etc/passwd",
            "a/b",
            "a\\b",
            "\0",
            "nul",
            "com1.txt",
            "x.",
        ] {
            let k = thread_key(evil);
            assert!(k.starts_with("aguiid~"), "{evil}: {k}");
            assert!(!k.contains('/') && !k.contains('\\') && !k.contains('.') && !k.contains('\0'));
        }
        let long = "X".repeat(100);
        assert_eq!(thread_key(&long).len(), "aguihash~".len() + 64);
        assert_ne!(thread_key(&long), thread_key(&"X".repeat(101)));
    }

    #[test]
    fn long_plain_ids_are_hashed_so_the_file_name_stays_valid() {
        assert_eq!(thread_key(&"a".repeat(200)), "a".repeat(200));
        for n in [201, 251, 300, 10_000] {
            let id = "a".repeat(n);
            let k = thread_key(&id);
            assert_eq!(k, format!("aguihash~{}", sha256_hex(id.as_bytes())), "{n}");
        }
        // The file can really be created (255-byte name limit) in the temp directory.
        let dir = std::env::temp_dir().join(format!("agui-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for id in ["a".repeat(251), "é".repeat(300), "x".repeat(99)] {
            let path = dir.join(format!("{}.json", thread_key(&id)));
            std::fs::write(&path, b"{}").unwrap();
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn rfc3339_millis_keeps_the_milliseconds() {
        assert_eq!(
            rfc3339_millis(1_787_799_600_250),
            "2026-08-27T03:00:00.250Z"
        );
        assert_eq!(rfc3339_millis(5), "1970-01-01T00:00:00.005Z");
    }

    #[test]
    fn rfc3339_formats_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_787_799_600_000), "2026-08-27T03:00:00Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn uuids_are_v4_and_distinct() {
        let (a, b) = (uuid_v4(), uuid_v4());
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
    }
}
