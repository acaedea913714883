//! Bounded property tests (a deterministic fuzzer): the request parser, the SSE parser and the
//! projection never panic on any input, and the projection closes every span it opens whatever
//! the upstream sends. `FUZZ_ITERS` raises the iteration count (default 20,000 per target).
//! The coverage-guided targets (tests/fuzz_targets) check their properties in
//! `iac_code_agui::untrusted`; their committed corpora replay here too, and each finding is a
//! test named for the behaviour, here or beside the parser it was in.

use iac_code_agui::error::Lang;
use iac_code_agui::input::parse_run;
use iac_code_agui::projection::{End, Projection, RunIds};
use iac_code_agui::sse::Parser;
use iac_code_agui::testing::check_spans;
use serde_json::{json, Value};
use std::path::PathBuf;
use test_support::Rng;

fn iters() -> usize {
    std::env::var("FUZZ_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000)
}

fn random_value(rng: &mut Rng, depth: usize) -> Value {
    match rng.below(if depth > 3 { 5 } else { 8 }) {
        0 => Value::Null,
        1 => json!(rng.below(2) == 0),
        2 => json!(rng.next_u64() as i64),
        3 => json!((rng.next_u64() % 1000) as f64 / 7.0),
        4 => {
            let pool = [
                "",
                "user",
                "image",
                "text",
                "data",
                "/",
                "../x",
                "TASK_STATE_FAILED",
                "ROLE_AGENT",
                "permission",
                "你好",
                "\u{0}",
                "input-required",
            ];
            json!(pool[rng.below(pool.len())])
        }
        5 => Value::Array(
            (0..rng.below(4))
                .map(|_| random_value(rng, depth + 1))
                .collect(),
        ),
        _ => {
            let keys = [
                "type",
                "text",
                "role",
                "id",
                "content",
                "source",
                "value",
                "mimeType",
                "status",
                "state",
                "message",
                "parts",
                "metadata",
                "iac_code",
                "tool",
                "toolUseId",
                "input",
                "inputId",
                "required",
                "kind",
                "options",
                "pipeline",
                "eventType",
                "sequence",
                "eventId",
                "usage",
            ];
            let mut m = serde_json::Map::new();
            for _ in 0..rng.below(5) {
                m.insert(
                    keys[rng.below(keys.len())].to_string(),
                    random_value(rng, depth + 1),
                );
            }
            Value::Object(m)
        }
    }
}

/// Replaces one random node of `v` by a random value.
fn mutate(v: &mut Value, rng: &mut Rng) {
    let replace = rng.below(4) == 0;
    match v {
        Value::Object(m) if !m.is_empty() && !replace => {
            let k = m.keys().nth(rng.below(m.len())).unwrap().clone();
            if rng.below(5) == 0 {
                m.remove(&k);
            } else {
                mutate(m.get_mut(&k).unwrap(), rng);
            }
        }
        Value::Array(a) if !a.is_empty() && !replace => {
            let i = rng.below(a.len());
            mutate(&mut a[i], rng);
        }
        _ => *v = random_value(rng, 0),
    }
}

#[test]
fn the_request_parser_never_panics() {
    let mut rng = Rng(0xfeed);
    let roots = [PathBuf::from("/workspace")];
    let valid = json!({
        "threadId": "t", "runId": "r", "state": {}, "tools": [], "context": [],
        "messages": [{"id": "m", "role": "user", "content": [{"type": "text", "text": "hi"},
            {"type": "image", "source": {"type": "data", "value": "AAAA", "mimeType": "image/png"}}]}],
        "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "i", "cwd": "/workspace/a",
            "thinking": {"enabled": true, "budget": 3}, "alibabaCloud": {"regionId": "cn"}}},
        "resume": [{"interruptId": "x", "status": "resolved", "payload": {"decision": "deny"}}]
    });
    for _ in 0..iters() {
        let mut v = valid.clone();
        for _ in 0..1 + rng.below(3) {
            mutate(&mut v, &mut rng);
        }
        let _ = parse_run(&serde_json::to_vec(&v).unwrap(), &roots, None);
        let mut bytes = serde_json::to_vec(&v).unwrap();
        if !bytes.is_empty() {
            let i = rng.below(bytes.len());
            bytes[i] = rng.next_u64() as u8;
            bytes.truncate(bytes.len() - rng.below(bytes.len()));
        }
        let _ = parse_run(&bytes, &roots, None);
    }
    // Deep nesting is refused, not a stack overflow.
    let deep = "[".repeat(100_000);
    assert!(parse_run(deep.as_bytes(), &roots, None).1.is_err());
}

