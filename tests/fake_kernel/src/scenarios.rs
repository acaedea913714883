//! The named scenarios a user message picks with `scenario:<name>`, and the small builders they
//! are written with.

use crate::captures::{normal_turn, permission_flow};
use crate::script::Step;
use serde_json::{json, Value};

fn status(state: &'static str, iac: Value, text: Option<&str>) -> Step {
    Step::Status {
        state,
        iac,
        text: text.map(String::from),
    }
}

pub(crate) fn working_text(t: &str) -> Step {
    status("TASK_STATE_WORKING", json!({}), Some(t))
}

fn done() -> Step {
    status("TASK_STATE_INPUT_REQUIRED", json!({}), None)
}

fn tool(id: &str, st: &str, extra: Value) -> Step {
    let mut t = json!({"toolUseId": id, "name": "write_file", "status": st});
    if let (Some(o), Some(e)) = (t.as_object_mut(), extra.as_object()) {
        o.extend(e.clone());
    }
    status("TASK_STATE_WORKING", json!({"tool": t}), None)
}

pub fn permission_envelope(input_id: &str, tool_use: &str) -> Value {
    json!({"kind": "permission", "schemaVersion": 1, "requestTaskId": "$TASK", "contextId": "$CTX",
           "inputId": input_id, "toolUseId": tool_use, "toolName": "write_file", "required": true,
           "title": "Change a workspace file", "purpose": "Write a file needed for the task.",
           "safeSummary": "write_file: hello.txt", "prompt": "Change a workspace file Allow once?",
           "options": [{"id": "allow_once", "label": "Allow once"}, {"id": "deny", "label": "Deny"}]})
}

fn denied_tail() -> Vec<Step> {
    vec![
        tool(
            "call_1",
            "failed",
            json!({"result": "Permission denied by the user."}),
        ),
        working_text("OK, I did not write the file."),
        done(),
    ]
}

