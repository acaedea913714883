//! The `resume` entries of a run request: the answers to pending interrupts.

use super::json::{
    choice, each_element, kind, missing, non_empty, object, value, wrong_type, Kind,
};
use crate::error::{Error, Msg};
use serde_json::value::RawValue;
use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ResumeEntry {
    pub(crate) interrupt_id: String,
    pub(crate) status: ResumeStatus,
    pub(crate) payload: Option<Value>,
}

/// How the client answered an interrupt (`resume[].status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResumeStatus {
    /// Answered with a payload.
    Resolved,
    /// Declined: a permission is denied, a question or selection cancels the execution.
    Cancelled,
}

impl ResumeStatus {
    const NAMES: [(ResumeStatus, &'static str); 2] = [
        (ResumeStatus::Resolved, "resolved"),
        (ResumeStatus::Cancelled, "cancelled"),
    ];

    fn as_str(self) -> &'static str {
        match self {
            ResumeStatus::Resolved => "resolved",
            ResumeStatus::Cancelled => "cancelled",
        }
    }
}

impl ResumeEntry {
    /// The canonical form whose digest marks an applied answer: `{status, payload}`.
    pub(crate) fn canonical(&self) -> Value {
        let mut v = serde_json::json!({ "status": self.status.as_str() });
        if let Some(p) = &self.payload {
            v["payload"] = p.clone();
        }
        v
    }
}

pub(super) fn parse_resume(raw: &RawValue) -> Result<Vec<ResumeEntry>, Error> {
    if kind(raw) != Kind::Array {
        return Err(wrong_type("resume", Msg::MustBeArray));
    }
    let mut entries = Vec::new();
    each_element(raw, |i, item| {
        let path = format!("resume[{i}]");
        let obj =
            object(item, &["interruptId", "status", "payload"], &path)?.no_duplicate(&path)?;
        let interrupt_id = non_empty(&obj, "interruptId", &format!("{path}.interruptId"))?;
        let status = choice(
            &obj,
            "status",
            &format!("{path}.status"),
            &ResumeStatus::NAMES,
        )?
        .ok_or_else(|| missing(&format!("{path}.status")))?;
        let payload = match obj.get("payload") {
            None => None,
            Some(p) if kind(p) == Kind::Null => None,
            Some(p) => Some(value(p)?),
        };
        entries.push(ResumeEntry {
            interrupt_id,
            status,
            payload,
        });
        Ok(())
    })?;
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use crate::input::fixtures::{base, parse};
    use serde_json::json;

    #[test]
    fn resume_entries_parse_and_a_message_is_optional_then() {
        let mut v = base();
        v["messages"] = json!([]);
        v["resume"] =
            json!([{"interruptId": "p1", "status": "resolved", "payload": {"decision": "deny"}}]);
        let r = parse(&v).unwrap();
        assert_eq!(
            r.resume.unwrap()[0].payload,
            Some(json!({"decision": "deny"}))
        );
        v["resume"] = json!([{"interruptId": "p1", "status": "maybe"}]);
        assert!(parse(&v).is_err());
        v.as_object_mut().unwrap().remove("resume");
        assert!(parse(&v).is_err());
    }
}
