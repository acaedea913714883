//! Resuming an interrupt after something failed, over real HTTP against the fake kernel: the
//! adapter killed (before or while an answer was applied), a kernel that lost the task, moved it,
//! renewed the session, or failed transiently at the resume (the interrupt stays answerable), a
//! pipeline recovered from its snapshot, and a retry after a partial failure.

use fake_kernel::{permission_flow, FakeKernel, Step};
use serde_json::{json, Value};
use std::time::Duration;
use test_support::*;

fn setup() -> (FakeKernel, Adapter) {
    let k = FakeKernel::start();
    let a = Adapter::start(&k.url);
    (k, a)
}

#[test]
fn a_pending_interrupt_survives_sigkill_and_resumes_after_a_restart() {
    let (k, mut a) = setup();
    let (first, i) = a.interrupted("t-restart");
    a.restart();
    let r = a.run(&a.resume_request("t-restart", "r2", allow(&i["id"])));
    assert_eq!(r.last()["outcome"]["type"], "success", "{:?}", r.last());
    assert_eq!(r.session()["taskId"], first.session()["taskId"]);
    assert!(k
        .calls("GetTask")
        .iter()
        .any(|c| c["body"]["params"]
            == json!({"id": first.session()["taskId"], "historyLength": 100})));
}

#[test]
fn after_a_restart_a_task_the_kernel_lost_is_execution_lost() {
    let (k, mut a) = setup();
    let (_, i) = a.interrupted("t-lost");
    a.restart();
    k.forget_everything();
    let r = a.run(&a.resume_request("t-lost", "r2", allow(&i["id"])));
    assert_eq!(r.error_code(), "EXECUTION_LOST");
}

#[test]
fn after_a_restart_a_task_in_another_context_is_a_protocol_error() {
    let (k, mut a) = setup();
    let (first, i) = a.interrupted("t-moved");
    a.restart();
    k.swap_context(first.session()["taskId"].as_str().unwrap());
    let r = a.run(&a.resume_request("t-moved", "r2", allow(&i["id"])));
    assert_eq!(r.error_code(), "A2A_PROTOCOL_ERROR");
    assert_eq!(
        a.state_file("t-moved")["execution"]["pending"]
            .as_object()
            .unwrap()
            .len(),
        1,
        "nothing lost"
    );
}

#[test]
fn a_resume_for_an_unknown_thread_or_invocation_is_execution_lost() {
    let (_k, a) = setup();
    let r = a.run(&a.resume_request(
        "t-never",
        "r1",
        json!([{"interruptId": "x", "status": "cancelled"}]),
    ));
    assert_eq!((r.status, r.error_code()), (409, "EXECUTION_LOST"));
    let (_, i) = a.interrupted("t-inv");
    let mut body = a.resume_request("t-inv", "r2", allow(&i["id"]));
    body["forwardedProps"]["iacCode"]["rosInvocationId"] = json!("invocation-other");
    let r = a.run(&body);
    assert_eq!((r.status, r.error_code()), (409, "EXECUTION_LOST"));
}

#[test]
fn a_new_iac_code_session_for_a_known_thread_is_a_protocol_error() {
    let (k, a) = setup();
    let first = a.run(&a.request("t-session", "r1", "hello"));
    assert_eq!(first.last()["outcome"]["type"], "success");
    let session = a.state_file("t-session")["iacCodeSessionId"].clone();
    k.renew_sessions();
    let mut body = a.request("t-session", "r2", "hello again");
    body["forwardedProps"]["iacCode"]["rosInvocationId"] = json!("invocation-2");
    let r = a.run(&body);
    assert_eq!(r.error_code(), "A2A_PROTOCOL_ERROR");
    assert!(
        r.custom("iac-code.session.v1")
            .iter()
            .all(|e| e["value"]["sessionId"] == session),
        "never announced under another session"
    );
    assert_eq!(a.state_file("t-session")["iacCodeSessionId"], session);
}

fn pending_count(a: &Adapter, thread: &str) -> usize {
    a.state_file(thread)["execution"]["pending"]
        .as_object()
        .map_or(0, |p| p.len())
}

#[test]
fn a_transient_get_task_error_at_resume_is_a2a_unavailable_and_keeps_the_interrupt() {
    let (k, a) = setup();
    let (_, i) = a.interrupted("t-flaky-get");
    // Not TaskNotFoundError (-32001): the kernel says nothing about the task.
    k.fail_next_rpc(
        "GetTask",
        json!({"code": -32603, "message": "Internal error"}),
    );
    let r = a.run(&a.resume_request("t-flaky-get", "r2", allow(&i["id"])));
    assert_eq!(r.error_code(), "A2A_UNAVAILABLE");
    assert_eq!(pending_count(&a, "t-flaky-get"), 1, "still pending");
    let r = a.run(&a.resume_request("t-flaky-get", "r3", allow(&i["id"])));
    assert_eq!(r.last()["outcome"]["type"], "success");
}

