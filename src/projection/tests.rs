//! The projection driven item by item, without sockets.

use super::*;
use crate::error::Code;
use crate::testing::check_spans;

fn ids() -> RunIds {
    RunIds {
        thread_id: "t".into(),
        run_id: "r".into(),
        execution_id: "e".into(),
        context_id: "ctx".into(),
        ros_invocation_id: "inv".into(),
        parent_run_id: None,
    }
}

fn proj() -> Projection {
    Projection::new(ids(), Lang::En).with_clock(|| 0)
}

fn types(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["type"].as_str().unwrap()).collect()
}

fn status(iac: Value, state: &str) -> Value {
    json!({"statusUpdate": {"taskId": "task", "contextId": "ctx", "status": {"state": state}, "metadata": {"iac_code": iac}}})
}

fn text(id: &str, t: &str) -> Value {
    json!({"statusUpdate": {"taskId": "task", "contextId": "ctx", "status": {"state": "TASK_STATE_WORKING",
           "message": {"messageId": id, "role": "ROLE_AGENT", "parts": [{"text": t}]}}}})
}

#[test]
fn identity_mismatch_is_a_protocol_error() {
    let mut p = proj();
    let mut out = vec![];
    p.on_item(&text("m", "a"), &mut out).unwrap();
    let other = json!({"statusUpdate": {"taskId": "other", "contextId": "ctx", "status": {"state": "TASK_STATE_WORKING"}}});
    assert_eq!(
        p.on_item(&other, &mut out).unwrap_err().code,
        Code::A2aProtocolError
    );
    let ctx = json!({"statusUpdate": {"taskId": "task", "contextId": "nope", "status": {"state": "TASK_STATE_WORKING"}}});
    assert_eq!(
        p.on_item(&ctx, &mut out).unwrap_err().code,
        Code::A2aProtocolError
    );
}

#[test]
fn every_span_is_closed_on_error() {
    let mut p = proj();
    let mut out = vec![];
    p.start(&mut out);
    p.on_item(
        &status(
            json!({"thinking": {"type": "raw_thinking", "text": "hmm"}}),
            "TASK_STATE_WORKING",
        ),
        &mut out,
    )
    .unwrap();
    p.on_item(&text("m1", "hi"), &mut out).unwrap();
    p.on_item(
        &status(
            json!({"tool": {"toolUseId": "c1", "name": "x", "status": "started"}}),
            "TASK_STATE_WORKING",
        ),
        &mut out,
    )
    .unwrap();
    let end = p.on_item(&json!({"statusUpdate": {"taskId": "task", "contextId": "ctx", "status": {"state": "TASK_STATE_FAILED"}}}), &mut out).unwrap();
    let Some(End::Failed(e)) = end else {
        panic!("{end:?}")
    };
    assert_eq!(e.code, Code::A2aExecutionFailed);
    p.finish(&End::Failed(e), &mut out);
    let t = types(&out);
    assert_eq!(
        &t[t.len() - 3..],
        &["TOOL_CALL_END", "TEXT_MESSAGE_END", "RUN_ERROR"]
    );
    assert!(t.contains(&"REASONING_END"));
    assert_balanced(&out);
}

fn assert_balanced(events: &[Value]) {
    if let Err(e) = check_spans(events) {
        panic!("{e}");
    }
}

#[test]
fn final_repeat_is_not_emitted_twice_and_usage_is_summed() {
    let mut p = proj();
    let mut out = vec![];
    p.on_item(&text("m1", "Hello"), &mut out).unwrap();
    let mut fin = text("m2", "Hello");
    fin["statusUpdate"]["metadata"] = json!({"iac_code": {"assistantFinal": {"complete": true}}});
    p.on_item(&fin, &mut out).unwrap();
    let u = json!({"usage": {"provider": "openai", "model": "m", "inputTokens": 10.0, "outputTokens": 2.0}});
    p.on_item(&status(u.clone(), "TASK_STATE_WORKING"), &mut out)
        .unwrap();
    p.on_item(&status(u, "TASK_STATE_WORKING"), &mut out)
        .unwrap();
    let end = p
        .on_item(&status(json!({}), "TASK_STATE_INPUT_REQUIRED"), &mut out)
        .unwrap();
    assert_eq!(end, Some(End::Success));
    p.finish(&End::Success, &mut out);
    let contents: Vec<_> = out
        .iter()
        .filter(|e| e["type"] == "TEXT_MESSAGE_CONTENT")
        .collect();
    assert_eq!(contents.len(), 1);
    let last = out.last().unwrap();
    assert_eq!(
        last["usage"],
        json!([{"provider": "openai", "model": "m", "inputTokens": 20, "outputTokens": 4}])
    );
}

