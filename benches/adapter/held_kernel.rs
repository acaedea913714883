//! The kernel side of figure 10 (ten thousand held runs): a minimal A2A kernel that holds every
//! upstream stream open in one thread (epoll, nonblocking sockets), so that 10,000 streams cost it
//! a few MiB and no thread each. It runs in a child process (the bench binary again, with
//! `BENCH_ROLE=held-kernel`): the bench process already holds the 10,000 client sockets, and one
//! process may not hold 20,000 descriptors here (hard limit 20,000).
//!
//! It answers `SendStreamingMessage` with the submitted task and one text `statusUpdate` (the
//! real kernel's shape, benches/frames/text.a2a.sse's first frame, the request's ids filled in)
//! and then writes nothing; the stream stays open until the adapter closes it or cancels its
//! task. `CancelTask` ends the task's held stream as the real kernel does (iac_code
//! `a2a/executor.py`, `cancel_normal_turn`: the cancelled turn publishes its
//! `TASK_STATE_CANCELED` status update, "Task canceled.", and the SDK ends the stream after that
//! final state), then answers. `GetTask` gets its answer, as do `/health` and the agent card;
//! `GET /stats` gives the counts (`{"streams","cancels","open"}`). Every answer but a stream
//! closes its connection.
//!
//! A resumed run (benches/held_stack.py): a turn whose text contains `hold-interrupt` gets the
//! submitted task and an input-required status with a question (the fake kernel's
//! `scenario:question` envelope), and its stream ends; `GetTask` then finds that task waiting for
//! input, in its context and session; the answer (a message with the `taskId`) is held like a
//! new turn.

use crate::ROOT;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::process::{Child, Command, Stdio};

const CAPTURED_TASK: &str = "07195cb1-be1b-4aa4-93c0-53feadfa81e7";
const CAPTURED_CTX: &str = "agui-58633450475f377504ca56b46b5a293d95591ee7";
const CAPTURED_SESSION: &str = "9d08fcfb-85c7-4bb8-9ec3-024ec4a1b37d";

/// The kernel as a child process; killed when dropped.
pub(crate) struct HeldKernel {
    child: Child,
    pub(crate) url: String,
    port: u16,
}

impl HeldKernel {
    pub(crate) fn start() -> HeldKernel {
        let exe = std::env::current_exe().expect("the bench's own path");
        let mut child = Command::new(exe)
            .env("BENCH_ROLE", "held-kernel")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the held kernel");
        let mut out = child.stdout.take().unwrap();
        let mut line = Vec::new();
        let mut b = [0u8; 1];
        while out.read(&mut b).unwrap_or(0) == 1 && b[0] != b'\n' {
            line.push(b[0]);
        }
        let port: u16 = String::from_utf8_lossy(&line)
            .trim()
            .parse()
            .expect("the held kernel's port");
        HeldKernel {
            child,
            url: format!("http://127.0.0.1:{port}"),
            port,
        }
    }

    /// `(streams, cancels, open)`: `SendStreamingMessage` and `CancelTask` calls so far, streams
    /// open now.
    pub(crate) fn stats(&self) -> (u64, u64, u64) {
        let get = || -> std::io::Result<Value> {
            let mut s = TcpStream::connect(("127.0.0.1", self.port))?;
            s.write_all(b"GET /stats HTTP/1.1\r\nHost: k\r\n\r\n")?;
            let mut text = String::new();
            s.read_to_string(&mut text)?;
            let body = text.split("\r\n\r\n").nth(1).unwrap_or("{}");
            Ok(serde_json::from_str(body).unwrap_or(Value::Null))
        };
        let v = get().unwrap_or(Value::Null);
        let n = |k: &str| v[k].as_u64().unwrap_or(0);
        (n("streams"), n("cancels"), n("open"))
    }
}

impl Drop for HeldKernel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Conn {
    sock: TcpStream,
    buf: Vec<u8>,
    held: bool,
    /// A held stream's task, and its last frame (written when the task is cancelled).
    task: String,
    cancelled_frame: Vec<u8>,
}

