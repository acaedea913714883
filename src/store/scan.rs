//! What the thread index reads from disk: the start-up scan of `threads/*.json` (in a background
//! thread, so start-up waits for none of it) and, lazily for a listed thread, the header line of
//! its conversation log `history/<key>.jsonl` (title and creation time).

use super::index::{Header, ThreadIndex};
use crate::ids;
use serde::Deserialize;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;

/// What the scan reads of a state file: its thread id and bound user, `Some(None)` for a file
/// bound to no user.
#[derive(Default)]
struct Binding {
    thread_id: Option<String>,
    user_id: Option<Option<String>>,
}

/// Fills a [`Binding`] from a state file's top-level object and stops the parse as soon as both
/// keys are read (with an error the caller ignores): they are among the first keys of every state
/// file (the reference's layout and ours), so the run digests after them are never parsed.
struct Visit<'a>(&'a mut Binding);

impl<'de> serde::de::Visitor<'de> for Visit<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a thread state document")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "threadId" => self.0.thread_id = Some(map.next_value()?),
                "userId" => self.0.user_id = Some(map.next_value()?),
                _ => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
            if self.0.thread_id.is_some() && self.0.user_id.is_some() {
                return Err(serde::de::Error::custom("read enough"));
            }
        }
        Ok(())
    }
}

/// The binding at the start of `bytes` (a whole file or its first bytes).
fn binding_of(bytes: &[u8]) -> Option<(String, Option<String>)> {
    let mut found = Binding::default();
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let _ = serde::Deserializer::deserialize_map(&mut de, Visit(&mut found));
    Some((found.thread_id?, found.user_id?))
}

/// How much of a state file is read first: its first keys, whatever its run digests.
const PREFIX: usize = 4096;

/// Files recorded into the index per lock, so live writes are never held up long.
const BATCH: usize = 256;

/// Scans `dir` (the state dir's `threads/`) in a thread of its own and marks `index` built when
/// done, whatever it found (a missing directory is an empty store).
pub(crate) fn scan_in_background(dir: std::path::PathBuf, index: Arc<ThreadIndex>) {
    let spawned = std::thread::Builder::new()
        .name("thread-index".into())
        .spawn({
            let (dir, index) = (dir.clone(), index.clone());
            move || {
                yield_to_requests();
                let started = std::time::Instant::now();
                let found = scan(&dir, &index, 0);
                index.mark_built();
                log::info!(
                    "thread index: {found} user-bound thread(s) in {:?}",
                    started.elapsed()
                );
            }
        });
    if let Err(e) = spawned {
        log::error!("cannot start the thread index scan ({e}); scanning now");
        scan(&dir, &index, 0);
        index.mark_built();
    }
}

/// Lowers this thread's CPU priority (nice 10): the scan starts the instant the adapter listens,
/// and on a small host it otherwise takes a core from the first requests (`benches/thread_list`:
/// `/health` answered 0.8 ms later with 10,000 threads on disk than with none). Nice 10, not
/// idle scheduling: on a host that is never idle the scan must still end within the 10 s a list
/// waits for it.
fn yield_to_requests() {
    // SAFETY: plain syscalls on the calling thread's own id; a failure only leaves the priority.
    unsafe {
        let tid = libc::gettid() as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, 10);
    }
}

/// Records the threads whose state file was written at or after `since` (ms), in a thread of
/// its own: after an upgrade, those the old process wrote while it drained.
pub(crate) fn rescan_in_background(dir: std::path::PathBuf, index: Arc<ThreadIndex>, since: u64) {
    let spawned = std::thread::Builder::new()
        .name("thread-index".into())
        .spawn(move || {
            yield_to_requests();
            let found = scan(&dir, &index, since);
            log::info!("thread index: {found} thread(s) written by the previous process added");
        });
    if let Err(e) = spawned {
        log::error!("cannot start the thread index rescan: {e}");
    }
}

/// Records every user-bound thread of `dir` written at or after `since` (ms); returns how many.
fn scan(dir: &Path, index: &ThreadIndex, since: u64) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut batch = Vec::with_capacity(BATCH);
    let mut found = 0;
    let mut buf = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(key) = name.to_str().and_then(|n| n.strip_suffix(".json")) else {
            continue;
        };
        if let Some((thread_id, user_id, stamp)) = read_binding(&entry.path(), &mut buf) {
            // A file copied under another thread's name is not that thread (`Store::load`).
            if ids::thread_key(&thread_id) == key && stamp >= since {
                batch.push((key.to_string(), thread_id, user_id, stamp));
            }
        }
        if batch.len() == BATCH {
            found += batch.len();
            index.add_found(std::mem::take(&mut batch));
        }
    }
    found += batch.len();
    index.add_found(batch);
    found
}

