//! A scripted client: an endless loop of episodes on its own threads (a few turns a thread),
//! picked at random from a seed: turns with text, tools or reasoning; permission interrupts
//! answered, denied or left to expire; Stops; its own stream cut; an observer that follows a
//! run with the owner's cursor, is cut and resumes exactly; a client that stops reading.

use crate::stream::{agent, Answer, Call, End, Ev, Read};
use crate::world::{World, BUSY_BOUND, BUSY_SLACK};
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::io::Write;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use test_support::Rng;

const PATIENCE: Duration = Duration::from_secs(10);
/// Codes after which a resume is tried again: the answer was not taken, the wait is still there.
const RETRYABLE: &[&str] = &[
    "A2A_UNAVAILABLE",
    "STATE_PERSISTENCE_FAILED",
    "STATE_UNAVAILABLE",
    "SESSION_BACKUP_NOT_READY",
    "THREAD_BUSY",
];

pub struct Client {
    pub(crate) id: usize,
    pub(crate) w: Arc<World>,
    pub(crate) rng: Rng,
    pub(crate) agent: ureq::Agent,
    pub(crate) thread: String,
    pub(crate) threads: u64,
    pub(crate) runs: u64,
    pub(crate) episodes_on_thread: u64,
    /// When the thread's previous run ended (its end event read, or the client's cut), and its id.
    pub(crate) last_end: Option<(Instant, String)>,
}

impl Client {
    pub fn new(id: usize, w: Arc<World>, seed: u64) -> Client {
        let mut c = Client {
            id,
            w,
            rng: Rng(seed | 1),
            agent: agent(),
            thread: String::new(),
            threads: 0,
            runs: 0,
            episodes_on_thread: 0,
            last_end: None,
        };
        c.new_thread();
        c
    }

    fn new_thread(&mut self) {
        self.threads += 1;
        self.thread = format!("soak-c{}-t{}", self.id, self.threads);
        self.episodes_on_thread = 0;
        self.last_end = None;
        self.w.count("threads");
    }

    pub(crate) fn next_run(&mut self) -> String {
        self.runs += 1;
        format!("c{}-r{}", self.id, self.runs)
    }

    pub fn run(mut self) {
        while !self.w.stopping() {
            if self.w.pause.load(Ordering::SeqCst) {
                self.w.idle_clients.fetch_add(1, Ordering::SeqCst);
                while self.w.pause.load(Ordering::SeqCst) && !self.w.stopping() {
                    std::thread::sleep(Duration::from_millis(50));
                }
                self.w.idle_clients.fetch_sub(1, Ordering::SeqCst);
                continue;
            }
            if self.episodes_on_thread >= 6 {
                self.new_thread();
            }
            self.episodes_on_thread += 1;
            self.episode();
        }
        self.w.idle_clients.fetch_add(1, Ordering::SeqCst);
    }

    fn episode(&mut self) {
        if self.w.slow_readers.load(Ordering::SeqCst) && self.rng.below(2) == 0 {
            return self.stop_reading();
        }
        match self.rng.below(100) {
            0..=11 => self.turn("scenario:normal"),
            12..=21 => self.turn("scenario:reasoning"),
            22..=31 => self.turn("scenario:tools-artifact"),
            32..=36 => self.turn("scenario:numbered"),
            37..=46 => self.interrupt(Decision::Allow),
            47..=54 => self.interrupt(Decision::Deny),
            55..=60 => self.interrupt(Decision::Expire),
            61..=70 => self.stop(),
            71..=84 => self.observe(),
            85..=94 => self.cut_own(),
            _ => self.stop_reading(),
        }
    }

    fn iac(&self) -> Value {
        json!({"schemaVersion": 1, "rosInvocationId": "invocation-1", "cwd": self.w.cwd})
    }

    pub(crate) fn turn_body(&self, run: &str, text: &str) -> Value {
        json!({"threadId": self.thread, "runId": run, "state": {}, "tools": [], "context": [],
               "messages": [{"id": format!("msg-{run}"), "role": "user", "content": text}],
               "forwardedProps": {"iacCode": self.iac()}})
    }