#[derive(Default)]
struct Counts {
    streams: u64,
    cancels: u64,
    open: u64,
    /// Each held stream's connection, by its task id.
    held: HashMap<String, RawFd>,
    /// Tasks waiting for input: their context and session, by task id.
    waiting: HashMap<String, (String, String)>,
}

/// What a request asks of the loop beside its own connection.
enum Next {
    Keep,
    Close,
    /// Ends the named task's held stream (with its cancelled status), then closes this one.
    EndTaskThenClose(String),
}

/// The child's main: serve until stdin closes (the bench ended).
pub(crate) fn child_main() {
    crate::procfs::raise_own_nofile();
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind the held kernel");
    listener.set_nonblocking(true).unwrap();
    // SAFETY: listen(2) again on our own socket only deepens its backlog.
    unsafe { libc::listen(listener.as_raw_fd(), 4096) };
    println!("{}", listener.local_addr().unwrap().port());
    std::thread::spawn(|| {
        let mut sink = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut sink);
        std::process::exit(0);
    });
    let frame = std::fs::read_to_string(format!("{ROOT}/benches/frames/text.a2a.sse"))
        .expect("benches/frames/text.a2a.sse")
        .split("\n\n")
        .next()
        .unwrap()
        .to_string();
    serve(&listener, &frame);
}

fn serve(listener: &TcpListener, frame: &str) {
    // SAFETY: plain epoll(7) calls on descriptors this process owns.
    let ep = unsafe { libc::epoll_create1(0) };
    add(ep, listener.as_raw_fd());
    let mut conns: Vec<Option<Conn>> = Vec::new();
    let mut counts = Counts::default();
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 1024];
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = unsafe { libc::epoll_wait(ep, events.as_mut_ptr(), events.len() as i32, 1000) };
        for ev in events.iter().take(n.max(0) as usize) {
            let fd = ev.u64 as RawFd;
            if fd == listener.as_raw_fd() {
                while let Ok((sock, _)) = listener.accept() {
                    let _ = sock.set_nonblocking(true);
                    let _ = sock.set_nodelay(true);
                    let fd = sock.as_raw_fd();
                    add(ep, fd);
                    if conns.len() <= fd as usize {
                        conns.resize_with(fd as usize + 1, || None);
                    }
                    conns[fd as usize] = Some(Conn {
                        sock,
                        buf: Vec::new(),
                        held: false,
                        task: String::new(),
                        cancelled_frame: Vec::new(),
                    });
                }
                continue;
            }
            let next = match conns.get_mut(fd as usize).and_then(Option::as_mut) {
                Some(c) => on_readable(c, &mut chunk, &mut counts, frame),
                None => Next::Close,
            };
            if let Next::EndTaskThenClose(task) = &next {
                end_held_stream(&mut conns, &mut counts, task);
            }
            if !matches!(next, Next::Keep) {
                close_conn(&mut conns, &mut counts, fd);
            }
        }
    }
}

/// The cancelled task's stream gets its last status, then ends (its connection closes).
fn end_held_stream(conns: &mut [Option<Conn>], counts: &mut Counts, task: &str) {
    let Some(fd) = counts.held.get(task).copied() else {
        return;
    };
    if let Some(c) = conns.get_mut(fd as usize).and_then(Option::as_mut) {
        c.sock.set_nonblocking(false).ok();
        let _ = (&c.sock).write_all(&c.cancelled_frame);
    }
    close_conn(conns, counts, fd);
}

/// Dropping the connection closes its socket (and leaves the epoll set).
fn close_conn(conns: &mut [Option<Conn>], counts: &mut Counts, fd: RawFd) {
    if let Some(c) = conns.get_mut(fd as usize).and_then(Option::take) {
        if c.held {
            counts.open -= 1;
            counts.held.remove(&c.task);
        }
    }
}

fn add(ep: RawFd, fd: RawFd) {
    let mut ev = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: fd as u64,
    };
    // SAFETY: registers our own descriptor.
    unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev) };
}

