//! A client's request head, read by the vendored tiny_http (`tiny_http::parse_request`: the
//! connection's head parser and request framing over bytes in memory).

use tiny_http::{Limits, Request};

/// Small limits, so that short inputs reach every refusal (431, 414).
fn limits() -> Limits {
    Limits {
        max_head_bytes: 1024,
        max_headers: 16,
        max_url_bytes: 256,
        ..Limits::default()
    }
}

/// The statuses a connection answers a head with before it closes (0: closed without one).
const REFUSALS: [u16; 8] = [0, 400, 408, 414, 417, 431, 501, 505];

/// The request's head as it would be sent again, framed by `Content-Length` for its body.
fn rewritten(rq: &Request, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "{} {} HTTP/{}\r\n",
        rq.method(),
        rq.url(),
        rq.http_version()
    )
    .into_bytes();
    for h in rq.headers() {
        if h.field.equiv("Content-Length") || h.field.equiv("Transfer-Encoding") {
            continue;
        }
        out.extend_from_slice(format!("{}: {}\r\n", h.field, h.value).as_bytes());
    }
    out.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
    out.extend_from_slice(body);
    out
}

fn body_of(rq: &mut Request) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    rq.as_reader().read_to_end(&mut body).ok()?;
    Some(body)
}

/// The request head: a refusal is one of the statuses the server answers by itself; an accepted
/// request, written again with its body framed by `Content-Length`, reads back the same method,
/// target, version, headers and body.
pub fn check_http_head(data: &[u8]) {
    let limits = limits();
    let mut rq = match tiny_http::parse_request(data, &limits) {
        Ok(rq) => rq,
        Err(status) => {
            assert!(REFUSALS.contains(&status), "refused with {status}");
            return;
        }
    };
    // A chunked body cut short or malformed is the body reader's error, not the head's.
    let Some(body) = body_of(&mut rq) else {
        return;
    };
    let again = rewritten(&rq, &body);
    // Read again without limits: the added `Content-Length` may be the one line too many.
    let mut back = tiny_http::parse_request(&again, &Limits::default())
        .unwrap_or_else(|s| panic!("refused with {s} when written again: {again:?}"));
    let fields = |rq: &Request| {
        let headers: Vec<String> = rq
            .headers()
            .iter()
            .filter(|h| !h.field.equiv("Content-Length") && !h.field.equiv("Transfer-Encoding"))
            .map(|h| format!("{}: {}", h.field, h.value))
            .collect();
        (
            rq.method().clone(),
            rq.url().to_string(),
            rq.http_version().clone(),
            headers,
        )
    };
    assert_eq!(fields(&rq), fields(&back));
    assert_eq!(Some(body), body_of(&mut back));
}
