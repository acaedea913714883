//! The value rules: how one option's text becomes its typed value (numbers, durations, switches,
//! lists, the kernel command, paths), each error naming the option.

use std::path::PathBuf;
use std::time::Duration;

use super::loopback::normalize_a2a_url;
use super::paths::{config_dir, expand_path};
use super::LogFormat;

/// One option's text as its sources gave it (or the table's default), named for its errors.
pub(crate) struct Value<'a> {
    name: &'static str,
    text: Option<String>,
    env: &'a dyn Fn(&str) -> Option<String>,
}

impl<'a> Value<'a> {
    pub(super) fn new(
        name: &'static str,
        text: Option<String>,
        env: &'a dyn Fn(&str) -> Option<String>,
    ) -> Value<'a> {
        Value { name, text, env }
    }

    /// The error `'--<name>' <why>`.
    pub(crate) fn error(&self, why: &str) -> String {
        format!("'--{}' {why}", self.name)
    }

    /// The text; an option read this way has a default in the table, so it is always there.
    fn given(&self) -> Result<&str, String> {
        self.text
            .as_deref()
            .ok_or_else(|| self.error("has no value and no default"))
    }

    pub(crate) fn string(&self) -> Result<String, String> {
        self.given().map(str::to_string)
    }

    /// The text, an empty one counting as none (the tokens).
    pub(crate) fn non_empty(self) -> Option<String> {
        self.text.filter(|v| !v.is_empty())
    }

    pub(crate) fn number<T: std::str::FromStr>(&self) -> Result<T, String> {
        let v = self.given()?;
        v.trim()
            .parse()
            .map_err(|_| self.error(&format!("expects a number, got '{v}'")))
    }

    pub(crate) fn seconds(&self) -> Result<Duration, String> {
        let secs: f64 = self.number()?;
        Duration::try_from_secs_f64(secs).map_err(|_| self.error("must be 0 or more seconds"))
    }

    pub(crate) fn positive(&self) -> Result<usize, String> {
        match self.number()? {
            0 => Err(self.error("must be above 0")),
            n => Ok(n),
        }
    }

    pub(crate) fn positive_seconds(&self) -> Result<Duration, String> {
        let d = self.seconds()?;
        if d.is_zero() {
            return Err(self.error("must be above 0 seconds"));
        }
        Ok(d)
    }

    /// A switch: absent is off.
    pub(crate) fn switch(&self) -> Result<bool, String> {
        match self
            .text
            .as_deref()
            .map(|v| v.trim().to_ascii_lowercase())
            .as_deref()
        {
            None => Ok(false),
            Some("true" | "1" | "yes" | "on") => Ok(true),
            Some("false" | "0" | "no" | "off" | "") => Ok(false),
            Some(other) => Err(self.error(&format!("expects true or false, got '{other}'"))),
        }
    }

    /// Host names: comma-separated, trimmed, lower-cased (Host matching ignores case).
    pub(crate) fn hosts(&self) -> Result<Vec<String>, String> {
        let hosts = self.list(|h| h.trim().to_ascii_lowercase());
        if let Some(bad) = hosts.iter().find(|h| h.contains(['/', '@', ' '])) {
            return Err(self.error(&format!("expects a host name, got '{bad}'")));
        }
        Ok(hosts)
    }

    /// Comma-separated exact origins (`scheme://host[:port]`, no path, lower-cased) or `*`.
    pub(crate) fn origins(&self) -> Result<Vec<String>, String> {
        let origins = self.list(|o| o.trim().trim_end_matches('/').to_ascii_lowercase());
        let valid = |o: &str| {
            o == "*"
                || ["http://", "https://"].iter().any(|s| {
                    o.strip_prefix(s).is_some_and(|rest| {
                        !rest.is_empty() && !rest.contains(['/', '@', ' ', '?', '#', '*'])
                    })
                })
        };
        if let Some(bad) = origins.iter().find(|o| !valid(o)) {
            return Err(self.error(&format!(
                "expects an origin like https://console.example:8443, got '{bad}'"
            )));
        }
        Ok(origins)
    }

    /// The comma-separated items, each cleaned by `clean`, the empty ones dropped.
    fn list(&self, clean: impl Fn(&str) -> String) -> Vec<String> {
        let Some(v) = &self.text else {
            return Vec::new();
        };
        v.split(',')
            .map(clean)
            .filter(|item| !item.is_empty())
            .collect()
    }

    pub(crate) fn log_format(&self) -> Result<LogFormat, String> {
        match self.text.as_deref().map(str::trim) {
            None | Some("" | "text") => Ok(LogFormat::Text),
            Some("json") => Ok(LogFormat::Json),
            Some(other) => Err(self.error(&format!("expects text or json, got '{other}'"))),
        }
    }

    /// A command line split at whitespace.
    pub(crate) fn command(&self) -> Result<Vec<String>, String> {
        let parts: Vec<String> = self.given()?.split_whitespace().map(String::from).collect();
        if parts.is_empty() {
            return Err(self.error("must not be empty"));
        }
        Ok(parts)
    }

    /// The checked loopback URL; blank is none (a managed kernel).
    pub(crate) fn a2a_url(self) -> Result<Option<String>, String> {
        match self.text.filter(|u| !u.trim().is_empty()) {
            Some(url) => normalize_a2a_url(&url).map(Some),
            None => Ok(None),
        }
    }

    /// The state directory, expanded; blank is `<config-dir>/agui`.
    pub(crate) fn state_dir(self) -> PathBuf {
        match self.text.filter(|d| !d.trim().is_empty()) {
            Some(dir) => expand_path(&dir, self.env),
            None => config_dir(self.env).join("agui"),
        }
    }
}