#[test]
fn the_sse_parser_never_panics_and_chunking_never_changes_the_events() {
    let mut rng = Rng(0xbeef);
    let alphabet = b"data: \r\n:{}x\xe4\xbd\xa0event:id:";
    for _ in 0..iters() {
        let len = rng.below(300);
        let input: Vec<u8> = (0..len)
            .map(|_| alphabet[rng.below(alphabet.len())])
            .collect();
        let mut whole = Vec::new();
        Parser::new().feed(&input, &mut whole).unwrap();
        let mut parts = Vec::new();
        let mut p = Parser::new();
        let mut rest = &input[..];
        while !rest.is_empty() {
            let n = 1 + rng.below(rest.len());
            p.feed(&rest[..n], &mut parts).unwrap();
            rest = &rest[n..];
        }
        // A lone CR at a chunk end followed by LF is one line end either way.
        assert_eq!(whole, parts, "input {:?}", String::from_utf8_lossy(&input));
    }
}

#[test]
fn the_projection_never_panics_and_always_closes_its_spans() {
    let mut rng = Rng(0xc0ffee);
    let seeds: Vec<Value> = test_support::data_lines(include_str!("data/normal-turn.a2a.sse"))
        .into_iter()
        .map(|v| v["result"].clone())
        .chain([
            json!({"statusUpdate": {"taskId": "88b24f14-1984-4a52-9ab9-b44c1ac2ba2d", "status": {"state": "TASK_STATE_WORKING"},
                "metadata": {"iac_code": {"tool": {"toolUseId": "c", "name": "n", "status": "started"},
                "thinking": {"type": "raw_thinking", "text": "x"},
                "pipeline": {"eventType": "step_started", "sequence": 3, "eventId": "e", "step": {"id": "s"}, "data": {"text": "t"}}}}}}),
            json!({"statusUpdate": {"status": {"state": "TASK_STATE_INPUT_REQUIRED"},
                "metadata": {"iac_code": {"input": {"kind": "deployment_confirmation", "inputId": "d", "required": true, "options": [{"id": "a", "action": "confirm"}]}}}}}),
        ])
        .collect();
    for _ in 0..iters() / 3 {
        let ids = RunIds {
            thread_id: "t".into(),
            run_id: "r".into(),
            context_id: "bdd96997-fc99-4760-9d7c-64466b091e18".into(),
            ..Default::default()
        };
        let mut p = Projection::new(ids, Lang::En).with_clock(|| 0);
        let mut out = vec![];
        p.start(&mut out);
        let mut end = End::Failed(iac_code_agui::error::Msg::StreamEndedEarly.err());
        for _ in 0..rng.below(12) {
            let mut item = seeds[rng.below(seeds.len())].clone();
            for _ in 0..rng.below(3) {
                mutate(&mut item, &mut rng);
            }
            match p.on_item(&item, &mut out) {
                Ok(Some(reported)) => {
                    end = reported.announced("2026-01-01T00:00:00Z", Lang::En);
                    break;
                }
                Ok(None) => {}
                Err(e) => {
                    end = End::Failed(e);
                    break;
                }
            }
        }
        p.finish(&end, &mut out);
        if let Err(e) = check_spans(&out) {
            panic!("{e}: {out:#?}");
        }
    }
}

// ---- the request head, sent raw to a running adapter ------------------------------------------

fn pick<'a>(rng: &mut Rng, pool: &[&'a str]) -> &'a str {
    pool[rng.below(pool.len())]
}

/// Mostly CRLF; sometimes a bare LF, a bare CR, nothing, or a doubled CR.
fn eol(rng: &mut Rng) -> &'static str {
    pick(
        rng,
        &[
            "\n", "\r", "", "\r\r\n", "\r\n", "\r\n", "\r\n", "\r\n", "\r\n", "\r\n",
        ],
    )
}

