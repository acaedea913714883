//! The `--config` file: a flat YAML subset whose keys are the table's option names.

use std::collections::HashMap;

use super::defs::DEFS;

/// A flat YAML subset: `key: value` lines, `#` comments, optional quotes.
pub(super) fn parse_yaml(path: &str) -> Result<HashMap<String, String>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read --config file '{path}': {e}"))?;
    parse_yaml_text(path, &text)
}

/// The YAML subset in `text` (read from `path`, which errors name).
pub(crate) fn parse_yaml_text(path: &str, text: &str) -> Result<HashMap<String, String>, String> {
    let mut map = HashMap::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line == "---" {
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            return Err(format!("{path}:{}: expected 'key: value'", n + 1));
        };
        let key = key.trim().replace('_', "-");
        if !DEFS.iter().any(|d| d.name == key && d.given_by.yaml()) {
            return Err(format!("{path}:{}: unknown key '{key}'", n + 1));
        }
        let mut value = value.trim();
        if !value.starts_with(['"', '\'']) {
            value = value.split(" #").next().unwrap_or("").trim();
        }
        let value = value.trim_matches(|c| c == '"' || c == '\'');
        map.insert(key, value.to_string());
    }
    Ok(map)
}
