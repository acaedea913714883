//! One request from its first check to its answer: the checks in the order a client sees them,
//! then the route's own work (a JSON answer, or a run or observer admitted to stream).

use super::answer::{answer, Stream};
use super::body::{check_json_content_type, read_body, BodyError, Connection, MAX_CANCEL_BODY};
use super::guards::{bearer_matches, check_host, Cors};
use super::header;
use super::route::{check_method, Route};
use super::url::query_param;
use crate::app::App;
use crate::error::{Error, Lang, Msg};
use crate::input::{self, MAX_BODY_BYTES};
use crate::observe::{self, Observer};
use crate::pairs;
use crate::run::{self, Admitted};
use crate::store::parse_limit;
use crate::threadfeed::Follower;
use std::sync::Arc;
use tiny_http::{Header, Method, Request};

const PROTOCOL_VERSION: &str = "1.0.0";

/// What a request needs once its checks passed.
pub(super) enum Next {
    Json(serde_json::Value),
    /// The Prometheus exposition.
    Metrics(String),
    Run(Box<Admitted>),
    Observe(Box<Observer>),
    /// A thread's live feed.
    Follow(Box<Follower>),
    /// A CORS preflight (or a plain `OPTIONS`): 204 with these headers.
    Preflight(Vec<Header>),
}

/// A refusal, in the language chosen so far, and what becomes of the connection.
pub(super) struct Refusal {
    pub(super) error: Error,
    pub(super) lang: Lang,
    pub(super) connection: Connection,
}

impl Refusal {
    fn new(error: Error, lang: Lang) -> Refusal {
        Refusal {
            error,
            lang,
            connection: Connection::AsUsual,
        }
    }

    fn of_body(e: BodyError, lang: Lang) -> Refusal {
        Refusal {
            error: e.error,
            lang,
            connection: e.connection,
        }
    }
}

/// Checks and answers the request in `slot`, taking it out to answer it; a stream (a run, an
/// observer, a feed) is returned for the caller to run once this frame is gone.
pub(super) fn handle(app: &Arc<App>, slot: &mut Option<Request>) -> Option<Stream> {
    let req = slot.as_mut()?;
    // The run's ids, once known, are log fields of everything this thread logs until it ends
    // (the stream's end included: the scope goes with it).
    let fields = crate::logctx::scope();
    let cors = Cors::of(&app.config, req);
    let next = process(app, req, &cors);
    let req = slot.take()?;
    let stream = answer(app, req, next, cors)?;
    Some(Box::new(move || {
        let _fields = fields;
        stream()
    }))
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
        return Ok(Next::Json(health()));
    }
    if let Some(token) = &app.config.auth_token {
        if !bearer_matches(header(req, "Authorization"), token) {
            return Err(refuse(Msg::Unauthorized.err()));
        }
    }
    // A balancer may route by the user header (contrib/deploy): it must name the user a route's
    // `userId` query asks for (`POST /` compares it with its body's, below).
    let query = req.url().split_once('?').map_or("", |(_, q)| q);
    if let Some(user) = query_param(query, "userId") {
        pairs::check_user_header(header(req, pairs::USER_HEADER), Some(&user)).map_err(refuse)?;
    }
    if let Route::Metrics = route {
        return Ok(Next::Metrics(crate::metrics::render(
            app.store.active_runs(),
        )));
    }
    if let Route::Thread(id) = &route {
        let query = req.url().split_once('?').map_or("", |(_, q)| q);
        let ros_invocation_id = query_param(query, "rosInvocationId");
        let user_id = query_param(query, "userId");
        return observe::thread_status(app, id, ros_invocation_id, user_id, header_lang)
            .map(Next::Json)
            .map_err(refuse);
    }
    if let Route::Messages(id) = &route {
        let query = req.url().split_once('?').map_or("", |(_, q)| q);
        let who = observe::Identity {
            ros: query_param(query, "rosInvocationId"),
            user: query_param(query, "userId"),
        };
        let limit = query_param(query, "limit");
        let before = query_param(query, "before");
        return history_page(app, id, who, limit.as_deref(), before.as_deref())
            .map(Next::Json)
            .map_err(refuse);
    }
    if let Route::Threads = route {
        return thread_list(app, req.url()).map_err(refuse);
    }
    if let Route::Events(id) = &route {
        return follow_thread(app, req, id, header_lang).map_err(refuse);
    }
    check_json_content_type(req).map_err(refuse)?;
    let limit = match route {
        Route::Run => MAX_BODY_BYTES,
        _ => MAX_CANCEL_BODY,
    };
    let body = read_body(req, limit, app.config.body_timeout)
        .map_err(|e| Refusal::of_body(e, header_lang))?;
    crate::memory::note_body(body.len());
    let accept_language = accept_language.as_deref();
    with_body(app, req, route, body, header_lang, accept_language)
}

