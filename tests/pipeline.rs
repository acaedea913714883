//! Pipeline mode over real HTTP: standard mappings, the CUSTOM allow-list, activity snapshots,
//! parallel sub-pipelines, replays, and steps across an interrupt and an adapter restart.

use fake_kernel::FakeKernel;
use iac_code_agui::testing::check_spans;
use serde_json::{json, Value};
use test_support::*;

fn pipeline_request(a: &Adapter, thread: &str) -> Value {
    let mut body = a.request(thread, "run-1", "scenario:pipeline");
    let iac = &mut body["forwardedProps"]["iacCode"];
    iac["runMode"] = json!("pipeline");
    iac["pipelineName"] = json!("selling");
    iac["candidatePresentation"] = json!("rich");
    iac["cleanupOnly"] = json!(false);
    body
}

/// `TYPE` or `TYPE:detail` per event, where detail is the step, message, tool or pipeline type.
fn outline(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| {
            let t = e["type"].as_str().unwrap();
            let detail = match t {
                "STEP_STARTED" | "STEP_FINISHED" => e["stepName"].as_str().map(String::from),
                "TEXT_MESSAGE_CONTENT" | "REASONING_MESSAGE_CONTENT" => {
                    e["delta"].as_str().map(String::from)
                }
                "TOOL_CALL_START" | "TOOL_CALL_RESULT" => {
                    e["toolCallId"].as_str().map(String::from)
                }
                "CUSTOM" if e["name"] == "iac-code.pipeline.v1" => {
                    e["value"]["eventType"].as_str().map(String::from)
                }
                "CUSTOM" => e["name"].as_str().map(String::from),
                "ACTIVITY_SNAPSHOT" => e["activityType"].as_str().map(String::from),
                "RUN_FINISHED" => e["outcome"]["type"].as_str().map(String::from),
                _ => None,
            };
            match detail {
                Some(d) => format!("{t}:{d}"),
                None => t.to_string(),
            }
        })
        .collect()
}

const RUN1: &[&str] = &[
    "RUN_STARTED",
    "CUSTOM:iac-code.session.v1",
    "CUSTOM:pipeline_started",
    "STEP_STARTED:requirements",
    "TEXT_MESSAGE_START",
    "TEXT_MESSAGE_CONTENT:Collecting requirements.",
    "STEP_FINISHED:requirements",
    "STEP_STARTED:candidates",
    "CUSTOM:sub_pipeline_started",
    "CUSTOM:candidate_started",
    "CUSTOM:candidate_started",
    "STEP_STARTED:candidate:c1:plan",
    "STEP_STARTED:candidate:c2:plan",
    "TEXT_MESSAGE_START",
    "TEXT_MESSAGE_CONTENT:Plan A: ECS",
    "TEXT_MESSAGE_START",
    "TEXT_MESSAGE_CONTENT:Plan B: ACK",
    "TEXT_MESSAGE_CONTENT: with SLB",
    "REASONING_START",
    "REASONING_MESSAGE_START",
    "REASONING_MESSAGE_CONTENT:Comparing costs.",
    "STEP_FINISHED:candidate:c1:plan",
    "STEP_FINISHED:candidate:c2:plan",
    "CUSTOM:candidate_completed",
    "CUSTOM:candidate_completed",
    "CUSTOM:sub_pipeline_completed",
    "CUSTOM:candidate_selected",
    "STEP_FINISHED:candidates",
    "STEP_STARTED:deploy",
    "REASONING_MESSAGE_END",
    "REASONING_END",
    "TOOL_CALL_START:call_d",
    "TOOL_CALL_ARGS",
    "TOOL_CALL_END",
    "CUSTOM:stack_progress",
    "TEXT_MESSAGE_END",
    "TEXT_MESSAGE_END",
    "TEXT_MESSAGE_END",
    "STEP_FINISHED:deploy",
    "RUN_FINISHED:interrupt",
];

/// The resume: the steps re-opened and the missed events recovered first, then the session once
/// the kernel took the answer (the reference's order, `iac_code/agui/adapter.py`).
const RUN2: &[&str] = &[
    "RUN_STARTED",
    "STEP_STARTED:deploy",
    "ACTIVITY_SNAPSHOT:iac-code.pipeline.v1",
    "CUSTOM:stack_progress",
    "CUSTOM:iac-code.session.v1",
    "TOOL_CALL_RESULT:call_d",
    "TEXT_MESSAGE_START",
    "TEXT_MESSAGE_CONTENT:Deployed.",
    "STEP_FINISHED:deploy",
    "CUSTOM:pipeline_completed",
    "TEXT_MESSAGE_END",
    "RUN_FINISHED:success",
];

