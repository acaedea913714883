//! Validation of `RunAgentInput` and of the strict `forwardedProps.iacCode` extension.
//!
//! [`parse_run`] turns the request body into a [`RunInput`] or an `INVALID_INPUT`
//! [`Error`](crate::error::Error) whose message names the offending field (never its value: values
//! may be secrets). The standard envelope is read leniently (unknown top-level fields pass, as AG-UI
//! allows), the iac-code extension strictly.
//!
//! One job per file: `json` is the strict reader the others build on; `envelope` reads the
//! standard fields and hands `iac_code` (with its `cwd` checks), `parts` (the user messages) and
//! `resume` their values, then `digest` hashes the whole without its secrets; `cancel` reads the
//! cancel extension's body.

mod cancel;
mod cwd;
mod digest;
mod envelope;
#[cfg(test)]
mod fixtures;
mod iac_code;
mod json;
mod parts;
mod resume;

pub(crate) use cancel::{parse_cancel, CancelRequest};
pub use envelope::parse_run;
pub(crate) use envelope::MAX_BODY_BYTES;
pub(crate) use iac_code::IacCode;
pub(crate) use parts::UserMessage;
pub(crate) use resume::{ResumeEntry, ResumeStatus};

/// A validated run request.
#[derive(Debug, Clone)]
pub struct RunInput {
    pub(crate) thread_id: String,
    pub(crate) run_id: String,
    pub(crate) parent_run_id: Option<String>,
    pub(crate) iac: IacCode,
    /// The latest user message: its AG-UI id and its parts in A2A form.
    pub(crate) user_message: Option<UserMessage>,
    pub(crate) resume: Option<Vec<ResumeEntry>>,
    /// Canonical digest of the request without its secrets, for run-id idempotency.
    pub(crate) digest: String,
}
