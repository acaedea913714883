//! The thread index: every user-bound thread's place in its user's list, most recently active
//! first, kept in memory so that a page of the thread list costs O(page) whatever the thread count.
//!
//! Activity is a write of the thread's state file (a run admitted, its task learned, an interrupt
//! recorded, an end, a cancel): [`Store::save`](super::Store::save) takes a stamp before it writes
//! ([`ThreadIndex::begin_write`]), gives the file that modification time, and records the stamp
//! once the file is in place ([`ThreadIndex::end_write`]). The start-up scan reads the same
//! modification times back, so a restarted adapter lists the threads exactly as before.
//!
//! Paging is stable while threads keep changing. The first page fixes a snapshot instant `S`
//! (before any write still in flight, and every later stamp is after it); every page of that
//! listing orders the threads by their newest activity at or before `S` (then by key), and a
//! thread with no activity by `S` (created later) is not in it. A cursor carries `S` and the last
//! place returned, so no thread is listed twice or skipped however the threads change between
//! pages. To know a thread's newest activity as of any `S` a cursor may still hold, each thread
//! keeps its stamps of the last [`CURSOR_TTL`] and the newest one before; older cursors are
//! refused.

use super::cursor::{Cursor, Place};
use crate::ids;
use parking_lot::{Condvar, Mutex};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a cursor stays valid (ms): paging through a list is a matter of minutes.
pub(crate) const CURSOR_TTL: u64 = 60 * 60 * 1000;

/// Stamps a thread keeps within the window at most: a thread written more often than this in an
/// hour (some 300 runs) is placed by its retained stamps only, on pages of an old cursor.
const MAX_STAMPS: usize = 1024;

/// What the history log's header line says of a thread (helper-written, read lazily).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Header {
    pub(crate) title: Option<String>,
    pub(crate) created_at: Option<String>,
}

struct Entry {
    thread_id: String,
    user_id: String,
    /// Activity stamps (ms since the epoch), oldest first, pruned as the module says.
    stamps: Vec<u64>,
    /// The oldest stamp ever seen: the creation time when there is no header to tell it.
    first: u64,
    header: Option<Header>,
}

impl Entry {
    fn newest(&self) -> u64 {
        self.stamps.last().copied().unwrap_or(self.first)
    }

    /// The newest activity at or before `s`, if any.
    fn newest_by(&self, s: u64) -> Option<u64> {
        self.stamps.iter().rev().find(|&&t| t <= s).copied()
    }

    fn add(&mut self, stamp: u64, now: u64) {
        if let Err(at) = self.stamps.binary_search(&stamp) {
            self.stamps.insert(at, stamp);
        }
        self.first = self.first.min(stamp);
        // Keep every stamp of the window and the newest one before it (a second of slack
        // covers stamps taken slightly ahead of the clock).
        let horizon = now.saturating_sub(CURSOR_TTL + 1000);
        let before = self.stamps.partition_point(|&t| t < horizon);
        let drop = before.saturating_sub(1);
        let over = (self.stamps.len() - drop).saturating_sub(MAX_STAMPS);
        self.stamps.drain(..drop + over);
    }
}

/// One thread of a page, as the index knows it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Row {
    pub(crate) key: Arc<str>,
    pub(crate) thread_id: String,
    /// The newest activity now (ms).
    pub(crate) updated: u64,
    /// The oldest activity known (ms), the creation time without a header.
    pub(crate) first: u64,
    pub(crate) header: Option<Header>,
}

/// A page: its rows and, when more threads follow at the snapshot, where the next page starts.
#[derive(Debug)]
pub(crate) struct Page {
    pub(crate) rows: Vec<Row>,
    pub(crate) next: Option<Cursor>,
}

#[derive(Default)]
struct Inner {
    threads: HashMap<Arc<str>, Entry>,
    /// Per user, its threads by newest activity (newest first, then by key).
    by_user: HashMap<String, BTreeSet<Place>>,
    /// Stamps of writes under way (a multiset): no snapshot may include them.
    writing: BTreeMap<u64, usize>,
    /// The latest snapshot instant handed out: every later stamp is after it.
    high_water: u64,
    /// The latest stamp of a finished write: a new snapshot includes it, even one taken in the
    /// same millisecond.
    newest_written: u64,
    built: bool,
}

#[derive(Default)]
pub(crate) struct ThreadIndex {
    inner: Mutex<Inner>,
    built: Condvar,
}

impl ThreadIndex {
    /// A stamp for a write about to start: after every snapshot handed out so far, and held back
    /// from later snapshots until [`end_write`](Self::end_write).
    pub(crate) fn begin_write(&self) -> u64 {
        let mut inner = self.inner.lock();
        let stamp = ids::now_ms().max(inner.high_water + 1);
        *inner.writing.entry(stamp).or_default() += 1;
        stamp
    }

    /// The write of `stamp` is over; `written` with the thread it wrote when the file is in
    /// place (a thread without a user is never listed, so it is not indexed).
    pub(crate) fn end_write(&self, stamp: u64, written: Option<(&str, &str, &str)>) {
        let mut inner = self.inner.lock();
        inner.newest_written = inner.newest_written.max(stamp);
        if let Some(n) = inner.writing.get_mut(&stamp) {
            *n -= 1;
            if *n == 0 {
                inner.writing.remove(&stamp);
            }
        }
        if let Some((key, thread_id, user_id)) = written {
            inner.record(key, thread_id, user_id, stamp);
        }
    }

