//! Atomic replacement of one state file, as the reference's `atomic_write_json` does it
//! (contract/reference-behaviour.md 6.3): a temporary file `.<name>.<unique>.tmp` in the same
//! directory, made owner-only before any byte is in it, written, fsynced, renamed over the
//! document, then the directory fsynced. A crash at any instant leaves the old document or the
//! new one, never a torn one (at worst a stray `.tmp` file, which no reader takes for a document:
//! they read `*.json` only).
//!
//! Two fsyncs and one descriptor at a time (the file's, closed before the directory's is
//! opened). The `atomicwrites` crate this replaces made a temporary directory per write (a
//! mkdir, an rmdir, a third fsync, two more descriptors held at once), which at a thousand
//! admissions a second was a third of the disk's work and the admission burst's spare
//! descriptors.
//!
//! [`replace_unsynced`] skips the directory's fsync and syncs only the temporary file's data
//! (`fdatasync`), for the one write whose loss is repaired as a crash's is (the end of a run
//! whose client left): readers still see the old document or the whole new one, and so does the
//! host after a crash, which may take the rename back but never leaves the document empty (a
//! rename of a file whose data is not on disk can, on XFS or an ext4 without its journal).

use std::fs::{File, OpenOptions, Permissions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

/// Makes each temporary name unique within the process (the pid makes it unique beside an
/// upgrade's other process).
static NEXT_TMP: AtomicU64 = AtomicU64::new(0);

/// Whether a replacement waits for the disk.
#[derive(Clone, Copy, PartialEq)]
enum Durability {
    /// The file and the directory fsynced: the new document survives a crash of the host.
    Synced,
    /// The file's data synced, the rename not: every reader sees the old document or the whole
    /// new one, and a crash of the host (not of the process) within the kernel's writeback
    /// delay may leave the old one, never an empty one. One flush, not two.
    Unsynced,
}

/// Replaces `dir/name` with `bytes`, mode `mode`, modification time `modified`, durably.
pub(super) fn replace(
    dir: &Path,
    name: &str,
    bytes: &[u8],
    mode: u32,
    modified: SystemTime,
) -> std::io::Result<()> {
    replace_as(dir, name, bytes, mode, modified, Durability::Synced)
}

/// [`replace`] without the directory's fsync (the temporary file's data is synced, so that a
/// host crash leaves the old document or the new one, never an empty one): for a write whose
/// loss is repaired as a crash's is (the end of a run whose client left,
/// `Store::save_unsynced`).
pub(super) fn replace_unsynced(
    dir: &Path,
    name: &str,
    bytes: &[u8],
    mode: u32,
    modified: SystemTime,
) -> std::io::Result<()> {
    replace_as(dir, name, bytes, mode, modified, Durability::Unsynced)
}

fn replace_as(
    dir: &Path,
    name: &str,
    bytes: &[u8],
    mode: u32,
    modified: SystemTime,
    durability: Durability,
) -> std::io::Result<()> {
    let n = NEXT_TMP.fetch_add(1, Ordering::Relaxed);
    let tmp = dir.join(format!(".{name}.{}-{n}.tmp", std::process::id()));
    let written = write_tmp(&tmp, bytes, mode, modified, durability)
        .and_then(|()| std::fs::rename(&tmp, dir.join(name)));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written?;
    if durability == Durability::Unsynced {
        return Ok(());
    }
    // The rename is durable once the directory is.
    File::open(dir)?.sync_all()
}

fn write_tmp(
    tmp: &Path,
    bytes: &[u8],
    mode: u32,
    modified: SystemTime,
    durability: Durability,
) -> std::io::Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(tmp)?;
    // The creation mode passes through the umask: set it exactly, still before any byte.
    f.set_permissions(Permissions::from_mode(mode))?;
    f.write_all(bytes)?;
    f.set_modified(modified)?;
    match durability {
        Durability::Synced => f.sync_all(),
        // The data, before the rename can reach the disk: a renamed file whose blocks were
        // never written reads back empty after a crash, and an unreadable state file would fail
        // every request of its thread.
        Durability::Unsynced => f.sync_data(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn names_in(dir: &Path) -> Vec<String> {
        let entries = std::fs::read_dir(dir).unwrap();
        entries
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    }

    /// An empty directory of this test process's own.
    fn fresh_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// `t.json` holds `bytes`, owner-only, modified at `at`, alone in `dir` (then removed).
    fn assert_only_the_document(dir: &Path, bytes: &[u8], at: SystemTime) {
        let path = dir.join("t.json");
        assert_eq!(std::fs::read(&path).unwrap(), bytes);
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(meta.modified().unwrap(), at);
        assert_eq!(names_in(dir), ["t.json"]);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_replace_leaves_the_new_document_owner_only_and_no_temporary_file() {
        let dir = fresh_dir("agui-replace");
        let at = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
        replace(&dir, "t.json", b"old", 0o600, at).unwrap();
        replace(&dir, "t.json", b"new", 0o600, at).unwrap();
        assert_only_the_document(&dir, b"new", at);
    }

    /// The unsynced replace is as atomic for readers as the synced one: a reader racing many
    /// replacements of different lengths only ever reads one whole document, never a mix or a
    /// cut one, and no temporary file is left.
    #[test]
    fn an_unsynced_replace_is_never_seen_torn_and_leaves_the_document_owner_only() {
        let dir = fresh_dir("agui-replace-uns");
        let docs: Vec<Vec<u8>> = (0..8)
            .map(|i| format!("{{\"n\":{i},\"pad\":\"{}\"}}", "x".repeat(i * 9000)).into_bytes())
            .collect();
        let at = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
        replace_unsynced(&dir, "t.json", &docs[0], 0o600, at).unwrap();
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reader = {
            let (dir, docs, done) = (dir.clone(), docs.clone(), done.clone());
            std::thread::spawn(move || {
                let mut reads = 0;
                while !done.load(Ordering::SeqCst) || reads == 0 {
                    let read = std::fs::read(dir.join("t.json")).unwrap();
                    assert!(docs.contains(&read), "a torn read of {} bytes", read.len());
                    reads += 1;
                }
            })
        };
        for i in 0..400 {
            replace_unsynced(&dir, "t.json", &docs[i % docs.len()], 0o600, at).unwrap();
        }
        done.store(true, Ordering::SeqCst);
        reader.join().unwrap();
        assert_only_the_document(&dir, &docs[399 % docs.len()], at);
    }

    #[test]
    fn a_failed_replace_leaves_no_temporary_file() {
        let dir = fresh_dir("agui-replace-fail");
        std::fs::create_dir_all(dir.join("t.json")).unwrap();
        std::fs::write(
            dir.join("t.json").join("x"),
            b"keeps the directory non-empty",
        )
        .unwrap();
        let now = SystemTime::now();
        assert!(replace(&dir, "t.json", b"new", 0o600, now).is_err());
        assert_eq!(names_in(&dir), ["t.json"]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
