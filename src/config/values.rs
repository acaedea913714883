//! The value parsers: numbers, durations, switches, lists, paths.

use std::path::PathBuf;
use std::time::Duration;

use super::LogFormat;

/// The directories a run's `cwd` may be under: the environment's list, or the current and the
/// temporary directory.
pub(super) fn allowed_cwds(env: &impl Fn(&str) -> Option<String>) -> Vec<PathBuf> {
    let allowed = env("IAC_CODE_AGUI_ALLOWED_CWDS")
        .or_else(|| env("IACCODE_A2A_ALLOWED_CWDS"))
        .filter(|v| !v.trim().is_empty());
    match allowed {
        Some(v) => std::env::split_paths(&v)
            .filter(|p| !p.as_os_str().is_empty())
            .collect(),
        None => {
            let mut roots = vec![std::env::temp_dir()];
            if let Ok(cwd) = std::env::current_dir() {
                roots.insert(0, cwd);
            }
            roots
        }
    }
}

pub(super) fn number<T: std::str::FromStr>(
    v: Option<String>,
    name: &str,
    default: T,
) -> Result<T, String> {
    match v {
        None => Ok(default),
        Some(v) => v
            .trim()
            .parse()
            .map_err(|_| format!("'--{name}' expects a number, got '{v}'")),
    }
}

pub(super) fn seconds(v: Option<String>, name: &str, default: f64) -> Result<Duration, String> {
    let secs: f64 = number(v, name, default)?;
    Duration::try_from_secs_f64(secs).map_err(|_| format!("'--{name}' must be 0 or more seconds"))
}

pub(super) fn positive(v: Option<String>, name: &str, default: usize) -> Result<usize, String> {
    match number(v, name, default)? {
        0 => Err(format!("'--{name}' must be above 0")),
        n => Ok(n),
    }
}

pub(super) fn positive_seconds(
    v: Option<String>,
    name: &str,
    default: f64,
) -> Result<Duration, String> {
    let d = seconds(v, name, default)?;
    if d.is_zero() {
        return Err(format!("'--{name}' must be above 0 seconds"));
    }
    Ok(d)
}

/// `--allowed-host` values: comma-separated, trimmed, lower-cased (Host matching ignores case).
pub(super) fn host_list(v: Option<String>) -> Result<Vec<String>, String> {
    let Some(v) = v else {
        return Ok(Vec::new());
    };
    let hosts: Vec<String> = v
        .split(',')
        .map(|h| h.trim().to_ascii_lowercase())
        .filter(|h| !h.is_empty())
        .collect();
    if let Some(bad) = hosts.iter().find(|h| h.contains(['/', '@', ' '])) {
        return Err(format!("'--allowed-host' expects a host name, got '{bad}'"));
    }
    Ok(hosts)
}

/// `--cors-allow-origin` values: comma-separated exact origins (`scheme://host[:port]`, no path,
/// lower-cased) or `*`.
pub(super) fn origin_list(v: Option<String>) -> Result<Vec<String>, String> {
    let Some(v) = v else {
        return Ok(Vec::new());
    };
    let origins: Vec<String> = v
        .split(',')
        .map(|o| o.trim().trim_end_matches('/').to_ascii_lowercase())
        .filter(|o| !o.is_empty())
        .collect();
    let valid = |o: &str| {
        o == "*"
            || ["http://", "https://"].iter().any(|s| {
                o.strip_prefix(s).is_some_and(|rest| {
                    !rest.is_empty() && !rest.contains(['/', '@', ' ', '?', '#', '*'])
                })
            })
    };
    if let Some(bad) = origins.iter().find(|o| !valid(o)) {
        return Err(format!(
            "'--cors-allow-origin' expects an origin like https://console.example:8443, got '{bad}'"
        ));
    }
    Ok(origins)
}

pub(super) fn flag(v: Option<String>, name: &str) -> Result<bool, String> {
    match v.map(|v| v.trim().to_ascii_lowercase()).as_deref() {
        None => Ok(false),
        Some("true" | "1" | "yes" | "on") => Ok(true),
        Some("false" | "0" | "no" | "off" | "") => Ok(false),
        Some(other) => Err(format!("'--{name}' expects true or false, got '{other}'")),
    }
}

pub(super) fn split_command(cmd: &str) -> Result<Vec<String>, String> {
    let parts: Vec<String> = cmd.split_whitespace().map(String::from).collect();
    if parts.is_empty() {
        return Err("'--a2a-command' must not be empty".into());
    }
    Ok(parts)
}

/// `~` and `$VAR`/`${VAR}` expansion, as the reference applies to its state and config dirs.
pub(super) fn expand_path(raw: &str, env: &impl Fn(&str) -> Option<String>) -> PathBuf {
    let raw = raw.trim();
    let mut out = String::new();
    let rest = match raw.strip_prefix('~') {
        Some(r) if r.is_empty() || r.starts_with('/') => {
            out.push_str(&env("HOME").unwrap_or_else(|| "~".into()));
            r
        }
        _ => raw,
    };
    let mut chars = rest.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '$' {
            out.push(c);
            continue;
        }
        let braced = chars.peek() == Some(&'{');
        if braced {
            chars.next();
        }
        let mut name = String::new();
        while let Some(&n) = chars.peek() {
            if n.is_ascii_alphanumeric() || n == '_' {
                name.push(n);
                chars.next();
            } else {
                break;
            }
        }
        if braced && chars.peek() == Some(&'}') {
            chars.next();
        }
        match env(&name) {
            // Like os.path.expandvars: an unknown variable stays as written.
            None if braced => out.push_str(&format!("${{{name}}}")),
            None => out.push_str(&format!("${name}")),
            Some(v) => out.push_str(&v),
        }
    }
    PathBuf::from(out)
}

pub(super) fn log_format(v: Option<&str>) -> Result<LogFormat, String> {
    match v.map(str::trim) {
        None | Some("" | "text") => Ok(LogFormat::Text),
        Some("json") => Ok(LogFormat::Json),
        Some(other) => Err(format!(
            "'--log-format' expects text or json, got '{other}'"
        )),
    }
}