    /// Threads found on disk at start-up: (key, threadId, userId, modification time in ms).
    pub(crate) fn add_found(&self, found: Vec<(String, String, String, u64)>) {
        let mut inner = self.inner.lock();
        for (key, thread_id, user_id, stamp) in found {
            inner.record(&key, &thread_id, &user_id, stamp);
        }
    }

    pub(crate) fn mark_built(&self) {
        self.inner.lock().built = true;
        self.built.notify_all();
    }

    /// Waits (at most `limit`) for the start-up scan; whether the index is complete.
    pub(crate) fn wait_built(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        let mut inner = self.inner.lock();
        while !inner.built {
            if self.built.wait_until(&mut inner, deadline).timed_out() {
                return inner.built;
            }
        }
        true
    }

    /// Remembers a thread's history header once it was read.
    pub(crate) fn set_header(&self, key: &str, header: Header) {
        if let Some(e) = self.inner.lock().threads.get_mut(key) {
            e.header = Some(header);
        }
    }

    /// The snapshot instant of a new listing: now (or the newest finished write, if stamped
    /// ahead of the clock), but before the oldest write under way.
    fn snapshot(inner: &mut Inner) -> u64 {
        let mut s = ids::now_ms().max(inner.newest_written);
        if let Some((&oldest, _)) = inner.writing.first_key_value() {
            s = s.min(oldest.saturating_sub(1));
        }
        inner.high_water = inner.high_water.max(s);
        s
    }

    /// `limit` threads of `user` after `after` (from the start with `None`: a new snapshot).
    pub(crate) fn page(&self, user: &str, after: Option<&Cursor>, limit: usize) -> Page {
        let mut inner = self.inner.lock();
        let s = match after {
            Some(c) => c.snapshot,
            None => Self::snapshot(&mut inner),
        };
        let Some(places) = inner.by_user.get(user) else {
            return Page {
                rows: Vec::new(),
                next: None,
            };
        };
        let after = after.map(|c| c.place.clone());
        let mut chosen = changed_since(&inner.threads, places, s, after.as_ref());
        // The rest sit after every thread changed since `s`, in their place as of `s` already.
        let boundary: Place = (Reverse(s), Arc::from(""));
        let unchanged = match after.as_ref().filter(|a| **a >= boundary) {
            Some(a) => places.range((
                std::ops::Bound::Excluded(a.clone()),
                std::ops::Bound::Unbounded,
            )),
            None => places.range(boundary..),
        };
        chosen.extend(unchanged.take(limit + 1).cloned());
        chosen.sort();
        chosen.truncate(limit + 1);
        let more = chosen.len() > limit;
        chosen.truncate(limit);
        let next = chosen.last().filter(|_| more).map(|p| Cursor {
            snapshot: s,
            place: p.clone(),
        });
        let rows = chosen.iter().map(|p| inner.row(&p.1)).collect();
        Page { rows, next }
    }
}

/// The threads changed since `s` (newest activity after it), placed by their newest activity
/// as of `s`, after `after`; those with none by `s` were created later and are left out.
fn changed_since(
    threads: &HashMap<Arc<str>, Entry>,
    places: &BTreeSet<Place>,
    s: u64,
    after: Option<&Place>,
) -> Vec<Place> {
    places
        .iter()
        .take_while(|(Reverse(newest), _)| *newest > s)
        .filter_map(|(_, key)| {
            let at = threads.get(key)?.newest_by(s)?;
            let place = (Reverse(at), key.clone());
            after.is_none_or(|a| place > *a).then_some(place)
        })
        .collect()
}

impl Inner {
    fn record(&mut self, key: &str, thread_id: &str, user_id: &str, stamp: u64) {
        let now = ids::now_ms();
        let key: Arc<str> = match self.threads.get_key_value(key) {
            Some((k, _)) => k.clone(),
            None => Arc::from(key),
        };
        let entry = self.threads.entry(key.clone()).or_insert_with(|| Entry {
            thread_id: thread_id.to_string(),
            user_id: user_id.to_string(),
            stamps: Vec::new(),
            first: stamp,
            header: None,
        });
        let before = (!entry.stamps.is_empty()).then(|| entry.newest());
        entry.add(stamp, now);
        let newest = entry.newest();
        let places = self.by_user.entry(entry.user_id.clone()).or_default();
        if let Some(old) = before {
            places.remove(&(Reverse(old), key.clone()));
        }
        places.insert((Reverse(newest), key));
    }

    /// The row of a listed thread.
    fn row(&self, key: &Arc<str>) -> Row {
        let e = &self.threads[key];
        Row {
            key: key.clone(),
            thread_id: e.thread_id.clone(),
            updated: e.newest(),
            first: e.first,
            header: e.header.clone(),
        }
    }
}

#[cfg(test)]
#[path = "index_tests.rs"]
mod tests;
