use super::*;
use serde_json::json;

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("iac-history-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// One turn: the user's message, an assistant reply of the same number.
fn turn(h: &History, thread: &str, n: usize) {
    h.user(
        thread,
        &format!("u{n}"),
        &json!([{"text": format!("question {n}")}]),
    );
    let mut r = Recorder::new(h, thread);
    let events = vec![
        json!({"type": "TEXT_MESSAGE_START", "messageId": format!("a{n}"), "role": "assistant"}),
        json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": format!("a{n}"), "delta": format!("answer {n}")}),
        json!({"type": "TEXT_MESSAGE_END", "messageId": format!("a{n}")}),
        json!({"type": "RUN_FINISHED", "outcome": {"type": "success"}}),
    ];
    r.observe(&events);
}

fn lines(h: &History, thread: &str) -> Vec<Value> {
    std::fs::read_to_string(h.path_of(thread))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_run_s_events_become_the_messages_the_client_built() {
    let h = History::new(&tmp("events"), 100);
    h.user("t", "u1", &json!([{"text": "deploy a VPC"}]));
    let mut r = Recorder::new(&h, "t");
    let interrupt = json!({"id": "in1", "reason": "tool_call", "message": "ok?"});
    let events = vec![
        json!({"type": "RUN_STARTED", "threadId": "t", "runId": "r1"}),
        json!({"type": "REASONING_START", "messageId": "x1"}),
        json!({"type": "REASONING_MESSAGE_START", "messageId": "x1", "role": "reasoning"}),
        json!({"type": "REASONING_MESSAGE_CONTENT", "messageId": "x1", "delta": "think \"hard\""}),
        json!({"type": "REASONING_MESSAGE_END", "messageId": "x1"}),
        json!({"type": "REASONING_END", "messageId": "x1"}),
        json!({"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"}),
        json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "Sure\n"}),
        json!({"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "write", "parentMessageId": "m1"}),
        json!({"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": "{\"a\":"}),
        json!({"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": "1}"}),
        json!({"type": "TOOL_CALL_END", "toolCallId": "c1"}),
        json!({"type": "TOOL_CALL_RESULT", "messageId": "r1", "toolCallId": "c1", "content": "done", "role": "tool"}),
        json!({"type": "TEXT_MESSAGE_END", "messageId": "m1"}),
        json!({"type": "ACTIVITY_SNAPSHOT", "messageId": "p1", "activityType": "iac-code.pipeline", "content": {"n": 1}}),
        json!({"type": "ACTIVITY_SNAPSHOT", "messageId": "p1", "activityType": "iac-code.pipeline", "content": {"n": 2}}),
        json!({"type": "RUN_FINISHED", "outcome": {"type": "interrupt", "interrupts": [interrupt]}}),
    ];
    r.observe(&events);
    h.answered(
        "t",
        &interrupt,
        &json!({"status": "resolved", "payload": {"decision": "allow_once"}}),
    );
    let call = json!({"id": "c1", "type": "function", "function": {"name": "write", "arguments": "{\"a\":1}"}});
    assert_eq!(
        h.messages("t"),
        [
            json!({"id": "u1", "role": "user", "content": "deploy a VPC"}),
            json!({"id": "x1", "role": "reasoning", "content": "think \"hard\""}),
            json!({"id": "m1", "role": "assistant", "content": "Sure\n", "toolCalls": [call]}),
            json!({"id": "r1", "role": "tool", "toolCallId": "c1", "content": "done"}),
            json!({"id": "p1", "role": "activity", "activityType": "iac-code.pipeline", "content": {"n": 2}}),
            json!({"id": "interrupt-in1", "role": "activity", "activityType": INTERRUPT_ACTIVITY,
                   "content": {"interrupt": interrupt,
                               "answer": {"status": "resolved", "payload": {"decision": "allow_once"}}}}),
        ]
    );
    let head = &lines(&h, "t")[0];
    assert_eq!(
        (
            head["type"].as_str(),
            head["threadId"].as_str(),
            head["title"].as_str()
        ),
        (Some("thread"), Some("t"), Some("deploy a VPC"))
    );
}

#[test]
fn text_still_streaming_is_kept_at_a_checkpoint() {
    let h = History::new(&tmp("partial"), 100);
    let mut r = Recorder::new(&h, "t");
    r.observe(&vec![
        json!({"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"}),
        json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "Hello, "}),
    ]);
    r.checkpoint();
    r.observe(&vec![
        json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "world"}),
    ]);
    // Killed here: what was written is the start and the text up to the checkpoint.
    assert_eq!(
        h.messages("t"),
        [json!({"id": "m1", "role": "assistant", "content": "Hello, "})]
    );
    std::mem::forget(r);
}

