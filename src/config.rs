//! Start-up configuration: the reference adapter's flags, environment and YAML keys, plus ours.
//!
//! Precedence, as in the reference (a click application): command line, then environment, then the
//! `--config` YAML file, then the defaults.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Config {
    pub host: String,
    pub port: u16,
    /// Loopback A2A URL; `None` starts a managed kernel.
    pub a2a_url: Option<String>,
    /// Kernel command line (`--host`/`--port` are appended).
    pub(crate) a2a_command: Vec<String>,
    pub a2a_token: Option<String>,
    pub(crate) auth_token: Option<String>,
    pub state_dir: PathBuf,
    pub allowed_cwds: Vec<PathBuf>,
    pub idle_shutdown: Duration,
    pub debug: bool,
    pub log_stdout: bool,
    pub log_format: LogFormat,
    pub heartbeat: Duration,
    pub(crate) interrupt_ttl: Duration,
    /// How long the upstream stream may stay silent before the run fails (0 = never).
    pub a2a_idle_timeout: Duration,
    pub(crate) kernel_start_timeout: Duration,
    pub workers: usize,
    /// Open client connections; beyond it a fast 503.
    pub(crate) max_connections: usize,
    /// Request line plus headers, in bytes (431 beyond).
    pub(crate) max_header_bytes: usize,
    /// Header lines per request (431 beyond).
    pub(crate) max_headers: usize,
    /// Request-target length (414 beyond).
    pub(crate) max_url_bytes: usize,
    /// Time to receive a request's head (408 and close beyond).
    pub(crate) header_timeout: Duration,
    /// Total time to receive a request's body (408 and close beyond).
    pub(crate) body_timeout: Duration,
    /// Idle time of a keep-alive connection before it is closed.
    pub(crate) keepalive_timeout: Duration,
    /// A client that accepts no bytes for this long is dropped.
    pub(crate) write_timeout: Duration,
    /// Extra `Host` values accepted when bound to a loopback address (lower-case).
    pub(crate) allowed_hosts: Vec<String>,
    /// One of several pairs behind a balancer: unknown threads with history are refused.
    pub(crate) pair_mode: PairMode,
    /// Origins whose pages may call us from another origin (exact; `*` only without a token).
    pub(crate) cors_allow_origins: Vec<String>,
    /// How long a run whose client left keeps going for an observer to re-attach (0: cancelled
    /// at once, the spec's rule).
    pub detach_grace: Duration,
    /// Bytes of recent events kept per execution for an exact resume (`Last-Event-ID`).
    pub replay_buffer_bytes: usize,
}

/// `--log-format`: env_logger's text lines, or one JSON object a line with the run's ids as fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// What the command line asked for.
#[derive(Debug)]
pub enum Command {
    Run(Box<Config>),
    Help,
    Version,
}

pub const USAGE: &str = "\
Usage: iac-code-agui [OPTIONS]

AG-UI (HTTP + SSE) adapter for the iac-code A2A execution kernel.

