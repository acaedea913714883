//! The configuration's behaviours: precedence, each source, validation.

use super::defs::{ANSWERS, DEFS, VARIABLES};
use super::loopback::{check_loopback_url, is_loopback_host};
use super::schema::{Def, Fallback, Origin, Sources};
use super::*;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

/// The flag checklist (ARCHITECTURE.md), checked: an option of the table missing from the help,
/// or from README's table of its origin with its variable, YAML key, default and other spellings,
/// fails here, not in a user's hands.
#[test]
fn every_flag_is_in_the_help_and_the_readme_with_its_variable() {
    let readme = include_str!("../../README.md");
    let (reference, ours) = readme
        .split_once("Ours only")
        .expect("README's two flag tables");
    let help = usage();
    for def in DEFS {
        let (table, which) = match def.origin {
            Origin::Reference => (reference, "reference"),
            Origin::Ours => (ours, "ours-only"),
        };
        let row = readme_row(table, def)
            .unwrap_or_else(|| panic!("{} has no row in README's {which} table", def.name));
        let mut words = Vec::new();
        if def.given_by.variable() {
            words.push(def.variable());
        }
        if def.given_by.yaml() && matches!(def.origin, Origin::Reference) {
            words.push(format!("`{}`", def.name));
        }
        if let Fallback::Value(default) | Fallback::Computed(default) = def.default {
            words.push(format!("`{default}`"));
        }
        words.extend(def.short.map(|s| format!("`-{s}`")));
        words.extend(def.negated.map(|n| format!("`--{n}`")));
        for word in words {
            assert!(
                row.contains(&word),
                "README's row of {} lacks {word}",
                def.name
            );
        }
        let in_help = match def.given_by {
            Sources::All | Sources::FlagOnly => format!("--{}", def.name),
            Sources::NoFlag => def.variable(),
        };
        assert!(help.contains(&in_help), "{in_help} is not in --help");
    }
    for variable in VARIABLES {
        assert!(
            help.contains(variable.name),
            "{} not in --help",
            variable.name
        );
        assert!(
            reference.contains(variable.name),
            "{} not in README",
            variable.name
        );
    }
    for answer in ANSWERS {
        assert!(help.contains(&format!("-{}, --{}", answer.short, answer.name)));
        assert!(readme.contains(&format!("`--{}`", answer.name)));
    }
}

/// README's row of `def`: `| \`--name\`…` or `| \`--name VALUE\`…`, or for an option without a
/// flag the `(no flag)` row naming its variable.
fn readme_row<'a>(table: &'a str, def: &Def) -> Option<&'a str> {
    let flag = format!("| `--{}", def.name);
    table.lines().find(|line| match def.given_by {
        Sources::NoFlag => line.starts_with("| (no flag)") && line.contains(&def.variable()),
        Sources::All | Sources::FlagOnly => line
            .strip_prefix(&flag)
            .is_some_and(|rest| rest.starts_with(['`', ' '])),
    })
}

#[test]
fn the_help_lists_every_flag_once_within_100_columns() {
    let help = usage();
    for line in help.lines() {
        assert!(line.chars().count() <= 100, "too long: {line}");
    }
    for def in DEFS.iter().filter(|d| d.given_by.flag()) {
        let flag = format!("--{}", def.name);
        let lines = help
            .lines()
            .map(|l| l.trim_start())
            .map(|l| {
                def.short
                    .map_or(l, |s| l.trim_start_matches(&format!("-{s}, ")))
            })
            .filter(|l| {
                l.strip_prefix(&flag)
                    .is_some_and(|r| r.is_empty() || r.starts_with([' ', ',']))
            })
            .count();
        assert_eq!(lines, 1, "{flag}");
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

#[test]
fn the_history_cap_defaults_to_1000_and_zero_keeps_none() {
    assert_eq!(config(&[], &[]).history_max_messages, 1000);
    let c = config(
        &["--history-max-messages", "0"],
        &[("IAC_CODE_AGUI_HISTORY_MAX_MESSAGES", "5")],
    );
    assert_eq!(c.history_max_messages, 0);
    let c = config(&[], &[("IAC_CODE_AGUI_HISTORY_MAX_MESSAGES", "5")]);
    assert_eq!(c.history_max_messages, 5);
    assert!(parse(&["--history-max-messages", "-1"], &[]).is_err());
}

#[test]
fn the_connection_cap_is_lowered_to_what_the_host_holds_and_never_raised() {
    let mut c = config(&["--max-connections", "20000"], &[]);
    assert_eq!(c.cap_connections(5294), Some(20000));
    assert_eq!(c.max_connections, 5294);
    assert_eq!(c.cap_connections(9000), None);
    assert_eq!(c.max_connections, 5294);
}