    pub(crate) fn call<'a>(&'a self, what: &'a str, run: &'a str) -> Call<'a> {
        Call {
            world: &self.w,
            what,
            thread: &self.thread,
            run,
            patience: PATIENCE,
            tap: None,
        }
    }

    /// POSTs a new turn until it is admitted or refused for good (not busy, not unreachable),
    /// checking the busy bound on the way; `None` when the thread must be left.
    fn admit(
        &mut self,
        text: &str,
        read: Read,
        tap: Option<&Mutex<Vec<Ev>>>,
    ) -> Option<(String, Answer)> {
        let deadline = Instant::now() + Duration::from_secs(90);
        while Instant::now() < deadline && !self.w.stopping() {
            let run = self.next_run();
            let sent = Instant::now();
            let body = self.turn_body(&run, text);
            let mut call = self.call("turn", &run);
            call.tap = tap;
            let a = call.post(&self.agent, "/", &body, None, read);
            self.check_busy(&run, sent, &a);
            match (&a.end, a.code.as_str()) {
                (End::Unreachable, _) | (_, "THREAD_BUSY") => {
                    std::thread::sleep(Duration::from_millis(250));
                    continue;
                }
                // The thread waits on an interrupt we could not clear (a fault): leave it.
                (_, "RESUME_REQUIRED") => {
                    self.w.count("threads left waiting (RESUME_REQUIRED)");
                    self.new_thread();
                    return None;
                }
                _ => {}
            }
            if a.is_stream() {
                self.w.count("runs");
                self.count_end(&a);
                self.last_end = Some((a.ended_at, run.clone()));
            } else {
                // Refused (a full disk, say): a client backs off a little before its next turn.
                std::thread::sleep(Duration::from_millis(250));
            }
            return Some((run, a));
        }
        None
    }

    pub(crate) fn count_end(&self, a: &Answer) {
        let what = match &a.end {
            End::Finished => "runs ended: RUN_FINISHED".to_string(),
            End::Error(c) => format!("runs ended: RUN_ERROR {c}"),
            End::Cut => "runs ended: client cut".into(),
            End::AdapterKilled => "runs ended: adapter SIGKILLed".into(),
            End::Dropped => "runs ended: dropped (violation)".into(),
            End::Unreachable => return,
        };
        self.w.count(&what);
    }

    /// The invariant "no thread busy longer than the documented bound after its run ended".
    pub(crate) fn check_busy(&self, run: &str, sent: Instant, a: &Answer) {
        let Some((end, prev)) = &self.last_end else {
            return;
        };
        if a.end == End::Unreachable {
            return;
        }
        const NAME: &str = "no thread busy longer than 3 s after its run ended";
        let bound = BUSY_BOUND + BUSY_SLACK;
        let waited = a.head_at.duration_since(sent.max(*end));
        let since_end = a.head_at.duration_since(*end);
        if a.code == "THREAD_BUSY" && sent.duration_since(*end) > bound {
            let detail = format!(
                "thread={} run={run}: 409 THREAD_BUSY {:.1} s after run {prev} ended",
                self.thread,
                since_end.as_secs_f64()
            );
            return self.w.violation(NAME, detail);
        }
        if waited > bound {
            let detail = format!(
                "thread={} run={run}: answered {:.1} s after the request, {:.1} s after run {prev} ended",
                self.thread,
                waited.as_secs_f64(),
                since_end.as_secs_f64()
            );
            return self.w.violation(NAME, detail);
        }
        self.w.checked(NAME);
        if a.is_stream() {
            self.w.max(
                "max ms a turn waited for its 200 after its thread's previous run ended",
                waited.as_millis() as u64,
            );
        }
    }

    fn turn(&mut self, text: &str) {
        self.admit(text, Read::All, None);
    }

    fn lookup(&self) -> Option<Value> {
        let url = format!(
            "{}/extensions/iac-code/v1/threads/{}?rosInvocationId=invocation-1",
            self.w.url, self.thread
        );
        self.w.count("requests");
        let resp = self.agent.get(url).call().ok()?;
        if resp.status() != 200 {
            return None;
        }
        serde_json::from_str(&resp.into_body().read_to_string().ok()?).ok()
    }
}

#[derive(Clone, Copy, PartialEq)]
pub enum Decision {
    Allow,
    Deny,
    Expire,
}

impl Client {
    fn interrupt(&mut self, decision: Decision) {
        let Some((run, a)) = self.admit("scenario:permission", Read::All, None) else {
            return;
        };
        let interrupts = a.interrupts();
        if interrupts.is_empty() {
            return;
        }
        self.w.add("interrupts announced", interrupts.len() as u64);
        if decision == Decision::Expire {
            let until = Instant::now() + Duration::from_secs(self.w.ttl_secs + 1);
            while Instant::now() < until && !self.w.stopping() {
                std::thread::sleep(Duration::from_millis(200));
            }
        } else {
            self.check_listed(&run, &interrupts);
        }
        self.answer(&run, &interrupts, decision);
    }

    /// A pending interrupt is listed, as announced, by the thread lookup.
    fn check_listed(&self, run: &str, interrupts: &[Value]) {
        const NAME: &str = "a pending interrupt is listed by the thread lookup";
        let Some(found) = self.lookup() else { return };
        for i in interrupts {
            let listed = found["interrupts"]
                .as_array()
                .is_some_and(|l| l.iter().any(|x| x["id"] == i["id"]));
            if listed {
                self.w.checked(NAME);
            } else {
                let detail = format!(
                    "thread={} run={run} interrupt={} lookup={found}",
                    self.thread, i["id"]
                );
                self.w.violation(NAME, detail);
            }
        }
    }

