//! The subscribe request (`POST …/executions/{executionId}/subscribe`): its body's keys and
//! identities, as the reference adapter's route takes them.

use crate::error::{Error, Msg};
use serde_json::Value;

/// The body keys the reference's subscribe route accepts (`afterSequence` is accepted, unused).
/// `historyLimit` (ours): the join's snapshot holds the newest N messages only.
const SUBSCRIBE_FIELDS: &[&str] = &[
    "threadId",
    "runId",
    "rosInvocationId",
    "afterSequence",
    "historyLimit",
];

fn required(body: &Value, key: &str) -> Option<String> {
    body.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(String::from)
}

/// The identity a subscribe request presents: its body's three keys, and the newest messages
/// its snapshot should hold (`historyLimit`, body or query).
pub(crate) struct Subscribe {
    pub(crate) thread_id: String,
    pub(crate) run_id: String,
    pub(crate) ros_invocation_id: String,
    pub(super) history_limit: Option<usize>,
}

/// A subscribe request: its body, its `Last-Event-ID`, its query's `historyLimit`.
pub(crate) struct Asked<'a> {
    pub(crate) body: &'a [u8],
    pub(crate) last_event_id: Option<&'a str>,
    pub(crate) history_limit: Option<&'a str>,
}

/// The subscribe body: exactly the reference's keys, the three identities non-empty strings.
pub(crate) fn subscribe_body(body: &[u8]) -> Result<Subscribe, Error> {
    let bad = || Msg::ObserveIdentityInvalid.err();
    let v: Value = serde_json::from_slice(body).map_err(|_| bad())?;
    let obj = v.as_object().ok_or_else(bad)?;
    if obj.keys().any(|k| !SUBSCRIBE_FIELDS.contains(&k.as_str())) {
        return Err(bad());
    }
    let history_limit = match v.get("historyLimit") {
        None => None,
        Some(n) => Some(n.as_u64().ok_or_else(bad)? as usize),
    };
    match (
        required(&v, "threadId"),
        required(&v, "runId"),
        required(&v, "rosInvocationId"),
    ) {
        (Some(thread_id), Some(run_id), Some(ros_invocation_id)) => Ok(Subscribe {
            thread_id,
            run_id,
            ros_invocation_id,
            history_limit,
        }),
        _ => Err(bad()),
    }
}
