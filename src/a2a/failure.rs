//! How an upstream failure becomes one of three spec codes: the service cannot be reached or stops
//! mid-stream (`A2A_UNAVAILABLE`), it answers something that is not the protocol
//! (`A2A_PROTOCOL_ERROR`), or it refuses or fails the execution (`A2A_EXECUTION_FAILED`).

use super::rpc::SESSION_BACKUP_NOT_READY;
use crate::error::{Error, Msg};
use serde_json::Value;

pub(super) fn read_error(e: &std::io::Error) -> Error {
    match e.kind() {
        std::io::ErrorKind::InvalidData => Msg::SseEventTooLarge.err(),
        _ => transport_io(e),
    }
}

/// ensure-restored's 409 body names the kernel's code (and says it is retryable).
pub(super) fn backup_not_ready(resp: ureq::http::Response<ureq::Body>) -> bool {
    let text = resp
        .into_body()
        .with_config()
        .limit(64 * 1024)
        .read_to_string()
        .unwrap_or_default();
    serde_json::from_str::<Value>(&text)
        .ok()
        .and_then(|v| v.pointer("/error/code")?.as_str().map(String::from))
        .is_some_and(|c| c == SESSION_BACKUP_NOT_READY)
}

pub(super) fn check_status(status: u16) -> Result<(), Error> {
    match status {
        200..=299 => Ok(()),
        401 | 403 => Err(Msg::CredentialsRefused.err()),
        s => Err(Msg::UpstreamHttp.with(&[&s])),
    }
}

pub(super) fn transport(e: ureq::Error) -> Error {
    match e {
        ureq::Error::Io(io) => transport_io(&io),
        ureq::Error::Timeout(_) => Msg::UpstreamTimeout.err(),
        ureq::Error::ConnectionFailed | ureq::Error::HostNotFound => Msg::UpstreamUnreachable.err(),
        other => Msg::Transport.with(&[&truncate(&other.to_string(), 200)]),
    }
}

pub(super) fn transport_io(e: &std::io::Error) -> Error {
    use std::io::ErrorKind::*;
    // ureq reports its own timeouts inside the io::Error it hands the body reader.
    let ureq_timeout = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<ureq::Error>())
        .is_some_and(|u| matches!(u, ureq::Error::Timeout(_)));
    if ureq_timeout {
        return Msg::StreamSilent.err();
    }
    match e.kind() {
        TimedOut | WouldBlock => Msg::StreamSilent.err(),
        ConnectionRefused => Msg::UpstreamUnreachable.err(),
        _ => Msg::StreamBroke.err(),
    }
}

pub(super) fn truncate(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}
