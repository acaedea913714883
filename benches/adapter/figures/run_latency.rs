//! Figure 8: the latency of the start of a run and of a resume (issue 13 item 4), ours and the
//! reference's, each with its state dir on the disk and on tmpfs (what the durable state writes
//! cost on these paths). Timestamps on one clock (`fake_kernel::clock_us`): the client's before
//! its POST and at each event it reads, the fake kernel's as each request arrives (fully read).
//!
//! - New turn: POST → `RUN_STARTED`, → the `SendStreamingMessage` at the kernel, → the first event
//!   of the kernel's output (after `RUN_STARTED` and the session announcement); each run on a new
//!   thread.
//! - Resume: a run that ends on the permission interrupt (`scenario:permission`, the recorded
//!   flow), then the resume POST with `allow_once`: → `RUN_STARTED`, → each call the adapter makes
//!   on the way (session restore, `GetTask`, pipeline state, the answer: `SendStreamingMessage`
//!   from ours, a unary `SendMessage` from the reference), → the first event of the kernel's
//!   output.
//!
//! Then the pieces: one durable state write (as src/store.rs does it) on each file system, and a
//! loopback TCP connect (what overlapping the upstream connect with that write could save).

use crate::clients::{run_body, stream_lines};
use crate::procfs::loadavg;
use crate::report::Report;
use crate::server::{reference_available, Impl, Server};
use crate::support::{contains, pct, uuid};
use crate::{Res, RunNumbers, ROOT};
use fake_kernel::{clock_us, FakeKernel, Step};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Rounds, each running every configuration in turn (so that all see the same background load).
const ROUNDS: usize = 4;
const NEW_PER_ROUND: usize = 50;
const RESUMES_PER_ROUND: usize = 13;
/// Stop starting rounds after this (the report says how many ran).
const BUDGET: Duration = Duration::from_secs(300);
const TIMEOUT: Duration = Duration::from_secs(20);
const PIECES: usize = 200;
pub(crate) const START_SCRIPT: &str = "bench-start";

/// The new turn's script: one text event, then the task completes.
pub(crate) fn start_script() -> Vec<Step> {
    vec![
        Step::Status {
            state: "TASK_STATE_WORKING",
            iac: json!({}),
            text: Some("Hello.".into()),
        },
        Step::Status {
            state: "TASK_STATE_COMPLETED",
            iac: json!({}),
            text: None,
        },
    ]
}

/// One adapter with its state dir on one file system, and what was measured on it.
struct Config {
    name: String,
    srv: Server,
    state_dir: PathBuf,
    new_turns: Vec<Marks>,
    resumes: Vec<Marks>,
    /// The calls of one resume, in order (what the resume path is made of).
    resume_calls: Vec<String>,
    errors: Vec<String>,
}

/// Offsets from the POST, µs, by what happened (`started`, `first`, and the kernel's calls).
#[derive(Default)]
struct Marks(Vec<(String, u64)>);

impl Marks {
    fn get(&self, what: &str) -> Option<u64> {
        self.0.iter().find(|m| m.0 == what).map(|m| m.1)
    }
}

pub(crate) fn run_latency(
    rep: &mut Report,
    ours: &Impl,
    kernel: &FakeKernel,
    runs: &mut RunNumbers,
) {
    rep.line(format!(
        "## 8. Latency of the start of a run and of a resume ({} rounds of {NEW_PER_ROUND} new turns and {RESUMES_PER_ROUND} resumes per configuration, alternating)\n\nLoad average at the start: {}.\n",
        ROUNDS,
        loadavg()
    ));
    let disk = Path::new(ROOT).join(format!("target/tmp/agui-lat-{}", std::process::id()));
    let tmpfs = PathBuf::from(format!("/dev/shm/agui-lat-{}", std::process::id()));
    let mut imps = vec![ours.clone()];
    match reference_available() {
        Ok(p) => imps.push(Impl::Reference(p)),
        Err(e) => rep.line(format!("The reference is not measured: {e}.\n")),
    }
    let mut configs = vec![];
    for imp in &imps {
        for (fs, root) in [("disk", &disk), ("tmpfs", &tmpfs)] {
            match start(imp, fs, root, kernel) {
                Ok(c) => configs.push(c),
                Err(e) => rep.line(format!("{} on {fs} did not start: `{e}`\n", imp.name())),
            }
        }
    }
    let rounds = measure(&mut configs, kernel, runs);
    new_turn_table(rep, &configs, rounds);
    resume_table(rep, &configs);
    let pieces = pieces(rep, &configs, &disk, &tmpfs);
    summary(rep, &configs, pieces);
    drop(configs);
    let _ = std::fs::remove_dir_all(&disk);
    let _ = std::fs::remove_dir_all(&tmpfs);
}