Options:
  --host HOST                 bind address [env IAC_CODE_AGUI_HOST] (default 127.0.0.1)
  --port PORT                 port [env IAC_CODE_AGUI_PORT] (default 8000)
  --a2a-url URL               loopback A2A URL [env IAC_CODE_AGUI_A2A_URL];
                              empty starts a managed `iac-code a2a` kernel
  --a2a-command CMD           managed kernel command (default \"iac-code a2a\";
                              --host/--port are appended) [env IAC_CODE_AGUI_A2A_COMMAND]
  --state-dir DIR             thread-state directory [env IAC_CODE_AGUI_STATE_DIR]
                              (default <config-dir>/agui; config-dir from IAC_CODE_CONFIG_DIR,
                              else ~/.iac-code)
  --idle-shutdown SECS        exit after SECS without requests, 0 = off (default 0)
  --heartbeat-interval SECS   SSE heartbeat after SECS without an event (default 15)
  --interrupt-ttl SECS        lifetime of a pending interrupt (default 540)
  --a2a-idle-timeout SECS     fail a run whose upstream is silent this long, 0 = never (default 900)
  --kernel-start-timeout SECS wait this long for the managed kernel's /health (default 60)
  --workers N                 HTTP dispatcher threads; each request runs on its own
                              thread (default 8)
  --max-connections N         open client connections; beyond it a fast 503 (default 2048)
  --max-header-bytes N        request line plus headers, in bytes; beyond it 431 (default 16384)
  --max-headers N             header lines per request; beyond it 431 (default 100)
  --max-url-bytes N           request-target length; beyond it 414 (default 8192)
  --header-timeout SECS       time to send the request head; beyond it 408 (default 60)
  --body-timeout SECS         total time to send the request body; beyond it 408 (default 60)
  --keepalive-timeout SECS    idle keep-alive connections are closed after SECS (default 5)
  --write-timeout SECS        a client that accepts no bytes this long is dropped (default 60)
  --allowed-host HOST         extra Host header value accepted when bound to loopback (only
                              localhost, 127.0.0.1 and [::1] are otherwise); repeatable, env
                              comma-separated; on a non-loopback bind, enables the Host check
  --cors-allow-origin ORIGIN  a web page origin (scheme://host[:port]) allowed to call this
                              server from another origin (CORS; off by default); repeatable,
                              env comma-separated; `*` only without IAC_CODE_AGUI_AUTH_TOKEN
  --detach-grace SECS         a run whose client left keeps running this long for a client to
                              re-attach (subscribe route); then it is cancelled (default 0:
                              a client that leaves cancels its run, as the AG-UI spec says)
  --replay-buffer-bytes N     recent events kept per execution for an exact resume with
                              Last-Event-ID (default 262144)
  --pair-mode                 one of several adapter + kernel pairs behind a load balancer:
                              a thread this pair never held, arriving with history or a
                              resume, is refused (503 STATE_UNAVAILABLE), never restarted
  -d, --debug                 debug logging
  --log-stdout, --no-log-stdout
                              log to stdout instead of stderr (default: stderr)
  --log-format text|json      log lines as text, or one JSON object each with threadId, runId
                              and executionId as fields when known [env IAC_CODE_AGUI_LOG_FORMAT]
                              (default text)
  --config FILE               YAML file with the keys above (flat `key: value`), plus
                              `auth-token` and `a2a-token` (the variables below win over them)
                              Each option but --config also reads IAC_CODE_AGUI_<OPTION> (upper
                              snake case, e.g. IAC_CODE_AGUI_MAX_CONNECTIONS); the command line
                              wins over the variable, the variable over the file.
  -h, --help                  print this help
  -V, --version               print the version

Environment: IAC_CODE_AGUI_AUTH_TOKEN (protects this endpoint and /metrics), IAC_CODE_AGUI_A2A_TOKEN
(upstream bearer), IAC_CODE_AGUI_ALLOWED_CWDS (allowed workspace roots, ':'-separated; falls back to
IACCODE_A2A_ALLOWED_CWDS; default: the current directory and the system temp directory).
";

/// `(flag, takes a value)`; YAML keys are the flag names without dashes.
const FLAGS: &[(&str, bool)] = &[
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
const YAML_ONLY: &[&str] = &["auth-token", "a2a-token"];

/// The variable every option and YAML-only key also reads: `IAC_CODE_AGUI_` and the name in upper
/// snake case (`max-connections` → `IAC_CODE_AGUI_MAX_CONNECTIONS`), the reference's own rule for
/// the options it gives variables; one rule, so a new flag cannot forget its variable.
fn env_var(key: &str) -> String {
    format!(
        "IAC_CODE_AGUI_{}",
        key.to_ascii_uppercase().replace('-', "_")
    )
}

impl Command {
    /// Parses `args` (without the program name) with `env` as the environment.
    pub fn parse<I, E>(args: I, env: E) -> Result<Command, String>
    where
        I: IntoIterator<Item = String>,
        E: Fn(&str) -> Option<String>,
    {
        let cli = match read_flags(args)? {
            Flags::Given(cli) => cli,
            Flags::Early(command) => return Ok(command),
        };
        let yaml = match cli.get("config") {
            Some(path) => parse_yaml(path)?,
            None => HashMap::new(),
        };
        let get = |key: &str| -> Option<String> {
            if let Some(v) = cli.get(key) {
                return Some(v.clone());
            }
            if let Some(v) = env(&env_var(key)).filter(|v| !v.is_empty()) {
                return Some(v);
            }
            yaml.get(key).cloned()
        };
        let config_dir = env("IAC_CODE_CONFIG_DIR")
            .filter(|v| !v.trim().is_empty())
            .map(|d| expand_path(&d, &env))
            .or_else(|| env("HOME").map(|h| Path::new(&h).join(".iac-code")))
            .unwrap_or_else(|| PathBuf::from(".iac-code"));
        let a2a_url = match get("a2a-url").filter(|u| !u.trim().is_empty()) {
            Some(url) => Some(normalize_a2a_url(&url)?),
            None => None,
        };
        let allowed_cwds = allowed_cwds(&env);
        let config = Config {
            host: get("host").unwrap_or_else(|| "127.0.0.1".into()),
            port: number(get("port"), "port", 8000)?,
            a2a_url,
            a2a_command: split_command(
                &get("a2a-command").unwrap_or_else(|| "iac-code a2a".into()),
            )?,
            // The environment wins over YAML (`env or config.get(...)` in the reference); an empty
            // value means none.
            a2a_token: get("a2a-token").filter(|v| !v.is_empty()),
            auth_token: get("auth-token").filter(|v| !v.is_empty()),
            state_dir: get("state-dir")
                .filter(|d| !d.trim().is_empty())
                .map(|d| expand_path(&d, &env))
                .unwrap_or_else(|| config_dir.join("agui")),
            allowed_cwds,
            idle_shutdown: seconds(get("idle-shutdown"), "idle-shutdown", 0.0)?,
            debug: flag(get("debug"), "debug")?,
            log_stdout: flag(get("log-stdout"), "log-stdout")?,
            log_format: log_format(get("log-format").as_deref())?,
            heartbeat: seconds(get("heartbeat-interval"), "heartbeat-interval", 15.0)?,
            interrupt_ttl: seconds(get("interrupt-ttl"), "interrupt-ttl", 540.0)?,
            a2a_idle_timeout: seconds(get("a2a-idle-timeout"), "a2a-idle-timeout", 900.0)?,
            kernel_start_timeout: seconds(
                get("kernel-start-timeout"),
                "kernel-start-timeout",
                60.0,
            )?,
            workers: number(get("workers"), "workers", 8usize)?.max(1),
            max_connections: positive(get("max-connections"), "max-connections", 2048)?,
            max_header_bytes: positive(get("max-header-bytes"), "max-header-bytes", 16384)?,
            max_headers: positive(get("max-headers"), "max-headers", 100)?,
            max_url_bytes: positive(get("max-url-bytes"), "max-url-bytes", 8192)?,
            header_timeout: positive_seconds(get("header-timeout"), "header-timeout", 60.0)?,
            body_timeout: positive_seconds(get("body-timeout"), "body-timeout", 60.0)?,
            keepalive_timeout: positive_seconds(
                get("keepalive-timeout"),
                "keepalive-timeout",
                5.0,
            )?,
            write_timeout: positive_seconds(get("write-timeout"), "write-timeout", 60.0)?,
            allowed_hosts: host_list(get("allowed-host"))?,
            pair_mode: match flag(get("pair-mode"), "pair-mode")? {
                true => PairMode::Several,
                false => PairMode::Single,
            },
            cors_allow_origins: origin_list(get("cors-allow-origin"))?,
            detach_grace: seconds(get("detach-grace"), "detach-grace", 0.0)?,
            replay_buffer_bytes: number(
                get("replay-buffer-bytes"),
                "replay-buffer-bytes",
                256 * 1024,
            )?,
        };
        if config.auth_token.is_some() && config.cors_allow_origins.iter().any(|o| o == "*") {
            return Err(
                "'--cors-allow-origin *' is refused while IAC_CODE_AGUI_AUTH_TOKEN is set: \
                        list the console origins exactly"
                    .into(),
            );
        }
        if config.port == 0 {
            return Err("'--port' must be between 1 and 65535".into());
        }
        if config.heartbeat.is_zero() {
            return Err("'--heartbeat-interval' must be above 0".into());
        }
        Ok(Command::Run(Box::new(config)))
    }
}

/// What the command line says before any other source is read.
enum Flags {
    /// `--help` or `--version`: nothing else is read.
    Early(Command),
    /// Each given flag's value (a repeatable one's values joined by ',').
    Given(HashMap<&'static str, String>),
}

/// Reads `args` into flag values, without looking at the environment or the YAML file.
fn read_flags<I: IntoIterator<Item = String>>(args: I) -> Result<Flags, String> {
    let mut cli: HashMap<&'static str, String> = HashMap::new();
    // The one repeatable option: its values accumulate (joined by ',' like the env form).
    let mut hosts: Vec<String> = Vec::new();
    let mut origins: Vec<String> = Vec::new();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "-h" | "--help" => return Ok(Flags::Early(Command::Help)),
            "-V" | "--version" => return Ok(Flags::Early(Command::Version)),
            // The reference's short and negative boolean forms (click `--debug/-d`,
            // `--log-stdout/--no-log-stdout`).
            "-d" => {
                cli.insert("debug", "true".into());
                continue;
            }
            "--no-log-stdout" => {
                cli.insert("log-stdout", "false".into());
                continue;
            }
            _ => {}
        }
        let Some(body) = arg.strip_prefix("--") else {
            return Err(format!("unexpected argument '{arg}'"));
        };
        let (name, inline) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (body, None),
        };
        let Some(&(flag, takes_value)) = FLAGS.iter().find(|f| f.0 == name) else {
            return Err(format!("unknown option '--{name}'"));
        };
        let value = if takes_value {
            match inline {
                Some(v) => v,
                None => args
                    .next()
                    .ok_or_else(|| format!("option '--{flag}' needs a value"))?,
            }
        } else if let Some(v) = inline {
            v
        } else {
            "true".to_string()
        };
        if flag == "allowed-host" {
            hosts.push(value);
            continue;
        }
        if flag == "cors-allow-origin" {
            origins.push(value);
            continue;
        }
        cli.insert(flag, value);
    }
    if !hosts.is_empty() {
        cli.insert("allowed-host", hosts.join(","));
    }
    if !origins.is_empty() {
        cli.insert("cors-allow-origin", origins.join(","));
    }
    Ok(Flags::Given(cli))
}

