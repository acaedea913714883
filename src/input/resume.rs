//! The `resume` entries of a run request: the answers to pending interrupts.

use super::json::{
    each_element, enum_field, kind, missing, non_empty, object, value, wrong_type, Kind,
};
use crate::error::{Error, Msg};
use serde_json::value::RawValue;
use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ResumeEntry {
    pub(crate) interrupt_id: String,
    pub(crate) cancelled: bool,
    pub(crate) payload: Option<Value>,
}

impl ResumeEntry {
    /// The canonical form whose digest marks an applied answer: `{status, payload}`.
    pub(crate) fn canonical(&self) -> Value {
        let status = if self.cancelled {
            "cancelled"
        } else {
            "resolved"
        };
        let mut v = serde_json::json!({ "status": status });
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
        let status = enum_field(
            &obj,
            "status",
            &format!("{path}.status"),
            &["resolved", "cancelled"],
        )?
        .ok_or_else(|| missing(&format!("{path}.status")))?;
        let payload = match obj.get("payload") {
            None => None,
            Some(p) if kind(p) == Kind::Null => None,
            Some(p) => Some(value(p)?),
        };
        entries.push(ResumeEntry {
            interrupt_id,
            cancelled: status == "cancelled",
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