fn start(imp: &Impl, fs: &str, root: &Path, kernel: &FakeKernel) -> Res<Config> {
    std::fs::create_dir_all(root).map_err(|e| format!("{}: {e}", root.display()))?;
    let (srv, _) = Server::start(imp, &kernel.url, None, root)?;
    let state_dir = root.join(format!("srv-{}", srv.port)).join("state");
    Ok(Config {
        name: format!("{} ({fs})", imp.name()),
        srv,
        state_dir,
        new_turns: vec![],
        resumes: vec![],
        resume_calls: vec![],
        errors: vec![],
    })
}

/// The rounds, within `BUDGET`; returns how many ran.
fn measure(configs: &mut [Config], kernel: &FakeKernel, runs: &mut RunNumbers) -> usize {
    let t0 = Instant::now();
    // One of each first (not counted): the adapters' first runs pay for lazy set-up.
    for c in configs.iter() {
        let _ = new_turn(&c.srv, kernel, runs.next());
        let _ = resume(&c.srv, kernel, runs.next());
    }
    for round in 0..ROUNDS {
        if t0.elapsed() > BUDGET {
            return round;
        }
        for c in configs.iter_mut() {
            for _ in 0..NEW_PER_ROUND {
                match new_turn(&c.srv, kernel, runs.next()) {
                    Ok(m) => c.new_turns.push(m),
                    Err(e) => c.errors.push(e),
                }
            }
        }
        for c in configs.iter_mut() {
            for _ in 0..RESUMES_PER_ROUND {
                match resume(&c.srv, kernel, runs.next()) {
                    Ok((m, calls)) => {
                        c.resumes.push(m);
                        c.resume_calls = calls;
                    }
                    Err(e) => c.errors.push(e),
                }
            }
        }
    }
    ROUNDS
}

/// POSTs `body` and marks `RUN_STARTED`, the first event of the kernel's output, and each request
/// the kernel got meanwhile; returns the marks and the last event (`RUN_FINISHED`).
fn timed_run(url: &str, body: Vec<u8>, kernel: &FakeKernel) -> Res<(Marks, Vec<String>, Value)> {
    let before = kernel.request_count();
    let mut marks = Marks::default();
    let mut last = Vec::new();
    let t0 = clock_us();
    stream_lines(url, false, body, TIMEOUT, |l| {
        let now = clock_us();
        if !l.starts_with(b"data: ") {
            return;
        }
        // "first": the first event of the kernel's output, i.e. after `RUN_STARTED` and the
        // session announcement (which ours sends at once on a resume, the reference later).
        if marks.get("started").is_none() && contains(l, b"\"RUN_STARTED\"") {
            marks.0.push(("started".into(), now - t0));
        } else if marks.get("started").is_some()
            && marks.get("first").is_none()
            && !contains(l, b"\"iac-code.session.v1\"")
        {
            marks.0.push(("first".into(), now - t0));
        }
        last = l.to_vec();
    })?;
    let mut calls = vec![];
    for r in kernel.requests_since(before) {
        let at = r["atUs"].as_u64().unwrap_or(0).saturating_sub(t0);
        let path = r["path"].as_str().unwrap_or("");
        let what = match r["body"]["method"].as_str() {
            Some(m) if path == "/" => m.to_string(),
            _ => path.split('?').next().unwrap_or("").to_string(),
        };
        calls.push(format!("{what} +{at} µs"));
        // "send": the turn's message or the answer, streaming (ours) or unary (the reference's
        // permission answer).
        let send = what == "SendStreamingMessage" || what == "SendMessage";
        if send && marks.get("send").is_none() {
            marks.0.push(("send".into(), at));
        }
        if marks.get(&what).is_none() {
            marks.0.push((what, at));
        }
    }
    let last: Value = serde_json::from_slice(&last[6..]).unwrap_or(Value::Null);
    if last["type"] != "RUN_FINISHED" {
        return Err(format!("the run ended with {last}"));
    }
    Ok((marks, calls, last))
}

