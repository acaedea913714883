//! The HTTP surface: routes, Host and bearer checks, body limits and pre-SSE error answers.
//!
//! A few dispatcher threads take requests from tiny_http and hand each to its own short-lived
//! thread, which runs the handler under `catch_unwind`: a slow body or a panic only ever holds or
//! ends that one thread, never a shared worker. An admitted run continues on the same thread, which
//! owns the raw connection for the life of the SSE stream.

use crate::app::App;
use crate::config::{self, Config};
use crate::error::{Error, Lang, Msg};
use crate::input::{self, MAX_BODY_BYTES};
use crate::observe::{self, Observer};
use crate::pairs as routing;
use crate::run::{self, Admitted};
use crate::stream::SseStream;
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tiny_http::{Header, Method, Request, Response};

const CANCEL_PREFIX: &str = "/extensions/iac-code/v1/executions/";
const THREADS_PREFIX: &str = "/extensions/iac-code/v1/threads/";
const MAX_CANCEL_BODY: usize = 64 * 1024;
pub(crate) const PROTOCOL_VERSION: &str = "1.0.0";
/// Stack of a request thread, which is also the run's thread: runs are many and long-lived.
const RUN_STACK: usize = 512 * 1024;
/// Name of request threads; the panic hook logs their panics with a backtrace.
const REQUEST_THREAD: &str = "http-req";
const READ_CHUNK: usize = 64 * 1024;

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
    }
}

/// The body of an answer tiny_http gives by itself (no request language is known there: English).
pub(crate) fn error_body(status: u16) -> (Vec<u8>, &'static str) {
    let body = Error::http_limit(status).to_json(Lang::En);
    (
        serde_json::to_vec(&body).unwrap_or_default(),
        "application/json",
    )
}

/// Starts `dispatchers` threads taking requests from `server`; each request gets its own thread.
pub fn serve(app: &Arc<App>, server: &Arc<tiny_http::Server>, dispatchers: usize) {
    log_request_panics();
    let weak = Arc::downgrade(server);
    crate::metrics::count_connections_with(move || {
        weak.upgrade().map_or(0, |s| s.num_connections())
    });
    for i in 0..dispatchers {
        let (app, server) = (app.clone(), server.clone());
        let spawned = std::thread::Builder::new()
            .name(format!("http-{i}"))
            .spawn(move || loop {
                match server.recv() {
                    Ok(req) => dispatch(&app, req),
                    Err(e) => {
                        log::error!("accept failed: {e}");
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
            });
        if let Err(e) = spawned {
            log::error!("cannot spawn HTTP dispatcher {i}: {e}");
        }
    }
}

/// Hands `req` to a new thread. When no thread can be started the dispatcher answers 503 itself:
/// the request is kept in a cell the failed closure shared, so it is not lost with the closure.
fn dispatch(app: &Arc<App>, req: Request) {
    let cell = Arc::new(Mutex::new(Some(req)));
    let (app2, cell2) = (app.clone(), cell.clone());
    let spawned = std::thread::Builder::new()
        .name(REQUEST_THREAD.into())
        .stack_size(RUN_STACK)
        .spawn(move || {
            let req = cell2.lock().take();
            if let Some(req) = req {
                handle_guarded(&app2, req);
            }
        });
    if let Err(e) = spawned {
        log::error!("cannot spawn a request thread: {e}");
        if let Some(req) = cell.lock().take() {
            reply_error(req, &Msg::Overloaded.err(), Lang::En);
        }
    }
}

/// Installs (once) a panic hook that logs a request thread's panic with a backtrace; other
/// threads keep the previous hook.
fn log_request_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if std::thread::current().name() == Some(REQUEST_THREAD) {
                let bt = std::backtrace::Backtrace::force_capture();
                log::error!("request handler panicked: {info}\n{bt}");
            } else {
                previous(info);
            }
        }));
    });
}

/// Runs the handler; a panic (logged by the hook) answers a JSON 500 if the request was not
/// answered yet.
fn handle_guarded(app: &Arc<App>, req: Request) {
    guarded(
        req,
        |slot| handle(app, slot),
        |req| reply_error(req, &Msg::Internal.err(), Lang::En),
    );
}

