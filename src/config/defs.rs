//! The flag table: each option's name, whether it takes a value, its variable and YAML key.

/// `(flag, takes a value)`; YAML keys are the flag names without dashes.
pub(super) const FLAGS: &[(&str, bool)] = &[
    ("host", true),
    ("port", true),
    ("a2a-url", true),
    ("a2a-command", true),
    ("state-dir", true),
    ("idle-shutdown", true),
    ("heartbeat-interval", true),
    ("interrupt-ttl", true),
    ("a2a-idle-timeout", true),
    ("kernel-start-timeout", true),
    ("workers", true),
    ("max-connections", true),
    ("max-header-bytes", true),
    ("max-headers", true),
    ("max-url-bytes", true),
    ("header-timeout", true),
    ("body-timeout", true),
    ("keepalive-timeout", true),
    ("write-timeout", true),
    ("allowed-host", true),
    ("pair-mode", false),
    ("detach-grace", true),
    ("replay-buffer-bytes", true),
    ("cors-allow-origin", true),
    ("debug", false),
    ("log-stdout", false),
    ("log-format", true),
    ("config", true),
];

/// YAML keys with no command-line flag (the reference's): secrets are not put on command lines,
/// which any local user can read in /proc.
pub(super) const YAML_ONLY: &[&str] = &["auth-token", "a2a-token"];

/// The variable every option and YAML-only key also reads: `IAC_CODE_AGUI_` and the name in upper
/// snake case (`max-connections` → `IAC_CODE_AGUI_MAX_CONNECTIONS`), the reference's own rule for
/// the options it gives variables; one rule, so a new flag cannot forget its variable.
pub(super) fn env_var(key: &str) -> String {
    format!(
        "IAC_CODE_AGUI_{}",
        key.to_ascii_uppercase().replace('-', "_")
    )
}
