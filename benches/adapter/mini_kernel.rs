//! A minimal A2A kernel for figure 7: it answers `SendStreamingMessage` with a pre-rendered stream
//! of `MINI_FRAMES` text `statusUpdate`s in the real kernel's shape (benches/frames/text.a2a.sse),
//! so that the kernel is not what limits the figure. std only, no async: one listener thread, one
//! thread per connection, one request per connection (`Connection: close`, as the fake kernel).
//!
//! The stream is a template split at the ids (task, context, session, JSON-RPC id); a request only
//! fills them in while it copies the template out in `WRITE_CHUNK` writes, or one write per frame
//! ([`Writes::PerFrame`]: as a server that flushes every event, which the real kernel's SSE
//! response does). It also answers what the
//! adapters call around a run (GetTask, CancelTask, session restore, pipeline state, /health, the
//! agent card) and counts every call, so the report can say what each adapter asked for.

use crate::support::uuid;
use crate::ROOT;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub(crate) const MINI_FRAMES: usize = 20_000;
const WRITE_CHUNK: usize = 256 * 1024;
/// The ids in the captured frames: each becomes a hole the request fills.
const CAPTURED: [(&str, Hole); 3] = [
    ("07195cb1-be1b-4aa4-93c0-53feadfa81e7", Hole::Task),
    ("agui-58633450475f377504ca56b46b5a293d95591ee7", Hole::Ctx),
    ("9d08fcfb-85c7-4bb8-9ec3-024ec4a1b37d", Hole::Session),
];

#[derive(Clone, Copy, PartialEq)]
enum Hole {
    Task,
    Ctx,
    Session,
    RpcId,
}

enum Piece {
    Lit(Vec<u8>),
    Hole(Hole),
}

/// How the kernel writes its stream.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Writes {
    /// `WRITE_CHUNK` bytes at a time: the kernel costs next to nothing.
    Chunks,
    /// One `write(2)` per frame.
    PerFrame,
}

pub(crate) struct MiniKernel {
    pub(crate) url: String,
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    template: Vec<Piece>,
    /// Bytes of the whole stream with the captured ids (the real kernel's frame sizes).
    stream_bytes: usize,
    /// `<method> <path>` or the JSON-RPC method → count.
    calls: Mutex<BTreeMap<String, u64>>,
    /// The CPU time (µs) of the thread that wrote the last stream.
    last_stream_cpu_us: AtomicU64,
    tasks: Mutex<BTreeMap<String, String>>,
    per_frame: AtomicBool,
}

impl MiniKernel {
    pub(crate) fn start() -> MiniKernel {
        MiniKernel::with_frames(MINI_FRAMES)
    }

    /// A kernel whose streams carry `frames` text frames.
    pub(crate) fn with_frames(frames: usize) -> MiniKernel {
        let (template, stream_bytes) = template(frames);
        let shared = Arc::new(Shared {
            template,
            stream_bytes,
            ..Default::default()
        });
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the minimal kernel");
        let url = format!("http://{}", listener.local_addr().unwrap());
        let s = shared.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let s = s.clone();
                std::thread::spawn(move || {
                    let _ = serve(&s, conn);
                });
            }
        });
        MiniKernel { url, shared }
    }

    /// Every call so far, as `what ×n`.
    pub(crate) fn calls(&self) -> String {
        let calls = self.shared.calls.lock().unwrap();
        let all: Vec<String> = calls.iter().map(|(k, n)| format!("{k} ×{n}")).collect();
        all.join(", ")
    }

    pub(crate) fn set_writes(&self, writes: Writes) {
        self.shared
            .per_frame
            .store(writes == Writes::PerFrame, Ordering::SeqCst);
    }

    pub(crate) fn reset_calls(&self) {
        self.shared.calls.lock().unwrap().clear();
    }

    pub(crate) fn last_stream_cpu_us(&self) -> f64 {
        self.shared.last_stream_cpu_us.load(Ordering::SeqCst) as f64
    }

    pub(crate) fn mean_frame_bytes(&self) -> usize {
        self.shared.stream_bytes / (MINI_FRAMES + 2)
    }
}

/// The stream: the submitted task, `MINI_FRAMES` text frames cycled from the captured ones, the
/// task completed. Returns its pieces and its size with the captured ids.
fn template(frames: usize) -> (Vec<Piece>, usize) {
    let cycle = std::fs::read_to_string(format!("{ROOT}/benches/frames/text.a2a.sse"))
        .expect("benches/frames/text.a2a.sse");
    let texts: Vec<&str> = cycle
        .split("\n\n")
        .filter(|f| f.starts_with("data: "))
        .collect();
    let (task, ctx, session) = (CAPTURED[0].0, CAPTURED[1].0, CAPTURED[2].0);
    let submitted = json!({"jsonrpc": "2.0", "id": "1", "result": {"task": {"id": task, "contextId": ctx,
        "status": {"state": "TASK_STATE_SUBMITTED"}}}});
    let completed = json!({"jsonrpc": "2.0", "id": "1", "result": {"statusUpdate": {"taskId": task, "contextId": ctx,
        "status": {"state": "TASK_STATE_COMPLETED"}, "metadata": {"iac_code": {"iacCodeSessionId": session}}}}});
    let mut text = format!("data: {submitted}\n\n");
    for i in 0..frames {
        text.push_str(texts[i % texts.len()]);
        text.push_str("\n\n");
    }
    text.push_str(&format!("data: {completed}\n\n"));
    let size = text.len();
    // Split at every id (and at the JSON-RPC id `"1"`, which becomes the request's).
    let mut pieces = vec![];
    let mut rest = text.as_str();
    let marks: Vec<(&str, Hole)> = CAPTURED
        .iter()
        .copied()
        .chain([("\"id\":\"1\"", Hole::RpcId)])
        .collect();
    while !rest.is_empty() {
        let next = marks
            .iter()
            .filter_map(|(m, h)| rest.find(m).map(|at| (at, *m, *h)))
            .min_by_key(|n| n.0);
        let Some((at, mark, hole)) = next else {
            pieces.push(Piece::Lit(rest.as_bytes().to_vec()));
            break;
        };
        let lit = if hole == Hole::RpcId { "\"id\":" } else { "" };
        pieces.push(Piece::Lit(
            [&rest.as_bytes()[..at], lit.as_bytes()].concat(),
        ));
        pieces.push(Piece::Hole(hole));
        rest = &rest[at + mark.len()..];
    }
    (pieces, size)
}

