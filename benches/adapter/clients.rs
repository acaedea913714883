//! The clients: a ureq client that reads a stream line by line (throughput, latency), and a raw
//! socket client that holds one SSE run open until the bench closes it from outside (held runs).

use crate::support::contains;
use crate::support::now_us;
use crate::Res;
use serde_json::json;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub(crate) fn agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(timeout))
        .build()
        .into()
}

pub(crate) fn run_body(thread: &str, run: &str, text: &str, cwd: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "threadId": thread, "runId": run, "state": {}, "tools": [], "context": [],
        "messages": [{"id": format!("msg-{run}"), "role": "user", "content": text}],
        "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "invocation-1", "cwd": cwd}}
    }))
    .unwrap()
}

/// The JSON-RPC call the adapter would make, sent straight to the fake kernel.
pub(crate) fn a2a_body(text: &str, n: u64) -> Vec<u8> {
    let ctx = format!("agui-{:040x}", (n as u128) << 64 | now_us() as u128);
    serde_json::to_vec(&json!({
        "jsonrpc": "2.0", "id": format!("bench-{n}"), "method": "SendStreamingMessage",
        "params": {
            "message": {"messageId": format!("bench-msg-{n}"), "role": "ROLE_USER", "contextId": ctx,
                        "parts": [{"text": text}], "metadata": {"iac_code": {"cwd": std::env::temp_dir()}}},
            "configuration": {"acceptedOutputModes": ["text/plain"]}
        }
    }))
    .unwrap()
}

/// POSTs `body` and feeds every line of the streamed answer to `f`.
pub(crate) fn stream_lines(
    url: &str,
    a2a: bool,
    body: Vec<u8>,
    timeout: Duration,
    mut f: impl FnMut(&[u8]),
) -> Res<()> {
    let mut req = agent(timeout)
        .post(format!("{url}/"))
        .header("Content-Type", "application/json")
        .header("Accept", "text/event-stream");
    if a2a {
        req = req.header("A2A-Version", "1.0");
    }
    let resp = req
        .send(&body[..])
        .map_err(|e| format!("POST {url}/: {e}"))?;
    let status = resp.status().as_u16();
    let mut body = resp.into_body();
    if status != 200 {
        let text = body.read_to_string().unwrap_or_default();
        return Err(format!("POST {url}/ answered {status}: {text}"));
    }
    let mut reader = BufReader::with_capacity(64 * 1024, body.into_reader());
    let mut line = Vec::with_capacity(512);
    loop {
        line.clear();
        let n = reader
            .read_until(b'\n', &mut line)
            .map_err(|e| format!("reading the stream from {url}: {e}"))?;
        if n == 0 {
            return Ok(());
        }
        f(&line);
    }
}

pub(crate) struct Shared {
    pub(crate) stop: AtomicBool,
    pub(crate) started: AtomicUsize,
    pub(crate) non200: AtomicUsize,
    pub(crate) conn_errors: AtomicUsize,
    pub(crate) early_end: AtomicUsize,
    pub(crate) run_errors: AtomicUsize,
    pub(crate) texts: AtomicUsize,
    pub(crate) first_error: Mutex<Option<String>>,
    pub(crate) sockets: Mutex<Vec<TcpStream>>,
}

impl Shared {
    pub(crate) fn new(clients: usize) -> Shared {
        Shared {
            stop: AtomicBool::new(false),
            started: AtomicUsize::new(0),
            non200: AtomicUsize::new(0),
            conn_errors: AtomicUsize::new(0),
            early_end: AtomicUsize::new(0),
            run_errors: AtomicUsize::new(0),
            texts: AtomicUsize::new(0),
            first_error: Mutex::new(None),
            sockets: Mutex::new(Vec::with_capacity(clients)),
        }
    }

    pub(crate) fn error(&self, counter: &AtomicUsize, what: String) {
        counter.fetch_add(1, Ordering::SeqCst);
        let mut first = self.first_error.lock().unwrap();
        if first.is_none() {
            *first = Some(what);
        }
    }
}

/// One held SSE client on a raw socket (so that the bench can close it from outside).
pub(crate) fn hold_client(port: u16, body: Vec<u8>, shared: Arc<Shared>, hb: Arc<AtomicU32>) {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let stream = match TcpStream::connect_timeout(&addr, Duration::from_secs(10)) {
        Ok(s) => s,
        Err(e) => return shared.error(&shared.conn_errors, format!("connect: {e}")),
    };
    if let Ok(c) = stream.try_clone() {
        shared.sockets.lock().unwrap().push(c);
    }
    let mut w = &stream;
    let head = format!(
        "POST / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    if let Err(e) = w
        .write_all(head.as_bytes())
        .and_then(|_| w.write_all(&body))
    {
        return shared.error(&shared.conn_errors, format!("send: {e}"));
    }
    let mut r = BufReader::with_capacity(4096, &stream);
    let mut line = Vec::with_capacity(256);
    match r.read_until(b'\n', &mut line) {
        Ok(n) if n > 0 => {
            if !line.starts_with(b"HTTP/1.1 200") {
                let status = String::from_utf8_lossy(&line).trim().to_string();
                return shared.error(&shared.non200, format!("status line: {status}"));
            }
        }
        Ok(_) => return shared.error(&shared.conn_errors, "closed before the status line".into()),
        Err(e) => return shared.error(&shared.conn_errors, format!("status line: {e}")),
    }
    let mut started = false;
    let mut text = false;
    loop {
        line.clear();
        match r.read_until(b'\n', &mut line) {
            Ok(0) => {
                if !shared.stop.load(Ordering::SeqCst) {
                    shared.error(&shared.early_end, "the stream ended during the hold".into());
                }
                return;
            }
            Err(e) => {
                if !shared.stop.load(Ordering::SeqCst) {
                    shared.error(&shared.conn_errors, format!("read: {e}"));
                }
                return;
            }
            Ok(_) => {}
        }
        let l = line.strip_suffix(b"\n").unwrap_or(&line);
        let l = l.strip_suffix(b"\r").unwrap_or(l);
        if l == b": heartbeat" {
            if started && !shared.stop.load(Ordering::SeqCst) {
                hb.fetch_add(1, Ordering::SeqCst);
            }
        } else if l.starts_with(b"data: ") {
            if !started && contains(l, b"\"RUN_STARTED\"") {
                started = true;
                shared.started.fetch_add(1, Ordering::SeqCst);
            } else if !text && contains(l, b"\"TEXT_MESSAGE_CONTENT\"") {
                text = true;
                shared.texts.fetch_add(1, Ordering::SeqCst);
            } else if contains(l, b"\"RUN_ERROR\"") || contains(l, b"\"RUN_FINISHED\"") {
                let ev = String::from_utf8_lossy(l).chars().take(300).collect();
                shared.error(&shared.run_errors, ev);
            }
        }
    }
}