/// A named scenario.
pub fn scenario(name: &str) -> Option<Vec<Step>> {
    Some(match name {
        "normal" => normal_turn(),
        "permission" => {
            let (perm_run1, perm_envelope, perm_run2) = permission_flow();
            let mut s = perm_run1;
            s.push(Step::Input { envelope: perm_envelope, allow: perm_run2, deny: denied_tail(), answer: vec![] });
            s
        }
        "permission-gated" => {
            let (perm_run1, perm_envelope, perm_run2) = permission_flow();
            let mut s = perm_run1;
            s.push(Step::Gate("interrupt".into()));
            s.push(Step::Input { envelope: perm_envelope, allow: perm_run2, deny: denied_tail(), answer: vec![] });
            s
        }
        "question" => vec![
            working_text("I need one detail. "),
            Step::Input {
                envelope: json!({"kind": "ask_user_question", "schemaVersion": 1, "requestTaskId": "$TASK", "contextId": "$CTX",
                    "inputId": "ask-call_q", "toolUseId": "call_q", "required": true, "prompt": "Which region?", "allowFreeText": true,
                    "options": [{"id": "cn-hangzhou", "label": "Hangzhou"}, {"id": "cn-beijing", "label": "Beijing"}]}),
                allow: vec![], deny: vec![],
                answer: vec![working_text("You chose: $ANSWER."), done()],
            },
        ],
        "selection" => vec![Step::Input {
            envelope: json!({"kind": "candidate_selection", "schemaVersion": 1, "requestTaskId": "$TASK", "contextId": "$CTX",
                "inputId": "input-sel-1", "required": true, "prompt": "Pick a plan",
                "options": [{"id": "0", "label": "Plan A"}, {"id": "1", "label": "Plan B"}]}),
            allow: vec![], deny: vec![],
            answer: vec![working_text("Selected $ANSWER."), done()],
        }],
        "reasoning" => vec![
            status("TASK_STATE_WORKING", json!({"thinking": {"type": "raw_thinking", "text": "Let me think. "}}), None),
            status("TASK_STATE_WORKING", json!({"thinking": {"type": "raw_thinking", "text": "Done."}}), None),
            working_text("Answer."),
            status("TASK_STATE_WORKING", json!({"usage": {"provider": "openai", "model": "m", "inputTokens": 3.0, "outputTokens": 2.0, "totalTokens": 5.0}}), None),
            done(),
        ],
        "tools-artifact" => vec![
            working_text("Writing. "),
            tool("call_9", "started", json!({})),
            tool("call_9", "input_complete", json!({"toolInput": {"path": "/w/a.txt"}})),
            tool("call_9", "progress", json!({"progress": 0.5})),
            status("TASK_STATE_WORKING", json!({"mcpProgress": {"server": "ros", "message": "halfway"}}), None),
            Step::Item(json!({"artifactUpdate": {"taskId": "$TASK", "contextId": "$CTX", "artifact": {"artifactId": "a1", "name": "a.txt",
                "parts": [{"url": "file:///w/a.txt", "mediaType": "text/plain"}]}, "lastChunk": true}})),
            tool("call_9", "completed", json!({"result": {"ok": true}})),
            working_text("Done."),
            status("TASK_STATE_COMPLETED", json!({}), None),
        ],
        "fail" => vec![working_text("Trying. "), status("TASK_STATE_FAILED", json!({}), Some("The model provider rejected the request."))],
        "rpc-error" => vec![Step::RpcError(-32603, "Internal error while running the task")],
        "die" => vec![working_text("Partial "), Step::Die],
        "garbage" => vec![working_text("Partial "), Step::Garbage],
        "hang" => vec![working_text("Working on it. "), Step::Hang],
        "silent" => vec![working_text("Thinking "), Step::Sleep(700), working_text("done."), done()],
        "mismatch" => vec![Step::Item(json!({"statusUpdate": {"taskId": "$TASK", "contextId": "agui-ffffffffffffffffffffffffffffffffffffffff",
            "status": {"state": "TASK_STATE_WORKING"}}}))],
        "framing" => vec![
            Step::Raw(b"data: {\"jsonrpc\":\"2.0\",\"id\":\"1\",\r\ndata: \"result\":{\"statusUpdate\":{\"taskId\":\"$TASK\",\"contextId\":\"$CTX\",".to_vec()),
            Step::Sleep(20),
            Step::Raw("\"status\":{\"state\":\"TASK_STATE_WORKING\",\"message\":{\"messageId\":\"m\",\"role\":\"ROLE_AGENT\",\"parts\":[{\"text\":\"你好\"}]}}}}}\r\n\r\n: comment\r\n\r".as_bytes().to_vec()),
            Step::Raw(b"\n".to_vec()),
            done(),
        ],
        "pipeline" => pipeline_flow(),
        "side-waits" => {
            let side = |id: &str, tool: &str, cand: &str| {
                let mut e = permission_envelope(id, tool);
                e["scope"] = json!("candidate_step");
                e["subPipelineId"] = json!(cand);
                e
            };
            vec![
                working_text("Two candidates need approval. "),
                Step::SideWaits {
                    envelopes: vec![side("permission-c1", "call_c1", "c1"), side("permission-c2", "call_c2", "c2")],
                    then: vec![working_text("Both approved."), done()],
                },
            ]
        }
        // A side wait answered, then a pipeline event the client misses (logged for
        // `/iac-code/pipeline/state` only, as between the unary answer and SubscribeToTask) below
        // one it sees live: the follow-up recovers it from where the run stood before the answer.
        "side-wait-gap" => {
            let mut e = permission_envelope("permission-g1", "call_g1");
            e["scope"] = json!("candidate_step");
            e["subPipelineId"] = json!("c1");
            vec![
                pipe_step("pipeline_started", 1, json!({"data": {"pipelineName": "selling"}})),
                Step::SideWaits {
                    envelopes: vec![e],
                    then: vec![
                        Step::PipelineLog(pipe("candidate_completed", 2, candidate_coords("c1", None, "candidates"))),
                        pipe_step("candidate_completed", 3, candidate_coords("c2", None, "candidates")),
                        done(),
                    ],
                },
            ]
        }
        "panic" => vec![working_text("before "), working_text("__iac_code_agui_test_panic__"), done()],
        "numbered" => (0..20).map(|i| working_text(&format!("[{i}]"))).chain([done()]).collect(),
        "slow-numbered" => vec![Step::Numbered { count: 100_000, gap_ms: 100 }, done()],
        // `count` text events whose text is `$NOW` (the fake's clock at emit time, µs), ~5 ms apart:
        // per-event latency through a proxy against direct (benches/pairs.mjs).
        n if n.starts_with("clock-") => (0..n["clock-".len()..].parse().ok()?)
            .flat_map(|_| [working_text("$NOW"), Step::Sleep(1)])
            .chain([done()])
            .collect(),
        // The browser test's slow turn: text, then it waits at the gate named like the scenario
        // (`console-slow-<tag>`, opened through /__control/open) before it finishes.
        n if n.starts_with("console-slow-") => vec![
            working_text("Streaming the first part. "),
            Step::Sleep(300),
            status("TASK_STATE_WORKING", json!({"thinking": {"type": "raw_thinking", "text": "Checking the template."}}), None),
            working_text("Still working. "),
            Step::Gate(n.to_string()),
            working_text("Finished after the wait."),
            done(),
        ],
        // `count` numbered text items 100 ms apart, then done: a run that lasts long enough to be
        // observed, cut and resumed mid-way (the soak bench).
        n if n.starts_with("paced-") => vec![Step::Numbered { count: n["paced-".len()..].parse().ok()?, gap_ms: 100 }, done()],
        n if n.starts_with("flood-") => vec![Step::Flood(n["flood-".len()..].parse().ok()?), done()],
        _ => return None,
    })
}

