//! How fast a cancelled run lets go of its thread (issue 29), measured and reported, never
//! asserted (the functional bounds, generous for a loaded machine, are in tests/cancel.rs and
//! tests/streams.rs). Five rounds of each, against the in-process fake kernel:
//!
//! 1. Stop, kernel hung (takes the run, ignores `CancelTask`, never ends the stream): from the
//!    cancel request to the client reading `RUN_ERROR CANCELLED` (the thread is freed just before).
//!    Design bound: the 0.5 s upstream grace plus a write.
//! 2. A client leaves, kernel hung and `CancelTask` never answered: from the close to the `200`
//!    head of a new turn on the thread sent right after it. Design bound: at once when the task id
//!    is known (the thread is freed as the client is found gone; the turn then stops the old task
//!    first), else the 0.5 s grace (admission waits for the stopping run).
//! 3. Stop on a client that does not read (its run blocked writing): from the cancel request to
//!    the `200` head of the thread's next turn. Design bound: 1 s.
//!
//! `cargo bench --bench stops` (harness = false) prints the report and writes it to
//! `target/bench-stops.md`.

use fake_kernel::FakeKernel;
use std::io::Write;
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};
use test_support::raw::{
    body_of, connect, open_run, read_head, read_session, read_until, run_request, status_of,
};
use test_support::Adapter;

const ROUNDS: usize = 5;

fn main() {
    let k = FakeKernel::start();
    let a = Adapter::start(&k.url);
    let mut out = String::from("# Stops: how fast a cancelled run frees its thread (issue 29)\n\n");
    out.push_str("| case | design bound | median | max | rounds |\n|---|---|---|---|---|\n");
    let mut rows = Vec::new();
    k.ignore_cancels(true);
    rows.push((
        "Stop, hung kernel: cancel → RUN_ERROR at the client",
        "≈ 0.5 s",
        measure(|i| stop_hung(&a, i)),
    ));
    k.stall_cancels(true);
    rows.push((
        "client leaves, hung kernel: close → next turn's 200",
        "at once (task known); ≈ 0.5 s before",
        measure(|i| leave_hung(&a, i)),
    ));
    k.stall_cancels(false);
    k.ignore_cancels(false);
    rows.push((
        "Stop, client not reading: cancel → next turn's 200",
        "1 s",
        measure(|i| stop_stuck(&a, i)),
    ));
    for (what, bound, times) in rows {
        let mut t = times.clone();
        t.sort();
        let (med, max) = (t[t.len() / 2], t[t.len() - 1]);
        out.push_str(&format!(
            "| {what} | {bound} | {:.0} ms | {:.0} ms | {} |\n",
            med.as_secs_f64() * 1e3,
            max.as_secs_f64() * 1e3,
            t.len()
        ));
    }
    println!("{out}");
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/target/bench-stops.md");
    std::fs::write(path, &out).expect("write target/bench-stops.md");
}

fn measure(mut f: impl FnMut(usize) -> Duration) -> Vec<Duration> {
    (0..ROUNDS).map(&mut f).collect()
}

fn stop_hung(a: &Adapter, i: usize) -> Duration {
    let thread = format!("stop-hung-{i}");
    let mut s = open_run(&a.url, &body_of(&a.request(&thread, "r1", "scenario:hang")));
    let (execution, _, _) = read_session(&mut s);
    let t0 = Instant::now();
    let (status, _) = a.cancel(&execution, &thread);
    assert_eq!(status, 200);
    read_until(&mut s, b"RUN_ERROR", Duration::from_secs(30)).expect("RUN_ERROR");
    t0.elapsed()
}

fn leave_hung(a: &Adapter, i: usize) -> Duration {
    let thread = format!("leave-hung-{i}");
    let mut s = open_run(&a.url, &body_of(&a.request(&thread, "r1", "scenario:hang")));
    read_session(&mut s);
    let t0 = Instant::now();
    drop(s);
    next_turn_admitted(a, &thread);
    t0.elapsed()
}

fn stop_stuck(a: &Adapter, i: usize) -> Duration {
    let thread = format!("stop-stuck-{i}");
    let s = connect(&a.url);
    let small: i32 = 4096;
    // SAFETY: setsockopt on our own socket with a valid int.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            &small as *const i32 as *const libc::c_void,
            std::mem::size_of::<i32>() as libc::socklen_t,
        );
    }
    let flood = a.request(&thread, "r1", "scenario:flood-1000000");
    (&s).write_all(&run_request(&body_of(&flood), &[])).unwrap();
    let state = a.wait_task(&thread);
    // The run's writes block once the client's small buffer and the send queue are full.
    std::thread::sleep(Duration::from_millis(1500));
    let execution = state["execution"]["executionId"]
        .as_str()
        .unwrap()
        .to_string();
    let t0 = Instant::now();
    let (status, _) = a.cancel(&execution, &thread);
    assert_eq!(status, 200);
    next_turn_admitted(a, &thread);
    let took = t0.elapsed();
    drop(s);
    took
}

/// Sends a new turn on `thread` until its answer's head is a `200` (a run admitted); 30 s at most.
fn next_turn_admitted(a: &Adapter, thread: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    for n in 2.. {
        let mut s: TcpStream = connect(&a.url);
        let body = body_of(&a.request(thread, &format!("r{n}"), "hi"));
        s.write_all(&run_request(&body, &[])).unwrap();
        let head = read_head(&mut s).ok().flatten().unwrap_or_default();
        if status_of(head.as_bytes()) == Some(200) || Instant::now() > deadline {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
