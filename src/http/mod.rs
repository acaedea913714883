//! The HTTP surface: routes, Host, CORS and bearer checks, body limits and pre-SSE answers.
//!
//! A few dispatcher threads take requests from tiny_http and hand each to its own short-lived
//! thread, which runs the handler under `catch_unwind`: a slow body or a panic only ever holds or
//! ends that one thread, never a shared worker. An admitted run continues on the same thread, which
//! owns the raw connection for the life of the SSE stream.
//!
//! One job per file: `dispatch` (threads and panics), `request` (every check in the order a
//! client sees them), `route` (paths and methods), `guards` (Host, CORS, bearer), `body` (type,
//! limit, deadline), `url` (percent and query decoding), `answer` (JSON, refusals, the SSE head),
//! `limits` (what tiny_http enforces for us).

mod answer;
mod body;
mod dispatch;
mod guards;
mod limits;
mod request;
mod route;
mod url;

pub use dispatch::serve;
pub use limits::limits;

use tiny_http::Request;

/// The value of the first header called `name` (case-insensitive).
fn header<'a>(req: &'a Request, name: &str) -> Option<&'a str> {
    req.headers()
        .iter()
        .find(|h| h.field.as_str().as_str().eq_ignore_ascii_case(name))
        .map(|h| h.value.as_str())
}

/// A configuration as `agui` would build it from these flags (and no environment).
#[cfg(test)]
fn test_config(args: &[&str]) -> crate::config::Config {
    use crate::config::Command;
    match Command::parse(args.iter().map(|s| s.to_string()), |_| None).unwrap() {
        Command::Run(c) => *c,
        _ => unreachable!(),
    }
}