/// One header line (without its line end).
fn random_header(rng: &mut Rng) -> String {
    const NUMBERS: &[&str] = &[
        "0",
        "5",
        "-1",
        "+5",
        " 5",
        "0x10",
        "100000000000",
        "9223372036854775807",
        "9223372036854775808",
        "18446744073709551615",
        "18446744073709551616",
        "99999999999999999999999999",
        "",
        "5, 5",
        "5,6",
        "1e3",
    ];
    const TES: &[&str] = &[
        "chunked",
        "identity",
        "gzip",
        "chunked, chunked",
        "Chunked",
        "gzip, chunked",
        "chunked, gzip",
        " chunked",
        "",
        "\tchunked",
    ];
    const NAMES: &[&str] = &[
        "Host",
        "Connection",
        "Expect",
        "Authorization",
        "Content-Type",
        "Accept",
        "Upgrade",
        "Accept-Language",
        "X-Custom",
        "Host ",
        " Host",
        "",
        "Content-Length\u{0}",
    ];
    const VALUES: &[&str] = &[
        "127.0.0.1",
        "localhost",
        "evil.example",
        "close",
        "keep-alive",
        "upgrade",
        "100-continue",
        "Bearer x",
        "application/json",
        "text/event-stream",
        "zh-CN",
        "",
        "\u{1}",
        "é",
        "websocket",
    ];
    match rng.below(10) {
        0 | 1 => format!("Content-Length: {}", pick(rng, NUMBERS)),
        2 => format!("Transfer-Encoding: {}", pick(rng, TES)),
        3 => "no colon here".to_string(),
        4 => format!(" folded {}", pick(rng, VALUES)),
        5 => format!("X-Long: {}", "v".repeat(rng.below(20_000))),
        _ => format!("{}: {}", pick(rng, NAMES), pick(rng, VALUES)),
    }
}

/// A request head (and sometimes a body or a second request) built from hostile pieces, then
/// perhaps mutated byte-wise.
fn random_head(rng: &mut Rng) -> Vec<u8> {
    const METHODS: &[&str] = &[
        "GET",
        "GET",
        "POST",
        "POST",
        "HEAD",
        "PUT",
        "OPTIONS",
        "CONNECT",
        "get",
        "G\u{0}T",
        "",
        "POSTPOSTPOSTPOST",
    ];
    const TARGETS: &[&str] = &[
        "/",
        "/health",
        "/health?x=1",
        "/extensions/iac-code/v1/executions/cancel",
        "/extensions/iac-code/v1/executions/x/cancel",
        "/extensions/iac-code/v1/executions//cancel",
        "/extensions/iac-code/v1/executions/",
        "*",
        "http://127.0.0.1/health",
        "//",
        "/%00",
        "/\u{7f}",
        "",
        "/../../etc/passwd",
    ];
    const VERSIONS: &[&str] = &[
        "HTTP/1.1",
        "HTTP/1.1",
        "HTTP/1.0",
        "HTTP/2.0",
        "HTTP/0.9",
        "HTTP/1.1 x",
        "http/1.1",
        "HTTP/1.",
        "",
        "HTTP/11111111111111111111.1",
    ];
    const BODIES: &[&str] = &[
        "",
        "",
        "0\r\n\r\n",
        "5\r\nhello\r\n0\r\n\r\n",
        "zz\r\n",
        "ffffffffffffffffff\r\n",
        "{}",
        "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        "hello",
    ];
    let mut target = pick(rng, TARGETS).to_string();
    if rng.below(20) == 0 {
        target.push_str(&"a".repeat(rng.below(20_000)));
    }
    let mut out = format!(
        "{} {target} {}{}",
        pick(rng, METHODS),
        pick(rng, VERSIONS),
        eol(rng)
    );
    let headers = match rng.below(30) {
        0 => 150,
        1 => 1000,
        _ => rng.below(8),
    };
    for _ in 0..headers {
        out.push_str(&random_header(rng));
        out.push_str(eol(rng));
    }
    out.push_str(eol(rng));
    out.push_str(pick(rng, BODIES));
    let mut bytes = out.into_bytes();
    if !bytes.is_empty() && rng.below(3) == 0 {
        for _ in 0..1 + rng.below(3) {
            let i = rng.below(bytes.len());
            match rng.below(3) {
                0 => bytes[i] = rng.next_u64() as u8,
                1 => bytes.insert(i, b"\r\n:\0 "[rng.below(5)]),
                _ => bytes.truncate(i.max(1)),
            }
        }
    }
    bytes
}

