//! The flag table: every option written once (ripgrep's `flags/defs.rs` is the model): its name,
//! short and negated forms, what it takes, where it may be given, its default, whether the
//! reference has it, its help, and how its value is checked into its `Config` field (the fields
//! are described in `schema.rs`). `--help`, the parser, the YAML reader and the README test all
//! read this table; an option's variable and YAML key follow from its name.

use super::schema::{Answer, Def, Fallback, Origin, Sources, Takes, Variable};
use super::{Command, PairMode};

/// The flag that names the YAML file.
pub(crate) const CONFIG: &str = "config";

/// Every option, in `--help`'s order.
pub(crate) const DEFS: &[Def] = &[
    Def {
        name: "host",
        short: None,
        negated: None,
        takes: Takes::One("HOST"),
        given_by: Sources::All,
        default: Fallback::Value("127.0.0.1"),
        origin: Origin::Reference,
        help: "bind address",
        set: |c, v| {
            c.host = v.string()?;
            Ok(())
        },
    },
    Def {
        name: "port",
        short: None,
        negated: None,
        takes: Takes::One("PORT"),
        given_by: Sources::All,
        default: Fallback::Value("8000"),
        origin: Origin::Reference,
        help: "port",
        set: |c, v| {
            c.port = v.number()?;
            if c.port == 0 {
                return Err(v.error("must be between 1 and 65535"));
            }
            Ok(())
        },
    },
    Def {
        name: "a2a-url",
        short: None,
        negated: None,
        takes: Takes::One("URL"),
        given_by: Sources::All,
        default: Fallback::Empty,
        origin: Origin::Reference,
        help: "loopback A2A URL; empty starts a managed `iac-code a2a` kernel",
        set: |c, v| {
            c.a2a_url = v.a2a_url()?;
            Ok(())
        },
    },
    Def {
        name: "a2a-command",
        short: None,
        negated: None,
        takes: Takes::One("CMD"),
        given_by: Sources::All,
        default: Fallback::Value("iac-code a2a"),
        origin: Origin::Ours,
        help: "managed kernel command; --host/--port are appended",
        set: |c, v| {
            c.a2a_command = v.command()?;
            Ok(())
        },
    },
    Def {
        name: "state-dir",
        short: None,
        negated: None,
        takes: Takes::One("DIR"),
        given_by: Sources::All,
        default: Fallback::Computed("<config-dir>/agui"),
        origin: Origin::Reference,
        help: "thread-state directory, `~` and `$VAR` expanded",
        set: |c, v| {
            c.state_dir = v.state_dir();
            Ok(())
        },
    },
    Def {
        name: "idle-shutdown",
        short: None,
        negated: None,
        takes: Takes::One("SECS"),
        given_by: Sources::All,
        default: Fallback::Value("0"),
        origin: Origin::Reference,
        help: "exit after SECS without requests, 0 = off",
        set: |c, v| {
            c.idle_shutdown = v.seconds()?;
            Ok(())
        },
    },
    Def {
        name: "heartbeat-interval",
        short: None,
        negated: None,
        takes: Takes::One("SECS"),
        given_by: Sources::All,
        default: Fallback::Value("15"),
        origin: Origin::Ours,
        help: "SSE heartbeat after SECS without an event",
        set: |c, v| {
            c.heartbeat = v.seconds()?;
            if c.heartbeat.is_zero() {
                return Err(v.error("must be above 0"));
            }
            Ok(())
        },
    },
    Def {
        name: "interrupt-ttl",
        short: None,
        negated: None,
        takes: Takes::One("SECS"),
        given_by: Sources::All,
        default: Fallback::Value("540"),
        origin: Origin::Ours,
        help: "lifetime of a pending interrupt",
        set: |c, v| {
            c.interrupt_ttl = v.seconds()?;
            Ok(())
        },
    },
    Def {
        name: "a2a-idle-timeout",
        short: None,
        negated: None,
        takes: Takes::One("SECS"),
        given_by: Sources::All,
        default: Fallback::Value("900"),
        origin: Origin::Ours,
        help: "fail a run whose upstream is silent this long, 0 = never",
        set: |c, v| {
            c.a2a_idle_timeout = v.seconds()?;
            Ok(())
        },
    },
    Def {
        name: "kernel-start-timeout",
        short: None,
        negated: None,
        takes: Takes::One("SECS"),
        given_by: Sources::All,
        default: Fallback::Value("60"),
        origin: Origin::Ours,
        help: "wait this long for the managed kernel's /health",
        set: |c, v| {
            c.kernel_start_timeout = v.seconds()?;
            Ok(())
        },
    },
    Def {
        name: "drain-timeout",
        short: None,
        negated: None,
        takes: Takes::One("SECS"),
        given_by: Sources::All,
        default: Fallback::Value("300"),
        origin: Origin::Ours,
        help: "an upgrade (SIGUSR2) or a kernel drain (SIGHUP) lets running turns finish this long",
        set: |c, v| {
            c.drain_timeout = v.seconds()?;
            Ok(())
        },
    },
    Def {
        name: "workers",
        short: None,
        negated: None,
        takes: Takes::One("N"),
        given_by: Sources::All,
        default: Fallback::Value("8"),
        origin: Origin::Ours,
        help: "HTTP dispatcher threads; each request runs on its own thread",
        set: |c, v| {
            c.workers = v.number::<usize>()?.max(1);
            Ok(())
        },
    },
    Def {
        name: "max-connections",
        short: None,
        negated: None,
        takes: Takes::One("N"),
        given_by: Sources::All,
        default: Fallback::Value("2048"),
        origin: Origin::Ours,
        help: "open client connections; beyond it a fast 503",
        set: |c, v| {
            c.max_connections = v.positive()?;
            Ok(())
        },
    },
    Def {
        name: "max-header-bytes",
        short: None,
        negated: None,
        takes: Takes::One("N"),
        given_by: Sources::All,
        default: Fallback::Value("16384"),
        origin: Origin::Ours,
        help: "request line plus headers, in bytes; beyond it 431",
        set: |c, v| {
            c.max_header_bytes = v.positive()?;
            Ok(())
        },
    },
    Def {
        name: "max-headers",
        short: None,
        negated: None,
        takes: Takes::One("N"),
        given_by: Sources::All,
        default: Fallback::Value("100"),
        origin: Origin::Ours,
        help: "header lines per request; beyond it 431",
        set: |c, v| {
            c.max_headers = v.positive()?;
            Ok(())
        },
    },
    Def {
        name: "max-url-bytes",
        short: None,
        negated: None,
        takes: Takes::One("N"),
        given_by: Sources::All,
        default: Fallback::Value("8192"),
        origin: Origin::Ours,
        help: "request-target length; beyond it 414",
        set: |c, v| {
            c.max_url_bytes = v.positive()?;
            Ok(())
        },
    },
    Def {
        name: "header-timeout",
        short: None,
        negated: None,
        takes: Takes::One("SECS"),
        given_by: Sources::All,
        default: Fallback::Value("60"),
        origin: Origin::Ours,
        help: "time to send the request head; beyond it 408",
        set: |c, v| {
            c.header_timeout = v.positive_seconds()?;
            Ok(())
        },
    },
    Def {
        name: "body-timeout",
        short: None,
        negated: None,
        takes: Takes::One("SECS"),
        given_by: Sources::All,
        default: Fallback::Value("60"),
        origin: Origin::Ours,
        help: "total time to send the request body; beyond it 408",
        set: |c, v| {
            c.body_timeout = v.positive_seconds()?;
            Ok(())
        },
    },
    Def {
        name: "keepalive-timeout",
        short: None,
        negated: None,
        takes: Takes::One("SECS"),
        given_by: Sources::All,
        default: Fallback::Value("5"),
        origin: Origin::Ours,
        help: "idle keep-alive connections are closed after SECS",
        set: |c, v| {
            c.keepalive_timeout = v.positive_seconds()?;
            Ok(())
        },
    },
    Def {
        name: "write-timeout",
        short: None,
        negated: None,
        takes: Takes::One("SECS"),
        given_by: Sources::All,
        default: Fallback::Value("60"),
        origin: Origin::Ours,
        help: "a client that accepts no bytes this long is dropped",
        set: |c, v| {
            c.write_timeout = v.positive_seconds()?;
            Ok(())
        },
    },
    Def {
        name: "allowed-host",
        short: None,
        negated: None,
        takes: Takes::Many("HOST"),
        given_by: Sources::All,
        default: Fallback::Empty,
        origin: Origin::Ours,
        help: "extra Host header value accepted when bound to loopback (only localhost, \
               127.0.0.1 and [::1] are otherwise); on a non-loopback bind, enables the Host check",
        set: |c, v| {
            c.allowed_hosts = v.hosts()?;
            Ok(())
        },
    },
    Def {
        name: "cors-allow-origin",
        short: None,
        negated: None,
        takes: Takes::Many("ORIGIN"),
        given_by: Sources::All,
        default: Fallback::Empty,
        origin: Origin::Ours,
        help: "a web page origin (scheme://host[:port]) allowed to call this server from another \
               origin (CORS; off by default); `*` only without IAC_CODE_AGUI_AUTH_TOKEN",
        set: |c, v| {
            c.cors_allow_origins = v.origins()?;
            Ok(())
        },
    },
    Def {
        name: "detach-grace",
        short: None,
        negated: None,
        takes: Takes::One("SECS"),
        given_by: Sources::All,
        default: Fallback::Value("0"),
        origin: Origin::Ours,
        help: "a run whose client left keeps running this long for a client to re-attach \
               (subscribe route), then it is cancelled; 0: a client that leaves cancels its run, \
               as the AG-UI spec says",
        set: |c, v| {
            c.detach_grace = v.seconds()?;
            Ok(())
        },
    },
    Def {
        name: "replay-buffer-bytes",
        short: None,
        negated: None,
        takes: Takes::One("N"),
        given_by: Sources::All,
        default: Fallback::Value("262144"),
        origin: Origin::Ours,
        help: "recent events kept per execution for an exact resume with Last-Event-ID",
        set: |c, v| {
            c.replay_buffer_bytes = v.number()?;
            Ok(())
        },
    },
    Def {
        name: "history-max-messages",
        short: None,
        negated: None,
        takes: Takes::One("N"),
        given_by: Sources::All,
        default: Fallback::Value("1000"),
        origin: Origin::Ours,
        help: "messages of a conversation kept per thread in <state-dir>/history/ (the oldest \
               turns dropped beyond it; 0 keeps none)",
        set: |c, v| {
            c.history_max_messages = v.number()?;
            Ok(())
        },
    },
    Def {
        name: "pair-mode",
        short: None,
        negated: None,
        takes: Takes::Switch,
        given_by: Sources::All,
        default: Fallback::Empty,
        origin: Origin::Ours,
        help: "one of several adapter + kernel pairs behind a load balancer: a thread this pair \
               never held, arriving with history or a resume, is refused (503 \
               STATE_UNAVAILABLE), never restarted",
        set: |c, v| {
            c.pair_mode = match v.switch()? {
                true => PairMode::Several,
                false => PairMode::Single,
            };
            Ok(())
        },
    },
    Def {
        name: "debug",
        short: Some('d'),
        negated: None,
        takes: Takes::Switch,
        given_by: Sources::All,
        default: Fallback::Empty,
        origin: Origin::Reference,
        help: "debug logging",
        set: |c, v| {
            c.debug = v.switch()?;
            Ok(())
        },
    },
    Def {
        name: "log-stdout",
        short: None,
        negated: Some("no-log-stdout"),
        takes: Takes::Switch,
        given_by: Sources::All,
        default: Fallback::Empty,
        origin: Origin::Reference,
        help: "log to stdout instead of stderr",
        set: |c, v| {
            c.log_stdout = v.switch()?;
            Ok(())
        },
    },
    Def {
        name: "log-format",
        short: None,
        negated: None,
        takes: Takes::One("text|json"),
        given_by: Sources::All,
        default: Fallback::Value("text"),
        origin: Origin::Ours,
        help: "log lines as text, or one JSON object each with threadId, runId and executionId \
               as fields when known",
        set: |c, v| {
            c.log_format = v.log_format()?;
            Ok(())
        },
    },
    Def {
        name: CONFIG,
        short: None,
        negated: None,
        takes: Takes::One("FILE"),
        given_by: Sources::FlagOnly,
        default: Fallback::Empty,
        origin: Origin::Reference,
        help: "YAML file of flat `key: value` lines: the options above and the keys named \
               below (`_` and `-` alike in keys)",
        // Read before every other option: the parser opens the file it names.
        set: |_, _| Ok(()),
    },
    Def {
        name: "auth-token",
        short: None,
        negated: None,
        takes: Takes::One("TOKEN"),
        given_by: Sources::NoFlag,
        default: Fallback::Empty,
        origin: Origin::Reference,
        help: "protects this endpoint and /metrics",
        set: |c, v| {
            c.auth_token = v.non_empty();
            Ok(())
        },
    },
    Def {
        name: "a2a-token",
        short: None,
        negated: None,
        takes: Takes::One("TOKEN"),
        given_by: Sources::NoFlag,
        default: Fallback::Empty,
        origin: Origin::Reference,
        help: "upstream bearer (sent to an external kernel; a managed one gets its own)",
        set: |c, v| {
            c.a2a_token = v.non_empty();
            Ok(())
        },
    },
];

