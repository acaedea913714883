//! The thread list, `GET /extensions/iac-code/v1/threads?userId=…&limit=N&cursor=…`, over real HTTP
//! against the fake kernel: a user's threads only, most recently active first, with the live state
//! the thread lookup reports; pages that stay exact while turns run; bearer and query rules; the
//! same list after a restart; threads already on disk at start-up; titles from the history header.

use fake_kernel::{FakeKernel, Step};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::Path;
use test_support::*;

const LIST: &str = "/extensions/iac-code/v1/threads";

/// `GET …/threads?{query}` (with `token` as the bearer): status and JSON body.
fn list_with(a: &Adapter, query: &str, token: Option<&str>) -> (u16, Value) {
    let mut req = agent().get(format!("{}{LIST}?{query}", a.url));
    if let Some(t) = token {
        req = req.header("Authorization", format!("Bearer {t}"));
    }
    let resp = req.call().unwrap();
    let status = resp.status().as_u16();
    let text = resp.into_body().read_to_string().unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn list(a: &Adapter, query: &str) -> Value {
    let (status, body) = list_with(a, query, None);
    assert_eq!(status, 200, "{body}");
    body
}

/// Every page of `user`'s list, `limit` at a time, `between` run after each page.
fn all_pages(a: &Adapter, user: &str, limit: usize, mut between: impl FnMut(usize)) -> Vec<Value> {
    let mut threads = Vec::new();
    let mut cursor: Option<String> = None;
    for n in 0.. {
        let mut query = format!("userId={user}&limit={limit}");
        if let Some(c) = &cursor {
            query.push_str(&format!("&cursor={c}"));
        }
        let page = list(a, &query);
        let got = page["threads"].as_array().unwrap();
        assert!(got.len() <= limit);
        threads.extend(got.iter().cloned());
        between(n);
        match page["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    threads
}

fn ids(threads: &[Value]) -> Vec<String> {
    threads
        .iter()
        .map(|t| t["threadId"].as_str().unwrap().to_string())
        .collect()
}

/// A turn's request on `thread` for `user` (`None`: a thread bound to no user).
fn request(a: &Adapter, thread: &str, run: &str, text: &str, user: Option<&str>) -> Value {
    let mut body = a.request(thread, run, text);
    if let Some(u) = user {
        body["forwardedProps"]["iacCode"]["userId"] = json!(u);
    }
    body
}

fn turn(a: &Adapter, thread: &str, run: &str, user: Option<&str>) {
    let r = a.run(&request(a, thread, run, "hi", user));
    assert_eq!(r.last()["type"], "RUN_FINISHED", "{:?}", r.last());
}

/// A run on `thread` that streams, then waits at gate `go` until the kernel is told to open it.
fn start_gated(
    k: &FakeKernel,
    a: &Adapter,
    thread: &str,
    user: &str,
) -> std::thread::JoinHandle<RunResult> {
    k.script(
        "gated",
        vec![
            Step::Status {
                state: "TASK_STATE_WORKING",
                iac: json!({}),
                text: Some("Working. ".into()),
            },
            Step::Gate("go".into()),
            Step::Status {
                state: "TASK_STATE_INPUT_REQUIRED",
                iac: json!({}),
                text: None,
            },
        ],
    );
    let (url, body) = (
        a.url.clone(),
        request(a, thread, "run-gated", "scenario:gated", Some(user)),
    );
    let run = std::thread::spawn(move || post_run(&url, &body, &[]));
    a.wait_task(thread);
    run
}

fn is_rfc3339_millis(t: &Value) -> bool {
    let s = t.as_str().unwrap_or("");
    s.len() == 24 && s.ends_with('Z') && s.as_bytes()[10] == b'T' && s.as_bytes()[19] == b'.'
}

#[test]
fn a_users_threads_are_listed_newest_first_with_the_state_the_lookup_reports() {
    let k = FakeKernel::start();
    let a = Adapter::start(&k.url);
    turn(&a, "idle-1", "r1", Some("alice"));
    turn(&a, "idle-1", "r2", Some("alice"));
    turn(&a, "bobs", "r1", Some("bob"));
    turn(&a, "nobodys", "r1", None);
    let waiting = a.run(&request(
        &a,
        "waiting-1",
        "r1",
        "scenario:permission",
        Some("alice"),
    ));
    assert_eq!(waiting.interrupts().len(), 1);
    let running = start_gated(&k, &a, "running-1", "alice");

    let page = list(&a, "userId=alice");
    assert!(page["nextCursor"].is_null());
    let threads = page["threads"].as_array().unwrap();
    assert_eq!(ids(threads), ["running-1", "waiting-1", "idle-1"]);
    let expect = [
        ("running", 0, "run-gated", "scenario:gated"),
        ("waiting", 1, "r1", "scenario:permission"),
        ("idle", 0, "r2", "hi"),
    ];
    for (t, (state, pending, run, title)) in threads.iter().zip(expect) {
        assert_eq!(t["state"], state, "{t}");
        assert_eq!(t["pendingInterrupts"], pending, "{t}");
        assert_eq!(t["runId"], run, "{t}");
        // The title is the thread's first user message, from its conversation log's header.
        assert_eq!(t["title"], title, "{t}");
        assert!(
            is_rfc3339_millis(&t["createdAt"]) && is_rfc3339_millis(&t["updatedAt"]),
            "{t}"
        );
        assert!(t["createdAt"].as_str() <= t["updatedAt"].as_str(), "{t}");
        let id = t["threadId"].as_str().unwrap();
        let (status, lookup) = a.thread_lookup(id, "userId=alice");
        assert_eq!((status, &lookup["state"]), (200, &t["state"]), "{lookup}");
        assert_eq!(lookup["interrupts"].as_array().unwrap().len(), pending);
    }
    let updated: Vec<&str> = threads
        .iter()
        .map(|t| t["updatedAt"].as_str().unwrap())
        .collect();
    assert!(updated.windows(2).all(|w| w[0] >= w[1]), "{updated:?}");

    // Another user sees only their own; an unknown user nothing; no user's thread is anyone's.
    assert_eq!(
        ids(list(&a, "userId=bob")["threads"].as_array().unwrap()),
        ["bobs"]
    );
    assert_eq!(
        list(&a, "userId=mallory"),
        json!({"threads": [], "nextCursor": null})
    );

    // The running turn ends: the thread is idle and still first.
    k.open("go");
    assert_eq!(running.join().unwrap().last()["type"], "RUN_FINISHED");
    let first = &list(&a, "userId=alice&limit=1")["threads"][0];
    assert_eq!(
        (&first["threadId"], &first["state"]),
        (&json!("running-1"), &json!("idle"))
    );
}

#[test]
fn the_list_checks_the_bearer_first_then_its_query() {
    let k = FakeKernel::start();
    let a = Adapter::start_with(
        &k.url,
        Options {
            auth_token: Some("tok-list".into()),
            ..Default::default()
        },
    );
    let no_bearer = list_with(&a, "userId=alice", None);
    assert_eq!(
        (no_bearer.0, &no_bearer.1["error"]["code"]),
        (401, &json!("UNAUTHORIZED"))
    );
    let wrong = list_with(&a, "userId=alice", Some("other"));
    assert_eq!(wrong.0, 401);
    let ok = list_with(&a, "userId=alice", Some("tok-list"));
    assert_eq!(ok, (200, json!({"threads": [], "nextCursor": null})));
    for query in [
        "",
        "limit=5",
        "userId=",
        "userId=alice&limit=0",
        "userId=alice&limit=x",
        "userId=alice&cursor=abc",
    ] {
        let (status, body) = list_with(&a, query, Some("tok-list"));
        assert_eq!(
            (status, &body["error"]["code"]),
            (400, &json!("INVALID_INPUT")),
            "{query}: {body}"
        );
        assert!(
            body["error"]["message"].as_str().unwrap().contains('`'),
            "{body}"
        );
    }
    let (status, body) = list_with(&a, "userId=alice&limit=1000", Some("tok-list"));
    assert_eq!(
        status, 200,
        "a limit over the maximum is the maximum: {body}"
    );
    let post = agent()
        .post(format!("{}{LIST}?userId=alice", a.url))
        .header("Authorization", "Bearer tok-list")
        .send("")
        .unwrap();
    assert_eq!(post.status(), 405);
}

#[test]
fn pages_list_every_thread_once_while_turns_run_on_listed_threads() {
    let k = FakeKernel::start();
    let a = Adapter::start(&k.url);
    let before: Vec<String> = (0..11).map(|i| format!("t{i:02}")).collect();
    for t in &before {
        turn(&a, t, "r1", Some("alice"));
    }
    turn(&a, "bob-1", "r1", Some("bob"));
    let mut runs = 0;
    let listed = all_pages(&a, "alice", 4, |page| {
        // Turns on a thread already listed, on one still to come, and on a new thread.
        let (done, coming) = (&before[10 - page * 3], &before[3 - page]);
        for t in [done, coming, &format!("new-{page}")] {
            runs += 1;
            turn(&a, t, &format!("more-{runs}"), Some("alice"));
        }
        turn(&a, "bob-1", &format!("more-{runs}"), Some("bob"));
    });
    let mut expected = before.clone();
    expected.reverse();
    assert_eq!(
        ids(&listed),
        expected,
        "each thread once, in its place when page 1 was listed"
    );
    // A fresh listing has the new threads and the new order.
    let fresh = ids(&all_pages(&a, "alice", 100, |_| {}));
    assert_eq!(fresh.len(), 11 + 3);
    assert_eq!(fresh.iter().collect::<BTreeSet<_>>().len(), fresh.len());
    assert_eq!(fresh[0], "new-2");

    // Turns running all along on the listed threads, from another client: still each once.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let busy = std::thread::spawn({
        let (url, stop, body) = (
            a.url.clone(),
            stop.clone(),
            request(&a, "x", "x", "hi", Some("alice")),
        );
        let fresh = fresh.clone();
        move || {
            for n in 0.. {
                if stop.load(std::sync::atomic::Ordering::SeqCst) {
                    return n;
                }
                let mut body = body.clone();
                body["threadId"] = json!(fresh[n % fresh.len()]);
                body["runId"] = json!(format!("busy-{n}"));
                assert_eq!(post_run(&url, &body, &[]).last()["type"], "RUN_FINISHED");
            }
            unreachable!()
        }
    });
    for _ in 0..5 {
        let listed = ids(&all_pages(&a, "alice", 2, |_| {
            std::thread::sleep(std::time::Duration::from_millis(5))
        }));
        let unique: BTreeSet<_> = listed.iter().collect();
        assert_eq!(
            (listed.len(), unique.len()),
            (fresh.len(), fresh.len()),
            "{listed:?}"
        );
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(busy.join().unwrap() > 0, "turns ran during the listings");
}

#[test]
fn the_list_is_the_same_after_a_restart() {
    let k = FakeKernel::start();
    let mut a = Adapter::start(&k.url);
    for i in 0..5 {
        turn(&a, &format!("t{i}"), "r1", Some("alice"));
    }
    a.run(&request(
        &a,
        "w",
        "r1",
        "scenario:permission",
        Some("alice"),
    ));
    turn(&a, "t1", "r2", Some("alice"));
    // Two threads' conversation logs are replaced by a header alone (another title and creation
    // time): the list shows what the header says.
    let history = a.state_dir.join("history");
    std::fs::create_dir_all(&history).unwrap();
    for (t, title) in [("t1", "First"), ("w", "Second")] {
        let header = json!({"type": "thread", "v": 1, "threadId": t, "title": title,
            "createdAt": "2026-06-01T10:00:00.000Z"});
        std::fs::write(history.join(format!("{t}.jsonl")), format!("{header}\n")).unwrap();
    }
    let before = all_pages(&a, "alice", 2, |_| {});
    assert_eq!(ids(&before), ["t1", "w", "t4", "t3", "t2", "t0"]);
    a.kill();
    a.restart();
    let after = all_pages(&a, "alice", 2, |_| {});
    assert_eq!(
        after[..2],
        before[..2],
        "every field, the title and creation time included"
    );
    assert_eq!(after[1]["state"], "waiting");
    // Every thread has its conversation log, whose header keeps the creation time and the title
    // across the restart.
    assert_eq!(after, before);
    for t in &after[2..] {
        assert_eq!(t["title"], "hi", "{t}");
        assert!(t["createdAt"].as_str() <= t["updatedAt"].as_str(), "{t}");
    }
}

/// Writes a state file of `thread` bound to `user` with modification time `ms`.
fn write_state(dir: &Path, thread: &str, user: &str, ms: u64) {
    let path = dir.join(format!("{thread}.json"));
    let doc = json!({"schemaVersion": 1, "threadId": thread, "contextId": "c", "cwd": "/w",
        "userId": user, "iacCodeSessionId": null, "execution": null, "runDigests": {"r1": "d"}});
    std::fs::write(&path, serde_json::to_vec(&doc).unwrap()).unwrap();
    let file = std::fs::File::options().write(true).open(&path).unwrap();
    file.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))
        .unwrap();
}

