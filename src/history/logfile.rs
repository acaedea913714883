//! One thread's conversation log on disk: `<state-dir>/history/<thread key>.jsonl`, append-only
//! JSON lines. Line 1 is the header (`{"type":"thread","v":1,"threadId","title","createdAt"}`,
//! plus `seq`, the highest record number a compaction dropped or rewrote, so numbers are never
//! reused); every other line is one record with a per-thread `seq` (strictly increasing in the
//! file) and `at` (milliseconds). A line without its `\n` is a torn tail (a kill mid-`write()`):
//! readers ignore it and the next writer cuts it before it appends.
//!
//! Each batch of records is one `write()` of whole lines on an `O_APPEND` descriptor, so a
//! SIGKILL at any instant leaves every earlier line intact; `sync` (`fdatasync`) is called where
//! the thread's state file is saved. A compaction writes a new file beside it, syncs it and
//! renames it over the old one, so a reader sees one file or the other, never a mix.

use serde::Deserialize;
use serde_json::{json, Value};
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

const FILE_MODE: u32 = 0o600;
const DIR_MODE: u32 = 0o700;

/// A thread's log opened for appending, with what the writer needs to know without reading it
/// again: the next record number and how many records the file holds.
pub(crate) struct Log {
    path: PathBuf,
    file: File,
    pub(crate) next_seq: u64,
    pub(crate) records: usize,
    line: Vec<u8>,
}

/// One complete record line, as read back.
pub(crate) struct Record {
    pub(crate) seq: u64,
    pub(crate) at: u64,
    pub(crate) body: Value,
}

#[derive(Deserialize)]
struct SeqOnly {
    #[serde(default)]
    seq: u64,
}

/// The header line of a new log.
fn header(thread_id: &str, title: &str, created_ms: u64, seq: u64) -> Vec<u8> {
    let mut h = json!({"type": "thread", "v": 1, "threadId": thread_id, "title": title,
                       "createdAt": crate::ids::rfc3339(created_ms)});
    if seq > 0 {
        h["seq"] = json!(seq);
    }
    let mut line = serde_json::to_vec(&h).unwrap_or_default();
    line.push(b'\n');
    line
}

/// The title of a conversation: its first user message's text, trimmed to 80 characters.
pub(crate) fn title_of(text: &str) -> String {
    let t = text.trim();
    match t.char_indices().nth(80) {
        Some((at, _)) => t[..at].trim_end().to_string(),
        None => t.to_string(),
    }
}

impl Log {
    /// Opens the log, creating it with its header (and the directory) when it does not exist,
    /// and cuts a torn tail. Reads the file once (the writer's numbers), bounded by the cap.
    pub(crate) fn open(path: &Path, thread_id: &str, title: &str) -> io::Result<Log> {
        if let Some(dir) = path.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(DIR_MODE)
                .create(dir)?;
        }
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(FILE_MODE)
            .open(path)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let whole = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        let mut log = Log {
            path: path.to_path_buf(),
            file,
            next_seq: 1,
            records: 0,
            line: Vec::new(),
        };
        let first_end = bytes.iter().position(|&b| b == b'\n');
        let Some(first_end) = first_end else {
            // New, or killed before its header was whole: the header first.
            log.file.set_len(0)?;
            log.file
                .write_all(&header(thread_id, title, crate::ids::now_ms(), 0))?;
            return Ok(log);
        };
        if whole < bytes.len() {
            log::warn!(
                "conversation log {}: cutting a torn last line",
                path.display()
            );
            log.file.set_len(whole as u64)?;
        }
        let top = serde_json::from_slice::<SeqOnly>(&bytes[..first_end]).map_or(0, |h| h.seq);
        let mut max = top;
        for line in bytes[first_end + 1..whole].split(|&b| b == b'\n') {
            if let Ok(r) = serde_json::from_slice::<SeqOnly>(line) {
                max = max.max(r.seq);
                log.records += 1;
            }
        }
        log.next_seq = max + 1;
        Ok(log)
    }

    /// Appends records, each body the JSON of its fields after `seq` and `at` (no braces):
    /// all of them in one `write()` of whole lines.
    pub(crate) fn append<'b>(&mut self, bodies: impl Iterator<Item = &'b [u8]>) -> io::Result<()> {
        let at = crate::ids::now_ms();
        self.line.clear();
        let mut count = 0;
        for body in bodies {
            let _ = write!(
                self.line,
                "{{\"seq\":{},\"at\":{at},",
                self.next_seq + count as u64
            );
            self.line.extend_from_slice(body);
            self.line.extend_from_slice(b"}\n");
            count += 1;
        }
        if count == 0 {
            return Ok(());
        }
        self.file.write_all(&self.line)?;
        self.next_seq += count as u64;
        self.records += count;
        Ok(())
    }

    /// Makes what was appended durable (where the thread's state file is saved).
    pub(crate) fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    /// Replaces the file with `header` and `records` (sorted by `seq`), atomically: a new file
    /// beside it, synced, renamed over it. The numbers go on from where they were.
    pub(crate) fn rewrite(
        &mut self,
        head: &Value,
        records: &[(u64, u64, Value)],
    ) -> io::Result<()> {
        let tmp = self.path.with_extension("jsonl.tmp");
        let mut out = Vec::new();
        let created = head.get("createdAt").cloned().unwrap_or(Value::Null);
        let mut h = head.clone();
        h["seq"] = json!(self.next_seq - 1);
        h["createdAt"] = created;
        serde_json::to_writer(&mut out, &h)?;
        out.push(b'\n');
        for (seq, at, body) in records {
            let _ = write!(out, "{{\"seq\":{seq},\"at\":{at},\"message\":");
            serde_json::to_writer(&mut out, body)?;
            out.extend_from_slice(b"}\n");
        }
        {
            let mut f = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(FILE_MODE)
                .open(&tmp)?;
            f.write_all(&out)?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, &self.path)?;
        self.file = OpenOptions::new()
            .read(true)
            .append(true)
            .open(&self.path)?;
        self.records = records.len();
        Ok(())
    }
}

