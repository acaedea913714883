//! iac-code-agui patch test: running out of file descriptors makes `accept` fail (EMFILE); the
//! accept thread must retry, not end (it used to end, closing the server for good). Alone in its
//! binary because it exhausts the process's descriptors.
#![cfg(unix)]

use std::fs::File;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread;
use std::time::Duration;

use tiny_http::{Limits, Response, Server};

#[test]
fn accept_survives_emfile() {
    // a low limit makes exhausting it quick
    let lim = libc::rlimit {
        rlim_cur: 256,
        rlim_max: 256,
    };
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut old), 0);
        let lim = libc::rlimit {
            rlim_cur: lim.rlim_cur.min(old.rlim_max),
            rlim_max: old.rlim_max,
        };
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
    }

    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = Server::from_listener_with_limits(listener, None, Limits::default()).unwrap();
    thread::spawn(move || {
        while let Ok(rq) = server.recv() {
            let _ = rq.respond(Response::from_string("ok"));
        }
    });
    thread::sleep(Duration::from_millis(100));

    // take every descriptor but one, which the client socket takes
    let mut hog = Vec::new();
    while let Ok(f) = File::open("/dev/null") {
        hog.push(f);
    }
    hog.pop();
    let mut client = TcpStream::connect(addr).unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    client
        .write_all(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n")
        .unwrap();
    // the accept thread now fails with EMFILE, a few times (backoff 10, 20, 40... ms)
    thread::sleep(Duration::from_millis(300));
    drop(hog);

    let mut out = String::new();
    client.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{}", out);
    assert!(out.ends_with("ok"), "{}", out);

    unsafe {
        libc::setrlimit(libc::RLIMIT_NOFILE, &old);
    }
}