#[test]
fn threads_on_disk_at_start_are_listed_by_their_last_write_with_their_history_titles() {
    let k = FakeKernel::start();
    let root = temp_dir("thread-list-disk");
    let threads = root.join("state/threads");
    std::fs::create_dir_all(&threads).unwrap();
    let t0 = 1_780_000_000_000;
    for i in 0..2_000u64 {
        // Distinct times, not in name order.
        write_state(
            &threads,
            &format!("th-{i:04}"),
            "alice",
            t0 + (i * 7919) % 2_000 * 1000,
        );
    }
    write_state(&threads, "bobs", "bob", t0 + 10_000_000);
    let history = root.join("state/history");
    std::fs::create_dir_all(&history).unwrap();
    let header = json!({"type": "thread", "v": 1, "threadId": "th-0000", "title": "Deploy a VPC",
        "createdAt": "2026-06-01T10:00:00.000Z"});
    std::fs::write(
        history.join("th-0000.jsonl"),
        format!("{header}\n{{\"seq\":1}}\n"),
    )
    .unwrap();
    std::fs::write(
        history.join("th-1999.jsonl"),
        r#"{"type":"thread","v":1,"threadId":"th-1999","ti"#,
    )
    .unwrap();
    let a = Adapter::start_with(
        &k.url,
        Options {
            state_dir: Some(root.join("state")),
            ..Default::default()
        },
    );
    let page = list(&a, "userId=alice&limit=100");
    let mut expected: Vec<(u64, String)> = (0..2_000u64)
        .map(|i| (t0 + (i * 7919) % 2_000 * 1000, format!("th-{i:04}")))
        .collect();
    expected.sort_by_key(|e| std::cmp::Reverse(e.0));
    let got = ids(page["threads"].as_array().unwrap());
    assert_eq!(
        got,
        expected
            .iter()
            .take(100)
            .map(|e| e.1.clone())
            .collect::<Vec<_>>()
    );
    let all = all_pages(&a, "alice", 100, |_| {});
    assert_eq!(all.len(), 2_000);
    let titled = all.iter().find(|t| t["threadId"] == "th-0000").unwrap();
    assert_eq!(titled["title"], "Deploy a VPC");
    assert_eq!(titled["createdAt"], "2026-06-01T10:00:00.000Z");
    let torn = all.iter().find(|t| t["threadId"] == "th-1999").unwrap();
    assert!(
        torn["title"].is_null(),
        "a header line not yet complete is no header"
    );
    assert_eq!(
        torn["createdAt"], torn["updatedAt"],
        "without a header: its state file's time"
    );
}