/// Reads what arrived; answers a whole request.
fn on_readable(c: &mut Conn, chunk: &mut [u8], counts: &mut Counts, frame: &str) -> Next {
    loop {
        match (&c.sock).read(chunk) {
            Ok(0) => return Next::Close,
            Ok(n) if !c.held => c.buf.extend_from_slice(&chunk[..n]),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(_) => return Next::Close,
        }
    }
    if c.held {
        return Next::Keep;
    }
    let Some(head_end) = c.buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Next::Keep;
    };
    let head = String::from_utf8_lossy(&c.buf[..head_end]).to_string();
    let len = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    if c.buf.len() < head_end + 4 + len {
        return Next::Keep;
    }
    let body = &c.buf[head_end + 4..head_end + 4 + len];
    let mut parts = head.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let req: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let rpc = req["method"].as_str().unwrap_or("");
    let answer = match (method, path) {
        ("POST", "/") if rpc == "SendStreamingMessage" && asks_interrupt(&req) => {
            counts.streams += 1;
            let (out, task, ctx_session) = interrupt_stream(&req, counts.streams);
            counts.waiting.insert(task, ctx_session);
            let _ = (&c.sock).write_all(&out);
            return Next::Close;
        }
        ("POST", "/") if rpc == "SendStreamingMessage" => {
            counts.streams += 1;
            counts.open += 1;
            c.held = true;
            let answered = req["params"]["message"]["taskId"].as_str();
            let known = answered.and_then(|t| counts.waiting.remove(t).map(|w| (t, w)));
            let (start, task, cancelled) = stream_start(&req, counts.streams, frame, known);
            let _ = (&c.sock).write_all(&start);
            counts.held.insert(task.clone(), c.sock.as_raw_fd());
            c.task = task;
            c.cancelled_frame = cancelled;
            return Next::Keep;
        }
        ("POST", "/") if rpc == "CancelTask" || rpc == "GetTask" => {
            if rpc == "CancelTask" {
                counts.cancels += 1;
            }
            let id = req["params"]["id"].as_str().unwrap_or("");
            if let (Some((ctx, session)), "GetTask") = (counts.waiting.get(id), rpc) {
                json!({"jsonrpc": "2.0", "id": req["id"], "result": {"id": id, "contextId": ctx,
                    "status": {"state": "TASK_STATE_INPUT_REQUIRED"},
                    "metadata": {"iac_code": {"iacCodeSessionId": session}}}})
            } else {
                let state = if rpc == "GetTask" {
                    "TASK_STATE_WORKING"
                } else {
                    "TASK_STATE_CANCELED"
                };
                json!({"jsonrpc": "2.0", "id": req["id"], "result": {"id": id, "contextId": "",
                    "status": {"state": state}}})
            }
        }
        ("GET", "/stats") => {
            json!({"streams": counts.streams, "cancels": counts.cancels, "open": counts.open})
        }
        ("GET", "/health") => json!({"status": "ok"}),
        ("GET", "/.well-known/agent-card.json") => {
            json!({"name": "held-kernel", "description": "bench", "version": "0", "url": "/",
            "protocolVersion": "1.0", "capabilities": {"streaming": true},
            "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"], "skills": []})
        }
        ("POST", "/iac-code/session/ensure-restored") => json!({"status": "current"}),
        ("GET", p) if p.starts_with("/iac-code/pipeline/state") => json!({"events": []}),
        _ => json!({"error": "Not Found"}),
    };
    let bytes = serde_json::to_vec(&answer).unwrap();
    let mut out = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        bytes.len()
    )
    .into_bytes();
    out.extend_from_slice(&bytes);
    let _ = (&c.sock).write_all(&out);
    match rpc {
        "CancelTask" => Next::EndTaskThenClose(req["params"]["id"].as_str().unwrap_or("").into()),
        _ => Next::Close,
    }
}

