//! The HTTP surface: routes, authentication, body limits and pre-SSE error answers.
//!
//! A fixed pool of workers takes requests from tiny_http. A run request that is admitted gets its own
//! OS thread, which owns the raw connection for the life of the SSE stream; the worker goes back to
//! the queue at once.

use crate::error::{Error, Lang};
use crate::input::{self, MAX_BODY_BYTES};
use crate::run::{self, App};
use crate::stream::SseStream;
use std::io::Read;
use std::sync::Arc;
use tiny_http::{Header, Method, Request, Response};

const CANCEL_PREFIX: &str = "/extensions/iac-code/v1/executions/";
const MAX_CANCEL_BODY: usize = 64 * 1024;
pub const PROTOCOL_VERSION: &str = "1.0.0";
const RUN_STACK: usize = 512 * 1024;

/// Starts `workers` threads serving `server`.
pub fn serve(app: Arc<App>, server: Arc<tiny_http::Server>, workers: usize) {
    for i in 0..workers {
        let (app, server) = (app.clone(), server.clone());
        std::thread::Builder::new()
            .name(format!("http-{i}"))
            .spawn(move || loop {
                match server.recv() {
                    Ok(req) => handle(&app, req),
                    Err(e) => {
                        log::error!("accept failed: {e}");
                        std::thread::sleep(std::time::Duration::from_millis(10));
                    }
                }
            })
            .expect("spawn http worker");
    }
}

fn header<'a>(req: &'a Request, name: &str) -> Option<&'a str> {
    req.headers()
        .iter()
        .find(|h| h.field.as_str().as_str().eq_ignore_ascii_case(name))
        .map(|h| h.value.as_str())
}

fn json_response(status: u16, body: &serde_json::Value) -> Response<std::io::Cursor<Vec<u8>>> {
    Response::from_data(serde_json::to_vec(body).unwrap_or_default())
        .with_status_code(status)
        .with_header(Header::from_bytes("Content-Type", "application/json").expect("static header"))
}

fn reply_error(req: Request, e: &Error, lang: Lang) {
    log::debug!(
        "{} {} -> {} {}",
        req.method(),
        req.url(),
        e.status(),
        e.code
    );
    let _ = req.respond(json_response(e.status(), &e.to_json(lang)));
}

fn handle(app: &Arc<App>, mut req: Request) {
    let path = req.url().split('?').next().unwrap_or("").to_string();
    let accept_language = header(&req, "Accept-Language").map(String::from);
    let header_lang = Lang::choose(None, accept_language.as_deref());
    let method = req.method().clone();
    let route = Route::of(&path);
    let allowed = match (&route, &method) {
        (Route::Health, Method::Get | Method::Head) => true,
        (Route::Run | Route::Cancel(_), Method::Post) => true,
        (Route::Unknown, _) => {
            let e = Error::invalid(
                format!("No route for {path}."),
                format!("不存在路由 {path}。"),
            )
            .with_status(404);
            return reply_error(req, &e, header_lang);
        }
        _ => false,
    };
    if !allowed {
        let e = Error::invalid(
            format!("Method {method} is not allowed on {path}."),
            format!("{path} 不支持 {method} 方法。"),
        )
        .with_status(405);
        return reply_error(req, &e, header_lang);
    }
    if let Route::Health = route {
        let body = serde_json::json!({
            "status": "ok",
            "protocol": "ag-ui",
            "protocolPackageVersion": PROTOCOL_VERSION,
            "executionKernel": "a2a-1.0",
            "serverVersion": env!("CARGO_PKG_VERSION"),
        });
        let _ = req.respond(json_response(200, &body));
        return;
    }
    if let Some(token) = &app.config.auth_token {
        if !bearer_matches(header(&req, "Authorization"), token) {
            let e = Error::invalid(
                "Missing or invalid bearer token.",
                "缺少或无效的 Bearer token。",
            )
            .with_status(401);
            return reply_error(req, &e, header_lang);
        }
    }
    let is_json = header(&req, "Content-Type").is_some_and(|v| {
        v.split(';')
            .next()
            .unwrap_or("")
            .trim()
            .eq_ignore_ascii_case("application/json")
    });
    if !is_json {
        let e = Error::invalid(
            "The request body must be sent with Content-Type: application/json.",
            "请求体必须使用 Content-Type: application/json。",
        )
        .with_status(415);
        return reply_error(req, &e, header_lang);
    }
    let limit = match route {
        Route::Run => MAX_BODY_BYTES,
        _ => MAX_CANCEL_BODY,
    };
    let body = match read_body(&mut req, limit) {
        Ok(b) => b,
        Err(e) => return reply_error(req, &e, header_lang),
    };
    match route {
        Route::Cancel(id) => match run::cancel_execution(app, &id, &body) {
            Ok(v) => {
                let _ = req.respond(json_response(200, &v));
            }
            Err(e) => reply_error(req, &e, header_lang),
        },
        Route::Run => start_run(app, req, &body, accept_language.as_deref()),
        _ => {}
    }
}

