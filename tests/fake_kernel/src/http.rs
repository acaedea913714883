//! The HTTP side: one thread per connection, one request per connection (`Connection: close`),
//! every request but control ones recorded, then routed: open routes, the bearer token, the
//! session and pipeline extensions, and JSON-RPC on `POST /`.

use crate::control::serve_open_route;
use crate::rpc::{rpc, rpc_error};
use crate::State;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;

pub(crate) fn accept(state: &Arc<State>, listener: &TcpListener) {
    for conn in listener.incoming().flatten() {
        let s = state.clone();
        std::thread::spawn(move || {
            let _ = serve(&s, conn);
        });
    }
}

struct Req {
    method: String,
    path: String,
    headers: HashMap<String, String>,
    body: Vec<u8>,
}

fn read_request(conn: &TcpStream) -> std::io::Result<Req> {
    let mut r = BufReader::new(conn);
    let mut line = String::new();
    r.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let path = parts.next().unwrap_or("").to_string();
    let mut headers = HashMap::new();
    loop {
        let mut h = String::new();
        r.read_line(&mut h)?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let len: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    r.read_exact(&mut body)?;
    Ok(Req {
        method,
        path,
        headers,
        body,
    })
}

pub(crate) fn respond(mut conn: &TcpStream, status: u16, body: &Value) -> std::io::Result<()> {
    let bytes = serde_json::to_vec(body).unwrap();
    write!(
        conn,
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        bytes.len()
    )?;
    conn.write_all(&bytes)?;
    conn.flush()
}

fn serve(state: &Arc<State>, conn: TcpStream) -> std::io::Result<()> {
    conn.set_nodelay(true)?;
    let req = read_request(&conn)?;
    let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
    let (path, query) = req.path.split_once('?').unwrap_or((&req.path, ""));
    if !path.starts_with("/__control") {
        record(state, &req, &body);
    }
    if let Some(served) = serve_open_route(state, &conn, &req.method, path, query) {
        return served;
    }
    if let Some(token) = &state.token {
        if req.headers.get("authorization") != Some(&format!("Bearer {token}")) {
            return respond(&conn, 401, &json!({"error": "Unauthorized"}));
        }
    }
    if let Some((status, reply)) = crate::control::take_fault(state, path, &body) {
        return respond(&conn, status, &reply);
    }
    match (req.method.as_str(), path) {
        ("POST", "/iac-code/session/ensure-restored") => ensure_restored(state, &conn, &body),
        ("GET", "/iac-code/pipeline/state") => crate::pipeline::serve_state(state, &conn, query),
        ("POST", "/") => json_rpc(state, &conn, &req, &body),
        _ => respond(&conn, 404, &json!({"error": "Not Found"})),
    }
}

/// Keeps the request, with the headers the kernel checks and its arrival time (`atUs`, on
/// [`crate::clock_us`]; the benches time the adapters' upstream calls with it), for
/// `FakeKernel::requests`.
fn record(state: &State, req: &Req, body: &Value) {
    let at = crate::clock_us();
    let mut headers = json!({});
    for k in ["a2a-version", "authorization", "content-type", "accept"] {
        if let Some(v) = req.headers.get(k) {
            headers[k] = json!(v);
        }
    }
    state.requests.lock().unwrap().push(json!({
        "method": req.method, "path": req.path, "headers": headers, "body": body, "atUs": at
    }));
}

fn ensure_restored(state: &State, conn: &TcpStream, body: &Value) -> std::io::Result<()> {
    let known = body["sessionId"]
        .as_str()
        .is_some_and(|s| state.sessions.lock().unwrap().values().any(|v| v == s));
    if known {
        respond(conn, 200, &json!({"status": "current"}))
    } else {
        respond(conn, 404, &json!({"status": "not_found"}))
    }
}

/// `POST /`: the A2A transport headers, then the JSON-RPC call.
fn json_rpc(state: &Arc<State>, conn: &TcpStream, req: &Req, body: &Value) -> std::io::Result<()> {
    if req.headers.get("a2a-version").map(String::as_str) != Some("1.0") {
        return respond(
            conn,
            400,
            &rpc_error(body, -32600, "A2A-Version 1.0 header required"),
        );
    }
    if !req
        .headers
        .get("content-type")
        .is_some_and(|c| c.starts_with("application/json"))
    {
        return respond(
            conn,
            400,
            &rpc_error(body, -32600, "Content-Type must be application/json"),
        );
    }
    rpc(state, conn, body)
}
