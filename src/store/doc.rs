//! The thread document: what one thread's JSON file holds (the reference's layout), bounded in size
//! however many runs the thread has, and byte-compatible with files the reference wrote.

use super::used::{Seen, UsedRunIds};
use crate::ids;
use crate::modes::RunMode;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ThreadDoc {
    pub(crate) schema_version: u32,
    pub(crate) thread_id: String,
    pub(crate) context_id: String,
    pub(crate) cwd: String,
    pub(crate) user_id: Option<String>,
    pub(crate) iac_code_session_id: Option<String>,
    pub(crate) execution: Option<Execution>,
    #[serde(default)]
    pub(crate) run_digests: RunDigests,
    /// The runs before the newest [`MAX_RUN_DIGESTS`], hashed (`used.rs`): never reusable.
    #[serde(default, skip_serializing_if = "UsedRunIds::is_empty")]
    pub(crate) used_run_ids: UsedRunIds,
    #[serde(default)]
    pub(crate) applied_resume_digests: Vec<AppliedDigest>,
    #[serde(default)]
    pub(crate) terminal_execution_ids: Vec<String>,
}

/// How many idempotency records a thread keeps whole (run id and request digest): the newest
/// ones; older runs are remembered hashed, 16 bytes each, in `usedRunIds` (`used.rs`), so a used
/// run id is never usable again while the file stays small.
pub(crate) const MAX_RUN_DIGESTS: usize = 256;

/// How many ended executions a thread remembers (the cancel extension answers `already_terminal`
/// for them, 404 for older ones; a client cancels within seconds of a run, not 64 runs later).
pub(crate) const MAX_TERMINAL_EXECUTIONS: usize = 64;

/// `runDigests`: runId → request digest, the reference's JSON object, kept in insertion order (the
/// object's key order in the file is that order); [`ThreadDoc::record_run`] moves the oldest
/// beyond [`MAX_RUN_DIGESTS`] to `usedRunIds`. A file the reference wrote (keys sorted, every
/// run it ever admitted) loads whole; its order is then simply the sorted one.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct RunDigests(Vec<(String, String)>);

impl RunDigests {
    pub(crate) fn get(&self, run_id: &str) -> Option<&String> {
        self.0.iter().find(|(k, _)| k == run_id).map(|(_, v)| v)
    }

    /// Records (or refreshes) a run's digest as the newest.
    pub(crate) fn insert(&mut self, run_id: String, digest: String) {
        self.0.retain(|(k, _)| *k != run_id);
        self.0.push((run_id, digest));
    }

    /// Takes out the oldest records beyond the newest `keep`.
    fn take_oldest(&mut self, keep: usize) -> Vec<(String, String)> {
        let excess = self.0.len().saturating_sub(keep);
        self.0.drain(..excess).collect()
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// The run admitted last on the thread (the run of its current execution, if any).
    pub(crate) fn newest(&self) -> Option<&str> {
        self.0.last().map(|(k, _)| k.as_str())
    }
}

impl Serialize for RunDigests {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for RunDigests {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = RunDigests;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object of runId to digest")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> Result<RunDigests, A::Error> {
                let mut out = RunDigests::default();
                while let Some((k, v)) = m.next_entry::<String, String>()? {
                    out.insert(k, v);
                }
                Ok(out)
            }
        }
        d.deserialize_map(Visit)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Execution {
    pub(crate) execution_id: String,
    pub(crate) ros_invocation_id: String,
    pub(crate) task_id: Option<String>,
    #[serde(default)]
    pub(crate) pending: BTreeMap<String, Pending>,
    #[serde(default)]
    pub(crate) pipeline_open_steps: Vec<String>,
    #[serde(default)]
    pub(crate) pipeline_sequence: u64,
    #[serde(default)]
    pub(crate) text_snapshot_digests: Vec<String>,
    /// The client's `runMode` on the turn that started the execution, sent again with every
    /// answer (the kernel decides the mode per message: `iac_code/a2a/request_mode.py`).
    #[serde(default, skip_serializing_if = "Recorded::is_absent")]
    pub(crate) run_mode: Recorded<RunMode>,
    /// The client's `pipelineName`, recorded like `run_mode`.
    #[serde(default, skip_serializing_if = "Recorded::is_absent")]
    pub(crate) pipeline_name: Recorded<String>,
    /// The adapter process that runs it (`owner.rs`), so that during an upgrade the other
    /// process knows it busy rather than left running by a killed adapter. Ours; the reference
    /// ignores the key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) owner: Option<String>,
}

/// A choice of the turn that started an execution, as its state file keeps it: a key that is
/// present (even `null`) was recorded; an absent one was not (a file the reference wrote, which
/// keeps no mode), so the answering request's own choice is used.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) enum Recorded<T> {
    /// Not in the file: the file's writer keeps no such choice.
    #[default]
    Absent,
    /// What the client gave (`None`: nothing, and nothing is sent).
    Given(Option<T>),
}

