//! The spec's error codes, each with the HTTP status it is answered with before a stream.

use std::fmt;

/// The error codes of the spec (plus `EXECUTION_NOT_FOUND` from the cancel extension,
/// `STATE_UNAVAILABLE`, which the reference adapter answers when the state store cannot be read,
/// and `INTERNAL_ERROR` for a request handler that panicked, where the reference gives a bare 500).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Code {
    Unauthorized,
    UnsupportedMediaType,
    RequestTooLarge,
    InvalidJson,
    InvalidInput,
    DuplicateRunId,
    RunIdConflict,
    ThreadBusy,
    ThreadBindingConflict,
    ResumeRequired,
    IncompleteResume,
    UnknownInterrupt,
    ResumePayloadInvalid,
    ResumeAlreadyApplied,
    ExecutionExpired,
    ExecutionLost,
    ExecutionNotFound,
    StatePersistenceFailed,
    StateUnavailable,
    A2aUnavailable,
    A2aProtocolError,
    A2aExecutionFailed,
    /// The kernel's own code (`iac_code/services/session_backup.py`), passed on as the
    /// reference passes it: the session backup is still synchronizing, retry shortly.
    SessionBackupNotReady,
    Cancelled,
    InternalError,
}

impl Code {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Code::Unauthorized => "UNAUTHORIZED",
            Code::UnsupportedMediaType => "UNSUPPORTED_MEDIA_TYPE",
            Code::RequestTooLarge => "REQUEST_TOO_LARGE",
            Code::InvalidJson => "INVALID_JSON",
            Code::InvalidInput => "INVALID_INPUT",
            Code::DuplicateRunId => "DUPLICATE_RUN_ID",
            Code::RunIdConflict => "RUN_ID_CONFLICT",
            Code::ThreadBusy => "THREAD_BUSY",
            Code::ThreadBindingConflict => "THREAD_BINDING_CONFLICT",
            Code::ResumeRequired => "RESUME_REQUIRED",
            Code::IncompleteResume => "INCOMPLETE_RESUME",
            Code::UnknownInterrupt => "UNKNOWN_INTERRUPT",
            Code::ResumePayloadInvalid => "RESUME_PAYLOAD_INVALID",
            Code::ResumeAlreadyApplied => "RESUME_ALREADY_APPLIED",
            Code::ExecutionExpired => "EXECUTION_EXPIRED",
            Code::ExecutionLost => "EXECUTION_LOST",
            Code::ExecutionNotFound => "EXECUTION_NOT_FOUND",
            Code::StatePersistenceFailed => "STATE_PERSISTENCE_FAILED",
            Code::StateUnavailable => "STATE_UNAVAILABLE",
            Code::A2aUnavailable => "A2A_UNAVAILABLE",
            Code::A2aProtocolError => "A2A_PROTOCOL_ERROR",
            Code::A2aExecutionFailed => "A2A_EXECUTION_FAILED",
            Code::SessionBackupNotReady => "SESSION_BACKUP_NOT_READY",
            Code::Cancelled => "CANCELLED",
            Code::InternalError => "INTERNAL_ERROR",
        }
    }

    /// The HTTP status used when the error is answered before the SSE stream starts.
    pub(crate) fn http_status(self) -> u16 {
        match self {
            Code::Unauthorized => 401,
            Code::UnsupportedMediaType => 415,
            Code::RequestTooLarge => 413,
            Code::InvalidJson | Code::InvalidInput | Code::ResumePayloadInvalid => 400,
            Code::IncompleteResume | Code::UnknownInterrupt => 400,
            Code::ExecutionNotFound => 404,
            Code::ExecutionExpired => 410,
            Code::DuplicateRunId | Code::RunIdConflict | Code::ThreadBusy => 409,
            Code::ThreadBindingConflict | Code::ResumeRequired => 409,
            Code::ResumeAlreadyApplied | Code::ExecutionLost => 409,
            Code::StatePersistenceFailed => 500,
            Code::StateUnavailable | Code::A2aUnavailable => 503,
            Code::A2aProtocolError | Code::A2aExecutionFailed => 502,
            // The kernel answers it with 409 (`iac_code/a2a/app.py`, ensure-restored).
            Code::Cancelled | Code::SessionBackupNotReady => 409,
            Code::InternalError => 500,
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
