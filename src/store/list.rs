//! The thread list, `GET /extensions/iac-code/v1/threads?userId=…&limit=N&cursor=…`: a page of
//! the index (order, snapshot, cursor: `index.rs`) with each thread's live fields read as the thread
//! lookup reads them (its document and its slot, under the slot's mutex): `state`, the pending
//! interrupts count and the newest `runId`.

use super::cursor::Cursor;
use super::index::Row;
use super::scan::read_header;
use super::{Store, ThreadDoc};
use crate::error::{Error, Msg};
use crate::ids;
use serde_json::{json, Value};
use std::time::Duration;

pub(crate) const DEFAULT_LIMIT: usize = 20;
pub(crate) const MAX_LIMIT: usize = 100;

/// How long a list asked for right after a start waits for the start-up scan.
const BUILD_WAIT: Duration = Duration::from_secs(10);

/// A thread's state as the thread lookup names it (`observe::thread_status`): a run in progress
/// is `running` (here, or in an upgrade's old process), an execution with pending interrupts
/// `waiting`, anything else `idle`.
fn state_of(doc: &ThreadDoc, running: bool) -> &'static str {
    if running || doc.running_elsewhere() {
        "running"
    } else if doc.pending_count() > 0 {
        "waiting"
    } else {
        "idle"
    }
}

/// `limit` as given (absent: the default; more than the maximum: the maximum).
pub(crate) fn parse_limit(given: Option<&str>) -> Result<usize, Error> {
    let Some(text) = given else {
        return Ok(DEFAULT_LIMIT);
    };
    match text.parse::<u64>() {
        Ok(0) | Err(_) => Err(Msg::ThreadListLimitInvalid.with(&[&MAX_LIMIT])),
        Ok(n) => Ok(usize::try_from(n).unwrap_or(MAX_LIMIT).min(MAX_LIMIT)),
    }
}

impl Store {
    /// One page of `user`'s threads, most recently active first.
    pub(crate) fn list_threads(
        &self,
        user: &str,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<Value, Error> {
        let after = cursor
            .map(|c| Cursor::decode(c, user, ids::now_ms()))
            .transpose()?;
        self.start_index();
        if !self.index.wait_built(BUILD_WAIT) {
            return Err(Msg::ThreadListNotReady.err());
        }
        let page = self.index.page(user, after.as_ref(), limit);
        let threads: Vec<Value> = page
            .rows
            .into_iter()
            .filter_map(|row| self.listed(user, row))
            .collect();
        Ok(json!({
            "threads": threads,
            "nextCursor": page.next.map(|c| c.encode(user)),
        }))
    }

    /// A listed thread's entry; `None` (logged) when its document no longer reads as `user`'s.
    fn listed(&self, user: &str, row: Row) -> Option<Value> {
        let slot = self.slot(&row.thread_id);
        let found = {
            let guard = slot.lock();
            self.load(&row.thread_id)
                .map(|doc| doc.map(|d| (d, guard.active.is_some())))
        };
        drop(slot);
        self.release(&row.thread_id);
        let (doc, running) = match found {
            Ok(Some(found)) if found.0.user_id.as_deref() == Some(user) => found,
            Ok(_) => {
                log::warn!(
                    "thread {} left the list: its state file changed owner or vanished",
                    row.key
                );
                return None;
            }
            Err(_) => return None,
        };
        let header = row.header.or_else(|| {
            let header = read_header(&self.history_path(&row.key), &row.thread_id)?;
            self.index.set_header(&row.key, header.clone());
            Some(header)
        });
        let (title, created_at) = header.map_or((None, None), |h| (h.title, h.created_at));
        Some(json!({
            "threadId": row.thread_id,
            "title": title,
            "createdAt": created_at.unwrap_or_else(|| ids::rfc3339_millis(row.first)),
            "updatedAt": ids::rfc3339_millis(row.updated),
            "state": state_of(&doc, running),
            "pendingInterrupts": doc.pending_count(),
            "runId": doc.run_digests.newest(),
        }))
    }

    /// A thread's conversation log (written by the history module), by its key.
    fn history_path(&self, key: &str) -> std::path::PathBuf {
        self.root.join("history").join(format!("{key}.jsonl"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Code;

    #[test]
    fn limit_defaults_to_20_caps_at_100_and_refuses_zero_or_text() {
        assert_eq!(parse_limit(None).unwrap(), 20);
        assert_eq!(parse_limit(Some("7")).unwrap(), 7);
        assert_eq!(
            parse_limit(Some("100000000000000000000")).unwrap_err().code,
            Code::InvalidInput
        );
        assert_eq!(parse_limit(Some("5000")).unwrap(), 100);
        for bad in ["0", "-1", "ten", "1.5"] {
            assert_eq!(
                parse_limit(Some(bad)).unwrap_err().code,
                Code::InvalidInput,
                "{bad}"
            );
        }
    }
}