impl<T> Recorded<T> {
    fn is_absent(&self) -> bool {
        matches!(self, Recorded::Absent)
    }

    /// What was recorded, else `fallback`.
    pub(crate) fn or(self, fallback: Option<T>) -> Option<T> {
        match self {
            Recorded::Absent => fallback,
            Recorded::Given(v) => v,
        }
    }

    pub(crate) fn as_deref(&self) -> Recorded<&T::Target>
    where
        T: std::ops::Deref,
    {
        match self {
            Recorded::Absent => Recorded::Absent,
            Recorded::Given(v) => Recorded::Given(v.as_deref()),
        }
    }
}

impl<T: Serialize> Serialize for Recorded<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Recorded::Absent => s.serialize_none(),
            Recorded::Given(v) => v.serialize(s),
        }
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Recorded<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Option::<T>::deserialize(d).map(Recorded::Given)
    }
}

/// A pending interrupt: the reduced input envelope, whether it is a pipeline side wait, and when it
/// expires.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Pending {
    pub(crate) value: Value,
    #[serde(default)]
    pub(crate) sideband: bool,
    #[serde(default)]
    pub(crate) expires_at: Option<String>,
    #[serde(default)]
    pub(crate) expires_at_ms: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AppliedDigest {
    pub(crate) digest: String,
    pub(crate) execution_id: String,
    pub(crate) interrupt_id: String,
}

impl ThreadDoc {
    pub(crate) fn new(thread_id: &str, cwd: &str, user_id: Option<&str>) -> ThreadDoc {
        ThreadDoc {
            schema_version: 1,
            thread_id: thread_id.to_string(),
            context_id: ids::context_id(thread_id),
            cwd: cwd.to_string(),
            user_id: user_id.map(String::from),
            iac_code_session_id: None,
            execution: None,
            run_digests: RunDigests::default(),
            used_run_ids: UsedRunIds::default(),
            applied_resume_digests: Vec::new(),
            terminal_execution_ids: Vec::new(),
        }
    }

    /// Records an admitted run: whole among the newest [`MAX_RUN_DIGESTS`], the oldest moved to
    /// `usedRunIds` (hashed), so the run id stays used for good.
    pub(crate) fn record_run(&mut self, run_id: String, digest: String) {
        self.run_digests.insert(run_id, digest);
        for (run_id, digest) in self.run_digests.take_oldest(MAX_RUN_DIGESTS) {
            self.used_run_ids.push(&run_id, &digest);
        }
    }

    /// Whether `run_id` was used on the thread, by this request (`digest`) or another.
    pub(crate) fn run_seen(&self, run_id: &str, digest: &str) -> Option<Seen> {
        match self.run_digests.get(run_id) {
            Some(d) if d == digest => Some(Seen::Same),
            Some(_) => Some(Seen::Other),
            None => self.used_run_ids.seen(run_id, digest),
        }
    }

    pub(crate) fn is_terminal(&self, execution_id: &str) -> bool {
        self.terminal_execution_ids
            .iter()
            .any(|e| e == execution_id)
    }

    /// Ends the current execution: no pending inputs, no live task, its id remembered as terminal.
    pub(crate) fn mark_terminal(&mut self) {
        if let Some(exec) = &mut self.execution {
            exec.pending.clear();
            exec.task_id = None;
            exec.pipeline_open_steps.clear();
            if !self.terminal_execution_ids.contains(&exec.execution_id) {
                self.terminal_execution_ids.push(exec.execution_id.clone());
            }
        }
        self.prune_ended_executions();
    }

    /// Keeps the newest [`MAX_TERMINAL_EXECUTIONS`] ended executions and the applied-answer
    /// records of only those and the current one, so the file stays small whatever the run count.
    fn prune_ended_executions(&mut self) {
        let excess = self
            .terminal_execution_ids
            .len()
            .saturating_sub(MAX_TERMINAL_EXECUTIONS);
        self.terminal_execution_ids.drain(..excess);
        let current = self.execution.as_ref().map(|e| e.execution_id.as_str());
        let kept = &self.terminal_execution_ids;
        self.applied_resume_digests
            .retain(|a| Some(a.execution_id.as_str()) == current || kept.contains(&a.execution_id));
    }

    /// Whether the current execution is being run by another live adapter process (the one an
    /// upgrade replaces, still draining): neither waiting nor ended, and its owner alive.
    pub(crate) fn running_elsewhere(&self) -> bool {
        self.execution.as_ref().is_some_and(|e| {
            e.pending.is_empty()
                && !self.is_terminal(&e.execution_id)
                && e.owner
                    .as_deref()
                    .is_some_and(super::owner::is_another_live_process)
        })
    }

    pub(crate) fn pending_count(&self) -> usize {
        self.execution.as_ref().map_or(0, |e| e.pending.len())
    }
}