#[test]
fn compaction_drops_the_oldest_turns_and_keeps_the_header_and_the_numbers() {
    let h = History::new(&tmp("compact"), 10);
    for n in 0..60 {
        turn(&h, "t", n);
    }
    let all = lines(&h, "t");
    assert_eq!(all[0]["type"], "thread");
    assert_eq!(all[0]["title"], "question 0");
    let seqs: Vec<u64> = all[1..]
        .iter()
        .map(|l| l["seq"].as_u64().unwrap())
        .collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    // Never more than the cap plus the slack; never fewer than the cap's whole turns.
    assert!(all.len() - 1 <= 10 + slack(10), "{}", all.len());
    let msgs = h.messages("t");
    assert!(msgs.len() >= 10, "{}", msgs.len());
    assert_eq!(msgs[0]["role"], "user");
    assert_eq!(msgs.last().unwrap()["content"], "answer 59");
    // Numbers go on above the highest ever written (5 records a turn: user, open, append).
    turn(&h, "t", 60);
    let last = lines(&h, "t").last().unwrap()["seq"].as_u64().unwrap();
    assert_eq!(last, 61 * 3);
}

#[test]
fn pages_go_back_with_stable_cursors_while_the_thread_goes_on() {
    let h = History::new(&tmp("pages"), 1000);
    for n in 0..10 {
        turn(&h, "t", n);
    }
    let page = h.page("t", 4, None).unwrap();
    let ids = |p: &Value| -> Vec<String> {
        p["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(ids(&page), ["u8", "a8", "u9", "a9"]);
    let cursor = page["nextCursor"].as_str().unwrap().to_string();
    // New turns do not move an older page.
    turn(&h, "t", 10);
    let older = h.page("t", 4, Some(&cursor)).unwrap();
    assert_eq!(ids(&older), ["u6", "a6", "u7", "a7"]);
    let mut all = Vec::new();
    let mut next = None::<String>;
    loop {
        let p = h.page("t", 3, next.as_deref()).unwrap();
        let mut chunk = ids(&p);
        chunk.extend(all);
        all = chunk;
        match p["nextCursor"].as_str() {
            Some(c) => next = Some(c.to_string()),
            None => break,
        }
    }
    assert_eq!(all.len(), 22);
    assert_eq!(all[0], "u0");
    for bad in ["", "!!", "MA", "eA"] {
        assert_eq!(
            h.page("t", 3, Some(bad)).unwrap_err().code,
            crate::code::Code::InvalidInput,
            "{bad}"
        );
    }
    assert!(page_limit(Some("0")).is_err() && page_limit(Some("501")).is_err());
    assert_eq!(page_limit(None).unwrap(), 50);
    // An unknown thread has an empty history.
    assert_eq!(h.page("nobody", 5, None).unwrap()["messages"], json!([]));
}

#[test]
fn a_cap_of_zero_keeps_nothing() {
    let dir = tmp("zero");
    let h = History::new(&dir, 0);
    turn(&h, "t", 1);
    assert!(!dir.join("history").exists());
    assert!(h.messages("t").is_empty());
}

#[test]
fn a_kernel_join_keeps_the_conversation_and_completes_it_from_the_task() {
    let past = [
        json!({"id": "u1", "content": "hi"}),
        json!({"id": "a1", "content": "Hel", "toolCalls": []}),
        json!({"id": "i1", "role": "activity"}),
    ];
    let now = [
        json!({"id": "u1", "content": "hi"}),
        json!({"id": "a1", "content": "Hello"}),
        json!({"id": "a2", "content": "more"}),
    ];
    let j = joined(&past, &now, None);
    assert_eq!(
        j,
        [
            json!({"id": "u1", "content": "hi"}),
            json!({"id": "a1", "content": "Hello", "toolCalls": []}),
            json!({"id": "i1", "role": "activity"}),
            json!({"id": "a2", "content": "more"}),
        ]
    );
    assert_eq!(
        joined(&past, &now, Some(1)),
        [json!({"id": "a2", "content": "more"})]
    );
}

/// A thread whose run ended holds no open log (a descriptor per thread that ever ran was the
/// soak's finding); the next turn opens it again and appends.
#[test]
fn a_log_is_closed_when_its_run_ends_and_reopened_by_the_next_turn() {
    let dir = tmp("release");
    let h = History::new(&dir, 100);
    turn(&h, "t", 1);
    assert!(
        h.inner.logs.lock().is_empty(),
        "the run's end closed the log"
    );
    turn(&h, "t", 2);
    assert!(h.inner.logs.lock().is_empty());
    let texts: Vec<Value> = h
        .messages("t")
        .iter()
        .map(|m| m["content"].clone())
        .collect();
    assert_eq!(
        texts,
        [
            json!("question 1"),
            json!("answer 1"),
            json!("question 2"),
            json!("answer 2")
        ]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A run waiting on a silent upstream holds no descriptor for its log: the thread's idle wait
/// closes it (synced), and the run's next events open it again and append after what it wrote.
#[test]
fn a_waiting_run_closes_its_log_and_its_next_events_reopen_it() {
    let dir = tmp("idle");
    let h = History::new(&dir, 100);
    h.user("t", "u1", &json!([{"text": "question"}]));
    let mut r = Recorder::new(&h, "t");
    r.observe(&[
        json!({"type": "TEXT_MESSAGE_START", "messageId": "a1", "role": "assistant"}),
        json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "a1", "delta": "first"}),
        json!({"type": "TEXT_MESSAGE_END", "messageId": "a1"}),
    ]);
    let open = |h: &History| {
        h.inner
            .logs
            .lock()
            .get("t")
            .is_some_and(|w| w.lock().is_some())
    };
    assert!(open(&h), "the run's writes opened the log");
    crate::memory::idle();
    assert!(!open(&h), "the idle wait closed it");
    r.observe(&[
        json!({"type": "TEXT_MESSAGE_START", "messageId": "a2", "role": "assistant"}),
        json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "a2", "delta": "second"}),
        json!({"type": "TEXT_MESSAGE_END", "messageId": "a2"}),
        json!({"type": "RUN_FINISHED", "outcome": {"type": "success"}}),
    ]);
    drop(r);
    crate::memory::idle(); // the run ended: its hook is gone, nothing happens
    let texts: Vec<Value> = h
        .messages("t")
        .iter()
        .map(|m| m["content"].clone())
        .collect();
    assert_eq!(texts, [json!("question"), json!("first"), json!("second")]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Out of descriptors for a moment (a burst of runs): the log's open and its compaction wait
/// for one (bounded) instead of losing the records or leaving the log over its cap. Exhausted
/// for real, in a child process: the soft open-file limit lowered and every descriptor taken,
/// given back 300 ms later.
#[test]
fn a_brief_exhaustion_of_descriptors_delays_the_log_but_loses_nothing() {
    use crate::descriptors::exhaustion::{exhaust, give_back_after, in_child};
    let name = "history::tests::a_brief_exhaustion_of_descriptors_delays_the_log_but_loses_nothing";
    in_child(name, || {
        let h = History::new(&tmp("exhausted"), 10);
        let back = std::time::Duration::from_millis(300);
        give_back_after(exhaust(), back);
        h.user("t", "u0", &json!([{"text": "opened"}]));
        assert_eq!(h.messages("t").len(), 1, "the record was lost");
        // Up to the compaction's threshold (cap + slack records) on the open log, then one more.
        for n in 1..=24 {
            turn(&h, "t", n);
        }
        h.user("t", "u25", &json!([{"text": "threshold"}]));
        assert_eq!(lines(&h, "t").len() - 1, 10 + slack(10));
        give_back_after(exhaust(), back);
        h.user("t", "u26", &json!([{"text": "compacted"}]));
        let all = lines(&h, "t");
        assert!(
            all.len() - 1 <= 10,
            "not compacted: {} records",
            all.len() - 1
        );
        assert_eq!(h.messages("t").last().unwrap()["content"], "compacted");
    });
}
