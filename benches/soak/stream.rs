//! One HTTP exchange with the adapter as a soak client makes it: a POST whose answer is a JSON
//! refusal or an SSE stream, read the way the episode asks (to its end, or cut after some events,
//! or until a patience runs out), with the "every stream ends with `RUN_FINISHED` or `RUN_ERROR`
//! or a cut the client made" and "every code is the spec's" invariants checked on the way.

use crate::world::{World, SPEC_CODES};
use parking_lot::Mutex;
use serde_json::Value;
use std::io::BufReader;
use std::time::{Duration, Instant};
use test_support::sse::{self, Item};

pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_connect(Some(Duration::from_secs(5)))
        .timeout_per_read(Some(Duration::from_secs(15)))
        .timeout_send_body(Some(Duration::from_secs(15)))
        .build()
        .into()
}

/// How the client reads a stream.
#[derive(Clone, Copy)]
pub enum Read {
    /// To its end (or until the patience runs out: then a client cut).
    All,
    /// Cuts after this many events.
    CutAfter(usize),
}

#[derive(Debug, PartialEq)]
pub enum End {
    Finished,
    Error(String),
    /// The client closed it (on purpose, or out of patience).
    Cut,
    /// The adapter closed it without an end event while it was being SIGKILLed (excused).
    AdapterKilled,
    /// The adapter closed it without an end event, no fault explaining it (a violation).
    Dropped,
    /// No answer at all (connection refused or reset): the adapter is down.
    Unreachable,
}

pub struct Answer {
    pub status: u16,
    /// The code of a JSON refusal (or "" when it had none).
    pub code: String,
    pub resume: String,
    /// `(id, event)` in order.
    pub events: Vec<Ev>,
    pub end: End,
    /// When the answer's head arrived (the run admitted, or refused).
    pub head_at: Instant,
    pub ended_at: Instant,
}

impl Answer {
    pub fn is_stream(&self) -> bool {
        self.status == 200
    }

    pub fn last(&self) -> Option<&Value> {
        self.events.last().map(|e| &e.1)
    }

    pub fn interrupts(&self) -> Vec<Value> {
        match self.last() {
            Some(l) if l["type"] == "RUN_FINISHED" && l["outcome"]["type"] == "interrupt" => l
                ["outcome"]["interrupts"]
                .as_array()
                .cloned()
                .unwrap_or_default(),
            _ => vec![],
        }
    }

    /// The refusal's code, or the `RUN_ERROR`'s.
    pub fn error_code(&self) -> &str {
        match &self.end {
            End::Error(c) => c,
            _ if !self.is_stream() => &self.code,
            _ => "",
        }
    }
}

/// What a call is, for the violation messages: `thread`, `run` and the route.
pub struct Call<'a> {
    pub world: &'a World,
    pub what: &'a str,
    pub thread: &'a str,
    pub run: &'a str,
    /// A stream without any event for this long is cut by the client (a hung kernel).
    pub patience: Duration,
    /// Every event read is also pushed here as it arrives (for an observer to follow).
    pub tap: Option<&'a Mutex<Vec<Ev>>>,
}

pub type Ev = (Option<String>, Value);

