//! iac-code-agui patch tests: tiny_http under hostile clients (see PATCHES.md). Each test drives a
//! server built with `Server::from_listener_with_limits` over raw `TcpStream`s on 127.0.0.1.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use tiny_http::{Limits, Response, Server};

/// Paths the application saw, to show what was (not) taken for a request.
type Seen = Arc<Mutex<Vec<String>>>;

fn small_limits() -> Limits {
    Limits {
        max_head_bytes: 4096,
        max_headers: 20,
        max_url_bytes: 200,
        head_timeout: Some(Duration::from_millis(400)),
        keepalive_timeout: Some(Duration::from_millis(400)),
        body_timeout: Some(Duration::from_secs(2)),
        write_timeout: Some(Duration::from_secs(2)),
        max_connections: 64,
        error_body: Arc::new(|status| {
            (
                format!("{{\"error\":{{\"status\":{}}}}}", status).into_bytes(),
                "application/json",
            )
        }),
        thread_stack: Some(256 * 1024),
        on_stream_wait: None,
        draining: Arc::default(),
        park_connections: false,
    }
}

/// Starts a server and one application thread: `/echo` answers the body length it read,
/// `/noread` answers 401 without reading the body, `/socket` the peer seen on `Request::socket`,
/// anything else `ok`.
fn start(limits: Limits) -> (SocketAddr, Arc<Server>, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = Arc::new(Server::from_listener_with_limits(listener, None, limits).unwrap());
    let seen: Seen = Arc::default();
    let (s, seen2) = (server.clone(), seen.clone());
    thread::spawn(move || {
        while let Ok(mut rq) = s.recv() {
            seen2.lock().unwrap().push(rq.url().to_string());
            let answer = match rq.url() {
                "/echo" => {
                    let mut body = Vec::new();
                    match rq.as_reader().read_to_end(&mut body) {
                        Ok(_) => Response::from_string(format!("read {}", body.len())),
                        Err(e) => Response::from_string(format!("error {:?}", e.kind())),
                    }
                }
                "/noread" => Response::from_string("no").with_status_code(401),
                "/socket" => {
                    let peer = rq.socket().and_then(|s| s.peer_addr().ok());
                    Response::from_string(format!("peer {:?}", peer))
                }
                _ => Response::from_string("ok"),
            };
            let _ = rq.respond(answer);
        }
    });
    (addr, server, seen)
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s
}

/// Everything the server sends until it closes the connection (or 5 s pass).
fn read_all(s: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) => panic!(
                "no close from the server: {:?} after {:?}",
                e,
                String::from_utf8_lossy(&out)
            ),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Sends `bytes` on a new connection and returns all the server sends back before closing.
fn exchange(addr: SocketAddr, bytes: &[u8]) -> String {
    let mut s = connect(addr);
    s.write_all(bytes).unwrap();
    read_all(&mut s)
}

/// Reads one response framed by Content-Length (no close expected).
fn read_response(s: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let mut byte = [0u8];
    while !out.ends_with(b"\r\n\r\n") {
        assert_eq!(
            s.read(&mut byte).unwrap(),
            1,
            "closed in head: {:?}",
            String::from_utf8_lossy(&out)
        );
        out.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&out).into_owned();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .map(|v| v.trim().parse().unwrap())
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).unwrap();
    head + &String::from_utf8_lossy(&body)
}

fn count(haystack: &str, needle: &str) -> usize {
    haystack.matches(needle).count()
}