/// The directories a run's `cwd` may be under: the environment's list, or the current and the
/// temporary directory.
fn allowed_cwds(env: &impl Fn(&str) -> Option<String>) -> Vec<PathBuf> {
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

fn number<T: std::str::FromStr>(v: Option<String>, name: &str, default: T) -> Result<T, String> {
    match v {
        None => Ok(default),
        Some(v) => v
            .trim()
            .parse()
            .map_err(|_| format!("'--{name}' expects a number, got '{v}'")),
    }
}

fn seconds(v: Option<String>, name: &str, default: f64) -> Result<Duration, String> {
    let secs: f64 = number(v, name, default)?;
    Duration::try_from_secs_f64(secs).map_err(|_| format!("'--{name}' must be 0 or more seconds"))
}

fn positive(v: Option<String>, name: &str, default: usize) -> Result<usize, String> {
    match number(v, name, default)? {
        0 => Err(format!("'--{name}' must be above 0")),
        n => Ok(n),
    }
}

fn positive_seconds(v: Option<String>, name: &str, default: f64) -> Result<Duration, String> {
    let d = seconds(v, name, default)?;
    if d.is_zero() {
        return Err(format!("'--{name}' must be above 0 seconds"));
    }
    Ok(d)
}

/// `--allowed-host` values: comma-separated, trimmed, lower-cased (Host matching ignores case).
fn host_list(v: Option<String>) -> Result<Vec<String>, String> {
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
fn origin_list(v: Option<String>) -> Result<Vec<String>, String> {
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

/// Whether `host` (a bind address) is a loopback one: only then is the `Host` header checked by
/// default (a browser page can reach a loopback port through DNS rebinding).
pub(crate) fn is_loopback_host(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.to_canonical().is_loopback(),
        Err(_) => host.eq_ignore_ascii_case("localhost"),
    }
}

/// Whether this adapter is the only pair or one of several behind a balancer (`--pair-mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PairMode {
    /// The only pair: every thread may start here.
    Single,
    /// One of several: a thread this pair never held is refused when it shows history.
    Several,
}

fn flag(v: Option<String>, name: &str) -> Result<bool, String> {
    match v.map(|v| v.trim().to_ascii_lowercase()).as_deref() {
        None => Ok(false),
        Some("true" | "1" | "yes" | "on") => Ok(true),
        Some("false" | "0" | "no" | "off" | "") => Ok(false),
        Some(other) => Err(format!("'--{name}' expects true or false, got '{other}'")),
    }
}

fn split_command(cmd: &str) -> Result<Vec<String>, String> {
    let parts: Vec<String> = cmd.split_whitespace().map(String::from).collect();
    if parts.is_empty() {
        return Err("'--a2a-command' must not be empty".into());
    }
    Ok(parts)
}

/// Only loopback upstreams: the adapter forwards credentials and must not leave the host.
/// The reference's rule: scheme `http` or `https`, host `127.0.0.1`, `localhost` or `::1`; ours also
/// takes the rest of 127.0.0.0/8 and the IPv4-mapped form `::ffff:127.0.0.1`.
pub(crate) fn check_loopback_url(url: &str) -> Result<(), String> {
    let refuse = |why: &str| {
        Err(format!(
            "refusing --a2a-url '{url}': {why}; the A2A upstream must be a loopback HTTP(S) URL \
             such as http://127.0.0.1:41242"
        ))
    };
    let lower = url.to_ascii_lowercase();
    let Some(rest) = lower
        .strip_prefix("http://")
        .or_else(|| lower.strip_prefix("https://"))
    else {
        return refuse("only http:// and https:// are supported");
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains('@') {
        return refuse("user info is not allowed");
    }
    let host = if let Some(v6) = authority.strip_prefix('[') {
        v6.split(']').next().unwrap_or("")
    } else {
        authority.split(':').next().unwrap_or("")
    };
    let loopback = match host.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.to_canonical().is_loopback(),
        Err(_) => host == "localhost",
    };
    if loopback {
        Ok(())
    } else {
        refuse("the host is not a loopback address")
    }
}

/// The checked URL as the reference keeps it: trimmed, with exactly one trailing `/`
/// (`http://127.0.0.1:41242` → `http://127.0.0.1:41242/`). An `https` URL is refused here: the
/// kernel serves plain HTTP on loopback, and this build has no TLS client (a TLS stack would be
/// the largest dependency of the binary for a loopback hop), so it could only fail at connect.
pub(crate) fn normalize_a2a_url(url: &str) -> Result<String, String> {
    let url = url.trim();
    check_loopback_url(url)?;
    if url[..5].eq_ignore_ascii_case("https") {
        return Err(format!(
            "--a2a-url '{url}': https is not supported by this build (no TLS client); the \
             iac-code kernel serves plain HTTP on loopback, use http:// instead"
        ));
    }
    Ok(format!("{}/", url.trim_end_matches('/')))
}

/// `~` and `$VAR`/`${VAR}` expansion, as the reference applies to its state and config dirs.
fn expand_path(raw: &str, env: &impl Fn(&str) -> Option<String>) -> PathBuf {
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

fn log_format(v: Option<&str>) -> Result<LogFormat, String> {
    match v.map(str::trim) {
        None | Some("" | "text") => Ok(LogFormat::Text),
        Some("json") => Ok(LogFormat::Json),
        Some(other) => Err(format!(
            "'--log-format' expects text or json, got '{other}'"
        )),
    }
}

/// A flat YAML subset: `key: value` lines, `#` comments, optional quotes.
fn parse_yaml(path: &str) -> Result<HashMap<String, String>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read --config file '{path}': {e}"))?;
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
        let known = FLAGS.iter().any(|f| f.0 == key && f.0 != "config");
        if !known && !YAML_ONLY.contains(&key.as_str()) {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The flag checklist (ARCHITECTURE.md), checked: a flag missing from the help, the README
    /// or its variable there fails here, not in a user's hands.
    #[test]
    fn every_flag_is_in_the_help_and_the_readme_with_its_variable() {
        let readme = include_str!("../README.md");
        for (name, _) in FLAGS {
            let flag = format!("--{name}");
            assert!(USAGE.contains(&flag), "{flag} is not in USAGE");
            let row = format!("| `{flag}");
            assert!(
                readme.contains(&row),
                "{flag} has no row in README's tables"
            );
            if *name != "config" {
                let var = env_var(name);
                assert!(readme.contains(&var), "{var} ({flag}) is not in README");
            }
        }
        for key in YAML_ONLY {
            assert!(
                readme.contains(&env_var(key)),
                "{key}'s variable is not in README"
            );
        }
    }

    #[test]
    fn every_option_reads_its_variable_below_the_command_line() {
        assert_eq!(config(&[], &[("IAC_CODE_AGUI_WORKERS", "3")]).workers, 3);
        assert_eq!(
            config(&["--workers", "5"], &[("IAC_CODE_AGUI_WORKERS", "3")]).workers,
            5
        );
    }

    fn parse(args: &[&str], env: &[(&str, &str)]) -> Result<Command, String> {
        let env: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Command::parse(args.iter().map(|s| s.to_string()), |k| env.get(k).cloned())
    }

    fn config(args: &[&str], env: &[(&str, &str)]) -> Config {
        match parse(args, env).unwrap() {
            Command::Run(c) => *c,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn cli_beats_env_beats_defaults() {
        let c = config(&["--port=9001"], &[("IAC_CODE_AGUI_PORT", "9002")]);
        assert_eq!(c.port, 9001);
        let c = config(&[], &[("IAC_CODE_AGUI_PORT", "9002"), ("HOME", "/h")]);
        assert_eq!(c.port, 9002);
        assert_eq!(c.host, "127.0.0.1");
        assert_eq!(c.state_dir, PathBuf::from("/h/.iac-code/agui"));
        let c = config(&[], &[("IAC_CODE_CONFIG_DIR", "/cfg")]);
        assert_eq!(c.state_dir, PathBuf::from("/cfg/agui"));
    }

    #[test]
    fn unknown_flags_and_bad_values_are_usage_errors() {
        assert!(parse(&["--nope"], &[])
            .unwrap_err()
            .contains("unknown option"));
        assert!(parse(&["--port", "x"], &[]).unwrap_err().contains("number"));
        assert!(parse(&["--port"], &[])
            .unwrap_err()
            .contains("needs a value"));
        assert!(matches!(parse(&["--help"], &[]), Ok(Command::Help)));
        assert!(matches!(parse(&["-V"], &[]), Ok(Command::Version)));
    }

    #[test]
    fn non_loopback_a2a_urls_are_refused() {
        for ok in [
            "http://127.0.0.1:41242",
            "http://localhost:1/",
            "http://[::1]:5",
            "http://127.1.2.3",
        ] {
            assert!(check_loopback_url(ok).is_ok(), "{ok}");
        }
        for bad in [
            "http://10.0.0.1:1",
            "ftp://127.0.0.1:1",
            "http://example.com",
            "http://127.0.0.1@evil.com/",
            "http://[::ffff:10.0.0.1]:1",
            "http://localhost.evil.com",
        ] {
            assert!(check_loopback_url(bad).is_err(), "{bad}");
        }
        assert!(parse(&["--a2a-url", "http://192.168.1.1:80"], &[])
            .unwrap_err()
            .contains("loopback"));
    }

    #[test]
    fn a2a_urls_follow_the_reference_loopback_rule_and_get_one_trailing_slash() {
        for ok in [
            "https://127.0.0.1:1",
            "HTTP://LOCALHOST:2",
            "http://[::ffff:127.0.0.1]:3",
        ] {
            assert!(check_loopback_url(ok).is_ok(), "{ok}");
        }
        let c = config(&["--a2a-url", " http://127.0.0.1:41242 "], &[]);
        assert_eq!(c.a2a_url.as_deref(), Some("http://127.0.0.1:41242/"));
        let c = config(&[], &[("IAC_CODE_AGUI_A2A_URL", "http://[::1]:5//")]);
        assert_eq!(c.a2a_url.as_deref(), Some("http://[::1]:5/"));
        let https = parse(&["--a2a-url", "https://127.0.0.1:1"], &[]).unwrap_err();
        assert!(https.contains("no TLS client"), "{https}");
    }

    #[test]
    fn the_reference_short_and_negative_flags_are_accepted() {
        let c = config(&["-d", "--log-stdout", "--no-log-stdout"], &[]);
        assert!(c.debug && !c.log_stdout);
        assert_eq!(c.log_format, LogFormat::Text);
        let c = config(&["--log-format", "json"], &[]);
        assert_eq!(c.log_format, LogFormat::Json);
        let c = config(&[], &[("IAC_CODE_AGUI_LOG_FORMAT", "json")]);
        assert_eq!(c.log_format, LogFormat::Json);
        assert!(parse(&["--log-format", "xml"], &[]).is_err());
        assert!(parse(&["--port", "0"], &[]).unwrap_err().contains("65535"));
    }

    #[test]
    fn token_keys_come_from_yaml_below_the_environment() {
        let dir = std::env::temp_dir().join(format!("agui-cfg-tok-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("c.yaml");
        std::fs::write(
            &file,
            "auth-token: from-yaml\na2a_token: 'up-yaml'\ndebug: True\n",
        )
        .unwrap();
        let f = file.to_str().unwrap();
        let c = config(&["--config", f], &[]);
        assert_eq!(c.auth_token.as_deref(), Some("from-yaml"));
        assert_eq!(c.a2a_token.as_deref(), Some("up-yaml"));
        assert!(c.debug);
        let c = config(
            &["--config", f],
            &[
                ("IAC_CODE_AGUI_AUTH_TOKEN", "from-env"),
                ("IAC_CODE_AGUI_A2A_TOKEN", ""),
            ],
        );
        assert_eq!(c.auth_token.as_deref(), Some("from-env"));
        assert_eq!(c.a2a_token.as_deref(), Some("up-yaml"), "empty env = unset");
        assert!(
            parse(&["--auth-token", "x"], &[]).is_err(),
            "no flag for a secret"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn state_and_config_dirs_expand_home_and_variables() {
        let env = [("HOME", "/h"), ("X", "/x")];
        let c = config(&["--state-dir", "~/s"], &env);
        assert_eq!(c.state_dir, PathBuf::from("/h/s"));
        let c = config(
            &[],
            &[
                ("HOME", "/h"),
                ("X", "/x"),
                ("IAC_CODE_CONFIG_DIR", "${X}/c"),
            ],
        );
        assert_eq!(c.state_dir, PathBuf::from("/x/c/agui"));
        let c = config(
            &[],
            &[("X", "/x"), ("IAC_CODE_AGUI_STATE_DIR", "$X/st/$NOPE")],
        );
        assert_eq!(c.state_dir, PathBuf::from("/x/st/$NOPE"));
    }

    #[test]
    fn allowed_cwds_fall_back_to_the_kernel_variable() {
        let c = config(&[], &[("IACCODE_A2A_ALLOWED_CWDS", "/a:/b")]);
        assert_eq!(
            c.allowed_cwds,
            vec![PathBuf::from("/a"), PathBuf::from("/b")]
        );
        let c = config(
            &[],
            &[
                ("IACCODE_A2A_ALLOWED_CWDS", "/a"),
                ("IAC_CODE_AGUI_ALLOWED_CWDS", "/w"),
            ],
        );
        assert_eq!(c.allowed_cwds, vec![PathBuf::from("/w")]);
    }

    #[test]
    fn the_example_config_in_contrib_parses() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/contrib/agui.example.yaml");
        let c = config(&["--config", path], &[]);
        assert_eq!(c.port, 41243);
        assert_eq!(c.a2a_url, None);
        assert_eq!(c.a2a_command, ["iac-code", "a2a"]);
        assert_eq!(c.log_format, LogFormat::Text);
    }

    #[test]
    fn yaml_config_is_below_cli() {
        let dir = std::env::temp_dir().join(format!("agui-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("c.yaml");
        std::fs::write(
            &file,
            "# c\nport: 7000\nhost: \"127.0.0.2\"\nlog_stdout: true\n",
        )
        .unwrap();
        let f = file.to_str().unwrap();
        let c = config(&["--config", f], &[]);
        assert_eq!(
            (c.port, c.host.as_str(), c.log_stdout),
            (7000, "127.0.0.2", true)
        );
        assert_eq!(config(&["--config", f, "--port", "7001"], &[]).port, 7001);
        std::fs::write(&file, "bogus: 1\n").unwrap();
        assert!(parse(&["--config", f], &[])
            .unwrap_err()
            .contains("unknown key"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn limit_flags_have_defaults_env_yaml_and_validation() {
        let c = config(&[], &[]);
        assert_eq!(
            (
                c.max_connections,
                c.max_header_bytes,
                c.max_headers,
                c.max_url_bytes
            ),
            (2048, 16384, 100, 8192)
        );
        assert_eq!(
            (
                c.header_timeout,
                c.body_timeout,
                c.keepalive_timeout,
                c.write_timeout
            ),
            (
                Duration::from_secs(60),
                Duration::from_secs(60),
                Duration::from_secs(5),
                Duration::from_secs(60)
            )
        );
        assert!(c.allowed_hosts.is_empty());
        let c = config(
            &["--max-connections", "10", "--body-timeout=0.5"],
            &[
                ("IAC_CODE_AGUI_MAX_CONNECTIONS", "20"),
                ("IAC_CODE_AGUI_MAX_HEADERS", "7"),
                ("IAC_CODE_AGUI_WRITE_TIMEOUT", "3"),
            ],
        );
        assert_eq!((c.max_connections, c.max_headers), (10, 7));
        assert_eq!(c.body_timeout, Duration::from_millis(500));
        assert_eq!(c.write_timeout, Duration::from_secs(3));
        for bad in [
            ["--max-connections", "0"],
            ["--max-url-bytes", "-1"],
            ["--header-timeout", "0"],
            ["--keepalive-timeout", "x"],
        ] {
            assert!(parse(&bad, &[]).is_err(), "{bad:?}");
        }
        let dir = std::env::temp_dir().join(format!("agui-cfg-lim-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("c.yaml");
        std::fs::write(
            &file,
            "max_url_bytes: 100\nallowed-host: A.example, b.example\n",
        )
        .unwrap();
        let c = config(&["--config", file.to_str().unwrap()], &[]);
        assert_eq!(c.max_url_bytes, 100);
        assert_eq!(c.allowed_hosts, ["a.example", "b.example"]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn cors_origins_repeat_are_exact_and_star_needs_no_token() {
        let c = config(
            &[
                "--cors-allow-origin",
                "https://A.example",
                "--cors-allow-origin=http://b:8080/",
            ],
            &[],
        );
        assert_eq!(c.cors_allow_origins, ["https://a.example", "http://b:8080"]);
        let c = config(
            &[],
            &[("IAC_CODE_AGUI_CORS_ALLOW_ORIGIN", "http://x, http://y:1")],
        );
        assert_eq!(c.cors_allow_origins, ["http://x", "http://y:1"]);
        assert!(config(&[], &[]).cors_allow_origins.is_empty());
        assert!(parse(&["--cors-allow-origin", "x.example"], &[]).is_err());
        assert!(parse(&["--cors-allow-origin", "http://x/path"], &[]).is_err());
        assert!(parse(&["--cors-allow-origin", "*"], &[]).is_ok());
        assert!(parse(
            &["--cors-allow-origin", "*"],
            &[("IAC_CODE_AGUI_AUTH_TOKEN", "t")]
        )
        .is_err());
    }

    #[test]
    fn allowed_host_repeats_and_env_is_comma_separated() {
        let c = config(
            &["--allowed-host", "One.test", "--allowed-host=two.test:8000"],
            &[],
        );
        assert_eq!(c.allowed_hosts, ["one.test", "two.test:8000"]);
        let c = config(&[], &[("IAC_CODE_AGUI_ALLOWED_HOST", "a.test, b.test")]);
        assert_eq!(c.allowed_hosts, ["a.test", "b.test"]);
        assert!(parse(&["--allowed-host", "http://x/"], &[]).is_err());
        for (host, lo) in [
            ("127.0.0.1", true),
            ("::1", true),
            ("[::1]", true),
            ("localhost", true),
            ("LOCALHOST", true),
            ("127.0.0.2", true),
            ("::ffff:127.0.0.1", true),
            ("0.0.0.0", false),
            ("::", false),
            ("192.168.1.1", false),
        ] {
            assert_eq!(is_loopback_host(host), lo, "{host}");
        }
    }
}