#[test]
fn input_required_with_an_envelope_is_an_interrupt() {
    let mut p = proj();
    let mut out = vec![];
    let input = json!({"input": {"kind": "permission", "inputId": "p1", "required": true, "toolUseId": "c1"}});
    let end = p
        .on_item(&status(input, "TASK_STATE_INPUT_REQUIRED"), &mut out)
        .unwrap();
    let Some(End::Interrupt(inputs)) = end else {
        panic!()
    };
    assert_eq!(inputs[0]["inputId"], "p1");
}

#[test]
fn tool_lifecycle_matches_the_reference() {
    let mut p = proj();
    let mut out = vec![];
    let tool = |s: Value| status(json!({"tool": s}), "TASK_STATE_WORKING");
    p.on_item(
        &tool(json!({"toolUseId": "c1", "name": "write_file", "status": "started"})),
        &mut out,
    )
    .unwrap();
    p.on_item(
        &tool(json!({"toolUseId": "c1", "status": "input_delta"})),
        &mut out,
    )
    .unwrap();
    p.on_item(&tool(json!({"toolUseId": "c1", "name": "write_file", "status": "input_complete", "toolInput": {"b": 1, "a": 2}})), &mut out).unwrap();
    p.on_item(
        &tool(json!({"toolUseId": "c1", "status": "completed", "result": "ok"})),
        &mut out,
    )
    .unwrap();
    p.on_item(
        &tool(json!({"toolUseId": "c1", "status": "completed", "result": "ok"})),
        &mut out,
    )
    .unwrap();
    assert_eq!(
        types(&out)[1..],
        [
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "TOOL_CALL_RESULT"
        ]
    );
    assert_eq!(out[2]["delta"], r#"{"a":2,"b":1}"#);
    assert_eq!(out[4]["messageId"], "tool-result-c1");
}

fn pipe(event_type: &str, seq: u64, extra: Value) -> Value {
    let mut env = json!({"eventType": event_type, "eventId": format!("ev-{seq}"), "sequence": seq, "pipelineRunId": "pr"});
    if let (Some(env), Some(extra)) = (env.as_object_mut(), extra.as_object()) {
        env.extend(extra.clone());
    }
    status(json!({"pipeline": env}), "TASK_STATE_WORKING")
}

#[test]
fn pipeline_replays_are_dropped_and_unknown_types_never_leak() {
    let mut p = proj();
    let mut out = vec![];
    p.on_item(&pipe("pipeline_started", 1, json!({})), &mut out)
        .unwrap();
    p.on_item(&pipe("pipeline_started", 1, json!({})), &mut out)
        .unwrap();
    p.on_item(&pipe("backup_committed", 2, json!({})), &mut out)
        .unwrap();
    p.on_item(
        &pipe("text_delta", 3, json!({"data": {"text": "x"}})),
        &mut out,
    )
    .unwrap();
    let customs: Vec<_> = out
        .iter()
        .filter(|e| e["type"] == "CUSTOM" && e["name"] == "iac-code.pipeline.v1")
        .collect();
    assert_eq!(customs.len(), 1);
    assert!(out.iter().all(|e| e["value"]["eventType"] != "text_delta"));
    assert_eq!(p.durable().pipeline_sequence, 3);
}

#[test]
fn parallel_candidates_get_their_own_messages_and_steps() {
    let mut p = proj();
    let mut out = vec![];
    p.on_item(
        &pipe(
            "candidate_step_started",
            1,
            json!({"candidate": {"id": "c1"}, "candidateStep": {"id": "plan"}}),
        ),
        &mut out,
    )
    .unwrap();
    p.on_item(
        &pipe(
            "candidate_step_started",
            2,
            json!({"candidate": {"id": "c2"}, "candidateStep": {"id": "plan"}}),
        ),
        &mut out,
    )
    .unwrap();
    p.on_item(
        &pipe(
            "text_delta",
            3,
            json!({"candidate": {"id": "c1"}, "data": {"text": "a"}}),
        ),
        &mut out,
    )
    .unwrap();
    p.on_item(
        &pipe(
            "text_delta",
            4,
            json!({"candidate": {"id": "c2"}, "data": {"text": "b"}}),
        ),
        &mut out,
    )
    .unwrap();
    let starts: Vec<_> = out
        .iter()
        .filter(|e| e["type"] == "TEXT_MESSAGE_START")
        .map(|e| e["messageId"].clone())
        .collect();
    assert_eq!(starts.len(), 2);
    assert_ne!(starts[0], starts[1]);
    let steps: Vec<_> = out
        .iter()
        .filter(|e| e["type"] == "STEP_STARTED")
        .map(|e| e["stepName"].clone())
        .collect();
    assert_eq!(
        steps,
        vec![json!("candidate:c1:plan"), json!("candidate:c2:plan")]
    );
    p.finish(&End::Interrupt(vec![json!({"id": "i"})]), &mut out);
    assert_balanced(&out);
    assert_eq!(p.durable().open_steps.len(), 2);
}

#[test]
fn resumed_run_reopens_durable_steps_and_strips_replayed_text() {
    let mut first = proj();
    let mut out = vec![];
    first.on_item(&text("m1", "Hello "), &mut out).unwrap();
    let mut durable = first.durable();
    durable.open_steps.insert("step:deploy".into());
    let mut p = proj().resuming("task", Some("s"), durable);
    let mut out = vec![];
    p.start(&mut out);
    assert_eq!(types(&out), ["RUN_STARTED", "CUSTOM", "STEP_STARTED"]);
    p.on_item(&text("m1", "Hello world"), &mut out).unwrap();
    let delta: Vec<_> = out
        .iter()
        .filter(|e| e["type"] == "TEXT_MESSAGE_CONTENT")
        .collect();
    assert_eq!(delta[0]["delta"], "world");
    p.on_item(
        &pipe("step_completed", 1, json!({"step": {"id": "deploy"}})),
        &mut out,
    )
    .unwrap();
    p.on_item(
        &pipe("step_completed", 2, json!({"step": {"id": "verify"}})),
        &mut out,
    )
    .unwrap();
    p.finish(&End::Success, &mut out);
    assert_balanced(&out);
    assert!(p.durable().open_steps.is_empty());
}

#[test]
fn an_input_wait_in_a_working_update_is_an_interrupt_unless_already_answered() {
    let wait = json!({"kind": "permission", "inputId": "p1", "toolUseId": "c1", "required": true,
                      "requestTaskId": "task", "scope": "candidate_step", "subPipelineId": "s1",
                      "options": [{"id": "allow_once"}, {"id": "deny"}]});
    let item = status(
        json!({"pendingPermissions": [wait], "pipeline": {"eventType": "permission_requested"}}),
        "TASK_STATE_WORKING",
    );
    let mut out = vec![];
    let end = proj().on_item(&item, &mut out).unwrap();
    assert!(
        matches!(end, Some(End::Interrupt(ref w)) if w.len() == 1),
        "{end:?}"
    );
    let mut p = proj();
    p.answered(["p1".to_string()]);
    assert!(
        p.on_item(&item, &mut out).unwrap().is_none(),
        "a replayed answered wait"
    );
}

#[test]
fn recovered_pipeline_events_below_the_live_sequence_are_projected_once() {
    // Real kernel, sideband permission: events emitted between the unary answer and
    // SubscribeToTask (here seq 2) are missed live while later ones (seq 3) arrive; the
    // recovery from `/iac-code/pipeline/state` brings seq 2 (and seq 3 again).
    let mut p = proj();
    let mut out = vec![];
    p.on_item(&pipe("pipeline_started", 1, json!({})), &mut out)
        .unwrap();
    p.on_item(&pipe("candidate_completed", 3, json!({})), &mut out)
        .unwrap();
    let envelope = |seq: u64, t: &str| json!({"eventType": t, "eventId": format!("ev-{seq}"), "sequence": seq, "pipelineRunId": "pr"});
    let state = json!({"snapshot": {"pipelineRunId": "pr", "lastSequence": 3},
                       "events": [envelope(2, "candidate_completed"), envelope(3, "candidate_completed")]});
    p.recover_pipeline(&state, &mut out);
    let sequences: Vec<_> = out
        .iter()
        .filter(|e| e["type"] == "CUSTOM" && e["name"] == "iac-code.pipeline.v1")
        .map(|e| e["value"]["sequence"].as_u64().unwrap())
        .collect();
    assert_eq!(sequences, vec![1, 3, 2], "seq 2 recovered, seq 3 not twice");
    assert_eq!(p.durable().pipeline_sequence, 3);
    // Live again: a replay below the sequence stays dropped outside recovery.
    let before = out.len();
    p.on_item(&pipe("candidate_completed", 2, json!({})), &mut out)
        .unwrap();
    assert_eq!(out.len(), before);
}

#[test]
fn a_message_seen_in_two_task_snapshots_of_one_run_is_sent_once_and_only_what_it_gained() {
    // A side answer's follow-up: `GetTask`, then `SubscribeToTask`'s first item, each a task
    // whose history repeats the reply an earlier run streamed (one message id, in chunks).
    let earlier = "Two need approval. ";
    let durable = Durable {
        text_digests: [crate::ids::sha256_hex(earlier.as_bytes())].into(),
        ..Durable::default()
    };
    let mut p = proj().resuming("task", Some("s"), durable);
    let mut out = vec![];
    let agent = |t: &str| json!({"messageId": "task-message", "role": "ROLE_AGENT", "parts": [{"text": t}]});
    let snapshot = |history: Vec<Value>| {
        json!({"task": {"id": "task", "contextId": "ctx",
        "status": {"state": "TASK_STATE_WORKING"}, "history": history}})
    };
    let user = json!({"messageId": "u", "role": "ROLE_USER", "parts": [{"text": "go"}]});
    let first = snapshot(vec![user.clone(), agent("Two need "), agent("approval. ")]);
    p.on_item(&first, &mut out).unwrap();
    let second = snapshot(vec![
        user,
        agent("Two need "),
        agent("approval. "),
        agent("Both approved."),
    ]);
    p.on_item(&second, &mut out).unwrap();
    p.on_item(&second, &mut out).unwrap();
    let sent: String = out
        .iter()
        .filter(|e| e["type"] == "TEXT_MESSAGE_CONTENT")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(sent, "Both approved.");
}

#[test]
fn a_listed_pipeline_envelope_goes_on_as_its_own_bytes_in_a_batch_or_alone() {
    // Keys in the kernel's order, not sorted, and spacing a re-encoding would drop.
    let first = r#"{"eventType": "pipeline_started", "sequence": 1, "eventId": "ev-1", "data": {"z": 1, "a": [1.50, "é"]}}"#;
    let second =
        r#"{"eventType":"stack_progress","sequence":2,"eventId":"ev-2","data":{"b":2,"a":1}}"#;
    let alone = r#"{"eventType":"pipeline_completed","sequence":3,"eventId":"ev-3"}"#;
    let frame = |iac: String| {
        format!(
            r#"{{"statusUpdate":{{"taskId":"task","contextId":"ctx","status":{{"state":"TASK_STATE_WORKING"}},"metadata":{{"iac_code":{iac}}}}}}}"#
        )
    };
    let batch = frame(format!(
        r#"{{"pipelineBatch":{{"events":[{first},{second}]}}}}"#
    ));
    let single = frame(format!(r#"{{"pipeline":{alone}}}"#));
    let mut p = proj();
    let mut out = Events::default();
    for f in [&batch, &single] {
        let item = crate::a2a::frame::Item::of_result(f).unwrap();
        p.on_view(&item, &mut out).unwrap();
    }
    let customs: Vec<String> = out
        .iter()
        .map(|j| String::from_utf8(j.to_vec()).unwrap())
        .filter(|j| j.contains("iac-code.pipeline.v1"))
        .collect();
    assert_eq!(customs.len(), 3, "{customs:?}");
    for (event, envelope) in customs.iter().zip([first, second, alone]) {
        assert!(
            event.ends_with(&format!(",\"type\":\"CUSTOM\",\"value\":{envelope}}}")),
            "{event}"
        );
        let v: Value = serde_json::from_str(event).unwrap();
        assert_eq!(v["value"], serde_json::from_str::<Value>(envelope).unwrap());
    }
}

#[test]
fn a_pipeline_envelope_with_a_line_break_in_its_json_is_re_encoded_on_one_line() {
    let envelope = "{\"eventType\":\"pipeline_started\",\n\"sequence\":1}";
    let f = format!(
        r#"{{"statusUpdate":{{"taskId":"task","contextId":"ctx","status":{{"state":"TASK_STATE_WORKING"}},"metadata":{{"iac_code":{{"pipeline":{envelope}}}}}}}}}"#
    );
    let mut p = proj();
    let mut out = Events::default();
    p.on_view(&crate::a2a::frame::Item::of_result(&f).unwrap(), &mut out)
        .unwrap();
    let custom = out
        .iter()
        .find(|j| j.windows(8).any(|w| w == b"pipeline"))
        .unwrap();
    assert!(!custom.contains(&b'\n'));
    let v: Value = serde_json::from_slice(custom).unwrap();
    assert_eq!(v["value"]["eventType"], "pipeline_started");
}

#[test]
fn a_text_delta_marks_where_its_id_and_literal_are_unless_its_id_is_escaped() {
    let mut p = proj();
    let mut out = Events::default();
    p.on_item(&text("m2", "Say \"hi\"\n"), &mut out).unwrap();
    p.on_item(&text("m\\3", "x"), &mut out).unwrap();
    let mut marked = vec![];
    out.each_event(&mut |json, spans| {
        if let Some(DeltaSpans { message_id, delta }) = spans {
            let part = |(a, b): (usize, usize)| String::from_utf8(json[a..b].to_vec()).unwrap();
            marked.push((part(message_id), part(delta)));
        }
    });
    assert_eq!(
        marked,
        [("m2".to_string(), r#""Say \"hi\"\n""#.to_string())]
    );
}
