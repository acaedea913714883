//! Start-up configuration: the reference adapter's flags, environment and YAML keys, plus ours.
//!
//! Precedence, as in the reference (a click application): command line, then environment, then the
//! `--config` YAML file, then the defaults. Every option is written once, in `defs.rs`'s table,
//! which `--help`, the parser, the YAML reader and the README test read.

mod defs;
mod help;
mod loopback;
mod parse;
mod paths;
mod schema;
/// Whether this adapter is the only pair or one of several behind a balancer (`--pair-mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum PairMode {
    /// The only pair: every thread may start here.
    #[default]
    Single,
    /// One of several: a thread this pair never held is refused when it shows history.
    Several,
}

#[cfg(test)]
mod tests;
mod values;
mod yaml;

pub use help::usage;
pub(crate) use parse::yaml_config;
/// The `--config` YAML subset read from text (the fuzz target of `crate::untrusted`).
pub(crate) fn yaml_map(text: &str) -> Result<std::collections::HashMap<String, String>, String> {
    yaml::parse_yaml_text("--config", text)
}
pub(crate) use loopback::is_loopback_host;

use std::path::PathBuf;
use std::time::Duration;

/// The options, typed. `Default` is every field empty, the start the flag table's setters fill;
/// [`Command::parse`] makes a real one.
#[derive(Debug, Clone, Default)]
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
    /// How long an upgrade's or a kernel drain's running turns may take to finish.
    pub drain_timeout: Duration,
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
    /// Messages kept per thread's conversation (0: none).
    pub history_max_messages: usize,
}

impl Config {
    /// Lowers `--max-connections` to `room` (what the host's limits hold, measured at start-up);
    /// the previous value when it was lowered.
    pub fn cap_connections(&mut self, room: usize) -> Option<usize> {
        let before = self.max_connections;
        (before > room).then(|| {
            self.max_connections = room.max(1);
            before
        })
    }
}

/// `--log-format`: env_logger's text lines, or one JSON object a line with the run's ids as fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    #[default]
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
