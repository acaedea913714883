//! Ground truth: the real kernel's recorded A2A streams fed through the projection (no sockets)
//! give the reference adapter's recorded AG-UI streams, event by event, ids and timestamps aside.

use iac_code_agui::error::Lang;
use iac_code_agui::projection::{Durable, End, Projection, RunIds};
use serde_json::{json, Value};
use test_support::{data_lines, without_ids};

fn project(
    items: &[Value],
    context: &str,
    resume: Option<(&str, &str)>,
) -> (Vec<Value>, Option<End>) {
    let ids = RunIds {
        thread_id: "t".into(),
        run_id: "r".into(),
        context_id: context.into(),
        execution_id: "e".into(),
        ros_invocation_id: "invocation-1".into(),
        ..Default::default()
    };
    let mut p = Projection::new(ids, Lang::En).with_clock(|| 0);
    if let Some((task, session)) = resume {
        p = p.resuming(task, Some(session), Durable::default());
    }
    let mut out = vec![];
    p.start(&mut out);
    let mut end = None;
    for item in items {
        if let Some(e) = p.on_item(&item["result"], &mut out).unwrap() {
            end = Some(e);
            break;
        }
    }
    let announced = end
        .clone()
        .expect("stream without an end")
        .announced("2026-01-01T00:00:00Z", Lang::En);
    p.finish(&announced, &mut out);
    (out, end)
}

#[test]
fn the_recorded_normal_turn_projects_to_the_recorded_agui_stream() {
    let items = data_lines(include_str!("data/normal-turn.a2a.sse"));
    let (ours, end) = project(&items, "bdd96997-fc99-4760-9d7c-64466b091e18", None);
    assert_eq!(end, Some(End::Success));
    let golden = data_lines(include_str!("data/normal-turn.agui.sse"));
    // The two captures are different turns: their task ids differ, the message ids follow them.
    assert_eq!(
        without_ids(&ours, "88b24f14-1984-4a52-9ab9-b44c1ac2ba2d"),
        without_ids(&golden, "4c0dde0f-2c97-4a63-953c-c18ee9a20c1e")
    );
    // Message ids keep the kernel's message id, as the reference's do.
    assert_eq!(
        ours[2]["messageId"],
        "88b24f14-1984-4a52-9ab9-b44c1ac2ba2d-message"
    );
}

fn permission_streams() -> Vec<Vec<Value>> {
    let mut streams: Vec<Vec<Value>> = vec![];
    let mut in_stream = false;
    for line in include_str!("data/permission-flow.a2a.jsonl").lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        if v["kind"] == "request" {
            in_stream = v["body"]["method"] == "SendStreamingMessage";
            if in_stream {
                streams.push(vec![]);
            }
        } else if in_stream {
            let data = v["line"].as_str().unwrap().strip_prefix("data: ").unwrap();
            streams
                .last_mut()
                .unwrap()
                .push(serde_json::from_str(data).unwrap());
        }
    }
    streams
}

#[test]
fn the_recorded_permission_flow_projects_to_the_recorded_interrupt_and_resume() {
    let streams = permission_streams();
    let ctx = "agui-58633450475f377504ca56b46b5a293d95591ee7";
    let (run1, end) = project(&streams[0], ctx, None);
    assert!(matches!(end, Some(End::Interrupt(_))));
    let mut golden1 = data_lines(include_str!("data/permission-flow.run1.agui.sse"));
    let last = golden1.last_mut().unwrap();
    // The reference sets no expiry and copies the kernel's float schemaVersion; ours fixes both.
    last["outcome"]["interrupts"][0]["expiresAt"] = json!("2026-01-01T00:00:00Z");
    last["outcome"]["interrupts"][0]["metadata"]["schemaVersion"] = json!(1);
    assert_eq!(without_ids(&run1, ""), without_ids(&golden1, ""));

    let (run2, end) = project(
        &streams[1],
        ctx,
        Some((
            "07195cb1-be1b-4aa4-93c0-53feadfa81e7",
            "9d08fcfb-85c7-4bb8-9ec3-024ec4a1b37d",
        )),
    );
    assert_eq!(end, Some(End::Success));
    let golden2 = data_lines(include_str!("data/permission-flow.run2-resume.agui.sse"));
    assert_eq!(without_ids(&run2, ""), without_ids(&golden2, ""));
}