fn serve(s: &Shared, conn: TcpStream) -> std::io::Result<()> {
    conn.set_nodelay(true)?;
    let (method, path, body) = read_request(&conn)?;
    let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let rpc = req["method"].as_str().unwrap_or("");
    let what = if method == "POST" && path == "/" {
        rpc.to_string()
    } else {
        format!("{method} {path}")
    };
    *s.calls.lock().unwrap().entry(what).or_default() += 1;
    match (method.as_str(), path.split('?').next().unwrap_or("")) {
        ("GET", "/health") => respond(&conn, 200, &json!({"status": "ok"})),
        ("GET", "/.well-known/agent-card.json") => respond(&conn, 200, &agent_card()),
        ("POST", "/iac-code/session/ensure-restored") => {
            respond(&conn, 200, &json!({"status": "current"}))
        }
        ("GET", "/iac-code/pipeline/state") => respond(&conn, 200, &json!({"events": []})),
        ("POST", "/") if rpc == "SendStreamingMessage" => stream(s, &conn, &req),
        ("POST", "/") if rpc == "GetTask" || rpc == "CancelTask" => {
            let id = req["params"]["id"].as_str().unwrap_or("");
            let state = if rpc == "GetTask" {
                "TASK_STATE_COMPLETED"
            } else {
                "TASK_STATE_CANCELED"
            };
            let answer = match s.tasks.lock().unwrap().get(id) {
                Some(ctx) => json!({"jsonrpc": "2.0", "id": req["id"], "result":
                    {"id": id, "contextId": ctx, "status": {"state": state}}}),
                None => json!({"jsonrpc": "2.0", "id": req["id"],
                    "error": {"code": -32001, "message": "Task not found"}}),
            };
            respond(&conn, 200, &answer)
        }
        _ => respond(&conn, 404, &json!({"error": "Not Found"})),
    }
}

/// The stream for one `SendStreamingMessage`, the request's ids filled in, in large writes.
fn stream(s: &Shared, conn: &TcpStream, req: &Value) -> std::io::Result<()> {
    let cpu0 = thread_cpu_us();
    let ctx = req["params"]["message"]["contextId"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let n = s.tasks.lock().unwrap().len() as u64 + 1;
    let task = uuid(7, n);
    s.tasks.lock().unwrap().insert(task.clone(), ctx.clone());
    let session = uuid(8, n);
    let rpc_id = serde_json::to_string(&req["id"]).unwrap();
    let mut out = conn;
    out.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n")?;
    let per_frame = s.per_frame.load(Ordering::SeqCst);
    let mut buf = Vec::with_capacity(WRITE_CHUNK + 4096);
    for piece in &s.template {
        buf.extend_from_slice(match piece {
            Piece::Lit(b) => b,
            Piece::Hole(Hole::Task) => task.as_bytes(),
            Piece::Hole(Hole::Ctx) => ctx.as_bytes(),
            Piece::Hole(Hole::Session) => session.as_bytes(),
            Piece::Hole(Hole::RpcId) => rpc_id.as_bytes(),
        });
        if buf.len() >= WRITE_CHUNK && !per_frame {
            out.write_all(&buf)?;
            buf.clear();
        }
    }
    if per_frame {
        let mut rest = &buf[..];
        while !rest.is_empty() {
            let end = rest.windows(2).position(|w| w == b"\n\n");
            let end = end.map_or(rest.len(), |i| i + 2);
            out.write_all(&rest[..end])?;
            rest = &rest[end..];
        }
    } else {
        out.write_all(&buf)?;
    }
    s.last_stream_cpu_us
        .store(thread_cpu_us() - cpu0, Ordering::SeqCst);
    Ok(())
}

/// Enough of an agent card for a client that looks (the A2A SDK's shape).
fn agent_card() -> Value {
    json!({"name": "minimal-kernel", "description": "bench", "version": "0", "url": "/",
        "protocolVersion": "1.0", "capabilities": {"streaming": true},
        "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"], "skills": []})
}

fn read_request(conn: &TcpStream) -> std::io::Result<(String, String, Vec<u8>)> {
    let mut r = BufReader::new(conn);
    let mut line = String::new();
    r.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let path = parts.next().unwrap_or("").to_string();
    let mut len = 0;
    loop {
        let mut h = String::new();
        if r.read_line(&mut h)? == 0 || h.trim_end().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.trim().eq_ignore_ascii_case("content-length") {
                len = v.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0; len];
    r.read_exact(&mut body)?;
    Ok((method, path, body))
}

fn respond(mut conn: &TcpStream, status: u16, body: &Value) -> std::io::Result<()> {
    let bytes = serde_json::to_vec(body).unwrap();
    write!(
        conn,
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        bytes.len()
    )?;
    conn.write_all(&bytes)
}

/// This thread's CPU time, µs.
pub(crate) fn thread_cpu_us() -> u64 {
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: clock_gettime fills the local struct.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1000
}
