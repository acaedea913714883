//! Token usage: the kernel's usage reports summed per provider and model, sent with the run's end.

use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

/// The counters summed; anything else in a report is ignored.
const COUNTERS: [&str; 6] = [
    "inputTokens",
    "outputTokens",
    "totalTokens",
    "reasoningTokens",
    "cachedInputTokens",
    "cacheWriteInputTokens",
];

/// Sums per `(provider, model)`; an absent label is the empty string.
#[derive(Default)]
pub(super) struct Usage {
    totals: BTreeMap<(String, String), Map<String, Value>>,
}

impl Usage {
    /// Adds one report: finite, non-negative counters, rounded to whole tokens.
    pub(super) fn add(&mut self, report: &Value) {
        let Some(u) = report.as_object() else { return };
        let label = |k: &str| u.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let entry = self
            .totals
            .entry((label("provider"), label("model")))
            .or_default();
        for key in COUNTERS {
            if let Some(n) = u
                .get(key)
                .and_then(Value::as_f64)
                .filter(|n| n.is_finite() && *n >= 0.0)
            {
                let sum = entry.get(key).and_then(Value::as_u64).unwrap_or(0) + n.round() as u64;
                entry.insert(key.into(), json!(sum));
            }
        }
    }

    /// The `usage` list of `RUN_FINISHED`/`RUN_ERROR`, or `None` when nothing was reported.
    pub(super) fn list(&self) -> Option<Value> {
        if self.totals.is_empty() {
            return None;
        }
        let list = self
            .totals
            .iter()
            .map(|((provider, model), counts)| {
                let mut v = Map::new();
                if !provider.is_empty() {
                    v.insert("provider".into(), json!(provider));
                }
                if !model.is_empty() {
                    v.insert("model".into(), json!(model));
                }
                v.extend(counts.clone());
                Value::Object(v)
            })
            .collect();
        Some(Value::Array(list))
    }
}