/// The flags that answer at once and read nothing else.
pub(crate) const ANSWERS: &[Answer] = &[
    Answer {
        short: 'h',
        name: "help",
        help: "print this help",
        command: || Command::Help,
    },
    Answer {
        short: 'V',
        name: "version",
        help: "print the version",
        command: || Command::Version,
    },
];

/// The workspace roots a run's `cwd` may be under.
pub(crate) const ALLOWED_CWDS: Variable = Variable {
    name: "IAC_CODE_AGUI_ALLOWED_CWDS",
    help: "allowed workspace roots, ':'-separated; falls back to IACCODE_A2A_ALLOWED_CWDS \
           (default: the current directory and the system temp directory)",
};

/// The kernel's own name for [`ALLOWED_CWDS`], read when ours is unset.
pub(crate) const KERNEL_ALLOWED_CWDS: &str = "IACCODE_A2A_ALLOWED_CWDS";

/// The config root, `<config-dir>` in the help.
pub(crate) const CONFIG_DIR: Variable = Variable {
    name: "IAC_CODE_CONFIG_DIR",
    help: "<config-dir>, the config root (default ~/.iac-code; `~` and `$VAR` expanded)",
};

/// The variables `--help` lists after the options.
pub(crate) const VARIABLES: &[&Variable] = &[&ALLOWED_CWDS, &CONFIG_DIR];