/// A state file's thread id, bound user and modification time (ms); `None` for a file without a
/// user (never listed) or one that does not read.
fn read_binding(path: &Path, buf: &mut Vec<u8>) -> Option<(String, String, u64)> {
    let mut file = std::fs::File::open(path).ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() {
        return None;
    }
    buf.clear();
    (&mut file).take(PREFIX as u64).read_to_end(buf).ok()?;
    let (thread_id, user_id) = match binding_of(buf) {
        Some(found) => found,
        // Keys in another order, or a very long `cwd`: the whole file.
        None if buf.len() == PREFIX => {
            file.read_to_end(buf).ok()?;
            binding_of(buf)?
        }
        None => return None,
    };
    let mtime_ms = meta.mtime().max(0) as u64 * 1000 + meta.mtime_nsec().max(0) as u64 / 1_000_000;
    Some((thread_id, user_id?, mtime_ms))
}

/// The header line written first in a conversation log.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct HeaderLine {
    #[serde(rename = "type")]
    kind: String,
    thread_id: String,
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    created_at: Option<String>,
}

/// The longest header line read: an 80-character title and a thread id, JSON-escaped.
const MAX_HEADER: u64 = 64 * 1024;

/// The header of `thread_id`'s conversation log at `path`; `None` while there is none (no log
/// yet, or its first line not complete).
pub(crate) fn read_header(path: &Path, thread_id: &str) -> Option<Header> {
    let file = std::fs::File::open(path).ok()?;
    let mut head = Vec::new();
    let mut reader = std::io::BufReader::with_capacity(4096, file.take(MAX_HEADER));
    std::io::BufRead::read_until(&mut reader, b'\n', &mut head).ok()?;
    // A line without its newline is torn (being written, or cut by a crash).
    if head.pop() != Some(b'\n') {
        return None;
    }
    let line: HeaderLine = serde_json::from_slice(&head).ok()?;
    (line.kind == "thread" && line.thread_id == thread_id).then_some(Header {
        title: line.title,
        created_at: line.created_at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("agui-scan-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn the_header_line_gives_title_and_creation_time_once_complete() {
        let dir = tmp("header");
        let path = dir.join("t.jsonl");
        assert_eq!(read_header(&path, "t"), None, "no log yet");
        let line = r#"{"type":"thread","v":1,"threadId":"t","title":"Deploy a VPC","createdAt":"2026-12-04T12:00:00.000Z"}"#;
        std::fs::write(&path, line).unwrap();
        assert_eq!(read_header(&path, "t"), None, "a torn first line");
        std::fs::write(&path, format!("{line}\n{{\"seq\":1}}\n")).unwrap();
        let header = read_header(&path, "t").unwrap();
        assert_eq!(header.title.as_deref(), Some("Deploy a VPC"));
        assert_eq!(
            header.created_at.as_deref(),
            Some("2026-12-04T12:00:00.000Z")
        );
        assert_eq!(read_header(&path, "other"), None, "another thread's log");
        std::fs::write(&path, "{\"seq\":1}\n").unwrap();
        assert_eq!(read_header(&path, "t"), None, "no header first");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_scan_finds_user_bound_threads_under_their_own_key_only() {
        let dir = tmp("scan");
        let doc = |t: &str, u: &str| {
            format!(
                r#"{{"schemaVersion":1,"threadId":"{t}","contextId":"c","cwd":"/w","userId":{u},"iacCodeSessionId":null,"execution":null,"runDigests":{{}}}}"#
            )
        };
        std::fs::write(dir.join("a.json"), doc("a", "\"alice\"")).unwrap();
        std::fs::write(dir.join("b.json"), doc("b", "null")).unwrap();
        std::fs::write(dir.join("c.json"), doc("a", "\"alice\"")).unwrap();
        std::fs::write(dir.join("d.json"), "not json").unwrap();
        // Keys in another order, the binding after the first 4 KiB.
        let late = format!(
            r#"{{"pad":"{}","userId":"alice","threadId":"f"}}"#,
            "x".repeat(PREFIX)
        );
        std::fs::write(dir.join("f.json"), late).unwrap();
        std::fs::write(dir.join(".atomicwrite-tmp"), doc("e", "\"alice\"")).unwrap();
        let index = ThreadIndex::default();
        assert_eq!(scan(&dir, &index, 0), 2);
        let page = index.page("alice", None, 10);
        let listed: Vec<&str> = page.rows.iter().map(|r| r.thread_id.as_str()).collect();
        assert_eq!(listed.len(), 2);
        assert!(listed.contains(&"a") && listed.contains(&"f"), "{listed:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