/// One pipeline envelope as the kernel streams it in `metadata.iac_code.pipeline`
/// (`iac_code/a2a/pipeline_events.py`, `_envelope`): the sequence is a float on the A2A wire
/// (`22.0`, protobuf `Struct` numbers), an integer in `/iac-code/pipeline/state`.
pub fn pipe(event_type: &str, seq: u64, extra: Value) -> Value {
    let mut env = json!({"schemaVersion": 1, "eventType": event_type, "eventId": format!("ev-{seq}"),
                         "sequence": seq as f64, "pipelineRunId": "pr-1", "scope": "pipeline",
                         "status": "working", "data": {}});
    if let (Some(o), Some(e)) = (env.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            o.insert(k.clone(), v.clone());
        }
    }
    env
}

/// The kernel's parent step coordinate (`_parent_step_coordinate`).
pub fn step_coord(id: &str) -> Value {
    json!({"id": id, "runId": format!("step-{id}-1"), "attempt": 1})
}

/// The kernel's candidate coordinates (`_candidate_coordinate`, `_candidate_step_coordinate`):
/// scope `candidate`, or `candidate_step` with the candidate step; both under their parent step.
pub fn candidate_coords(candidate: &str, step: Option<&str>, parent: &str) -> Value {
    let run = format!("{candidate}-run-1");
    let mut v = json!({"scope": "candidate", "step": step_coord(parent),
                       "candidate": {"id": candidate, "runId": run, "index": 0, "attempt": 1}});
    if let Some(step) = step {
        v["scope"] = json!("candidate_step");
        v["candidateStep"] = json!({"id": step, "runId": format!("{run}-{step}-1"), "attempt": 1});
    }
    v
}

fn pipe_step(event_type: &str, seq: u64, extra: Value) -> Step {
    status(
        "TASK_STATE_WORKING",
        json!({"pipeline": pipe(event_type, seq, extra)}),
        None,
    )
}

fn pipe_batch(events: Vec<Value>) -> Step {
    status(
        "TASK_STATE_WORKING",
        json!({"pipelineBatch": {"events": events}}),
        None,
    )
}

/// `extra` with `data` set.
fn with_data(mut extra: Value, data: Value) -> Value {
    extra["data"] = data;
    extra
}

/// A parent step's event (scope `step`).
fn in_step(id: &str, data: Value) -> Value {
    json!({"scope": "step", "step": step_coord(id), "data": data})
}