#[test]
fn a_session_restore_the_kernel_cannot_do_now_is_a2a_unavailable_and_keeps_the_interrupt() {
    let (k, a) = setup();
    let (_, i) = a.interrupted("t-restore-503");
    k.fail_next_http(
        "/iac-code/session/ensure-restored",
        503,
        json!({"error": "Unable to restore the A2A session."}),
    );
    let r = a.run(&a.resume_request("t-restore-503", "r2", allow(&i["id"])));
    assert_eq!(r.error_code(), "A2A_UNAVAILABLE");
    assert_eq!(pending_count(&a, "t-restore-503"), 1);
    let r = a.run(&a.resume_request("t-restore-503", "r3", allow(&i["id"])));
    assert_eq!(r.last()["outcome"]["type"], "success");
}

#[test]
fn a_session_backup_still_synchronizing_is_passed_on_as_its_own_code_and_keeps_the_interrupt() {
    let (k, a) = setup();
    let (_, i) = a.interrupted("t-backup");
    // As the kernel answers ensure-restored (`iac_code/a2a/app.py`)…
    k.fail_next_http(
        "/iac-code/session/ensure-restored",
        409,
        json!({"error": {"code": "SESSION_BACKUP_NOT_READY",
                         "message": "Session backup is still synchronizing. Retry after 3 seconds.",
                         "retryable": true}}),
    );
    let r = a.run(&a.resume_request("t-backup", "r2", allow(&i["id"])));
    assert_eq!(r.error_code(), "SESSION_BACKUP_NOT_READY");
    assert_eq!(pending_count(&a, "t-backup"), 1);
    // …and an answer (`iac_code/a2a/executor.py`, SessionBackupNotReadyInvalidParamsError).
    k.fail_next_rpc(
        "SendStreamingMessage",
        json!({"code": -32602, "message": "Session backup is still synchronizing. Retry after 3 seconds.",
               "data": {"code": "SESSION_BACKUP_NOT_READY", "retryable": true}}),
    );
    let r = a.run(&a.resume_request("t-backup", "r3", allow(&i["id"])));
    assert_eq!(r.error_code(), "SESSION_BACKUP_NOT_READY");
    assert_eq!(pending_count(&a, "t-backup"), 1);
    let r = a.run(&a.resume_request("t-backup", "r4", allow(&i["id"])));
    assert_eq!(r.last()["outcome"]["type"], "success");
}

#[test]
fn a_task_the_kernel_says_is_gone_at_resume_is_execution_lost_and_closed() {
    let (k, a) = setup();
    let (_, i) = a.interrupted("t-gone");
    k.fail_next_rpc(
        "GetTask",
        json!({"code": -32001, "message": "Task not found"}),
    );
    let r = a.run(&a.resume_request("t-gone", "r2", allow(&i["id"])));
    assert_eq!(r.error_code(), "EXECUTION_LOST");
    assert_eq!(
        pending_count(&a, "t-gone"),
        0,
        "a definitive answer closes it"
    );
}

#[test]
fn the_recovery_cursor_moves_to_the_snapshots_last_sequence() {
    let (k, a) = setup();
    let r = a.run(&a.request("t-cursor", "r1", "scenario:side-wait-gap"));
    let i = r.interrupts()[0].clone();
    // The resume's recovery: a snapshot that covers the pipeline up to 5, no events listed.
    k.fail_next_http(
        "/iac-code/pipeline/state",
        200,
        json!({"snapshot": {"schemaVersion": 1, "pipelineRunId": "pr-1", "lastSequence": 5, "steps": []},
               "events": []}),
    );
    let r = a.run(&a.resume_request("t-cursor", "r2", allow(&i["id"])));
    assert_eq!(r.last()["outcome"]["type"], "success", "{:?}", r.last());
    let recoveries: Vec<String> = k
        .requests()
        .into_iter()
        .filter_map(|r| r["path"].as_str().map(str::to_string))
        .filter(|p| p.starts_with("/iac-code/pipeline/state"))
        .collect();
    assert!(
        recoveries.last().unwrap().contains("afterSequence=5"),
        "{recoveries:?}"
    );
    let replayed: Vec<&Value> = r
        .custom("iac-code.pipeline.v1")
        .into_iter()
        .filter(|e| e["value"]["sequence"].as_f64().unwrap_or(0.0) <= 5.0)
        .collect();
    assert!(
        replayed.is_empty(),
        "events the snapshot covered: {replayed:?}"
    );
}