/// Reads a log: its header and every complete record line, in file order. `None` when there is
/// no log. A line that does not parse (never written by this adapter) is skipped.
pub(crate) fn read(path: &Path) -> io::Result<Option<(Value, Vec<Record>)>> {
    let mut file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut bytes = Vec::new();
    file.seek(SeekFrom::Start(0))?;
    file.read_to_end(&mut bytes)?;
    let whole = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let mut lines = bytes[..whole].split(|&b| b == b'\n');
    let Some(head) = lines.next().and_then(|l| serde_json::from_slice(l).ok()) else {
        return Ok(None);
    };
    let mut records = Vec::new();
    for line in lines.filter(|l| !l.is_empty()) {
        let Ok(Value::Object(mut obj)) = serde_json::from_slice::<Value>(line) else {
            continue;
        };
        let seq = obj.remove("seq").and_then(|v| v.as_u64()).unwrap_or(0);
        let at = obj.remove("at").and_then(|v| v.as_u64()).unwrap_or(0);
        records.push(Record {
            seq,
            at,
            body: Value::Object(obj),
        });
    }
    Ok(Some((head, records)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("iac-history-log-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir.join("history").join("t.jsonl")
    }

    #[test]
    fn a_torn_last_line_is_ignored_by_readers_and_cut_before_the_next_append() {
        let path = tmp("torn");
        let mut log = Log::open(&path, "t", "hello").unwrap();
        log.append([&b"\"message\":{\"id\":\"a\"}"[..]].into_iter())
            .unwrap();
        drop(log);
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"seq\":2,\"at\":1,\"message\":{\"id\":\"b")
            .unwrap();
        let (head, recs) = read(&path).unwrap().unwrap();
        assert_eq!(head["title"], "hello");
        assert_eq!(recs.len(), 1);
        let mut log = Log::open(&path, "t", "ignored").unwrap();
        assert_eq!((log.next_seq, log.records), (2, 1));
        log.append([&b"\"message\":{\"id\":\"c\"}"[..]].into_iter())
            .unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.ends_with("\"message\":{\"id\":\"c\"}}\n"), "{text}");
        assert!(!text.contains("\"b"), "{text}");
        let (_, recs) = read(&path).unwrap().unwrap();
        assert_eq!(recs.iter().map(|r| r.seq).collect::<Vec<_>>(), [1, 2]);
    }

    #[test]
    fn a_header_cut_by_a_kill_is_written_again() {
        let path = tmp("head");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, b"{\"type\":\"thr").unwrap();
        Log::open(&path, "t", "x").unwrap();
        let (head, recs) = read(&path).unwrap().unwrap();
        assert_eq!((head["threadId"].as_str(), recs.len()), (Some("t"), 0));
    }

    #[test]
    fn titles_are_the_first_80_characters_trimmed() {
        assert_eq!(title_of("  hi  "), "hi");
        let long = "é".repeat(100);
        assert_eq!(title_of(&long).chars().count(), 80);
    }
}