/// One new turn on a new thread.
fn new_turn(srv: &Server, kernel: &FakeKernel, run: u64) -> Res<Marks> {
    let body = run_body(
        &uuid(8, run),
        &format!("start-{run}"),
        &format!("scenario:{START_SCRIPT}"),
        &srv.cwd,
    );
    let (marks, _, last) = timed_run(&srv.url, body, kernel)?;
    if last["outcome"]["type"] != "success" {
        return Err(format!("new turn: {last}"));
    }
    Ok(marks)
}

/// A run to the permission interrupt (untimed), then its resume with `allow_once` (timed).
fn resume(srv: &Server, kernel: &FakeKernel, run: u64) -> Res<(Marks, Vec<String>)> {
    let thread = uuid(9, run);
    let body = run_body(
        &thread,
        &format!("perm-{run}"),
        "scenario:permission",
        &srv.cwd,
    );
    let (_, _, last) = timed_run(&srv.url, body, kernel)?;
    let Some(id) = last["outcome"]["interrupts"][0]["id"].as_str() else {
        return Err(format!("no interrupt: {last}"));
    };
    let body = json!({
        "threadId": thread, "runId": format!("perm-{run}-resume"), "state": {}, "tools": [], "context": [],
        "messages": [],
        "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "invocation-1", "cwd": srv.cwd}},
        "resume": [{"interruptId": id, "status": "resolved", "payload": {"decision": "allow_once"}}]
    });
    let (marks, calls, last) = timed_run(&srv.url, serde_json::to_vec(&body).unwrap(), kernel)?;
    if last["outcome"]["type"] != "success" {
        return Err(format!("resume: {last}"));
    }
    Ok((marks, calls))
}

/// "p50 / p99" of one mark over `runs`, in ms, with the count when some runs lack it.
fn p50_p99(runs: &[Marks], what: &str) -> String {
    let mut v: Vec<u64> = runs.iter().filter_map(|m| m.get(what)).collect();
    if v.is_empty() {
        return "–".into();
    }
    v.sort_unstable();
    let missing = if v.len() < runs.len() {
        format!(" ({} of {})", v.len(), runs.len())
    } else {
        String::new()
    };
    format!(
        "{:.2} / {:.2}{missing}",
        pct(&v, 50) as f64 / 1e3,
        pct(&v, 99) as f64 / 1e3
    )
}

fn median_ms(runs: &[Marks], what: &str) -> Option<f64> {
    let mut v: Vec<u64> = runs.iter().filter_map(|m| m.get(what)).collect();
    v.sort_unstable();
    (!v.is_empty()).then(|| pct(&v, 50) as f64 / 1e3)
}

fn new_turn_table(rep: &mut Report, configs: &[Config], rounds: usize) {
    rep.line(format!(
        "New turn (`scenario:{START_SCRIPT}`: one text event, then the task completes; each run on a new thread; {rounds} rounds ran). \
         Milliseconds from the client's POST (its connect included), p50 / p99:\n"
    ));
    rep.line("| adapter (state dir) | runs | → `RUN_STARTED` | → `SendStreamingMessage` at the kernel | → first event of the kernel's output | errors |\n|---|---|---|---|---|---|");
    for c in configs {
        rep.line(format!(
            "| {} | {} | {} | {} | {} | {} |",
            c.name,
            c.new_turns.len(),
            p50_p99(&c.new_turns, "started"),
            p50_p99(&c.new_turns, "send"),
            p50_p99(&c.new_turns, "first"),
            errors(c)
        ));
    }
    rep.line("");
}

