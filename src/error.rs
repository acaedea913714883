//! The one error type every client-visible failure goes through.
//!
//! Each [`Error`] is a catalogue message ([`Msg`], src/messages.rs: code, status, one sentence per
//! language) plus its parameters, so the HTTP surface and the SSE `RUN_ERROR` render the reader's
//! language ([`Lang`], decided once per request) at the last moment. Messages never contain
//! request secrets: callers pass field *names*, never field values.

pub use crate::messages::Msg;
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

/// The language of user-visible messages: the reference's seven. The order is the column order
/// of the catalogue (src/messages.rs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Lang {
    #[default]
    En,
    Zh,
    Es,
    Fr,
    De,
    Ja,
    Pt,
}

impl Lang {
    /// Every language, in catalogue column order.
    pub(crate) const ALL: [Lang; 7] = [
        Lang::En,
        Lang::Zh,
        Lang::Es,
        Lang::Fr,
        Lang::De,
        Lang::Ja,
        Lang::Pt,
    ];

    /// The primary subtag: what the kernel gets as `preferredLanguage` when the client sent none.
    pub(crate) fn tag(self) -> &'static str {
        match self {
            Lang::En => "en",
            Lang::Zh => "zh",
            Lang::Es => "es",
            Lang::Fr => "fr",
            Lang::De => "de",
            Lang::Ja => "ja",
            Lang::Pt => "pt",
        }
    }

    /// The one language decision of a request: `preferredLanguage` when it normalises to a
    /// supported language, else `Accept-Language`, else English (the reference's order).
    pub(crate) fn choose(preferred: Option<&str>, accept_language: Option<&str>) -> Lang {
        preferred
            .and_then(Lang::normalize)
            .or_else(|| accept_language.map(Lang::from_accept_language))
            .unwrap_or_default()
    }

    /// Trim, lowercase, `_` → `-`, keep the primary subtag; `None` when it is not supported
    /// (`zh-CN` → zh, `pt_BR` → pt).
    pub(crate) fn normalize(tag: &str) -> Option<Lang> {
        let tag = tag.trim().to_ascii_lowercase().replace('_', "-");
        let primary = tag.split('-').next().unwrap_or("");
        Lang::ALL.into_iter().find(|l| l.tag() == primary)
    }

    /// `Accept-Language` as the reference reads it: the first `q=` of an item (a parse error is
    /// q=0); q ≤ 0, q > 1 and non-finite q skipped; `*` is the fallback (English); unsupported tags
    /// skipped; the highest q wins, the earliest item on a tie.
    fn from_accept_language(header: &str) -> Lang {
        let mut best: Option<(f64, Lang)> = None;
        for item in header.split(',') {
            let mut bits = item.split(';');
            let tag = bits.next().unwrap_or("").trim();
            let q = bits
                .find_map(|b| b.trim().strip_prefix("q="))
                .map_or(1.0, |q| q.trim().parse::<f64>().unwrap_or(0.0));
            if !q.is_finite() || q <= 0.0 || q > 1.0 {
                continue;
            }
            let lang = if tag == "*" {
                Some(Lang::default())
            } else {
                Lang::normalize(tag)
            };
            if let Some(lang) = lang {
                if best.is_none_or(|(b, _)| q > b) {
                    best = Some((q, lang));
                }
            }
        }
        best.map(|(_, l)| l).unwrap_or_default()
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
    fn preferred_language_beats_accept_language() {
        assert_eq!(Lang::choose(Some("zh-CN"), Some("en-US")), Lang::Zh);
        assert_eq!(Lang::choose(Some("en"), Some("zh")), Lang::En);
        assert_eq!(Lang::choose(Some("fr"), Some("zh")), Lang::Fr);
        assert_eq!(Lang::choose(Some(" PT_br "), None), Lang::Pt);
        assert_eq!(Lang::choose(Some("ko"), Some("ja")), Lang::Ja);
    }

    #[test]
    fn accept_language_respects_q_values() {
        assert_eq!(Lang::choose(None, Some("ko, en;q=0.5, zh;q=0.8")), Lang::Zh);
        assert_eq!(Lang::choose(None, Some("zh-TW;q=0, en")), Lang::En);
        assert_eq!(Lang::choose(None, Some("ja-JP, en;q=0.5")), Lang::Ja);
        assert_eq!(
            Lang::choose(None, Some("zh;q=0, en;q=0.2, ja;q=1")),
            Lang::Ja
        );
        assert_eq!(Lang::choose(None, None), Lang::En);
    }

    #[test]
    fn accept_language_skips_bad_q_values_and_keeps_the_earliest_tie() {
        assert_eq!(Lang::choose(None, Some("de;q=x, fr;q=0.1")), Lang::Fr);
        assert_eq!(
            Lang::choose(None, Some("de;q=1.5, es;q=NaN, fr;q=0.3")),
            Lang::Fr
        );
        assert_eq!(Lang::choose(None, Some("es;q=0.5, de;q=0.5")), Lang::Es);
        assert_eq!(Lang::choose(None, Some("*, zh;q=0.9")), Lang::En);
        assert_eq!(Lang::choose(None, Some("ko;q=1, pt-BR;q=0.1")), Lang::Pt);
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
