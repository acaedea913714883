//! The routes: a request path as a [`Route`], the methods each route takes, and its name in logs.

use super::url::percent_decode;
use crate::error::{Error, Msg};
use tiny_http::Method;

const CANCEL_PREFIX: &str = "/extensions/iac-code/v1/executions/";
const THREADS_PREFIX: &str = "/extensions/iac-code/v1/threads/";
const THREADS: &str = "/extensions/iac-code/v1/threads";

pub(super) enum Route {
    Health,
    /// `GET /metrics`, behind the bearer token when one is set.
    Metrics,
    Run,
    Cancel(String),
    Subscribe(String),
    /// The thread lookup; the id percent-decoded.
    Thread(String),
    /// A thread's kept conversation, page by page; the id percent-decoded.
    Messages(String),
    /// The thread list (a user's threads).
    Threads,
    /// The live feed of a thread (`…/threads/{threadId}/events`); the id percent-decoded.
    Events(String),
    Unknown,
}

impl Route {
    /// Matches a path without slicing by computed offsets: the cancel prefix and suffix may
    /// overlap (`…/executions/cancel`), and that must be a 404, not a panic.
    pub(super) fn of(path: &str) -> Route {
        match path {
            "/health" => Route::Health,
            "/metrics" => Route::Metrics,
            "/" => Route::Run,
            THREADS => Route::Threads,
            p => {
                let execution = |suffix: &str| {
                    p.strip_prefix(CANCEL_PREFIX)
                        .and_then(|rest| rest.strip_suffix(suffix))
                        .filter(|id| !id.is_empty() && !id.contains('/'))
                        .map(String::from)
                };
                let thread_id = |rest: &str| {
                    Some(rest)
                        .filter(|id| !id.is_empty() && !id.contains('/'))
                        .and_then(percent_decode)
                        .filter(|id| !id.is_empty())
                };
                let in_threads = p.strip_prefix(THREADS_PREFIX);
                let thread = in_threads.and_then(thread_id);
                let messages = in_threads
                    .and_then(|rest| rest.strip_suffix("/messages"))
                    .and_then(thread_id);
                let events = in_threads
                    .and_then(|rest| rest.strip_suffix("/events"))
                    .and_then(thread_id);
                if let Some(id) = events {
                    return Route::Events(id);
                }
                if let Some(id) = execution("/cancel") {
                    Route::Cancel(id)
                } else if let Some(id) = execution("/subscribe") {
                    Route::Subscribe(id)
                } else if let Some(id) = thread {
                    Route::Thread(id)
                } else if let Some(id) = messages {
                    Route::Messages(id)
                } else {
                    Route::Unknown
                }
            }
        }
    }

    /// The route's name in logs: the pattern, not the path (ids and unknown paths stay out).
    pub(super) fn label(&self) -> &'static str {
        match self {
            Route::Health => "/health",
            Route::Metrics => "/metrics",
            Route::Run => "/",
            Route::Cancel(_) => "/extensions/iac-code/v1/executions/{id}/cancel",
            Route::Subscribe(_) => "/extensions/iac-code/v1/executions/{id}/subscribe",
            Route::Thread(_) => "/extensions/iac-code/v1/threads/{threadId}",
            Route::Messages(_) => "/extensions/iac-code/v1/threads/{threadId}/messages",
            Route::Threads => THREADS,
            Route::Events(_) => "/extensions/iac-code/v1/threads/{threadId}/events",
            Route::Unknown => "(no route)",
        }
    }
}

pub(super) fn check_method(route: &Route, method: &Method, path: &str) -> Result<(), Error> {
    let allowed = match (route, method) {
        (Route::Health | Route::Metrics, Method::Get | Method::Head) => true,
        (Route::Run | Route::Cancel(_) | Route::Subscribe(_), Method::Post) => true,
        (
            Route::Thread(_) | Route::Messages(_) | Route::Threads | Route::Events(_),
            Method::Get,
        ) => true,
        (Route::Unknown, _) => {
            let shown = shorten(path);
            return Err(Msg::NoRoute.with(&[&shown]));
        }
        _ => false,
    };
    if allowed {
        return Ok(());
    }
    let shown = shorten(path);
    Err(Msg::MethodNotAllowed.with(&[method, &shown]))
}

/// A path as echoed in an error: at most 200 bytes, so a long URL is not sent back whole.
fn shorten(path: &str) -> String {
    match path.char_indices().nth(200) {
        Some((i, _)) => format!("{}…", &path[..i]),
        None => path.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_never_panic_on_overlapping_prefix_and_suffix() {
        for p in [
            "/extensions/iac-code/v1/executions/cancel",
            "/extensions/iac-code/v1/executions//cancel",
            "/extensions/iac-code/v1/executions/a/b/cancel",
            "/extensions/iac-code/v1/executions/",
            "/extensions/iac-code/v1/executions",
        ] {
            assert!(matches!(Route::of(p), Route::Unknown), "{p}");
        }
        assert!(
            matches!(Route::of("/extensions/iac-code/v1/executions/e1/cancel"), Route::Cancel(id) if id == "e1")
        );
        assert!(
            matches!(Route::of("/extensions/iac-code/v1/executions/e1/subscribe"), Route::Subscribe(id) if id == "e1")
        );
        assert!(
            matches!(Route::of("/extensions/iac-code/v1/threads/t%201"), Route::Thread(id) if id == "t 1")
        );
        assert!(
            matches!(Route::of("/extensions/iac-code/v1/threads/t%2F1/messages"), Route::Messages(id) if id == "t/1")
        );
        for p in [
            "/extensions/iac-code/v1/threads/",
            "/extensions/iac-code/v1/threads/a/b",
            "/extensions/iac-code/v1/threads/%zz",
            "/extensions/iac-code/v1/executions/subscribe",
        ] {
            assert!(matches!(Route::of(p), Route::Unknown), "{p}");
        }
        assert!(
            matches!(Route::of("/extensions/iac-code/v1/threads/t%201/events"), Route::Events(id) if id == "t 1")
        );
        assert!(matches!(
            Route::of("/extensions/iac-code/v1/threads//events"),
            Route::Unknown
        ));
        assert!(matches!(Route::of("/health"), Route::Health));
        assert!(matches!(
            Route::of("/extensions/iac-code/v1/threads"),
            Route::Threads
        ));
        assert!(matches!(Route::of("/"), Route::Run));
    }

    #[test]
    fn long_paths_are_not_echoed_whole() {
        let long = "/x".repeat(10_000);
        assert!(shorten(&long).len() < 210);
        assert_eq!(shorten("/short"), "/short");
    }
}
