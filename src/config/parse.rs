//! Precedence and parsing: the command line, then the environment, then the YAML file, then the defaults.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::defs::{env_var, FLAGS};
use super::loopback::normalize_a2a_url;
use super::values::*;
use super::yaml::parse_yaml;
use super::{Command, Config};

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
            pair_mode: flag(get("pair-mode"), "pair-mode")?,
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