fn errors(c: &Config) -> String {
    match c.errors.first() {
        None => "0".into(),
        Some(e) => format!(
            "{} (first: `{}`)",
            c.errors.len(),
            e.chars().take(200).collect::<String>()
        ),
    }
}

fn resume_table(rep: &mut Report, configs: &[Config]) {
    rep.line(
        "Resume (`scenario:permission`, the recorded flow, answered `allow_once`). Milliseconds from the resume POST, p50 / p99:\n",
    );
    rep.line("| adapter (state dir) | resumes | → `RUN_STARTED` | → session restore | → `GetTask` | → pipeline state | → the answer at the kernel | → first event of the kernel's output |\n|---|---|---|---|---|---|---|---|");
    for c in configs {
        rep.line(format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            c.name,
            c.resumes.len(),
            p50_p99(&c.resumes, "started"),
            p50_p99(&c.resumes, "/iac-code/session/ensure-restored"),
            p50_p99(&c.resumes, "GetTask"),
            p50_p99(&c.resumes, "/iac-code/pipeline/state"),
            p50_p99(&c.resumes, "send"),
            p50_p99(&c.resumes, "first"),
        ));
    }
    rep.line("");
    for c in configs {
        rep.line(format!(
            "- {}, the kernel's requests during its last resume: {}.",
            c.name,
            c.resume_calls.join(", ")
        ));
    }
    rep.line("");
}

/// Medians of one durable state write on each file system and of a loopback TCP connect, µs.
struct Pieces {
    write_disk: u64,
    write_tmpfs: u64,
    connect: u64,
}

/// The pieces of the start path, measured alone, `PIECES` times each.
fn pieces(rep: &mut Report, configs: &[Config], disk: &Path, tmpfs: &Path) -> Option<Pieces> {
    // A thread document as our adapter writes it (the size matters little; the fsyncs do).
    let doc = configs
        .iter()
        .find_map(|c| first_file(&c.state_dir.join("threads")))
        .unwrap_or_else(|| vec![b'x'; 1500]);
    // Interleaved, so that all three see the same disk (other work makes its fsyncs vary a lot).
    let [write_disk, write_tmpfs, old_disk] = state_writes(
        &doc,
        [(disk, plain_write), (tmpfs, plain_write), (disk, old_write)],
    )
    .ok()?;
    let connect = connects().ok()?;
    let show = |v: &[u64]| format!("{} / {} µs", pct(v, 50), pct(v, 99));
    rep.line(format!(
        "The pieces, {PIECES} of each, p50 / p99: one durable state write as src/store/replace.rs makes it (the \
         temporary file beside the document: write, fsync, rename, fsync of the directory; {} bytes) on the disk: \
         **{}**, on tmpfs: **{}**; the write before issue 27's third pass (atomicwrites 0.4: a temporary directory \
         and file, write, fsync, rename, fsync of both directories) on the disk: **{}**; a loopback TCP connect: \
         **{}**.\n",
        doc.len(),
        show(&write_disk),
        show(&write_tmpfs),
        show(&old_disk),
        show(&connect)
    ));
    Some(Pieces {
        write_disk: pct(&write_disk, 50),
        write_tmpfs: pct(&write_tmpfs, 50),
        connect: pct(&connect, 50),
    })
}

fn first_file(dir: &Path) -> Option<Vec<u8>> {
    let entry = std::fs::read_dir(dir).ok()?.flatten().next()?;
    std::fs::read(entry.path()).ok()
}

/// A way to replace a document durably.
type Writer = fn(&Path, &[u8]) -> std::io::Result<()>;

/// `PIECES` replacements of one file by each writer under its root, taking turns; µs each, sorted.
fn state_writes<const N: usize>(doc: &[u8], writers: [(&Path, Writer); N]) -> Res<[Vec<u64>; N]> {
    let mut paths = vec![];
    for (n, (root, _)) in writers.iter().enumerate() {
        let dir = root.join(format!("pieces-{n}"));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        paths.push(dir.join("thread.json"));
    }
    let mut times: [Vec<u64>; N] = std::array::from_fn(|_| Vec::with_capacity(PIECES));
    for _ in 0..PIECES {
        for (n, (_, write)) in writers.iter().enumerate() {
            let t = Instant::now();
            write(&paths[n], doc).map_err(|e| e.to_string())?;
            times[n].push(t.elapsed().as_micros() as u64);
        }
    }
    for v in &mut times {
        v.sort_unstable();
    }
    Ok(times)
}