/// `GET /extensions/iac-code/v1/threads/{threadId}/messages?limit=N&before=C`: one page of the
/// kept conversation, under the thread lookup's identity rules (checked before the query, so a
/// bad cursor on a thread the caller may not see is the same 404).
fn history_page(
    app: &App,
    thread_id: &str,
    who: observe::Identity,
    limit: Option<&str>,
    before: Option<&str>,
) -> Result<serde_json::Value, Error> {
    observe::identified(app, thread_id, &who)?;
    let limit = crate::history::page_limit(limit)?;
    app.history.page(thread_id, limit, before)
}

/// `GET …/threads?userId=U&limit=N&cursor=C`: a page of the user's threads.
fn thread_list(app: &App, url: &str) -> Result<Next, Error> {
    let query = url.split_once('?').map_or("", |(_, q)| q);
    let user = query_param(query, "userId").ok_or_else(|| Msg::ThreadListNeedsUser.err())?;
    let limit = parse_limit(query_param(query, "limit").as_deref())?;
    let cursor = query_param(query, "cursor");
    app.store
        .list_threads(&user, limit, cursor.as_deref())
        .map(Next::Json)
}

/// `GET …/threads/{threadId}/events`: the thread lookup's identity rules (the same answer, so
/// the same 404s), then a feed that holds every run beginning from now, seeded with the run the
/// lookup names (looked up again once the feed holds new runs, so none slips between).
fn follow_thread(app: &App, req: &Request, id: &str, lang: Lang) -> Result<Next, Error> {
    let query = req.url().split_once('?').map_or("", |(_, q)| q);
    let ros = query_param(query, "rosInvocationId");
    let user = query_param(query, "userId");
    observe::thread_status(app, id, ros.clone(), user.clone(), lang)?;
    let follower = app.threads.follow(id, &app.history);
    let status = observe::thread_status(app, id, ros, user, lang)?;
    let current = status["executionId"]
        .as_str()
        .and_then(|e| app.feeds.get(e));
    follower.seed(current);
    let follower = follower.resuming(header(req, "Last-Event-ID"));
    Ok(Next::Follow(Box::new(follower)))
}

/// `GET /health`: the adapter, its protocol and its version.
fn health() -> serde_json::Value {
    serde_json::json!({
        "status": "ok",
        "protocol": "ag-ui",
        "protocolPackageVersion": PROTOCOL_VERSION,
        "executionKernel": "a2a-1.0",
        "serverVersion": env!("CARGO_PKG_VERSION"),
    })
}

/// The routes that read a body: the cancel extension, the observer's subscribe and the run.
fn with_body(
    app: &Arc<App>,
    req: &Request,
    route: Route,
    body: Vec<u8>,
    header_lang: Lang,
    accept_language: Option<&str>,
) -> Result<Next, Refusal> {
    let refuse = |e: Error| Refusal::new(e, header_lang);
    match route {
        Route::Cancel(id) => pairs::check_cancel(
            app.config.pair_mode,
            &app.store,
            header(req, pairs::THREAD_HEADER),
            &body,
        )
        .and_then(|()| run::cancel_execution(app, &id, &body))
        .map(Next::Json)
        .map_err(refuse),
        Route::Subscribe(id) => {
            let query = req.url().split_once('?').map_or("", |(_, q)| q);
            let history_limit = query_param(query, "historyLimit");
            let cursor = header(req, "Last-Event-ID");
            let asked = observe::Asked {
                body: &body,
                last_event_id: cursor,
                history_limit: history_limit.as_deref(),
            };
            observe::admit_observer(app, &id, asked, header_lang)
                .map(|o| Next::Observe(Box::new(o)))
                .map_err(refuse)
        }
        Route::Run => admit_run(app, req, body, accept_language),
        Route::Health
        | Route::Metrics
        | Route::Thread(_)
        | Route::Messages(_)
        | Route::Threads
        | Route::Events(_)
        | Route::Unknown => Err(refuse(Msg::Internal.err())),
    }
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
    // `Accept` is not checked: the spec says a client *should* declare `text/event-stream` and
    // names no refusal, and the reference streams whatever a client declares (`application/json`
    // included), so a console written against it is never refused here.
    let parsed = parsed.map_err(|e| Refusal::new(e, lang))?;
    let thread_header = header(req, pairs::THREAD_HEADER);
    pairs::check_user_header(
        header(req, pairs::USER_HEADER),
        parsed.iac.user_id.as_deref(),
    )
    .map_err(|e| Refusal::new(e, lang))?;
    pairs::check_run(
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
