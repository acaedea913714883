//! What counts as loopback: the A2A upstream URL and the bind address.

/// Whether `host` (a bind address) is a loopback one: only then is the `Host` header checked by
/// default (a browser page can reach a loopback port through DNS rebinding).
pub(crate) fn is_loopback_host(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.to_canonical().is_loopback(),
        Err(_) => host.eq_ignore_ascii_case("localhost"),
    }
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
