//! The one error type every client-visible failure goes through.
//!
//! Each [`Error`] is a catalogue message ([`Msg`], src/messages.rs: code, status, one sentence per
//! language) plus its parameters, so the HTTP surface and the SSE `RUN_ERROR` render the reader's
//! language ([`Lang`], decided once per request) at the last moment. Messages never contain
//! request secrets: callers pass field *names*, never field values.

pub(crate) use crate::code::Code;
pub use crate::lang::Lang;
pub use crate::messages::Msg;
use std::fmt;

impl Msg {
    /// An error with this message and no parameters.
    pub fn err(self) -> Error {
        Error::from_msg(self, Vec::new())
    }

    /// An error with this message, `args` filling `{0}`, `{1}`, …
    pub(crate) fn with(self, args: &[&dyn std::fmt::Display]) -> Error {
        Error::from_msg(self, args.iter().map(ToString::to_string).collect())
    }
}

/// A client-visible failure: a catalogue message ([`Msg`]) with its parameters; the sentence is
/// rendered in the reader's language at the last moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub(crate) code: Code,
    msg: Msg,
    args: Vec<String>,
    /// Only tiny_http's refusals by a status the catalogue does not list keep that status.
    status: Option<u16>,
}

/// The `Retry-After` of a turn refused while the kernel restarts.
const KERNEL_RESTART_RETRY_SECS: u32 = 5;

impl Error {
    pub(crate) fn from_msg(msg: Msg, args: Vec<String>) -> Error {
        Error {
            code: msg.code(),
            msg,
            args,
            status: None,
        }
    }

    pub(crate) fn status(&self) -> u16 {
        self.status.unwrap_or_else(|| self.msg.status())
    }

    /// The `Retry-After` seconds of a retryable refusal (503): a kernel restart takes a few
    /// seconds; any other 503 (overload, a shutdown a supervisor follows with a restart, a state
    /// not readable yet) is worth retrying at once.
    pub(crate) fn retry_after(&self) -> Option<u32> {
        match (self.status(), self.msg) {
            (503, Msg::KernelRestarting) => Some(KERNEL_RESTART_RETRY_SECS),
            (503, _) => Some(1),
            _ => None,
        }
    }

    pub(crate) fn message(&self, lang: Lang) -> String {
        self.msg.render(lang, &self.args)
    }

    /// The pre-SSE HTTP body: `{"error":{"code","message"}}`.
    pub(crate) fn to_json(&self, lang: Lang) -> serde_json::Value {
        serde_json::json!({"error": {"code": self.code.as_str(), "message": self.message(lang)}})
    }

    /// The answers the HTTP layer gives by itself to a request it cannot serve (framing, limits,
    /// connection cap), by status.
    pub(crate) fn http_limit(status: u16) -> Error {
        let msg = match status {
            400 => Msg::HttpMalformed,
            408 => Msg::HttpTimeout,
            413 => Msg::HttpTooLarge,
            414 => Msg::UrlTooLong,
            431 => Msg::HeadersTooLarge,
            503 => Msg::ConnectionCap,
            _ => {
                let mut e = Msg::HttpUnservable.err();
                e.status = Some(status);
                return e;
            }
        };
        msg.err()
    }
}

impl From<Msg> for Error {
    fn from(msg: Msg) -> Error {
        msg.err()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message(Lang::En))
    }
}

impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retryable_refusal_says_when_to_retry_and_no_other_does() {
        assert_eq!(Msg::KernelRestarting.err().retry_after(), Some(5));
        assert_eq!(Msg::KernelRestarting.err().status(), 503);
        assert_eq!(Msg::ShuttingDown.err().retry_after(), Some(1));
        assert_eq!(Msg::StateUnreadable.err().retry_after(), Some(1));
        assert_eq!(Msg::ThreadBusy.err().retry_after(), None);
        assert_eq!(Msg::Missing.with(&[&"threadId"]).retry_after(), None);
    }

    #[test]
    fn error_json_has_code_and_localized_message() {
        let e = Msg::Missing.with(&[&"threadId"]);
        assert_eq!(
            e.to_json(Lang::Zh)["error"]["message"],
            "缺少必填字段 `threadId`。"
        );
        assert_eq!(e.to_json(Lang::En)["error"]["code"], "INVALID_INPUT");
        assert_eq!(e.status(), 400);
        assert_eq!(Msg::BodyTooLarge.with(&[&1]).status(), 413);
    }

    #[test]
    fn http_limit_answers_use_the_catalogue() {
        for status in [400, 408, 414, 431] {
            let e = Error::http_limit(status);
            assert_eq!((e.code, e.status()), (Code::InvalidInput, status));
            assert!(!e.message(Lang::Zh).is_empty());
        }
        let e = Error::http_limit(413);
        assert_eq!((e.code, e.status()), (Code::RequestTooLarge, 413));
        let e = Error::http_limit(503);
        assert_eq!((e.code, e.status()), (Code::A2aUnavailable, 503));
        assert_eq!(
            e.message(Lang::En),
            "The server is at its connection limit; retry shortly."
        );
        assert_eq!(Error::http_limit(417).status(), 417);
    }
}
