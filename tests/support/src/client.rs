//! An AG-UI client over real HTTP (ureq): a run posted and its SSE stream read to the end,
//! JSON requests, and the capture of every stream read for the Python protocol validation.

use crate::sse::{self, Item};
use serde_json::{json, Value};
use std::io::{BufReader, Read};
use std::path::Path;
use std::time::Duration;

pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into()
}

/// For streams held longer than `agent`'s 30 s overall limit: bounded per read instead.
pub fn long_agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_per_read(Some(Duration::from_secs(30)))
        .build()
        .into()
}

/// What a POST / answered: the HTTP status and either the JSON error or the SSE events.
#[derive(Debug)]
pub struct RunResult {
    pub status: u16,
    pub content_type: String,
    pub json: Value,
    pub events: Vec<Value>,
    pub heartbeats: usize,
}

impl RunResult {
    pub fn types(&self) -> Vec<String> {
        self.events
            .iter()
            .map(|e| e["type"].as_str().unwrap_or("").to_string())
            .collect()
    }

    pub fn last(&self) -> &Value {
        self.events.last().expect("no events")
    }

    pub fn custom(&self, name: &str) -> Vec<&Value> {
        self.events
            .iter()
            .filter(|e| e["type"] == "CUSTOM" && e["name"] == name)
            .collect()
    }

    pub fn session(&self) -> &Value {
        &self.custom("iac-code.session.v1")[0]["value"]
    }

    pub fn error_code(&self) -> &str {
        if self.status != 200 {
            return self.json["error"]["code"].as_str().unwrap_or("");
        }
        let last = self.last();
        assert_eq!(last["type"], "RUN_ERROR", "not an error: {last}");
        last["code"].as_str().unwrap_or("")
    }

    pub fn interrupts(&self) -> Vec<Value> {
        let last = self.last();
        assert_eq!(
            last["outcome"]["type"], "interrupt",
            "not an interrupt: {last}"
        );
        last["outcome"]["interrupts"].as_array().unwrap().clone()
    }

    pub fn text(&self) -> String {
        self.events
            .iter()
            .filter(|e| e["type"] == "TEXT_MESSAGE_CONTENT")
            .map(|e| e["delta"].as_str().unwrap_or(""))
            .collect()
    }
}

/// The resume that allows the permission interrupt `id` once.
pub fn allow(id: &Value) -> Value {
    json!([{"interruptId": id, "status": "resolved", "payload": {"decision": "allow_once"}}])
}

pub fn post_run(url: &str, body: &Value, headers: &[(&str, &str)]) -> RunResult {
    let mut req = agent()
        .post(format!("{url}/"))
        .header("Content-Type", "application/json")
        .header("Accept", "text/event-stream");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send(serde_json::to_vec(body).unwrap()).expect("POST /");
    read_result(resp)
}

/// `POST {url}/extensions/iac-code/v1/executions/{execution}/subscribe` (a join, or a re-attach
/// with `Last-Event-ID`): the response, not read yet (its `X-AGUI-Resume` tells which answer).
pub fn post_subscribe(
    url: &str,
    execution: &str,
    body: &Value,
    last_event_id: Option<&str>,
) -> ureq::http::Response<ureq::Body> {
    let mut req = agent()
        .post(format!(
            "{url}/extensions/iac-code/v1/executions/{execution}/subscribe"
        ))
        .header("Content-Type", "application/json")
        .header("Accept", "text/event-stream");
    if let Some(id) = last_event_id {
        req = req.header("Last-Event-ID", id);
    }
    req.send(serde_json::to_vec(body).unwrap())
        .expect("POST …/subscribe")
}

/// The answer read to its end: a JSON body, or an SSE stream (a read error fails the test).
pub fn read_result(resp: ureq::http::Response<ureq::Body>) -> RunResult {
    let status = resp.status().as_u16();
    let content_type = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let mut body = resp.into_body();
    if !content_type.starts_with("text/event-stream") {
        let text = body.read_to_string().unwrap_or_default();
        return RunResult {
            status,
            content_type,
            json: serde_json::from_str(&text).unwrap_or(Value::Null),
            events: vec![],
            heartbeats: 0,
        };
    }
    let mut events = vec![];
    let mut raw = vec![];
    let mut heartbeats = 0;
    for item in sse::read(BufReader::new(body.into_reader())) {
        match item.expect("SSE read") {
            Item::Event(e) => {
                events.push(e.json());
                raw.push(e.data);
            }
            Item::Comment(c) if c == "heartbeat" => heartbeats += 1,
            _ => {}
        }
    }
    capture(&raw);
    RunResult {
        status,
        content_type,
        json: Value::Null,
        events,
        heartbeats,
    }
}

/// With `AGUI_CAPTURE_DIR` set, every stream a test reads is appended there as JSON lines
/// (`{stream, index, raw}`), for the Python `ag-ui-protocol` validation in `tests/run-all.sh`.
fn capture(raw: &[String]) {
    let Some(dir) = std::env::var_os("AGUI_CAPTURE_DIR") else {
        return;
    };
    let _ = std::fs::create_dir_all(&dir);
    let label = std::thread::current().name().unwrap_or("main").to_string();
    let mut lines = String::new();
    for (index, r) in raw.iter().enumerate() {
        lines.push_str(&json!({"stream": label, "index": index, "raw": r}).to_string());
        lines.push('\n');
    }
    let path = Path::new(&dir).join(format!("{}.jsonl", std::process::id()));
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = std::io::Write::write_all(&mut f, lines.as_bytes());
    }
}

/// Posts a run and returns the raw body reader after the head, for disconnect tests.
pub fn open_stream(url: &str, body: &Value) -> impl Read {
    let resp = agent()
        .post(format!("{url}/"))
        .header("Content-Type", "application/json")
        .header("Accept", "text/event-stream")
        .send(serde_json::to_vec(body).unwrap())
        .unwrap();
    assert_eq!(resp.status(), 200);
    resp.into_body().into_reader()
}

pub fn post_json(url: &str, body: &Value) -> (u16, Value) {
    let resp = agent()
        .post(url)
        .header("Content-Type", "application/json")
        .send(serde_json::to_vec(body).unwrap())
        .unwrap();
    let status = resp.status().as_u16();
    let text = resp.into_body().read_to_string().unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}
