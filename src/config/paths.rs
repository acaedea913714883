//! The paths read from the environment: `~` and `$VAR` expansion, the config root, the allowed
//! workspace roots.

use std::path::{Path, PathBuf};

use super::defs::{ALLOWED_CWDS, CONFIG_DIR, KERNEL_ALLOWED_CWDS};

/// `IAC_CODE_CONFIG_DIR` (expanded), else `~/.iac-code`.
pub(super) fn config_dir(env: &dyn Fn(&str) -> Option<String>) -> PathBuf {
    env(CONFIG_DIR.name)
        .filter(|v| !v.trim().is_empty())
        .map(|d| expand_path(&d, env))
        .or_else(|| env("HOME").map(|h| Path::new(&h).join(".iac-code")))
        .unwrap_or_else(|| PathBuf::from(".iac-code"))
}

/// The directories a run's `cwd` may be under: the environment's list, or the current and the
/// temporary directory.
pub(super) fn allowed_cwds(env: &dyn Fn(&str) -> Option<String>) -> Vec<PathBuf> {
    let allowed = env(ALLOWED_CWDS.name)
        .or_else(|| env(KERNEL_ALLOWED_CWDS))
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

/// `~` and `$VAR`/`${VAR}` expansion, as the reference applies to its state and config dirs.
pub(super) fn expand_path(raw: &str, env: &dyn Fn(&str) -> Option<String>) -> PathBuf {
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