/// Every connection ends with a valid status line or a plain close, the process never dies, no
/// worker panics, and `/health` answers at the end. `FUZZ_ITERS / 10` connections (2,000 by
/// default), at most 25 s; each is half-closed after its bytes so the server sees the end at once.
#[test]
fn the_request_head_never_kills_or_hangs_the_server() {
    use std::io::Write;
    use std::time::{Duration, Instant};
    use test_support::raw::{closes_within, health, status_of, try_connect};
    let dead_kernel = format!("http://127.0.0.1:{}", test_support::free_port());
    let limits = [
        "--header-timeout",
        "1",
        "--body-timeout",
        "1",
        "--keepalive-timeout",
        "1",
        "--write-timeout",
        "1",
        "--max-connections",
        "64",
    ];
    let mut a = test_support::Adapter::start_with(
        &dead_kernel,
        test_support::Options {
            args: limits.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        },
    );
    let mut rng = Rng(0x4ead);
    let deadline = Instant::now() + Duration::from_secs(25);
    let (mut done, mut answered) = (0, 0);
    for i in 0..iters() / 10 {
        if Instant::now() >= deadline {
            break;
        }
        let req = random_head(&mut rng);
        let shown = String::from_utf8_lossy(&req[..req.len().min(300)]).into_owned();
        let mut s = try_connect(&a.url).unwrap_or_else(|e| {
            panic!(
                "iteration {i}: cannot connect ({e}); alive: {}; the previous input killed it?",
                a.alive()
            )
        });
        let _ = s.write_all(&req);
        let _ = s.shutdown(std::net::Shutdown::Write);
        let mut got = Vec::new();
        assert!(
            closes_within(&mut s, Duration::from_secs(5), &mut got),
            "iteration {i}: neither an answer nor a close within 5 s for {shown:?}"
        );
        assert!(
            got.is_empty() || status_of(&got).is_some(),
            "iteration {i}: not a status line: {:?} for {shown:?}",
            String::from_utf8_lossy(&got[..got.len().min(200)])
        );
        answered += usize::from(!got.is_empty());
        done += 1;
        assert!(a.alive(), "iteration {i}: the adapter died on {shown:?}");
    }
    eprintln!("request-head fuzz: {done} connections, {answered} answered, the rest closed");
    if let Err(e) = health(&a.url, Duration::from_secs(2)) {
        panic!("/health after the fuzz: {e}");
    }
    assert!(!a.logs().contains("panicked"), "a handler panicked");
}

/// A coverage-guided target's name and the property it asserts.
type Target = (&'static str, fn(&[u8]));

/// The committed corpora of the coverage-guided targets (tests/fuzz_targets/corpus/TARGET), each
/// input through the property its target asserts: what the campaigns found keeps passing without
/// the fuzzer's instrumentation.
#[test]
fn every_committed_fuzz_corpus_input_keeps_its_property() {
    use iac_code_agui::untrusted as u;
    let checks: [Target; 9] = [
        ("run_input", u::check_run_input),
        ("control_bodies", u::check_control_bodies),
        ("sse", u::check_sse),
        ("a2a_frame", u::check_a2a_frame),
        ("a2a_stream", u::check_a2a_stream),
        ("cursor", u::check_cursor),
        ("accept_language", u::check_accept_language),
        ("yaml_config", u::check_yaml_config),
        ("http_head", u::check_http_head),
    ];
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_targets/corpus");
    for (target, check) in checks {
        let inputs: Vec<_> = std::fs::read_dir(root.join(target))
            .unwrap_or_else(|e| panic!("corpus of {target}: {e}"))
            .map(|e| e.unwrap().path())
            .collect();
        assert!(!inputs.is_empty(), "the corpus of {target} is empty");
        for input in inputs {
            let data = std::fs::read(&input).unwrap();
            if std::panic::catch_unwind(|| check(&data)).is_err() {
                panic!("{target}: {} breaks its property", input.display());
            }
        }
    }
}
