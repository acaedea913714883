//! The limits tiny_http enforces for us, and the body of the answers it gives by itself.

use crate::config::Config;
use crate::error::{Error, Lang};
use std::sync::Arc;

/// The limits tiny_http enforces for us, from the configuration; its own error answers carry the
/// same JSON shape as ours.
pub fn limits(config: &Config) -> tiny_http::Limits {
    tiny_http::Limits {
        max_head_bytes: config.max_header_bytes,
        max_headers: config.max_headers,
        max_url_bytes: config.max_url_bytes,
        head_timeout: Some(config.header_timeout),
        keepalive_timeout: Some(config.keepalive_timeout),
        body_timeout: Some(config.body_timeout),
        write_timeout: Some(config.write_timeout),
        max_connections: config.max_connections,
        error_body: Arc::new(error_body),
        thread_stack: Some(CONNECTION_STACK),
        on_stream_wait: Some(crate::memory::release_unused_stack),
        // `main` shares the flag an upgrade sets.
        draining: Arc::default(),
        // A held run is one thread, its own: the connection waits parked (no thread) while the
        // stream is written, and is resumed on a pool thread for a next request after it.
        park_connections: true,
    }
}

/// Stack of a connection thread (tiny_http's pool): it reads request heads, bounded by
/// `--max-header-bytes`, in a loop without recursion; 256 KiB leaves room for a panic's
/// backtrace (symbolized on this thread) beside the ~20 KiB its deepest path touches. A held run
/// keeps none: its connection is parked while the stream is written.
const CONNECTION_STACK: usize = 256 * 1024;

/// The body of an answer tiny_http gives by itself (no request language is known there: English).
fn error_body(status: u16) -> (Vec<u8>, &'static str) {
    let body = Error::http_limit(status).to_json(Lang::En);
    (
        serde_json::to_vec(&body).unwrap_or_default(),
        "application/json",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::test_config as config;
    use std::time::Duration;

    #[test]
    fn tiny_http_error_bodies_are_catalogue_json() {
        let (body, ctype) = error_body(431);
        assert_eq!(ctype, "application/json");
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["error"]["code"], "INVALID_INPUT");
        let v: serde_json::Value = serde_json::from_slice(&error_body(503).0).unwrap();
        assert_eq!(v["error"]["code"], "A2A_UNAVAILABLE");
        let l = limits(&config(&[]));
        assert_eq!(
            (l.max_head_bytes, l.max_headers, l.max_url_bytes),
            (16384, 100, 8192)
        );
        assert_eq!(l.max_connections, 2048);
        assert_eq!(l.keepalive_timeout, Some(Duration::from_secs(5)));
    }
}
