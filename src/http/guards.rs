//! The guards a request passes before its route runs: the Host check, the CORS decision and the
//! bearer token.

use super::header;
use crate::config::{self, Config};
use crate::error::{Error, Msg};
use tiny_http::{Header, Request};

/// The Host check against DNS rebinding: a page on another origin can make a browser reach a
/// loopback port under the attacker's host name, but not send a loopback `Host`. Applied to every
/// route (health too) when bound to loopback or when `--allowed-host` was given. A request
/// without exactly one `Host` is refused on HTTP/1.1, as RFC 9112 §3.2 requires.
pub(super) fn check_host(config: &Config, req: &Request) -> Result<(), Error> {
    let mut hosts = req
        .headers()
        .iter()
        .filter(|h| h.field.equiv("Host"))
        .map(|h| h.value.as_str());
    let (host, more) = (hosts.next(), hosts.next().is_some());
    let http11 = *req.http_version() >= (1, 1);
    if more || (host.is_none() && http11) {
        return Err(Msg::HostHeaderCount.err());
    }
    let enforced = config::is_loopback_host(&config.host) || !config.allowed_hosts.is_empty();
    match host {
        Some(h) if enforced && !host_allowed(h, config) => {
            // The operator's side of the refusal: which header, which value (never a secret).
            log::info!("refused: Host {h:?} is not loopback nor an --allowed-host entry");
            Err(Msg::HostNotAllowed.with(&[&shown(h)]))
        }
        _ => Ok(()),
    }
}

/// A header value as a refusal shows it: at most 200 characters (the catalogue's sentence stays
/// readable, a hostile client cannot grow the answer); JSON escapes the rest.
fn shown(value: &str) -> String {
    match value.char_indices().nth(200) {
        Some((end, _)) => format!("{}…", &value[..end]),
        None => value.to_string(),
    }
}

/// Whether a `Host` value (`name[:port]`, `[v6][:port]`) names this server.
fn host_allowed(value: &str, config: &Config) -> bool {
    let value = value.trim().to_ascii_lowercase();
    let Some(name) = host_name(&value) else {
        return false;
    };
    let bind = config
        .host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase();
    let bind_literal = bind.parse::<std::net::IpAddr>().ok().map(|ip| match ip {
        std::net::IpAddr::V6(_) => format!("[{bind}]"),
        std::net::IpAddr::V4(_) => bind.clone(),
    });
    ["localhost", "127.0.0.1", "[::1]"].contains(&name)
        || bind_literal.as_deref() == Some(name)
        || config
            .allowed_hosts
            .iter()
            .any(|a| a == name || *a == value)
}

/// The host part of a lower-cased `Host` value; `None` when the port is not a number.
fn host_name(value: &str) -> Option<&str> {
    let (name, port) = if value.starts_with('[') {
        value.split_at(value.find(']')? + 1)
    } else {
        value.find(':').map_or((value, ""), |i| value.split_at(i))
    };
    let port_ok = port.is_empty()
        || port
            .strip_prefix(':')
            .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    (port_ok && !name.is_empty()).then_some(name)
}

/// The CORS decision for one request (off unless `--cors-allow-origin` lists the origin).
/// A request without `Origin`, or whose `Origin` names the request's own `Host` (same origin,
/// e.g. behind a proxy that keeps the Host), needs no CORS headers.
pub(super) enum Cors {
    None,
    Allowed(String),
    /// Neither same origin nor allowed: the `Origin` and the `Host` (if any) compared.
    Denied {
        origin: String,
        host: Option<String>,
    },
}

const CORS_METHODS: &str = "GET, POST, OPTIONS";
const CORS_HEADERS: &str =
    "Authorization, Content-Type, Accept, Accept-Language, Last-Event-ID, X-AGUI-Thread-Id, X-AGUI-User-Id";
const CORS_MAX_AGE: &str = "600";

impl Cors {
    pub(super) fn of(config: &Config, req: &Request) -> Cors {
        let Some(origin) = header(req, "Origin").map(str::trim) else {
            return Cors::None;
        };
        let authority = origin.split_once("://").map(|(_, a)| a);
        let host = header(req, "Host").map(str::trim);
        if authority.is_some_and(|a| host.is_some_and(|h| a.eq_ignore_ascii_case(h))) {
            return Cors::None;
        }
        let allowed = config
            .cors_allow_origins
            .iter()
            .any(|o| o == "*" || o.eq_ignore_ascii_case(origin));
        if allowed {
            Cors::Allowed(origin.to_string())
        } else {
            Cors::Denied {
                origin: origin.to_string(),
                host: host.map(String::from),
            }
        }
    }

