//! The one error type every client-visible failure goes through.
//!
//! Each [`Error`] carries a spec [`Code`] and the same message in English and Chinese, so the HTTP
//! surface and the SSE `RUN_ERROR` pick the reader's language at the last moment ([`Lang`]). Messages
//! never contain request secrets: callers pass field *names*, never field values.

use std::fmt;

/// The error codes of the spec (plus `EXECUTION_NOT_FOUND` from the cancel extension,
/// `STATE_UNAVAILABLE`, which the reference adapter answers when the state store cannot be read,
/// and `INTERNAL_ERROR` for a request handler that panicked, where the reference gives a bare 500).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
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
    Cancelled,
    InternalError,
}

impl Code {
    pub fn as_str(self) -> &'static str {
        match self {
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
            Code::Cancelled => "CANCELLED",
            Code::InternalError => "INTERNAL_ERROR",
        }
    }

    /// The HTTP status used when the error is answered before the SSE stream starts.
    pub fn http_status(self) -> u16 {
        match self {
            Code::InvalidInput | Code::ResumePayloadInvalid => 400,
            Code::IncompleteResume | Code::UnknownInterrupt => 400,
            Code::ExecutionNotFound => 404,
            Code::ExecutionExpired => 410,
            Code::DuplicateRunId | Code::RunIdConflict | Code::ThreadBusy => 409,
            Code::ThreadBindingConflict | Code::ResumeRequired => 409,
            Code::ResumeAlreadyApplied | Code::ExecutionLost => 409,
            Code::StatePersistenceFailed => 500,
            Code::StateUnavailable | Code::A2aUnavailable => 503,
            Code::A2aProtocolError | Code::A2aExecutionFailed => 502,
            Code::Cancelled => 409,
            Code::InternalError => 500,
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The language of user-visible messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Lang {
    #[default]
    En,
    Zh,
}

impl Lang {
    /// `preferredLanguage` (when given) wins over `Accept-Language`; English is the fallback.
    pub fn choose(preferred: Option<&str>, accept_language: Option<&str>) -> Lang {
        if let Some(lang) = preferred.and_then(Lang::from_tag) {
            return lang;
        }
        let Some(header) = accept_language else {
            return Lang::En;
        };
        // Highest q first; ties keep header order.
        let mut tags: Vec<(f32, usize, &str)> = header
            .split(',')
            .enumerate()
            .filter_map(|(i, item)| {
                let mut bits = item.split(';');
                let tag = bits.next()?.trim();
                let q = bits
                    .find_map(|b| b.trim().strip_prefix("q="))
                    .and_then(|q| q.parse::<f32>().ok())
                    .unwrap_or(1.0);
                Some((q, i, tag))
            })
            .collect();
        tags.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        tags.iter()
            .filter(|t| t.0 > 0.0)
            .find_map(|t| Lang::from_tag(t.2))
            .unwrap_or(Lang::En)
    }

    fn from_tag(tag: &str) -> Option<Lang> {
        let primary = tag.trim().split(['-', '_']).next()?.to_ascii_lowercase();
        match primary.as_str() {
            "zh" => Some(Lang::Zh),
            "en" => Some(Lang::En),
            _ => None,
        }
    }
}

/// A client-visible failure: a spec code plus the message in both languages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub code: Code,
    en: String,
    zh: String,
    /// Overrides [`Code::http_status`] (413, 401, 404, 405, 406, 415 all carry `INVALID_INPUT`).
    status: Option<u16>,
}

impl Error {
    pub fn new(code: Code, en: impl Into<String>, zh: impl Into<String>) -> Error {
        Error {
            code,
            en: en.into(),
            zh: zh.into(),
            status: None,
        }
    }

    /// An `INVALID_INPUT` error.
    pub fn invalid(en: impl Into<String>, zh: impl Into<String>) -> Error {
        Error::new(Code::InvalidInput, en, zh)
    }

    pub fn with_status(mut self, status: u16) -> Error {
        self.status = Some(status);
        self
    }

    pub fn status(&self) -> u16 {
        self.status.unwrap_or_else(|| self.code.http_status())
    }

    pub fn message(&self, lang: Lang) -> &str {
        match lang {
            Lang::En => &self.en,
            Lang::Zh => &self.zh,
        }
    }

    /// The pre-SSE HTTP body: `{"error":{"code","message"}}`.
    pub fn to_json(&self, lang: Lang) -> serde_json::Value {
        serde_json::json!({"error": {"code": self.code.as_str(), "message": self.message(lang)}})
    }

    pub fn persistence(what: &str) -> Error {
        Error::new(
            Code::StatePersistenceFailed,
            format!("Recovery-critical state could not be written reliably ({what})."),
            format!("恢复关键状态无法可靠写入（{what}）。"),
        )
    }

    pub fn a2a_unavailable(detail: &str) -> Error {
        Error::new(
            Code::A2aUnavailable,
            format!("The local A2A execution service is unavailable: {detail}."),
            format!("本地 A2A 执行服务不可用：{detail}。"),
        )
    }

    pub fn a2a_protocol(detail: &str) -> Error {
        Error::new(
            Code::A2aProtocolError,
            format!("The A2A service broke the protocol: {detail}."),
            format!("A2A 服务违反协议：{detail}。"),
        )
    }

    pub fn a2a_failed(detail: &str) -> Error {
        Error::new(
            Code::A2aExecutionFailed,
            format!("The A2A task failed: {detail}"),
            format!("A2A 任务执行失败：{detail}"),
        )
    }

    /// The answers the HTTP layer gives by itself to a request it cannot serve (framing, limits,
    /// connection cap), by status.
    pub fn http_limit(status: u16) -> Error {
        let (en, zh) = match status {
            400 => (
                "The request is not valid HTTP/1.1 (malformed or ambiguous framing).",
                "请求不是合法的 HTTP/1.1（格式错误或分帧有歧义）。",
            ),
            408 => (
                "The request was not received in time.",
                "未能在限定时间内收到完整请求。",
            ),
            413 => ("The request body is too large.", "请求体过大。"),
            414 => ("The request target (URL) is too long.", "请求 URL 过长。"),
            431 => (
                "The request header section is too large or has too many fields.",
                "请求头过大或字段过多。",
            ),
            503 => {
                return Error::new(
                    Code::A2aUnavailable,
                    "The server is at its connection limit; retry shortly.",
                    "服务器连接数已达上限，请稍后重试。",
                )
            }
            _ => ("The request could not be served.", "无法处理该请求。"),
        };
        Error::invalid(en, zh).with_status(status)
    }

    /// A handler panicked: the client gets this, the log gets the backtrace.
    pub fn internal() -> Error {
        Error::new(
            Code::InternalError,
            "Internal server error; the request was not completed.",
            "服务器内部错误，请求未完成。",
        )
    }

    /// No thread could be started for a request: retry later.
    pub fn overloaded() -> Error {
        Error::new(
            Code::A2aUnavailable,
            "The server cannot take more requests right now; retry shortly.",
            "服务器暂时无法接收更多请求，请稍后重试。",
        )
    }

    pub fn cancelled() -> Error {
        Error::new(
            Code::Cancelled,
            "The execution was cancelled.",
            "该 execution 已取消。",
        )
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.en)
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
    }

    #[test]
    fn accept_language_respects_q_values() {
        assert_eq!(Lang::choose(None, Some("fr, en;q=0.5, zh;q=0.8")), Lang::Zh);
        assert_eq!(Lang::choose(None, Some("zh-TW;q=0, en")), Lang::En);
        assert_eq!(Lang::choose(Some("fr"), Some("zh-Hans")), Lang::Zh);
        assert_eq!(Lang::choose(None, None), Lang::En);
    }

    #[test]
    fn error_json_has_code_and_localized_message() {
        let e = Error::invalid("bad", "坏");
        assert_eq!(e.to_json(Lang::Zh)["error"]["message"], "坏");
        assert_eq!(e.to_json(Lang::En)["error"]["code"], "INVALID_INPUT");
        assert_eq!(e.status(), 400);
        assert_eq!(e.with_status(413).status(), 413);
    }

    #[test]
    fn http_limit_answers_use_the_catalogue() {
        for status in [400, 408, 413, 414, 431] {
            let e = Error::http_limit(status);
            assert_eq!((e.code, e.status()), (Code::InvalidInput, status));
            assert!(!e.message(Lang::Zh).is_empty());
        }
        let e = Error::http_limit(503);
        assert_eq!((e.code, e.status()), (Code::A2aUnavailable, 503));
        assert_eq!(
            e.message(Lang::En),
            "The server is at its connection limit; retry shortly."
        );
    }
}