enum Route {
    Health,
    Run,
    Cancel(String),
    Unknown,
}

impl Route {
    /// Matches a path without slicing by computed offsets: the cancel prefix and suffix may
    /// overlap (`…/executions/cancel`), and that must be a 404, not a panic.
    fn of(path: &str) -> Route {
        match path {
            "/health" => Route::Health,
            "/" => Route::Run,
            p => match p
                .strip_prefix(CANCEL_PREFIX)
                .and_then(|rest| rest.strip_suffix("/cancel"))
            {
                Some(id) if !id.is_empty() && !id.contains('/') => Route::Cancel(id.to_string()),
                _ => Route::Unknown,
            },
        }
    }
}

fn read_body(req: &mut Request, limit: usize) -> Result<Vec<u8>, Error> {
    let too_large = || {
        Error::invalid(
            format!("The request body exceeds {} bytes.", limit),
            format!("请求体超过 {} 字节。", limit),
        )
        .with_status(413)
    };
    if req.body_length().is_some_and(|n| n > limit) {
        return Err(too_large());
    }
    let mut body = Vec::new();
    req.as_reader()
        .take(limit as u64 + 1)
        .read_to_end(&mut body)
        .map_err(|_| Error::invalid("The request body could not be read.", "无法读取请求体。"))?;
    if body.len() > limit {
        return Err(too_large());
    }
    Ok(body)
}

fn start_run(app: &Arc<App>, req: Request, body: &[u8], accept_language: Option<&str>) {
    let lang = input::request_lang(body, accept_language);
    let accepts_sse = header(&req, "Accept").is_none_or(|a| {
        a.split(',').any(|t| {
            let t = t.split(';').next().unwrap_or("").trim();
            t == "text/event-stream" || t == "*/*" || t == "text/*"
        })
    });
    if !accepts_sse {
        let e = Error::invalid(
            "The client must accept text/event-stream.",
            "客户端必须接受 text/event-stream。",
        )
        .with_status(406);
        return reply_error(req, &e, lang);
    }
    let parsed = match input::parse_run(body, &app.config.allowed_cwds) {
        Ok(p) => p,
        Err(e) => return reply_error(req, &e, lang),
    };
    let admitted = match run::admit(app, parsed, lang) {
        Ok(a) => a,
        Err(e) => return reply_error(req, &e, lang),
    };
    let app = app.clone();
    // The run thread owns the connection; admission already marked the thread busy, and dropping
    // `admitted` on any failure below releases it.
    let spawned = std::thread::Builder::new()
        .name("run".into())
        .stack_size(RUN_STACK)
        .spawn(move || {
            let stream = match SseStream::start(req.into_writer()) {
                Ok(s) => s,
                Err(e) => {
                    log::info!("client left before the stream started: {e}");
                    return; // dropping `admitted` frees the thread
                }
            };
            app.heartbeats.register(&stream);
            run::run(app, admitted, stream);
        });
    if let Err(e) = spawned {
        log::error!("cannot spawn a run thread: {e}");
    }
}

/// Constant-time comparison of the presented bearer token. The scheme name is case-insensitive
/// (RFC 9110 §11.1), the token is not.
fn bearer_matches(header: Option<&str>, token: &str) -> bool {
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
        assert!(matches!(Route::of("/health"), Route::Health));
        assert!(matches!(Route::of("/"), Route::Run));
    }
}