fn check_run1(r: &RunResult) -> Value {
    assert_eq!(outline(&r.events), RUN1, "{:#?}", outline(&r.events));
    check_spans(&r.events).unwrap();
    // Parallel candidates never share a message.
    let starts: Vec<&Value> = r
        .events
        .iter()
        .filter(|e| e["type"] == "TEXT_MESSAGE_START")
        .map(|e| &e["messageId"])
        .collect();
    assert_eq!(starts.len(), 3);
    // The reference's message ids (`iac_code/agui/events.py`, `_pipeline_message_id`): the
    // pipeline run is `pipeline-<threadId>` until a recovery snapshot names the kernel's; then
    // the scope and the run ids of candidate, candidate step and parent step.
    let thread = r.events[0]["threadId"].as_str().unwrap();
    let run = format!("pipeline-message:pipeline-{thread}");
    assert_eq!(
        starts,
        [
            &json!(format!("{run}:step:step-requirements-1")),
            &json!(format!(
                "{run}:candidate_step:c1-run-1:c1-run-1-plan-1:step-candidates-1"
            )),
            &json!(format!(
                "{run}:candidate_step:c2-run-1:c2-run-1-plan-1:step-candidates-1"
            )),
        ]
    );
    let reasoning = r
        .events
        .iter()
        .find(|e| e["type"] == "REASONING_START")
        .unwrap();
    assert_eq!(
        reasoning["messageId"],
        format!("reasoning-{run}:step:step-candidates-1")
    );
    assert_eq!(
        r.last()["usage"][0]["totalTokens"],
        10,
        "pipeline usage goes to RUN_FINISHED.usage"
    );
    // No CUSTOM for signals with a standard mapping, none outside the allow-list.
    for e in r.custom("iac-code.pipeline.v1") {
        let t = e["value"]["eventType"].as_str().unwrap();
        assert!(
            ![
                "text_delta",
                "thinking_delta",
                "tool_started",
                "tool_result",
                "usage",
                "step_started",
                "input_required",
                "backup_committed"
            ]
            .contains(&t),
            "{t}"
        );
        assert!(e["value"]["eventId"].is_string() && e["value"]["sequence"].is_number());
    }
    r.interrupts()[0].clone()
}

fn check_run2(r: &RunResult) {
    assert_eq!(outline(&r.events), RUN2, "{:#?}", outline(&r.events));
    check_spans(&r.events).unwrap();
    let snapshot = r
        .events
        .iter()
        .find(|e| e["type"] == "ACTIVITY_SNAPSHOT")
        .unwrap();
    assert_eq!(snapshot["messageId"], "pipeline:pr-1");
    assert_eq!(snapshot["replace"], true);
    assert_eq!(snapshot["content"]["schemaVersion"], 1);
    assert_eq!(snapshot["content"]["pipelineRunId"], "pr-1");
    let text = r
        .events
        .iter()
        .find(|e| e["type"] == "TEXT_MESSAGE_START")
        .unwrap();
    assert_eq!(
        text["messageId"], "pipeline-message:pr-1:step:step-deploy-1",
        "after the snapshot, the kernel's pipeline run id"
    );
    assert_eq!(
        r.custom("iac-code.pipeline.v1")[0]["value"]["sequence"],
        28,
        "the missed event, recovered"
    );
}

