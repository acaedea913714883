//! A JSON-RPC reply taken apart: a result, or an error with the kernel's own code.

use super::failure::truncate;
use crate::error::{Error, Msg};
use serde_json::Value;

/// The reply to a JSON-RPC call that is not a transport failure.
pub(crate) enum Rpc {
    Result(Value),
    Error {
        code: i64,
        message: String,
        /// The kernel's own code in `error.data.code` (`SESSION_BACKUP_NOT_READY`).
        kernel_code: Option<String>,
    },
}

/// A2A's `TaskNotFoundError` (`a2a/utils/errors.py`): the one JSON-RPC answer that says a task is
/// gone for good; any other error of a lookup is the service's trouble, not the task's end.
pub(super) const TASK_NOT_FOUND: i64 = -32001;

/// The kernel's code for a session backup still synchronizing (`iac_code/services/
/// session_backup.py`), in `error.data.code` of a JSON-RPC error (`iac_code/a2a/executor.py`,
/// `SessionBackupNotReadyInvalidParamsError`) and in `error.code` of ensure-restored's 409
/// (`iac_code/a2a/app.py`).
pub(crate) const SESSION_BACKUP_NOT_READY: &str = "SESSION_BACKUP_NOT_READY";

pub(crate) fn parse_rpc(data: &[u8]) -> Result<Value, Error> {
    let v: Value = serde_json::from_slice(data).map_err(|_| Msg::StreamNotJson.err())?;
    match rpc_of(v)? {
        Rpc::Result(r) => Ok(r),
        Rpc::Error {
            kernel_code: Some(k),
            ..
        } if k == SESSION_BACKUP_NOT_READY => Err(Msg::SessionBackupNotReady.err()),
        Rpc::Error { code, message, .. } => {
            Err(Msg::RpcError.with(&[&code, &truncate(&message, 200)]))
        }
    }
}

/// Takes the reply apart without copying the (possibly large) result.
pub(super) fn rpc_of(mut v: Value) -> Result<Rpc, Error> {
    if let Some(e) = v.get("error").filter(|e| !e.is_null()) {
        return Ok(Rpc::Error {
            code: e.get("code").and_then(Value::as_i64).unwrap_or(0),
            message: e
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            kernel_code: e
                .pointer("/data/code")
                .and_then(Value::as_str)
                .map(String::from),
        });
    }
    match v.get_mut("result").map(Value::take) {
        Some(r) if r.is_object() => Ok(Rpc::Result(r)),
        _ => Err(Msg::RpcNeither.err()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rpc_errors_and_garbage_map_to_spec_codes() {
        use crate::error::Code;
        assert_eq!(
            parse_rpc(b"not json").unwrap_err().code,
            Code::A2aProtocolError
        );
        assert_eq!(
            parse_rpc(br#"{"jsonrpc":"2.0"}"#).unwrap_err().code,
            Code::A2aProtocolError
        );
        let e = parse_rpc(br#"{"error":{"code":-32001,"message":"Task is already working."}}"#)
            .unwrap_err();
        assert_eq!(e.code, Code::A2aExecutionFailed);
        assert!(parse_rpc(br#"{"result":{"task":{}}}"#).is_ok());
    }
}
