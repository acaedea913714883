//! Ending the adapter: SIGTERM ends every active run with `RUN_ERROR` and a proper end of its
//! stream, cancels their tasks and exits (src/run/shutdown.rs); after SIGKILL mid-run, the
//! thread's next turn first repairs the execution the killed process left running
//! (src/run/repair.rs), and a task the kernel will not stop fails that turn and stays reachable.
//! Every wait is bounded.

use fake_kernel::FakeKernel;
use iac_code_agui::testing::check_spans;
use std::net::TcpStream;
use std::time::{Duration, Instant};
use test_support::raw::{body_of, closes_within, dechunk, open_run, read_session};
use test_support::*;

#[test]
fn sigterm_ends_every_active_run_with_run_error_and_the_end_of_the_stream() {
    let k = FakeKernel::start();
    let mut a = Adapter::start(&k.url);
    // Three streams on a silent upstream: each read up to its first text, raw (chunked).
    let mut streams: Vec<(TcpStream, Vec<u8>, String)> = (0..3)
        .map(|i| {
            let body = a.request(&format!("t-term-{i}"), "r1", "scenario:hang");
            let mut s = open_run(&a.url, &body_of(&body));
            let (_, task, got) = read_session(&mut s);
            (s, got, task)
        })
        .collect();
    let started = Instant::now();
    a.signal(libc::SIGTERM);
    for (i, (s, got, _)) in streams.iter_mut().enumerate() {
        let mut rest = Vec::new();
        assert!(
            closes_within(s, Duration::from_secs(10), &mut rest),
            "stream {i} still open 10 s after SIGTERM"
        );
        assert!(
            rest.ends_with(b"0\r\n\r\n"),
            "stream {i} has no end of the chunked body: {:?}",
            String::from_utf8_lossy(&rest[rest.len().saturating_sub(40)..])
        );
        got.extend_from_slice(&rest);
        let body = dechunk(got).unwrap_or_else(|| panic!("stream {i}: not a whole chunked body"));
        let events = data_lines(&String::from_utf8(body).unwrap());
        let last = events.last().expect("events");
        assert_eq!(
            last["type"], "RUN_ERROR",
            "stream {i} after SIGTERM: {last}"
        );
        assert_eq!(last["code"], "A2A_UNAVAILABLE", "stream {i}: {last}");
        assert_eq!(last["message"], "The adapter is shutting down.");
        check_spans(&events).unwrap();
    }
    let cancelled = k.calls("CancelTask");
    for (_, _, task) in &streams {
        assert!(
            cancelled
                .iter()
                .any(|c| c["body"]["params"]["id"] == task.as_str()),
            "task {task} not cancelled at SIGTERM"
        );
        assert_eq!(k.task_state(task).as_deref(), Some("TASK_STATE_CANCELED"));
    }
    assert!(
        a.wait_exit(Duration::from_secs(10)).is_some(),
        "the adapter did not exit within 10 s of SIGTERM"
    );
    eprintln!("exited {:?} after SIGTERM", started.elapsed());
    assert!(a.logs().contains("shutting down"), "{}", a.logs());
}

#[test]
fn a_thread_left_running_by_sigkill_is_repaired_before_its_next_turn() {
    let k = FakeKernel::start();
    let mut a = Adapter::start(&k.url);
    let old = a.hanging_run("t-crash");
    let old_task = old["execution"]["taskId"].as_str().unwrap().to_string();
    a.restart();
    assert_eq!(
        k.task_state(&old_task).as_deref(),
        Some("TASK_STATE_WORKING")
    );
    a.assert_turn_succeeds("t-crash", "r2");
    assert_eq!(
        k.task_state(&old_task).as_deref(),
        Some("TASK_STATE_CANCELED")
    );
    let state = a.state_file("t-crash");
    assert!(state["terminalExecutionIds"]
        .as_array()
        .unwrap()
        .contains(&old["execution"]["executionId"]));
    assert_ne!(
        state["execution"]["executionId"],
        old["execution"]["executionId"]
    );
    let (status, v) = a.cancel(old["execution"]["executionId"].as_str().unwrap(), "t-crash");
    assert_eq!(
        (status, v["status"].as_str()),
        (200, Some("already_terminal"))
    );
}

#[test]
fn a_task_the_kernel_will_not_stop_fails_the_turn_and_stays_reachable() {
    let k = FakeKernel::start();
    let mut a = Adapter::start(&k.url);
    let old = a.hanging_run("t-stubborn");
    a.restart();
    k.ignore_cancels(true);
    let r = a.run(&a.request("t-stubborn", "r2", "hi"));
    assert_eq!(r.error_code(), "A2A_UNAVAILABLE", "{:?}", r.last());
    // The old execution is still the thread's: not replaced by the failed turn.
    let state = a.state_file("t-stubborn");
    assert_eq!(
        state["execution"]["executionId"],
        old["execution"]["executionId"]
    );
    k.ignore_cancels(false);
    let r = a.run(&a.request("t-stubborn", "r3", "hi"));
    assert_eq!(r.last()["outcome"]["type"], "success", "{:?}", r.last());
}