#[test]
fn a_selling_pipeline_runs_across_an_interrupt_event_by_event() {
    let k = FakeKernel::start();
    let a = Adapter::start(&k.url);
    let r1 = a.run(&pipeline_request(&a, "t-pipe"));
    let i = check_run1(&r1);
    assert_eq!(i["metadata"]["scope"], "pipeline");
    let state = a.state_file("t-pipe");
    assert_eq!(state["execution"]["pipelineSequence"], 27);
    assert_eq!(
        state["execution"]["pipelineOpenSteps"],
        json!(["step:deploy"])
    );
    assert!(!state["execution"]["textSnapshotDigests"]
        .as_array()
        .unwrap()
        .is_empty());
    let meta =
        &k.calls("SendStreamingMessage")[0]["body"]["params"]["message"]["metadata"]["iac_code"];
    assert_eq!(
        (meta["run_mode"].as_str(), meta["pipeline_name"].as_str()),
        (Some("pipeline"), Some("selling"))
    );
    assert_eq!(
        (
            &state["execution"]["runMode"],
            &state["execution"]["pipelineName"]
        ),
        (&json!("pipeline"), &json!("selling")),
        "the execution's mode is recorded"
    );
    let resume = json!([{"interruptId": i["id"], "status": "resolved", "payload": {"decision": "allow_once"}}]);
    // The resume request names no mode: the answer still carries the execution's, or the kernel
    // would take it for a normal chat turn (`iac_code/a2a/request_mode.py`).
    let r2 = a.run(&a.resume_request("t-pipe", "run-2", resume));
    check_run2(&r2);
    let answer =
        &k.calls("SendStreamingMessage")[1]["body"]["params"]["message"]["metadata"]["iac_code"];
    assert_eq!(
        (
            answer["run_mode"].as_str(),
            answer["pipeline_name"].as_str()
        ),
        (Some("pipeline"), Some("selling"))
    );
    let recovery = k
        .requests()
        .into_iter()
        .find(|r| {
            r["path"]
                .as_str()
                .unwrap()
                .starts_with("/iac-code/pipeline/state")
        })
        .unwrap();
    assert!(recovery["path"]
        .as_str()
        .unwrap()
        .contains("afterSequence=27"));
    let state = a.state_file("t-pipe");
    assert_eq!(state["execution"]["pipelineOpenSteps"], json!([]));
}

#[test]
fn a_pipeline_resumes_after_an_adapter_restart_without_duplicates() {
    let k = FakeKernel::start();
    let mut a = Adapter::start(&k.url);
    let i = check_run1(&a.run(&pipeline_request(&a, "t-pipe-restart")));
    a.restart();
    let resume = json!([{"interruptId": i["id"], "status": "resolved", "payload": {"decision": "allow_once"}}]);
    check_run2(&a.run(&a.resume_request("t-pipe-restart", "run-2", resume)));
}

#[test]
fn a_denied_deploy_ends_the_pipeline_with_pipeline_failed_closing_its_steps() {
    let k = FakeKernel::start();
    let a = Adapter::start(&k.url);
    let i = check_run1(&a.run(&pipeline_request(&a, "t-pipe-deny")));
    let resume =
        json!([{"interruptId": i["id"], "status": "resolved", "payload": {"decision": "deny"}}]);
    let r = a.run(&a.resume_request("t-pipe-deny", "run-2", resume));
    check_spans(&r.events).unwrap();
    let o = outline(&r.events);
    assert!(
        o.contains(&"CUSTOM:step_failed".to_string())
            && !o.iter().any(|e| e.contains("pipeline_failed")),
        "{o:?}"
    );
    assert!(o.contains(&"STEP_FINISHED:deploy".to_string()));
    assert_eq!(
        r.last()["outcome"]["type"],
        "success",
        "the run ends; the pipeline's business end is pipeline_failed (not a CUSTOM type)"
    );
}

/// A pipeline's candidate selection labels each option where the reference does
/// (`iac_code/agui/events.py`, `_selection_schema`): on the `selectedId` property of its `oneOf`
/// branch (`type: string`, `const`, `title`), the branch itself a plain object, so a console that
/// draws options from the schema shows the same labels with either adapter.
#[test]
fn a_candidate_selection_schema_titles_each_option_on_its_property_as_the_reference() {
    let k = FakeKernel::start();
    let a = Adapter::start(&k.url);
    let mut body = a.request("t-select", "r1", "scenario:selection");
    body["forwardedProps"]["iacCode"]["runMode"] = json!("pipeline");
    let r = a.run(&body);
    let i = &r.interrupts()[0];
    assert_eq!(i["metadata"]["kind"], "candidate_selection");
    let option = |id: &str, title: &str| {
        json!({"type": "object",
               "properties": {"selectedId": {"type": "string", "const": id, "title": title}},
               "required": ["selectedId"], "additionalProperties": false})
    };
    assert_eq!(
        i["responseSchema"],
        json!({"oneOf": [option("0", "Plan A"), option("1", "Plan B")]})
    );
}
