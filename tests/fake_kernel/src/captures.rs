//! The real kernel's recorded traffic (`tests/data/`) as scripts: ids become placeholders, the
//! submitted task and the answer acknowledgement are left to the fake.

use crate::script::Step;
use serde_json::Value;

const NORMAL_TURN: &str = include_str!("../../data/normal-turn.a2a.sse");
const PERMISSION_FLOW: &str = include_str!("../../data/permission-flow.a2a.jsonl");

/// The recorded stream with its ids replaced by placeholders (the first item, the submitted task,
/// is produced by the fake itself).
fn recorded(
    lines: impl Iterator<Item = String>,
    task: &str,
    ctx: &str,
    session: &str,
) -> Vec<Step> {
    lines
        .filter_map(|l| l.strip_prefix("data: ").map(String::from))
        .filter_map(|l| {
            let l = l
                .replace(task, "$TASK")
                .replace(ctx, "$CTX")
                .replace(session, "$SESSION");
            let v: Value = serde_json::from_str(&l).ok()?;
            Some(v["result"].clone())
        })
        .filter(|r| r.get("task").is_none())
        .map(Step::Item)
        .collect()
}

pub fn normal_turn() -> Vec<Step> {
    recorded(
        NORMAL_TURN.lines().map(String::from),
        "88b24f14-1984-4a52-9ab9-b44c1ac2ba2d",
        "bdd96997-fc99-4760-9d7c-64466b091e18",
        "44be09b7-2125-4b26-ba40-ae369498f999",
    )
}

/// The permission flow of the capture: run 1 up to the input wait, the resumed stream after it.
pub fn permission_flow() -> (Vec<Step>, Value, Vec<Step>) {
    let (task, ctx, session) = (
        "07195cb1-be1b-4aa4-93c0-53feadfa81e7",
        "agui-58633450475f377504ca56b46b5a293d95591ee7",
        "9d08fcfb-85c7-4bb8-9ec3-024ec4a1b37d",
    );
    let mut streams: Vec<Vec<String>> = vec![];
    let mut current_is_stream = false;
    for line in PERMISSION_FLOW.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        if v["kind"] == "request" {
            current_is_stream = v["body"]["method"] == "SendStreamingMessage";
            if current_is_stream {
                streams.push(vec![]);
            }
        } else if current_is_stream {
            streams
                .last_mut()
                .unwrap()
                .push(v["line"].as_str().unwrap().to_string());
        }
    }
    let mut run1 = recorded(streams[0].clone().into_iter(), task, ctx, session);
    let Some(Step::Item(last)) = run1.pop() else {
        panic!("capture")
    };
    let envelope = last["statusUpdate"]["metadata"]["iac_code"]["input"].clone();
    let mut run2 = recorded(streams[1].clone().into_iter(), task, ctx, session);
    run2.remove(0); // inputReceived: the fake sends its own
    (run1, envelope, run2)
}