/// As the store saved a document before issue 27's third pass (atomicwrites 0.4: 3 fsyncs, a
/// directory made and removed).
fn old_write(path: &Path, doc: &[u8]) -> std::io::Result<()> {
    let parent = path.parent().unwrap_or(Path::new("."));
    let tmpdir = parent.join(format!(".atomicwrite{}", std::process::id()));
    std::fs::create_dir(&tmpdir)?;
    let tmp = tmpdir.join("tmpfile.tmp");
    let mut f = std::fs::File::create(&tmp)?;
    std::io::Write::write_all(&mut f, doc)?;
    f.sync_all()?;
    drop(f);
    let (from, to) = (std::fs::File::open(&tmpdir)?, std::fs::File::open(parent)?);
    std::fs::rename(&tmp, path)?;
    from.sync_all()?;
    to.sync_all()?;
    std::fs::remove_dir(&tmpdir)
}

/// As src/store/replace.rs saves a document (2 fsyncs): a temporary file beside the document,
/// renamed over it.
fn plain_write(path: &Path, doc: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp)?;
    std::io::Write::write_all(&mut f, doc)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(path.parent().unwrap_or(Path::new(".")))?.sync_all()
}

/// `PIECES` loopback connects to a listener that accepts and drops, µs each, sorted.
fn connects() -> Res<Vec<u64>> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    std::thread::spawn(move || {
        for c in listener.incoming().take(PIECES) {
            drop(c);
        }
    });
    let mut v = Vec::with_capacity(PIECES);
    for _ in 0..PIECES {
        let t = Instant::now();
        let s = std::net::TcpStream::connect(addr).map_err(|e| e.to_string())?;
        v.push(t.elapsed().as_micros() as u64);
        drop(s);
    }
    v.sort_unstable();
    Ok(v)
}

/// Ours against the reference (both on the disk), and what the disk costs ours.
fn summary(rep: &mut Report, configs: &[Config], pieces: Option<Pieces>) {
    let of = |name: &str| configs.iter().find(|c| c.name == name);
    let (ours, reference) = (of("iac-code-agui (disk)"), of("reference (Python) (disk)"));
    for (what, resume, mark) in [
        ("new turn, POST → RUN_STARTED", false, "started"),
        (
            "new turn, POST → SendStreamingMessage at the kernel",
            false,
            "send",
        ),
        ("resume, POST → the answer at the kernel", true, "send"),
    ] {
        let median = |c: &Config| median_ms(if resume { &c.resumes } else { &c.new_turns }, mark);
        let measured = match (ours.and_then(median), reference.and_then(median)) {
            (Some(o), Some(r)) => format!(
                "{o:.2} ms vs the reference's {r:.2} ms ({:.1}× less)",
                r / o
            ),
            (Some(o), None) => format!("{o:.2} ms (reference not measured)"),
            _ => "not measured".into(),
        };
        rep.row(
            &format!("{what}, median, state on the disk"),
            measured,
            "(reported)",
            None,
        );
    }
    let tmpfs = of("iac-code-agui (tmpfs)");
    if let (Some(d), Some(t), Some(p)) = (ours, tmpfs, pieces) {
        let cost = |mark: &str| {
            let (a, b) = (median_ms(&d.new_turns, mark), median_ms(&t.new_turns, mark));
            a.zip(b)
                .map_or("–".into(), |(a, b)| format!("{:.2} ms", a - b))
        };
        rep.line(format!(
            "Ours, disk − tmpfs (medians, new turn): {} to `RUN_STARTED`, {} to the upstream send, {} to the first event \
             of the kernel's output. One state write alone: {} µs on the disk, {} µs on tmpfs; a loopback connect {} µs.\n",
            cost("started"),
            cost("send"),
            cost("first"),
            p.write_disk,
            p.write_tmpfs,
            p.connect
        ));
    }
}