/// Runs `f` on `item` held in a slot that outlives a panic of `f`: `f` takes the item out when it
/// is done with it, and whatever is left after a panic goes to `on_panic` (a request dropped
/// during the unwinding would send tiny_http's bare 500 instead of ours).
fn guarded<T>(item: T, f: impl FnOnce(&mut Option<T>), on_panic: impl FnOnce(T)) {
    let mut slot = Some(item);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&mut slot)));
    if outcome.is_err() {
        if let Some(item) = slot.take() {
            on_panic(item);
        }
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

/// Answers a pre-SSE error. tiny_http adds `Connection: close` and closes the connection itself
/// when the body was left unread (an application cannot set that header).
///
/// One INFO line per refusal: method, route, status and code only. The route is our name for
/// the path, never the request-target itself (a query string can carry anything), and no header
/// value is logged.
fn reply_error(req: Request, e: &Error, lang: Lang) {
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
    let _ = req.respond(with_headers(
        json_response(e.status(), &e.to_json(lang)),
        cors.headers(),
    ));
}

/// What a request needs once its checks passed.
enum Next {
    Json(serde_json::Value),
    /// The Prometheus exposition.
    Metrics(String),
    Run(Box<Admitted>),
    Observe(Box<Observer>),
    /// A CORS preflight (or a plain `OPTIONS`): 204 with these headers.
    Preflight(Vec<Header>),
}

/// A refusal, in the language chosen so far; `close` when the connection must not be reused
/// (a body cut short by its deadline).
struct Refusal {
    error: Error,
    lang: Lang,
    close: bool,
}

impl Refusal {
    fn new(error: Error, lang: Lang) -> Refusal {
        Refusal {
            error,
            lang,
            close: false,
        }
    }
}

fn handle(app: &Arc<App>, slot: &mut Option<Request>) {
    let Some(req) = slot.as_mut() else {
        return;
    };
    // The run's ids, once known, are log fields of everything this thread logs until it ends.
    let _fields = crate::logctx::scope();
    let cors = Cors::of(&app.config, req);
    let next = process(app, req, &cors);
    let Some(req) = slot.take() else {
        return;
    };
    match next {
        Ok(Next::Json(v)) => {
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
        Ok(Next::Run(admitted)) => stream_run(app, req, *admitted, &cors),
        Ok(Next::Observe(observer)) => stream_observer(app, req, *observer, &cors),
        Err(r) => {
            let socket = if r.close { req.socket() } else { None };
            if let Some(s) = &socket {
                // Nothing more is read from this client: tiny_http must not wait for the rest
                // of the body before it closes the connection.
                let _ = s.shutdown(std::net::Shutdown::Read);
            }
            reply_error_with(req, &r.error, r.lang, &cors);
            if let Some(s) = socket {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
        }
    }
}

/// Every check of a request up to admission, in the order a client sees them.
fn process(app: &Arc<App>, req: &mut Request, cors: &Cors) -> Result<Next, Refusal> {
    let accept_language = header(req, "Accept-Language").map(String::from);
    let header_lang = Lang::choose(None, accept_language.as_deref());
    let refuse = |e: Error| Refusal::new(e, header_lang);
    check_host(&app.config, req).map_err(refuse)?;
    let path = req.url().split('?').next().unwrap_or("").to_string();
    let route = Route::of(&path);
    if !matches!(route, Route::Health) {
        cors.check().map_err(refuse)?;
        if *req.method() == Method::Options && !matches!(route, Route::Unknown) {
            return Ok(Next::Preflight(cors.preflight_headers()));
        }
    }
    check_method(&route, req.method(), &path).map_err(refuse)?;
    if let Route::Health = route {
        return Ok(Next::Json(serde_json::json!({
            "status": "ok",
            "protocol": "ag-ui",
            "protocolPackageVersion": PROTOCOL_VERSION,
            "executionKernel": "a2a-1.0",
            "serverVersion": env!("CARGO_PKG_VERSION"),
        })));
    }
    if let Some(token) = &app.config.auth_token {
        if !bearer_matches(header(req, "Authorization"), token) {
            return Err(refuse(Msg::Unauthorized.err()));
        }
    }
    if let Route::Metrics = route {
        return Ok(Next::Metrics(crate::metrics::render(
            app.store.active_runs(),
        )));
    }
    if let Route::Thread(id) = &route {
        let query = req.url().split_once('?').map_or("", |(_, q)| q);
        return observe::thread_status(app, id, query, header_lang)
            .map(Next::Json)
            .map_err(refuse);
    }
    check_json_content_type(req).map_err(refuse)?;
    let limit = match route {
        Route::Run => MAX_BODY_BYTES,
        _ => MAX_CANCEL_BODY,
    };
    let body =
        read_body(req, limit, app.config.body_timeout).map_err(|(error, close)| Refusal {
            error,
            lang: header_lang,
            close,
        })?;
    match route {
        Route::Cancel(id) => routing::check_cancel(
            app.config.pair_mode,
            &app.store,
            header(req, routing::THREAD_HEADER),
            &body,
        )
        .and_then(|()| run::cancel_execution(app, &id, &body))
        .map(Next::Json)
        .map_err(refuse),
        Route::Subscribe(id) => {
            observe::admit_observer(app, &id, &body, header(req, "Last-Event-ID"), header_lang)
                .map(|o| Next::Observe(Box::new(o)))
                .map_err(refuse)
        }
        Route::Run => admit_run(app, req, body, accept_language.as_deref()),
        Route::Health | Route::Metrics | Route::Thread(_) | Route::Unknown => {
            Err(refuse(Msg::Internal.err()))
        }
    }
}

fn check_method(route: &Route, method: &Method, path: &str) -> Result<(), Error> {
    let allowed = match (route, method) {
        (Route::Health | Route::Metrics, Method::Get | Method::Head) => true,
        (Route::Run | Route::Cancel(_) | Route::Subscribe(_), Method::Post) => true,
        (Route::Thread(_), Method::Get) => true,
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

fn check_json_content_type(req: &Request) -> Result<(), Error> {
    let is_json = header(req, "Content-Type").is_some_and(|v| {
        v.split(';')
            .next()
            .unwrap_or("")
            .trim()
            .eq_ignore_ascii_case("application/json")
    });
    if is_json {
        return Ok(());
    }
    Err(Msg::UnsupportedMediaType.err())
}

enum Route {
    Health,
    /// `GET /metrics`, behind the bearer token when one is set.
    Metrics,
    Run,
    Cancel(String),
    Subscribe(String),
    /// The thread lookup; the id percent-decoded.
    Thread(String),
    Unknown,
}

impl Route {
    /// Matches a path without slicing by computed offsets: the cancel prefix and suffix may
    /// overlap (`…/executions/cancel`), and that must be a 404, not a panic.
    fn of(path: &str) -> Route {
        match path {
            "/health" => Route::Health,
            "/metrics" => Route::Metrics,
            "/" => Route::Run,
            p => {
                let execution = |suffix: &str| {
                    p.strip_prefix(CANCEL_PREFIX)
                        .and_then(|rest| rest.strip_suffix(suffix))
                        .filter(|id| !id.is_empty() && !id.contains('/'))
                        .map(String::from)
                };
                let thread = p
                    .strip_prefix(THREADS_PREFIX)
                    .filter(|id| !id.is_empty() && !id.contains('/'))
                    .and_then(observe::percent_decode)
                    .filter(|id| !id.is_empty());
                if let Some(id) = execution("/cancel") {
                    Route::Cancel(id)
                } else if let Some(id) = execution("/subscribe") {
                    Route::Subscribe(id)
                } else if let Some(id) = thread {
                    Route::Thread(id)
                } else {
                    Route::Unknown
                }
            }
        }
    }

    /// The route's name in logs: the pattern, not the path (ids and unknown paths stay out).
    fn label(&self) -> &'static str {
        match self {
            Route::Health => "/health",
            Route::Metrics => "/metrics",
            Route::Run => "/",
            Route::Cancel(_) => "/extensions/iac-code/v1/executions/{id}/cancel",
            Route::Subscribe(_) => "/extensions/iac-code/v1/executions/{id}/subscribe",
            Route::Thread(_) => "/extensions/iac-code/v1/threads/{threadId}",
            Route::Unknown => "(no route)",
        }
    }
}

/// The Host check against DNS rebinding: a page on another origin can make a browser reach a
/// loopback port under the attacker's host name, but not send a loopback `Host`. Applied to every
/// route (health too) when bound to loopback or when `--allowed-host` was given. A request
/// without exactly one `Host` is refused on HTTP/1.1, as RFC 9112 §3.2 requires.
fn check_host(config: &Config, req: &Request) -> Result<(), Error> {
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
        Some(h) if enforced && !host_allowed(h, config) => Err(Msg::HostNotAllowed.err()),
        _ => Ok(()),
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

/// Reads the body with a fixed buffer, at most `limit` bytes and within `deadline` in total.
/// The error's flag says the connection must be closed at once: the client is too slow or the
/// socket failed. A 413 leaves the rest of the body to tiny_http, which discards it or closes the
/// connection after the answer (closing at once would make a client still sending its body miss
/// the 413 in a reset).
fn read_body(
    req: &mut Request,
    limit: usize,
    deadline: Duration,
) -> Result<Vec<u8>, (Error, bool)> {
    let too_large = || Msg::BodyTooLarge.with(&[&limit]);
    if req.body_length().is_some_and(|n| n > limit) {
        return Err((too_large(), false));
    }
    let started = Instant::now();
    let timed_out = || (Msg::BodyTimeout.with(&[&deadline.as_secs_f64()]), true);
    let socket = req.socket();
    let mut body = Vec::with_capacity(req.body_length().unwrap_or(0).min(limit));
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        let left = deadline.saturating_sub(started.elapsed());
        if left.is_zero() {
            return Err(timed_out());
        }
        if let Some(s) = &socket {
            // Each read waits at most for what is left of the whole body's deadline.
            let _ = s.set_read_timeout(Some(left.max(Duration::from_millis(1))));
        }
        let n = match req.as_reader().read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(timed_out())
            }
            Err(_) => {
                return Err((Msg::BodyUnreadable.err(), true));
            }
        };
        if body.len() + n > limit {
            return Err((too_large(), false));
        }
        body.extend_from_slice(&buf[..n]);
    }
    Ok(body)
}

/// Parses (once) and admits a run request. The body is dropped here, before the run starts.
fn admit_run(
    app: &Arc<App>,
    req: &Request,
    body: Vec<u8>,
    accept_language: Option<&str>,
) -> Result<Next, Refusal> {
    let (lang, parsed) = input::parse_run(&body, &app.config.allowed_cwds, accept_language);
    if let Ok(input) = &parsed {
        crate::logctx::set_run(&input.thread_id, &input.run_id);
    }
    let accepts_sse = header(req, "Accept").is_none_or(|a| {
        a.split(',').any(|t| {
            let t = t.split(';').next().unwrap_or("").trim();
            t == "text/event-stream" || t == "*/*" || t == "text/*"
        })
    });
    if !accepts_sse {
        return Err(Refusal::new(Msg::NotAcceptable.err(), lang));
    }
    let parsed = parsed.map_err(|e| Refusal::new(e, lang))?;
    let thread_header = header(req, routing::THREAD_HEADER);
    routing::check_run(
        app.config.pair_mode,
        &app.store,
        thread_header,
        &parsed,
        &body,
    )
    .map_err(|e| Refusal::new(e, lang))?;
    drop(body);
    let admitted = run::admit(app, parsed, lang).map_err(|e| Refusal::new(e, lang))?;
    Ok(Next::Run(Box::new(admitted)))
}

/// The run continues on this request thread, which owns the connection; admission already
/// marked the thread busy, and dropping `admitted` on any failure releases it.
fn stream_run(app: &Arc<App>, req: Request, admitted: Admitted, cors: &Cors) {
    let stream = match SseStream::open_with(req, app.config.write_timeout, &cors.head()) {
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
fn stream_observer(app: &Arc<App>, req: Request, observer: Observer, cors: &Cors) {
    // Which answer this is, never guessed by the client: `exact` or `join`.
    let head = format!(
        "X-AGUI-Resume: {}\r\n{}",
        observer.resume_kind(),
        cors.head()
    );
    let stream = match SseStream::open_with(req, app.config.write_timeout, &head) {
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

fn with_headers<R: std::io::Read>(mut resp: Response<R>, headers: Vec<Header>) -> Response<R> {
    for h in headers {
        resp.add_header(h);
    }
    resp
}

/// The CORS decision for one request (off unless `--cors-allow-origin` lists the origin).
/// A request without `Origin`, or whose `Origin` names the request's own `Host` (same origin,
/// e.g. behind a proxy that keeps the Host), needs no CORS headers.
enum Cors {
    None,
    Allowed(String),
    Denied,
}

const CORS_METHODS: &str = "GET, POST, OPTIONS";
const CORS_HEADERS: &str = "Authorization, Content-Type, Accept, Accept-Language, Last-Event-ID";
const CORS_MAX_AGE: &str = "600";

impl Cors {
    fn of(config: &Config, req: &Request) -> Cors {
        let Some(origin) = header(req, "Origin").map(str::trim) else {
            return Cors::None;
        };
        let authority = origin.split_once("://").map(|(_, a)| a);
        if authority
            .is_some_and(|a| header(req, "Host").is_some_and(|h| a.eq_ignore_ascii_case(h.trim())))
        {
            return Cors::None;
        }
        let allowed = config
            .cors_allow_origins
            .iter()
            .any(|o| o == "*" || o.eq_ignore_ascii_case(origin));
        if allowed {
            Cors::Allowed(origin.to_string())
        } else {
            Cors::Denied
        }
    }

    /// A page of an origin that is not allowed gets no run (nor anything else but `/health`).
    fn check(&self) -> Result<(), Error> {
        match self {
            Cors::Denied => Err(Msg::OriginNotAllowed.err()),
            _ => Ok(()),
        }
    }

    fn headers(&self) -> Vec<Header> {
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

    fn preflight_headers(&self) -> Vec<Header> {
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
    fn head(&self) -> String {
        self.headers()
            .iter()
            .map(|h| format!("{}: {}\r\n", h.field, h.value))
            .collect()
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
    use crate::config::Command;

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
        assert!(
            matches!(Route::of("/extensions/iac-code/v1/executions/e1/subscribe"), Route::Subscribe(id) if id == "e1")
        );
        assert!(
            matches!(Route::of("/extensions/iac-code/v1/threads/t%201"), Route::Thread(id) if id == "t 1")
        );
        for p in [
            "/extensions/iac-code/v1/threads/",
            "/extensions/iac-code/v1/threads/a/b",
            "/extensions/iac-code/v1/threads/%zz",
            "/extensions/iac-code/v1/executions/subscribe",
        ] {
            assert!(matches!(Route::of(p), Route::Unknown), "{p}");
        }
        assert!(matches!(Route::of("/health"), Route::Health));
        assert!(matches!(Route::of("/"), Route::Run));
    }

    fn config(args: &[&str]) -> Config {
        match Command::parse(args.iter().map(|s| s.to_string()), |_| None).unwrap() {
            Command::Run(c) => *c,
            _ => unreachable!(),
        }
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

    #[test]
    fn a_panicking_handler_leaves_the_request_to_the_panic_answer() {
        let answered = std::cell::Cell::new(None);
        guarded(
            "req",
            |_slot| panic!("handler bug"),
            |r| answered.set(Some(r)),
        );
        assert_eq!(answered.get(), Some("req"));
        // A handler that took the request (answered it) leaves nothing to answer twice.
        let answered = std::cell::Cell::new(None);
        guarded(
            "req",
            |slot| {
                slot.take();
                panic!("after answering")
            },
            |r| answered.set(Some(r)),
        );
        assert_eq!(answered.get(), None);
    }

    #[test]
    fn long_paths_are_not_echoed_whole() {
        let long = "/x".repeat(10_000);
        assert!(shorten(&long).len() < 210);
        assert_eq!(shorten("/short"), "/short");
    }

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
