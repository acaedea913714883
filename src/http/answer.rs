//! The answers: JSON, the metrics text, a preflight, a refusal (with its log line and metric),
//! or the SSE stream a run or an observer continues on, on the request's own thread.

use super::body::Connection;
use super::guards::Cors;
use super::request::{Next, Refusal};
use super::route::Route;
use crate::app::App;
use crate::error::{Error, Lang};
use crate::observe::{self, Observer};
use crate::run::{self, Admitted};
use crate::stream::SseStream;
use crate::threadfeed::{self, Follower};
use std::sync::Arc;
use tiny_http::{Header, Request, Response};

/// A stream that goes on after the request's checks and answer returned: it runs from the top
/// of the thread's stack, so a held stream's live frames are its own, not the checks' (large
/// frames stay resident for as long as a stream lasts).
pub(super) type Stream = Box<dyn FnOnce()>;

/// Answers `req` with what its checks decided; a stream is returned, to be run by the caller.
pub(super) fn answer(
    app: &Arc<App>,
    req: Request,
    next: Result<Next, Refusal>,
    cors: Cors,
) -> Option<Stream> {
    // What a stream captures is boxed: calling the closure moves its captures onto the stack,
    // where they would stay for the stream's life.
    let (app, req, cors) = (app.clone(), Box::new(req), Box::new(cors));
    match next {
        Ok(Next::Run(admitted)) => Some(Box::new(move || stream_run(&app, req, admitted, &cors))),
        Ok(Next::Observe(observer)) => Some(Box::new(move || {
            stream_observer(&app, req, *observer, &cors)
        })),
        Ok(Next::Follow(follower)) => Some(Box::new(move || {
            stream_follower(&app, req, *follower, &cors)
        })),
        other => {
            answer_now(*req, other, &cors);
            None
        }
    }
}

/// The answers given at once, on the request's thread.
fn answer_now(req: Request, next: Result<Next, Refusal>, cors: &Cors) {
    match next {
        Ok(Next::Json(v)) => {
            // tiny_http writes the head and the body apart: with Nagle's algorithm on, a body
            // past one segment (a history page) waited for the client's delayed ACK, 40 ms.
            if let Some(s) = req.socket() {
                let _ = s.set_nodelay(true);
            }
            let _ = req.respond(with_headers(json_response(200, &v), cors.headers()));
        }
        Ok(Next::Metrics(text)) => {
            let ctype = "text/plain; version=0.0.4; charset=utf-8";
            let _ = req
                .respond(Response::from_data(text).with_header(
                    Header::from_bytes("Content-Type", ctype).expect("static header"),
                ));
        }
        Ok(Next::Preflight(headers)) => {
            let _ = req.respond(with_headers(Response::empty(204), headers));
        }
        Ok(Next::Run(_) | Next::Observe(_) | Next::Follow(_)) => {
            unreachable!("streams are returned by `answer`")
        }
        Err(r) => refuse(req, &r, cors),
    }
}

/// Answers a refusal; one that closes the connection at once stops reading first.
fn refuse(req: Request, r: &Refusal, cors: &Cors) {
    let socket = match r.connection {
        Connection::CloseAtOnce => req.socket(),
        Connection::AsUsual => None,
    };
    if let Some(s) = &socket {
        // Nothing more is read from this client: tiny_http must not wait for the rest
        // of the body before it closes the connection.
        let _ = s.shutdown(std::net::Shutdown::Read);
    }
    reply_error_with(req, &r.error, r.lang, cors);
    if let Some(s) = socket {
        let _ = s.shutdown(std::net::Shutdown::Both);
    }
}

fn json_response(status: u16, body: &serde_json::Value) -> Response<std::io::Cursor<Vec<u8>>> {
    Response::from_data(serde_json::to_vec(body).unwrap_or_default())
        .with_status_code(status)
        .with_header(Header::from_bytes("Content-Type", "application/json").expect("static header"))
}

/// Answers a pre-SSE error. tiny_http adds `Connection: close` and closes the connection itself
/// when the body was left unread (an application cannot set that header).
///
/// One INFO line per refusal: method, route, status and code only. The route is our name for
/// the path, never the request-target itself (a query string can carry anything), and no header
/// value is logged.
pub(super) fn reply_error(req: Request, e: &Error, lang: Lang) {
    reply_error_with(req, e, lang, &Cors::None);
}

/// [`reply_error`] with the CORS headers an allowed origin needs to read the error.
fn reply_error_with(req: Request, e: &Error, lang: Lang, cors: &Cors) {
    let path = req.url().split('?').next().unwrap_or("");
    log::info!(
        "rejected {} {} -> {} {}",
        req.method(),
        Route::of(path).label(),
        e.status(),
        e.code
    );
    crate::metrics::rejected(e.status(), e.code);
    let mut response = with_headers(json_response(e.status(), &e.to_json(lang)), cors.headers());
    if let Some(secs) = e.retry_after() {
        // A retryable refusal says when to retry (RFC 9110 §10.2.3).
        let value = secs.to_string();
        response.add_header(Header::from_bytes("Retry-After", value.as_bytes()).expect("digits"));
    }
    let _ = req.respond(response);
}

/// The run continues on this request thread, which owns the connection; admission already
/// marked the thread busy, and dropping `admitted` on any failure releases it.
fn stream_run(app: &Arc<App>, req: Box<Request>, admitted: Box<Admitted>, cors: &Cors) {
    let stream = match open_stream(req, app.config.write_timeout, &cors.head()) {
        Ok(s) => s,
        Err(e) => {
            log::info!("client left before the stream started: {e}");
            return; // dropping `admitted` frees the thread
        }
    };
    app.heartbeats.register(&stream);
    run::drive(app, admitted, &stream);
}

/// An observer continues on this request thread, like a run, with heartbeats; it holds no
/// thread slot, so nothing is freed when it ends.
fn stream_observer(app: &Arc<App>, req: Box<Request>, observer: Observer, cors: &Cors) {
    // Which answer this is, never guessed by the client: `exact` or `join`.
    let head = format!(
        "X-AGUI-Resume: {}\r\n{}",
        observer.resume_kind(),
        cors.head()
    );
    let stream = match open_stream(req, app.config.write_timeout, &head) {
        Ok(s) => s,
        Err(e) => {
            log::info!("observer left before the stream started: {e}");
            observer.abandon();
            return;
        }
    };
    app.heartbeats.register(&stream);
    observe::observe(app, observer, &stream);
}

/// A thread's live feed continues on this request thread, with heartbeats, until its client
/// leaves; it holds no thread slot and no run.
fn stream_follower(app: &Arc<App>, req: Box<Request>, follower: Follower, cors: &Cors) {
    let stream = match open_stream(req, app.config.write_timeout, &cors.head()) {
        Ok(s) => s,
        Err(e) => {
            log::info!("feed client left before the stream started: {e}");
            return;
        }
    };
    app.heartbeats.register(&stream);
    threadfeed::follow(follower, &stream);
}

/// The SSE response begun on the request's connection, in a frame of its own (the request is
/// unboxed there, not in the frame the stream then lives in).
#[inline(never)]
fn open_stream(
    req: Box<Request>,
    write_timeout: std::time::Duration,
    extra: &str,
) -> std::io::Result<Arc<SseStream>> {
    SseStream::open_with(*req, write_timeout, extra)
}

fn with_headers<R: std::io::Read>(mut resp: Response<R>, headers: Vec<Header>) -> Response<R> {
    for h in headers {
        resp.add_header(h);
    }
    resp
}