#[test]
fn a_retry_after_a_partial_failure_skips_the_answer_already_applied_and_sends_the_rest_once() {
    let (k, a) = setup();
    let r = a.run(&a.request("t-partial", "r1", "scenario:side-waits"));
    assert_eq!(r.interrupts().len(), 2);
    let both = json!([
        {"interruptId": "permission-c2", "status": "resolved", "payload": {"decision": "allow_once"}},
        {"interruptId": "permission-c1", "status": "resolved", "payload": {"decision": "allow_once"}}
    ]);
    // The kernel takes c2's answer, then has trouble with c1's.
    k.fail_rpc_after(
        "SendMessage",
        1,
        json!({"code": -32603, "message": "Internal error"}),
    );
    let r = a.run(&a.resume_request("t-partial", "r2", both.clone()));
    assert_eq!(r.error_code(), "A2A_UNAVAILABLE");
    let state = a.state_file("t-partial");
    assert_eq!(
        state["execution"]["pending"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        ["permission-c1"]
    );
    // A different answer for the applied c2 is a conflict, and reaches nothing.
    let changed = json!([
        {"interruptId": "permission-c2", "status": "resolved", "payload": {"decision": "deny"}},
        {"interruptId": "permission-c1", "status": "resolved", "payload": {"decision": "allow_once"}}
    ]);
    let r = a.run(&a.resume_request("t-partial", "r3", changed));
    assert_eq!(r.error_code(), "RESUME_ALREADY_APPLIED");
    // The client's retry repeats both: c2 is applied already, c1 goes on.
    let r = a.run(&a.resume_request("t-partial", "r4", both));
    assert_eq!(r.last()["outcome"]["type"], "success", "{:?}", r.last());
    let sent: Vec<Value> = k
        .calls("SendMessage")
        .iter()
        .map(|c| c["body"]["params"]["message"]["parts"][0]["data"]["inputId"].clone())
        .collect();
    // c2 once; c1 twice, the first refused by the fault before the kernel saw it.
    assert_eq!(
        sent,
        [
            json!("permission-c2"),
            json!("permission-c1"),
            json!("permission-c1")
        ]
    );
}

/// Polls `done` (every 10 ms, at most 20 s): a wait for another process to reach a point.
fn wait_for(what: &str, done: impl Fn() -> bool) {
    for _ in 0..2000 {
        if done() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("never happened: {what}");
}

#[test]
fn a_sigkill_between_an_answer_sent_and_its_pending_cleared_never_runs_the_tool_twice() {
    let (k, mut a) = setup();
    // Point 1: the kernel took the answer, the adapter never heard back (pending still set).
    let (_, i) = a.interrupted("t-kill-sent");
    k.hold_answers(true);
    let (url, body) = (
        a.url.clone(),
        a.resume_request("t-kill-sent", "r2", allow(&i["id"])),
    );
    let cut = std::thread::spawn(move || post_run(&url, &body, &[]));
    wait_for("the kernel took the answer", || k.accepted_answers() == 1);
    a.restart();
    k.hold_answers(false);
    let _ = cut.join();
    assert_eq!(
        pending_count(&a, "t-kill-sent"),
        1,
        "the answer was never confirmed"
    );
    // The client's retry: the task's history shows the kernel took the answer, so it is not
    // sent again; the wait is cleared and the run follows the task to its end.
    let retry = a.run(&a.resume_request("t-kill-sent", "r3", allow(&i["id"])));
    assert_eq!(k.accepted_answers(), 1, "the tool ran once");
    assert_eq!(
        retry.last()["outcome"]["type"],
        "success",
        "{:?}",
        retry.last()
    );
    assert_eq!(pending_count(&a, "t-kill-sent"), 0);

    // Point 2: the answer accepted and its pending cleared, the task still running on.
    let (run1, envelope, run2) = permission_flow();
    let mut script = run1;
    let mut after = vec![Step::Gate("slow-tool".into())];
    after.extend(run2);
    script.push(Step::Input {
        envelope,
        allow: after,
        deny: vec![],
        answer: vec![],
    });
    k.script("slow-tool", script);
    let r = a.run(&a.request("t-kill-cleared", "r1", "scenario:slow-tool"));
    let i = r.interrupts()[0].clone();
    let (url, body) = (
        a.url.clone(),
        a.resume_request("t-kill-cleared", "r2", allow(&i["id"])),
    );
    let cut = std::thread::spawn(move || post_run(&url, &body, &[]));
    wait_for("pending cleared", || {
        pending_count(&a, "t-kill-cleared") == 0
    });
    a.restart();
    k.open("slow-tool");
    let _ = cut.join();
    let retry = a.run(&a.resume_request("t-kill-cleared", "r3", allow(&i["id"])));
    assert_eq!(retry.error_code(), "RESUME_ALREADY_APPLIED");
    assert_eq!(k.accepted_answers(), 2, "each thread's tool ran once");
}