    /// A page of an origin that is not allowed gets no run (nor anything else but `/health`).
    /// The refusal names both causes: behind a proxy that serves page and adapter on one origin
    /// the usual one is a proxy that does not pass the page's `Host` (nginx's plain `proxy_pass`
    /// sends the upstream's), so the `Origin` cannot match it; else the origin is another one and
    /// must be allowed. The log says which values were compared.
    pub(super) fn check(&self) -> Result<(), Error> {
        match self {
            Cors::Denied { origin, host } => {
                let host = host.as_deref().unwrap_or("");
                log::info!(
                    "refused: Origin {origin:?} is neither the request's Host {host:?} nor a \
                     --cors-allow-origin entry"
                );
                Err(Msg::OriginNotAllowed.with(&[&shown(origin), &shown(host)]))
            }
            _ => Ok(()),
        }
    }

    pub(super) fn headers(&self) -> Vec<Header> {
        match self {
            Cors::Allowed(origin) => [
                Header::from_bytes("Access-Control-Allow-Origin", origin.as_bytes()),
                Header::from_bytes("Vary", "Origin"),
                Header::from_bytes("Access-Control-Expose-Headers", "X-AGUI-Resume"),
            ]
            .into_iter()
            .flatten()
            .collect(),
            _ => Vec::new(),
        }
    }

    pub(super) fn preflight_headers(&self) -> Vec<Header> {
        let mut headers = self.headers();
        let more = match self {
            Cors::Allowed(_) => vec![
                ("Access-Control-Allow-Methods", CORS_METHODS),
                ("Access-Control-Allow-Headers", CORS_HEADERS),
                ("Access-Control-Max-Age", CORS_MAX_AGE),
            ],
            _ => vec![("Allow", CORS_METHODS)],
        };
        for (k, v) in more {
            headers.push(Header::from_bytes(k, v).expect("static header"));
        }
        headers
    }

    /// The same headers as raw lines for the SSE response head.
    pub(super) fn head(&self) -> String {
        self.headers()
            .iter()
            .map(|h| format!("{}: {}\r\n", h.field, h.value))
            .collect()
    }
}

/// Constant-time comparison of the presented bearer token. The scheme name is case-insensitive
/// (RFC 9110 §11.1), the token is not.
pub(super) fn bearer_matches(header: Option<&str>, token: &str) -> bool {
    let presented = header
        .and_then(|h| h.trim_start().split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map_or("", |(_, t)| t.trim())
        .as_bytes();
    let expected = token.as_bytes();
    let mut diff = presented.len() ^ expected.len();
    for (i, e) in expected.iter().enumerate() {
        diff |= (presented.get(i).copied().unwrap_or(0) ^ e) as usize;
    }
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::test_config as config;

    #[test]
    fn bearer_tokens_compare_exactly() {
        assert!(bearer_matches(Some("Bearer s3cret"), "s3cret"));
        assert!(!bearer_matches(Some("Bearer s3cre"), "s3cret"));
        assert!(!bearer_matches(Some("Bearer s3cretx"), "s3cret"));
        assert!(!bearer_matches(Some("Basic s3cret"), "s3cret"));
        assert!(!bearer_matches(None, "s3cret"));
        assert!(!bearer_matches(Some("Bearer"), "s3cret"));
        assert!(!bearer_matches(Some("Bearers3cret"), "s3cret"));
    }

    #[test]
    fn bearer_scheme_is_case_insensitive() {
        assert!(bearer_matches(Some("BEARER x"), "x"));
        assert!(bearer_matches(Some("bEaReR x"), "x"));
        assert!(bearer_matches(Some("bearer   x "), "x"));
        assert!(!bearer_matches(Some("BEARER X"), "x"));
    }

    #[test]
    fn loopback_binds_accept_only_loopback_hosts_and_allowed_entries() {
        let c = config(&["--allowed-host", "Agui.Example"]);
        for ok in [
            "localhost",
            "localhost:8000",
            "LOCALHOST:1",
            "127.0.0.1:41243",
            "[::1]:80",
            "[::1]",
            "agui.example",
            "AGUI.example:443",
        ] {
            assert!(host_allowed(ok, &c), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:8000",
            "localhost.",
            "localhost.evil.example",
            "127.0.0.1.nip.io",
            "127.0.0.2",
            "::1",
            "localhost:80x",
            "localhost:",
            "",
            "[::1",
        ] {
            assert!(!host_allowed(bad, &c), "{bad}");
        }
        let c = config(&["--host", "127.0.0.5"]);
        assert!(host_allowed("127.0.0.5:9", &c));
        let c = config(&["--allowed-host", "proxy.test:8443"]);
        assert!(host_allowed("proxy.test:8443", &c));
        assert!(!host_allowed("proxy.test:1", &c));
    }

    #[test]
    fn host_names_split_off_their_port() {
        assert_eq!(host_name("a.b:80"), Some("a.b"));
        assert_eq!(host_name("[::1]:80"), Some("[::1]"));
        assert_eq!(host_name("a.b"), Some("a.b"));
        assert_eq!(host_name(":80"), None);
        assert_eq!(host_name("[::1]x"), None);
    }
}
