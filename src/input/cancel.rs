//! The body of the cancel extension.

use super::json::missing;
use crate::error::{Error, Msg};
use serde_json::Value;

/// The body of the cancel extension: the thread and invocation that own the execution.
#[derive(Debug)]
pub(crate) struct CancelRequest {
    pub(crate) thread_id: String,
    pub(crate) ros_invocation_id: String,
}

/// Parses the cancel extension's body: a JSON object with `threadId` and `rosInvocationId`, both
/// non-empty strings (other fields pass unread).
pub(crate) fn parse_cancel(body: &[u8]) -> Result<CancelRequest, Error> {
    let v: Value = serde_json::from_slice(body).map_err(|_| Msg::CancelNotJson.err())?;
    let field = |k: &str| {
        v.get(k)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .ok_or_else(|| missing(k))
    };
    Ok(CancelRequest {
        thread_id: field("threadId")?,
        ros_invocation_id: field("rosInvocationId")?,
    })
}