    fn answer(&mut self, run: &str, interrupts: &[Value], decision: Decision) {
        const NAME: &str = "every announced interrupt is answerable or refused with a spec code";
        let payload = match decision {
            Decision::Deny => json!({"decision": "deny"}),
            _ => json!({"decision": "allow_once"}),
        };
        let resume: Vec<Value> = interrupts
            .iter()
            .map(|i| json!({"interruptId": i["id"], "status": "resolved", "payload": payload}))
            .collect();
        for _ in 0..8 {
            let rrun = self.next_run();
            let mut body = self.turn_body(&rrun, "");
            body["messages"] = json!([]);
            body["resume"] = Value::Array(resume.clone());
            let sent = Instant::now();
            let a = self
                .call("resume", &rrun)
                .post(&self.agent, "/", &body, None, Read::All);
            self.check_busy(&rrun, sent, &a);
            let code = a.error_code().to_string();
            let retry = matches!(a.end, End::Unreachable | End::AdapterKilled)
                || RETRYABLE.contains(&code.as_str());
            if a.is_stream() {
                self.w.count("runs");
                self.count_end(&a);
                self.last_end = Some((a.ended_at, rrun.clone()));
            }
            if retry && !self.w.stopping() {
                self.w.count("resumes tried again (retryable)");
                std::thread::sleep(Duration::from_secs(1));
                continue;
            }
            self.w.checked(NAME);
            return self.count_answer(run, decision, &a);
        }
        // Never answered nor refused with a final code: the wait is still there (retryable
        // refusals all along, a fault that lasted); not lost, but counted.
        self.w.count("interrupts still retryable after 8 tries");
        self.new_thread();
    }

    fn count_answer(&mut self, run: &str, decision: Decision, a: &Answer) {
        let taken = a.is_stream() && a.end == End::Finished;
        let what = match (decision, taken) {
            (Decision::Allow, true) => "interrupts answered (allow_once)".to_string(),
            (Decision::Deny, true) => "interrupts denied".to_string(),
            (Decision::Expire, true) => {
                let detail = format!(
                    "thread={} run={run}: the answer after expiresAt was taken",
                    self.thread
                );
                self.w.violation("an expired interrupt is refused", detail);
                return;
            }
            (Decision::Expire, false) if a.error_code() == "EXECUTION_EXPIRED" => {
                self.w.checked("an expired interrupt is refused");
                "interrupts expired (EXECUTION_EXPIRED)".into()
            }
            (_, false) => format!("interrupts refused: {}", a.error_code()),
        };
        self.w.count(&what);
        if !taken && decision != Decision::Expire {
            // Refused for good (the kernel lost the task, say): the thread may still wait.
            self.new_thread();
        }
    }
}

impl Client {
    /// Stop through the cancel extension, a second after the run started.
    fn stop(&mut self) {
        let (w, thread, agent) = (self.w.clone(), self.thread.clone(), self.agent.clone());
        let canceller = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(1000));
            let url = format!(
                "{}/extensions/iac-code/v1/threads/{thread}?rosInvocationId=invocation-1",
                w.url
            );
            let found: Value = agent
                .get(url)
                .call()
                .ok()
                .and_then(|r| r.into_body().read_to_string().ok())
                .and_then(|t| serde_json::from_str(&t).ok())
                .unwrap_or(Value::Null);
            let Some(exec) = found["executionId"].as_str() else {
                return;
            };
            let url = format!("{}/extensions/iac-code/v1/executions/{exec}/cancel", w.url);
            let body = json!({"threadId": thread, "rosInvocationId": "invocation-1"});
            w.add("requests", 2);
            if let Ok(r) = agent
                .post(url)
                .header("Content-Type", "application/json")
                .send(serde_json::to_vec(&body).unwrap())
            {
                w.count(&format!("cancels answered {}", r.status().as_u16()));
            }
        });
        self.admit("scenario:paced-150", Read::All, None);
        let _ = canceller.join();
        self.w.count("stops");
    }

    /// The client cuts its own stream (the run is cancelled: no detach grace), then its next
    /// turn on the thread at once.
    fn cut_own(&mut self) {
        let n = 3 + self.rng.below(10);
        if let Some((_, a)) = self.admit("scenario:paced-100", Read::CutAfter(n), None) {
            if a.end == End::Cut {
                self.w.count("client cuts of their own run");
            }
            self.turn("scenario:normal");
        }
    }

    /// A client that stops reading a flood for a few seconds, then closes.
    fn stop_reading(&mut self) {
        let run = self.next_run();
        let body = serde_json::to_vec(&self.turn_body(&run, "scenario:flood-300000")).unwrap();
        let Ok(mut s) = test_support::raw::try_connect(&self.w.url) else {
            return;
        };
        self.w.count("requests");
        if s.write_all(&test_support::raw::run_request(&body, &[]))
            .is_err()
        {
            return;
        }
        let head = test_support::raw::read_head(&mut s)
            .ok()
            .flatten()
            .unwrap_or_default();
        if test_support::raw::status_of(head.as_bytes()) != Some(200) {
            return;
        }
        self.w.count("runs");
        self.w.count("clients that stopped reading");
        std::thread::sleep(Duration::from_millis(2000 + 500 * self.rng.below(8) as u64));
        drop(s);
        self.last_end = Some((Instant::now(), run));
        self.turn("scenario:normal");
    }
}