impl Call<'_> {
    fn name(&self) -> String {
        format!("{} thread={} run={}", self.what, self.thread, self.run)
    }

    /// POSTs `body` to `path` (with `Last-Event-ID` when given) and reads the answer.
    pub fn post(
        &self,
        agent: &ureq::Agent,
        path: &str,
        body: &Value,
        last_id: Option<&str>,
        read: Read,
    ) -> Answer {
        self.world.count("requests");
        let epoch = self.world.epoch();
        let mut req = agent
            .post(format!("{}{path}", self.world.url))
            .header("Content-Type", "application/json")
            .header("Accept", "text/event-stream");
        if let Some(id) = last_id {
            req = req.header("Last-Event-ID", id);
        }
        let resp = match req.send(serde_json::to_vec(body).unwrap()) {
            Ok(r) => r,
            Err(_) => return self.unreachable(epoch),
        };
        let head_at = Instant::now();
        let status = resp.status().as_u16();
        let header = |n: &str| {
            resp.headers()
                .get(n)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string()
        };
        let (ctype, resume) = (header("content-type"), header("x-agui-resume"));
        let mut body = resp.into_body();
        if status != 200 || !ctype.starts_with("text/event-stream") {
            let text = body.read_to_string().unwrap_or_default();
            let json: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            let code = json["error"]["code"].as_str().unwrap_or("").to_string();
            self.check_code(&code, status);
            let end = if status == 200 {
                End::Dropped
            } else {
                End::Error(code.clone())
            };
            return Answer {
                status,
                code,
                resume,
                events: vec![],
                end,
                head_at,
                ended_at: Instant::now(),
            };
        }
        let (events, end) = self.read_events(body.into_reader(), read, epoch);
        Answer {
            status,
            code: String::new(),
            resume,
            events,
            end,
            head_at,
            ended_at: Instant::now(),
        }
    }

    fn unreachable(&self, epoch: u64) -> Answer {
        if self.world.epoch() == epoch && epoch % 2 == 0 {
            // Not refused by a restart in progress: count it, the adapter may be starting.
            self.world.count("unreachable outside an adapter restart");
        }
        self.world.count("unreachable (adapter restarting)");
        Answer {
            status: 0,
            code: String::new(),
            resume: String::new(),
            events: vec![],
            end: End::Unreachable,
            head_at: Instant::now(),
            ended_at: Instant::now(),
        }
    }

    fn read_events(&self, reader: impl std::io::Read, read: Read, epoch: u64) -> (Vec<Ev>, End) {
        let mut events = Vec::new();
        let mut last_event = Instant::now();
        for item in sse::read(BufReader::new(reader)) {
            match item {
                Ok(Item::Event(e)) => {
                    let v: Value = match serde_json::from_str(&e.data) {
                        Ok(v) => v,
                        Err(_) => {
                            self.world.violation(
                                "event data is JSON",
                                format!("{}: {}", self.name(), e.data),
                            );
                            continue;
                        }
                    };
                    let kind = v["type"].as_str().unwrap_or("").to_string();
                    if let Some(tap) = self.tap {
                        tap.lock().push((e.id.clone(), v.clone()));
                    }
                    events.push((e.id, v));
                    last_event = Instant::now();
                    if kind == "RUN_FINISHED" || kind == "RUN_ERROR" {
                        return self.ended(events, &kind);
                    }
                    if matches!(read, Read::CutAfter(n) if events.len() >= n) {
                        return (events, End::Cut);
                    }
                }
                Ok(_) if last_event.elapsed() > self.patience => return (events, End::Cut),
                Ok(_) => {}
                Err(_) => break,
            }
        }
        (events, self.dropped(epoch))
    }

    fn ended(&self, events: Vec<Ev>, kind: &str) -> (Vec<Ev>, End) {
        self.world
            .checked("stream ends with RUN_FINISHED, RUN_ERROR or a client cut");
        if kind == "RUN_FINISHED" {
            return (events, End::Finished);
        }
        let code = events.last().unwrap().1["code"]
            .as_str()
            .unwrap_or("")
            .to_string();
        self.check_code(&code, 200);
        (events, End::Error(code))
    }

    /// The stream ended without an end event: excused only by an adapter SIGKILL meanwhile.
    fn dropped(&self, epoch: u64) -> End {
        if self.world.epoch() != epoch || epoch % 2 == 1 {
            self.world.count("streams cut by an adapter SIGKILL");
            return End::AdapterKilled;
        }
        // The SIGKILL may be on its way: the epoch is bumped just before the signal.
        std::thread::sleep(Duration::from_millis(300));
        if self.world.epoch() != epoch {
            self.world.count("streams cut by an adapter SIGKILL");
            return End::AdapterKilled;
        }
        self.world.violation(
            "stream ends with RUN_FINISHED, RUN_ERROR or a client cut",
            self.name(),
        );
        End::Dropped
    }

    fn check_code(&self, code: &str, status: u16) {
        if SPEC_CODES.contains(&code) {
            self.world
                .checked("every refusal and RUN_ERROR carries a spec code");
            self.world.count(&format!("code {code}"));
        } else {
            self.world.violation(
                "every refusal and RUN_ERROR carries a spec code",
                format!("{} got {status} with code {code:?}", self.name()),
            );
        }
    }
}