#[test]
fn huge_content_length_neither_crashes_nor_is_drained() {
    let (addr, _server, _) = start(small_limits());
    for len in [
        "100000000000",
        "9223372036854775807",
        "18446744073709551615",
    ] {
        let req = format!("GET /health HTTP/1.1\r\nContent-Length: {}\r\n\r\n", len);
        let out = exchange(addr, req.as_bytes());
        assert!(out.starts_with("HTTP/1.1 200"), "{}", out);
        assert!(out.contains("Connection: close"), "{}", out);
    }
    // past u64: not a length at all
    let out = exchange(
        addr,
        b"GET / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n",
    );
    assert!(out.starts_with("HTTP/1.1 400"), "{}", out);
    // the server is still up
    assert!(exchange(addr, b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n").ends_with("ok"));
}

#[test]
fn small_unread_body_is_skipped_and_keep_alive_goes_on() {
    let (addr, _server, seen) = start(small_limits());
    let mut s = connect(addr);
    let body = "GET /smuggled HTTP/1.1\r\n\r\n".repeat(40);
    let req = format!(
        "POST /noread HTTP/1.1\r\nContent-Length: {}\r\n\r\n{}GET /second HTTP/1.1\r\n\r\n",
        body.len(),
        body
    );
    s.write_all(req.as_bytes()).unwrap();
    let first = read_response(&mut s);
    assert!(first.starts_with("HTTP/1.1 401"), "{}", first);
    assert!(!first.contains("Connection: close"), "{}", first);
    let second = read_response(&mut s);
    assert!(second.starts_with("HTTP/1.1 200"), "{}", second);
    assert_eq!(*seen.lock().unwrap(), ["/noread", "/second"]);
}

#[test]
fn unsent_body_never_holds_the_application() {
    // one application thread: a body announced but never sent must not keep it from the next
    // client (the rest is skipped by the connection's own thread, within body_timeout)
    let (addr, _server, _) = start(small_limits());
    let mut a = connect(addr);
    a.write_all(b"GET /health HTTP/1.1\r\nContent-Length: 5000\r\n\r\n")
        .unwrap();
    assert!(read_response(&mut a).ends_with("ok"));
    let started = Instant::now();
    let out = exchange(addr, b"GET /b HTTP/1.1\r\nConnection: close\r\n\r\n");
    assert!(out.ends_with("ok"), "{}", out);
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
    // and the first connection ends once body_timeout (2 s) is over
    assert_eq!(read_all(&mut a), "");
}

#[test]
fn long_unread_body_closes_the_connection() {
    let (addr, _server, seen) = start(small_limits());
    let mut s = connect(addr);
    let body = "x".repeat(100 * 1024);
    let req = format!(
        "POST /noread HTTP/1.1\r\nContent-Length: {}\r\n\r\n{}GET /second HTTP/1.1\r\n\r\n",
        body.len(),
        body
    );
    s.write_all(req.as_bytes()).unwrap();
    let out = read_all(&mut s);
    assert!(out.starts_with("HTTP/1.1 401"), "{}", out);
    assert!(out.contains("Connection: close"), "{}", out);
    assert_eq!(count(&out, "HTTP/1.1"), 1, "{}", out);
    assert_eq!(*seen.lock().unwrap(), ["/noread"]);
}

#[test]
fn large_upload_refused_unread_still_gets_its_answer() {
    // the client sends all 4 MiB before reading, as most do: the lingering close reads and drops
    // the rest instead of resetting the connection under the client's writes
    let (addr, _server, _) = start(small_limits());
    let mut s = connect(addr);
    let body = vec![b'q'; 4 << 20];
    s.write_all(
        format!(
            "POST /noread HTTP/1.1\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    )
    .unwrap();
    s.write_all(&body).unwrap();
    let out = read_all(&mut s);
    assert!(out.starts_with("HTTP/1.1 401"), "{}", out);
    assert!(out.contains("Connection: close"), "{}", out);
}

#[test]
fn rejected_chunked_body_is_not_read_as_the_next_request() {
    let (addr, _server, seen) = start(small_limits());
    let chunk = "GET /smuggled HTTP/1.1\r\n\r\n";
    let req = format!(
        "POST /noread HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{}\r\n0\r\n\r\nGET /after HTTP/1.1\r\n\r\n",
        chunk.len(),
        chunk
    );
    let out = exchange(addr, req.as_bytes());
    assert!(out.starts_with("HTTP/1.1 401"), "{}", out);
    assert!(out.contains("Connection: close"), "{}", out);
    assert_eq!(count(&out, "HTTP/1.1"), 1, "{}", out);
    assert_eq!(*seen.lock().unwrap(), ["/noread"]);
}

#[test]
fn chunked_body_read_by_the_application_keeps_the_connection() {
    let (addr, _server, _) = start(small_limits());
    let mut s = connect(addr);
    s.write_all(
        b"POST /echo HTTP/1.1\r\nTransfer-Encoding: Chunked \r\n\r\n5\r\nhello\r\n0\r\n\r\nGET /b HTTP/1.1\r\n\r\n",
    )
    .unwrap();
    assert!(read_response(&mut s).ends_with("read 5"));
    assert!(read_response(&mut s).ends_with("ok"));
}

#[test]
fn ambiguous_framing_is_refused_and_closed() {
    let (addr, _server, seen) = start(small_limits());
    let cases: &[&str] = &[
        "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
        "POST /echo HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
        "POST /echo HTTP/1.1\r\nTransfer-Encoding: identity\r\n\r\n",
        "POST /echo HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
        "POST /echo HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
        "POST /echo HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
        "POST /echo HTTP/1.1\r\nContent-Length: 5, 6\r\n\r\n",
        "POST /echo HTTP/1.1\r\nContent-Length: +5\r\n\r\n",
        "POST /echo HTTP/1.1\r\nContent-Length: five\r\n\r\n",
    ];
    for case in cases {
        let out = exchange(
            addr,
            format!("{}hello GET /x HTTP/1.1\r\n\r\n", case).as_bytes(),
        );
        assert!(out.starts_with("HTTP/1.1 400"), "{:?} -> {}", case, out);
        assert!(out.contains("Connection: close\r\n"), "{}", out);
        assert!(out.ends_with("{\"error\":{\"status\":400}}"), "{}", out);
        assert_eq!(count(&out, "HTTP/1.1"), 1, "{}", out);
    }
    assert!(seen.lock().unwrap().is_empty());
    // equal duplicates are one length
    let out = exchange(
        addr,
        b"POST /echo HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
    );
    assert!(out.ends_with("read 5"), "{}", out);
}

#[test]
fn head_over_the_byte_limit_is_431() {
    let (addr, _server, _) = start(small_limits());
    // one endless header line (no CRLF): refused without reading all of it
    let mut s = connect(addr);
    s.write_all(b"GET / HTTP/1.1\r\nX-Long: ").unwrap();
    s.write_all(&vec![b'a'; 64 * 1024]).unwrap();
    let out = read_all(&mut s);
    assert!(out.starts_with("HTTP/1.1 431"), "{}", out);
    assert!(out.contains("Connection: close"), "{}", out);
    assert!(out.ends_with("{\"error\":{\"status\":431}}"), "{}", out);
    // many headers just under the line limits, over the total
    let mut req = String::from("GET / HTTP/1.1\r\n");
    for i in 0..10 {
        req += &format!("X-{}: {}\r\n", i, "b".repeat(500));
    }
    req += "\r\n";
    assert!(exchange(addr, req.as_bytes()).starts_with("HTTP/1.1 431"));
}

#[test]
fn too_many_headers_is_431() {
    let (addr, _server, _) = start(small_limits());
    // 20 headers are fine, 21 are not
    let mut req = String::from("GET / HTTP/1.1\r\nConnection: close\r\n");
    for i in 0..19 {
        req += &format!("X-{}: y\r\n", i);
    }
    let ok = exchange(addr, format!("{}\r\n", req).as_bytes());
    assert!(ok.starts_with("HTTP/1.1 200"), "{}", ok);
    let out = exchange(addr, format!("{}X-19: y\r\n\r\n", req).as_bytes());
    assert!(out.starts_with("HTTP/1.1 431"), "{}", out);
}

#[test]
fn long_url_is_414_and_never_echoed() {
    let (addr, _server, seen) = start(small_limits());
    let url = format!("/{}", "u".repeat(250));
    let out = exchange(addr, format!("GET {} HTTP/1.1\r\n\r\n", url).as_bytes());
    assert!(out.starts_with("HTTP/1.1 414"), "{}", out);
    assert!(!out.contains("uuuu"), "{}", out);
    // a request line that never ends is refused before it is read in full
    let mut s = connect(addr);
    s.write_all(b"GET /").unwrap();
    s.write_all(&vec![b'v'; 1 << 20]).unwrap();
    let out = read_all(&mut s);
    assert!(out.starts_with("HTTP/1.1 414"), "{}", out);
    assert!(seen.lock().unwrap().is_empty());
}

#[test]
fn slow_head_gets_408_at_the_total_deadline() {
    let (addr, _server, _) = start(small_limits());
    let mut s = connect(addr);
    let started = Instant::now();
    s.write_all(b"GET / HTTP/1.1\r\n").unwrap();
    // one byte every 100 ms: each read succeeds, the total deadline (400 ms) must still hold
    let trickle = thread::spawn({
        let mut s = s.try_clone().unwrap();
        move || {
            for b in b"X-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa".iter() {
                if s.write_all(&[*b]).is_err() {
                    return;
                }
                thread::sleep(Duration::from_millis(100));
            }
        }
    });
    let out = read_all(&mut s);
    let took = started.elapsed();
    assert!(out.starts_with("HTTP/1.1 408"), "{}", out);
    assert!(out.ends_with("{\"error\":{\"status\":408}}"), "{}", out);
    assert!(took < Duration::from_millis(2500), "{:?}", took);
    trickle.join().unwrap();
}

#[test]
fn idle_connections_are_closed_silently() {
    let (addr, server, _) = start(small_limits());
    // never sends anything
    let mut s = connect(addr);
    let started = Instant::now();
    assert_eq!(read_all(&mut s), "");
    assert!(started.elapsed() < Duration::from_secs(2));
    // idle after a first keep-alive request
    let mut s = connect(addr);
    s.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    assert!(read_response(&mut s).ends_with("ok"));
    let started = Instant::now();
    assert_eq!(read_all(&mut s), "");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(2),
        "{:?}",
        took
    );
    // and they are not counted any more
    let deadline = Instant::now() + Duration::from_secs(3);
    while server.num_connections() != 0 {
        assert!(Instant::now() < deadline, "{}", server.num_connections());
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn connection_cap_answers_503_fast() {
    let mut limits = small_limits();
    limits.max_connections = 2;
    limits.keepalive_timeout = Some(Duration::from_secs(30));
    let (addr, server, _) = start(limits);
    let a = connect(addr);
    let b = connect(addr);
    let deadline = Instant::now() + Duration::from_secs(3);
    while server.num_connections() < 2 {
        assert!(Instant::now() < deadline);
        thread::sleep(Duration::from_millis(10));
    }
    let started = Instant::now();
    let out = exchange(addr, b"GET / HTTP/1.1\r\n\r\n");
    assert!(started.elapsed() < Duration::from_secs(1));
    assert!(out.starts_with("HTTP/1.1 503"), "{}", out);
    assert!(out.contains("Connection: close\r\n"), "{}", out);
    assert!(
        out.contains("Content-Type: application/json\r\n"),
        "{}",
        out
    );
    assert!(out.ends_with("{\"error\":{\"status\":503}}"), "{}", out);
    // a place frees up when a connection ends
    drop(a);
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let out = exchange(addr, b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n");
        if out.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(Instant::now() < deadline, "{}", out);
        thread::sleep(Duration::from_millis(50));
    }
    drop(b);
}

#[test]
fn keep_alive_pipelining_continue_and_socket_still_work() {
    pipelining_continue_and_socket(small_limits());
}

#[test]
fn parked_connections_keep_pipelining_continue_and_socket() {
    pipelining_continue_and_socket(Limits {
        park_connections: true,
        ..small_limits()
    });
}

fn pipelining_continue_and_socket(limits: Limits) {
    let (addr, _server, _) = start(limits);
    let mut s = connect(addr);
    s.write_all(b"GET /a HTTP/1.1\r\n\r\nPOST /echo HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcGET /c HTTP/1.1\r\n\r\n")
        .unwrap();
    assert!(read_response(&mut s).ends_with("ok"));
    assert!(read_response(&mut s).ends_with("read 3"));
    assert!(read_response(&mut s).ends_with("ok"));

    // Expect: 100-continue, with a body over the small-body size
    s.write_all(b"POST /echo HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2000\r\n\r\n")
        .unwrap();
    let cont = read_response(&mut s);
    assert!(cont.starts_with("HTTP/1.1 100"), "{}", cont);
    s.write_all(&[b'z'; 2000]).unwrap();
    assert!(read_response(&mut s).ends_with("read 2000"));

    s.write_all(b"GET /socket HTTP/1.1\r\n\r\n").unwrap();
    let local = s.local_addr().unwrap();
    assert!(read_response(&mut s).ends_with(&format!("peer Some({})", local)));
}

#[test]
fn unanswered_continue_closes_instead_of_waiting_for_the_body() {
    let (addr, _server, _) = start(small_limits());
    let mut s = connect(addr);
    s.write_all(b"POST /noread HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 10\r\n\r\n")
        .unwrap();
    let started = Instant::now();
    let out = read_all(&mut s);
    assert!(out.starts_with("HTTP/1.1 401"), "{}", out);
    assert!(out.contains("Connection: close"), "{}", out);
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[test]
fn slow_body_read_times_out_in_the_application() {
    let (addr, _server, _) = start(small_limits());
    let mut s = connect(addr);
    s.write_all(b"POST /echo HTTP/1.1\r\nContent-Length: 5000\r\n\r\nabc")
        .unwrap();
    let started = Instant::now();
    let out = read_response(&mut s);
    assert!(
        out.ends_with("error WouldBlock") || out.ends_with("error TimedOut"),
        "{}",
        out
    );
    assert!(started.elapsed() < Duration::from_secs(4));
}

#[test]
fn default_limits_keep_the_old_behaviour() {
    let (addr, _server, _) = start(Limits::default());
    let mut s = connect(addr);
    let url = format!("/{}", "d".repeat(20_000));
    s.write_all(format!("GET {} HTTP/1.1\r\nX: {}\r\n\r\n", url, "e".repeat(20_000)).as_bytes())
        .unwrap();
    assert!(read_response(&mut s).ends_with("ok"));
}

#[test]
fn http_0_9_and_2_request_lines_get_an_http_1_1_505() {
    let (addr, _server, seen) = start(small_limits());
    for version in ["HTTP/0.9", "HTTP/2.0"] {
        let out = exchange(addr, format!("GET / {}\r\n\r\n", version).as_bytes());
        assert!(out.starts_with("HTTP/1.1 505"), "{}: {}", version, out);
    }
    assert!(seen.lock().unwrap().is_empty());
}

#[test]
fn bare_line_ends_are_a_prompt_400_and_one_leading_empty_line_is_skipped() {
    let mut limits = small_limits();
    // a head that waited for a CRLF would be answered only at this deadline
    limits.head_timeout = Some(Duration::from_secs(30));
    let (addr, _server, seen) = start(limits);
    for case in [
        "GET / HTTP/1.1\nHost: x\n\n",
        "GET / HTTP/1.1\r\nHost: x\n\r\n",
        "GET / HTTP/1.1\r\nHost: x\rX: y\r\n\r\n",
        "\nGET / HTTP/1.1\r\n\r\n",
        "\r\n\r\nGET / HTTP/1.1\r\n\r\n",
    ] {
        let started = std::time::Instant::now();
        let out = exchange(addr, case.as_bytes());
        assert!(out.starts_with("HTTP/1.1 400"), "{:?} -> {}", case, out);
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?} answered after {:?}",
            case,
            started.elapsed()
        );
    }
    assert!(seen.lock().unwrap().is_empty());
    // RFC 9112 §2.2: one empty line before the request line is skipped
    let out = exchange(
        addr,
        b"\r\nPOST /echo HTTP/1.1\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
    );
    assert!(out.ends_with("read 5"), "{}", out);
}

#[test]
fn differing_authorization_headers_are_refused_and_identical_ones_are_one() {
    let (addr, _server, seen) = start(small_limits());
    let out = exchange(
        addr,
        b"GET / HTTP/1.1\r\nAuthorization: Bearer a\r\nAuthorization: Bearer b\r\n\r\n",
    );
    assert!(out.starts_with("HTTP/1.1 400"), "{}", out);
    assert!(seen.lock().unwrap().is_empty());
    let out = exchange(
        addr,
        b"POST /echo HTTP/1.1\r\nAuthorization: Bearer a\r\nAuthorization: Bearer a\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
    );
    assert!(out.ends_with("read 5"), "{}", out);
}

static STREAM_WAITS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn count_stream_wait() {
    STREAM_WAITS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

#[test]
fn a_held_response_shares_the_socket_and_its_connection_thread_is_told_it_waits() {
    let limits = Limits {
        on_stream_wait: Some(count_stream_wait),
        ..small_limits()
    };
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = Server::from_listener_with_limits(listener, None, limits).unwrap();
    let mut client = connect(addr);
    client
        .write_all(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let rq = server.recv().unwrap();
    // The connection thread goes back to wait for a next request while this one is unanswered.
    let deadline = Instant::now() + Duration::from_secs(5);
    while STREAM_WAITS.load(std::sync::atomic::Ordering::SeqCst) == 0 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(10));
    }
    assert!(STREAM_WAITS.load(std::sync::atomic::Ordering::SeqCst) > 0);
    // The shared socket is the connection's own: no new descriptor (`socket()` makes one).
    let before = open_fds();
    let shared = rq.shared_socket().expect("a TCP connection");
    assert_eq!(open_fds(), before);
    let dup = rq.socket().unwrap();
    assert_eq!(open_fds(), before + 1);
    drop(dup);
    // Writing through it reaches the client.
    let mut w: &std::net::TcpStream = &shared;
    w.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi")
        .unwrap();
    let mut got = [0u8; 64];
    let n = client.read(&mut got).unwrap();
    assert!(String::from_utf8_lossy(&got[..n]).ends_with("hi"));
}

/// Patch 11: once `draining` is set, the server stops accepting (within the listener's
/// `SO_RCVTIMEO`), and a connection is closed once its response is written instead of waiting
/// for another request.
#[cfg(unix)]
#[test]
fn a_draining_server_stops_accepting_and_closes_its_idle_connections() {
    use std::os::unix::io::AsRawFd;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let tv = libc::timeval {
        tv_sec: 0,
        tv_usec: 100_000,
    };
    // SAFETY: setsockopt(2) on our own listener with a local timeval.
    unsafe {
        libc::setsockopt(
            listener.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        );
    }
    // The other process's descriptor of the shared socket: the drained server's accept thread
    // drops its own when it ends.
    let _other = listener.try_clone().unwrap();
    let draining = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let limits = Limits {
        keepalive_timeout: Some(Duration::from_secs(5)),
        draining: draining.clone(),
        ..small_limits()
    };
    let server = Arc::new(Server::from_listener_with_limits(listener, None, limits).unwrap());
    let s = server.clone();
    thread::spawn(move || {
        while let Ok(rq) = s.recv() {
            let _ = rq.respond(Response::from_string("ok"));
        }
    });
    let mut idle = connect(addr);
    idle.write_all(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n").unwrap();
    let mut buf = [0u8; 512];
    assert!(idle.read(&mut buf).unwrap() > 0);
    draining.store(true, std::sync::atomic::Ordering::SeqCst);
    thread::sleep(Duration::from_millis(300));
    // Queued by the kernel, never accepted: no answer.
    let mut late = connect(addr);
    late.set_read_timeout(Some(Duration::from_millis(700)))
        .unwrap();
    late.write_all(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n").unwrap();
    assert!(late.read(&mut buf).is_err(), "a connection was accepted while draining");
    // A connection accepted before still gets its request answered, then it is closed at once
    // (100 ms), not after the keep-alive timeout (5 s).
    idle.write_all(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n").unwrap();
    assert!(idle.read(&mut buf).unwrap() > 0);
    let started = Instant::now();
    assert_eq!(idle.read(&mut buf).unwrap_or(usize::MAX), 0, "not closed");
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
}

static PARKED_WAITS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn count_parked_wait() {
    PARKED_WAITS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
}

#[test]
fn a_held_response_parks_its_connection_and_the_next_request_is_served_after_it() {
    let limits = Limits {
        on_stream_wait: Some(count_parked_wait),
        park_connections: true,
        ..small_limits()
    };
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = Server::from_listener_with_limits(listener, None, limits).unwrap();
    let mut client = connect(addr);
    // A second request pipelined behind the held one, and longer than the keep-alive timeout
    // (400 ms): nobody waits on the connection while the first response is written.
    client
        .write_all(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\nGET /next HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let rq = server.recv().unwrap();
    assert_eq!(rq.url(), "/stream");
    let mut w = rq.into_writer();
    w.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nab")
        .unwrap();
    w.flush().unwrap();
    assert!(server
        .recv_timeout(Duration::from_millis(700))
        .unwrap()
        .is_none());
    w.write_all(b"cd").unwrap();
    drop(w);
    // The writer's end resumed the connection: the pipelined request is read and answered.
    let next = server
        .recv_timeout(Duration::from_secs(5))
        .unwrap()
        .expect("resumed");
    assert_eq!(next.url(), "/next");
    next.respond(Response::from_string("ok")).unwrap();
    assert!(read_response(&mut client).ends_with("abcd"));
    assert!(read_response(&mut client).ends_with("ok"));
    // No connection thread waited beside the held response.
    assert_eq!(PARKED_WAITS.load(std::sync::atomic::Ordering::SeqCst), 0);
}