/// A selling-style pipeline in the kernel's envelope shapes: requirements, two parallel
/// candidates, a selection, then a deploy step whose tool needs permission; events the client
/// missed are only in the kernel's pipeline state; the resumed stream replays an old event and
/// old text.
pub fn pipeline_flow() -> Vec<Step> {
    let c = |id: &str| candidate_coords(id, None, "candidates");
    let cs = |id: &str| candidate_coords(id, Some("plan"), "candidates");
    let ctext = |id: &str, text: &str| with_data(cs(id), json!({"text": text}));
    let run1 = vec![
        pipe_step(
            "pipeline_started",
            1,
            json!({"data": {"pipelineName": "selling"}}),
        ),
        pipe_step("step_started", 2, in_step("requirements", json!({}))),
        pipe_step(
            "text_delta",
            3,
            in_step("requirements", json!({"text": "Collecting requirements."})),
        ),
        pipe_step("step_completed", 4, in_step("requirements", json!({}))),
        pipe_step("step_started", 5, in_step("candidates", json!({}))),
        pipe_step("sub_pipeline_started", 6, json!({"data": {"count": 2}})),
        pipe_batch(vec![
            pipe("candidate_started", 7, c("c1")),
            pipe("candidate_started", 8, c("c2")),
        ]),
        pipe_batch(vec![
            pipe("candidate_step_started", 9, cs("c1")),
            pipe("candidate_step_started", 10, cs("c2")),
        ]),
        pipe_step("text_delta", 11, ctext("c1", "Plan A: ECS")),
        pipe_step("text_delta", 12, ctext("c2", "Plan B: ACK")),
        pipe_step("text_delta", 11, ctext("c1", "Plan A: ECS")),
        pipe_step("text_delta", 13, ctext("c1", " with SLB")),
        pipe_step(
            "thinking_delta",
            14,
            in_step(
                "candidates",
                json!({"type": "raw_thinking", "text": "Comparing costs."}),
            ),
        ),
        pipe_batch(vec![
            pipe("candidate_step_completed", 15, cs("c1")),
            pipe("candidate_step_completed", 16, cs("c2")),
        ]),
        pipe_batch(vec![
            pipe("candidate_completed", 17, c("c1")),
            pipe("candidate_completed", 18, c("c2")),
        ]),
        pipe_step("sub_pipeline_completed", 19, json!({})),
        pipe_step(
            "candidate_selected",
            20,
            json!({"data": {"candidateId": "c1"}}),
        ),
        pipe_step("step_completed", 21, in_step("candidates", json!({}))),
        pipe_step("step_started", 22, in_step("deploy", json!({}))),
        pipe_step(
            "tool_started",
            23,
            in_step(
                "deploy",
                json!({"toolUseId": "call_d", "toolName": "ros_stack", "input": {"action": "create"}}),
            ),
        ),
        pipe_step(
            "usage",
            24,
            json!({"data": {"provider": "openai", "model": "m", "inputTokens": 7, "outputTokens": 3, "totalTokens": 10}}),
        ),
        pipe_step("input_required", 25, json!({})),
        pipe_step("backup_committed", 26, json!({})),
        pipe_step("stack_progress", 27, json!({"data": {"percent": 10}})),
        Step::PipelineLog(pipe("stack_progress", 28, json!({"data": {"percent": 20}}))),
    ];
    let mut envelope = permission_envelope("permission-deploy", "call_d");
    envelope["toolName"] = json!("ros_stack");
    envelope["scope"] = json!("pipeline");
    let after_allow = vec![
        status(
            "TASK_STATE_WORKING",
            json!({}),
            Some("Collecting requirements."),
        ),
        pipe_step("stack_progress", 27, json!({"data": {"percent": 10}})),
        pipe_step("input_received", 29, in_step("deploy", json!({}))),
        pipe_step(
            "tool_result",
            30,
            json!({"data": {"toolUseId": "call_d", "result": "stack created"}}),
        ),
        pipe_step(
            "text_delta",
            31,
            in_step("deploy", json!({"text": "Deployed."})),
        ),
        pipe_step("step_completed", 32, in_step("deploy", json!({}))),
        pipe_step("pipeline_completed", 33, json!({})),
        done(),
    ];
    let after_deny = vec![
        pipe_step(
            "tool_result",
            29,
            json!({"data": {"toolUseId": "call_d", "result": "denied", "isError": true}}),
        ),
        pipe_step("step_failed", 30, in_step("deploy", json!({}))),
        // The kernel's failed end (`iac_code/a2a/pipeline_executor.py`), not the spec's
        // `pipeline_error`.
        pipe_step(
            "pipeline_failed",
            31,
            json!({"data": {"message": "Deployment was not approved."}}),
        ),
        done(),
    ];
    let mut s = run1;
    s.push(Step::Input {
        envelope,
        allow: after_allow,
        deny: after_deny,
        answer: vec![],
    });
    s
}