/// Whether the turn asks for an input-required answer (a resumed run's first turn).
fn asks_interrupt(req: &Value) -> bool {
    let message = &req["params"]["message"];
    message.get("taskId").is_none()
        && message["parts"].as_array().into_iter().flatten().any(|p| {
            p["text"]
                .as_str()
                .is_some_and(|t| t.contains("hold-interrupt"))
        })
}

/// The whole stream of a turn that waits for input: the response head, the submitted task and
/// the input-required status with a question; the task id; its context and session.
fn interrupt_stream(req: &Value, n: u64) -> (Vec<u8>, String, (String, String)) {
    let ctx = req["params"]["message"]["contextId"].as_str().unwrap_or("");
    let task = crate::support::uuid(7, n);
    let session = crate::support::uuid(8, n);
    let submitted = json!({"jsonrpc": "2.0", "id": req["id"], "result": {"task": {"id": task,
        "contextId": ctx, "status": {"state": "TASK_STATE_SUBMITTED"}}}});
    let input = json!({"kind": "ask_user_question", "schemaVersion": 1, "requestTaskId": task,
        "contextId": ctx, "inputId": "ask-call_q", "toolUseId": "call_q", "required": true,
        "prompt": "Which region?", "allowFreeText": true,
        "options": [{"id": "cn-hangzhou", "label": "Hangzhou"}, {"id": "cn-beijing", "label": "Beijing"}]});
    let waiting = json!({"jsonrpc": "2.0", "id": req["id"], "result": {"statusUpdate": {
        "taskId": task, "contextId": ctx, "status": {"state": "TASK_STATE_INPUT_REQUIRED"},
        "metadata": {"iac_code": {"input": input, "iacCodeSessionId": session}}}}});
    let out = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\ndata: {submitted}\n\ndata: {waiting}\n\n"
    );
    (out.into_bytes(), task, (ctx.to_string(), session))
}

/// The response head, the submitted task and the text frame, with this request's ids; the task
/// id; the stream's last frame if the task is cancelled. An answer (`known`: its task, context
/// and session) goes on in its task, which is working again.
fn stream_start(
    req: &Value,
    n: u64,
    frame: &str,
    known: Option<(&str, (String, String))>,
) -> (Vec<u8>, String, Vec<u8>) {
    let (task, ctx, session, state) = match known {
        Some((task, (ctx, session))) => (task.to_string(), ctx, session, "TASK_STATE_WORKING"),
        None => (
            crate::support::uuid(7, n),
            req["params"]["message"]["contextId"]
                .as_str()
                .unwrap_or("")
                .to_string(),
            crate::support::uuid(8, n),
            "TASK_STATE_SUBMITTED",
        ),
    };
    let (ctx, session) = (ctx.as_str(), session.as_str());
    let rpc_id = serde_json::to_string(&req["id"]).unwrap();
    let submitted = json!({"jsonrpc": "2.0", "id": req["id"], "result": {"task": {"id": task,
        "contextId": ctx, "status": {"state": state}}}});
    let text = frame
        .replace(CAPTURED_TASK, &task)
        .replace(CAPTURED_CTX, ctx)
        .replace(CAPTURED_SESSION, session)
        .replace("\"id\":\"1\"", &format!("\"id\":{rpc_id}"));
    let start = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\ndata: {submitted}\n\n{text}\n\n"
    );
    // The kernel's `_publish_status(TASK_STATE_CANCELED, "Task canceled.")`: the message id is
    // the task id and the state's number (5), the session in the metadata.
    let cancelled = json!({"result": {"statusUpdate": {"taskId": task, "contextId": ctx,
        "status": {"state": "TASK_STATE_CANCELED", "message": {"messageId": format!("{task}-5"),
        "contextId": ctx, "taskId": task, "role": "ROLE_AGENT",
        "parts": [{"text": "Task canceled."}]}, "timestamp": "2026-12-04T00:00:00Z"},
        "metadata": {"iac_code": {"iacCodeSessionId": session}}}}, "id": req["id"],
        "jsonrpc": "2.0"});
    (
        start.into_bytes(),
        task,
        format!("data: {cancelled}\n\n").into_bytes(),
    )
}
