//! # Simple usage
//!
//! ## Creating the server
//!
//! The easiest way to create a server is to call `Server::http()`.
//!
//! The `http()` function returns an `IoResult<Server>` which will return an error
//! in the case where the server creation fails (for example if the listening port is already
//! occupied).
//!
//! ```no_run
//! let server = tiny_http::Server::http("0.0.0.0:0").unwrap();
//! ```
//!
//! A newly-created `Server` will immediately start listening for incoming connections and HTTP
//! requests.
//!
//! ## Receiving requests
//!
//! Calling `server.recv()` will block until the next request is available.
//! This function returns an `IoResult<Request>`, so you need to handle the possible errors.
//!
//! ```no_run
//! # let server = tiny_http::Server::http("0.0.0.0:0").unwrap();
//!
//! loop {
//!     // blocks until the next request is received
//!     let request = match server.recv() {
//!         Ok(rq) => rq,
//!         Err(e) => { println!("error: {}", e); break }
//!     };
//!
//!     // do something with the request
//!     // ...
//! }
//! ```
//!
//! In a real-case scenario, you will probably want to spawn multiple worker tasks and call
//! `server.recv()` on all of them. Like this:
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use std::thread;
//! # let server = tiny_http::Server::http("0.0.0.0:0").unwrap();
//! let server = Arc::new(server);
//! let mut guards = Vec::with_capacity(4);
//!
//! for _ in (0 .. 4) {
//!     let server = server.clone();
//!
//!     let guard = thread::spawn(move || {
//!         loop {
//!             let rq = server.recv().unwrap();
//!
//!             // ...
//!         }
//!     });
//!
//!     guards.push(guard);
//! }
//! ```
//!
//! If you don't want to block, you can call `server.try_recv()` instead.
//!
//! ## Handling requests
//!
//! The `Request` object returned by `server.recv()` contains informations about the client's request.
//! The most useful methods are probably `request.method()` and `request.url()` which return
//! the requested method (`GET`, `POST`, etc.) and url.
//!
//! To handle a request, you need to create a `Response` object. See the docs of this object for
//! more infos. Here is an example of creating a `Response` from a file:
//!
//! ```no_run
//! # use std::fs::File;
//! # use std::path::Path;
//! let response = tiny_http::Response::from_file(File::open(&Path::new("image.png")).unwrap());
//! ```
//!
//! All that remains to do is call `request.respond()`:
//!
//! ```no_run
//! # use std::fs::File;
//! # use std::path::Path;
//! # let server = tiny_http::Server::http("0.0.0.0:0").unwrap();
//! # let request = server.recv().unwrap();
//! # let response = tiny_http::Response::from_file(File::open(&Path::new("image.png")).unwrap());
//! let _ = request.respond(response);
//! ```
// iac-code-agui: vendored as released; its two dead-code warnings are upstream's.
#![allow(dead_code, unused_imports)]
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]
#![allow(clippy::match_like_matches_macro)]

#[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
use zeroize::Zeroizing;

use std::error::Error;
use std::io::Error as IoError;
use std::io::ErrorKind as IoErrorKind;
use std::io::Result as IoResult;
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use client::ClientConnection;
use connection::Connection;
use util::MessagesQueue;

#[doc(hidden)]
pub use client::parse_request;
pub use common::{HTTPVersion, Header, HeaderField, Method, StatusCode};
pub use connection::{ConfigListenAddr, ListenAddr, Listener, SharedSocket};
pub use request::{ReadWrite, Request};
pub use response::{Response, ResponseBox};
pub use test::TestRequest;

mod client;
mod common;
mod connection;
mod request;
mod response;
mod ssl;
mod test;
mod util;

/// The main class of this library.
///
/// Destroying this object will immediately close the listening socket and the reading
///  part of all the client's connections. Requests that have already been returned by
///  the `recv()` function will not close and the responses will be transferred to the client.
pub struct Server {
    // should be false as long as the server exists
    // when set to true, all the subtasks will close within a few hundreds ms
    close: Arc<AtomicBool>,

    // queue for messages received by child threads
    messages: Arc<MessagesQueue<Message>>,

    // result of TcpListener::local_addr()
    listening_addr: ListenAddr,

    // iac-code-agui patch: open connections, for `Limits::max_connections`
    open: Arc<AtomicUsize>,
}

/// The body and content type of an answer the server gives by itself, from its status code.
pub(crate) type ErrorBody = Arc<dyn Fn(u16) -> (Vec<u8>, &'static str) + Send + Sync>;

/// The work of one connection: hand each of its requests to `recv`.
fn connection_task(
    client: ClientConnection,
    messages: Arc<MessagesQueue<Message>>,
    pool: util::TaskPool,
) -> Box<dyn FnMut() + Send> {
    let mut client = Some(client);
    Box::new(move || {
        if let Some(mut client) = client.take() {
            // Synchronization is needed for HTTPS requests to avoid a deadlock
            if client.secure() {
                let (sender, receiver) = mpsc::channel();
                for rq in client {
                    messages.push(rq.with_notify_sender(sender.clone()).into());
                    if receiver.recv().is_err() {
                        break;
                    }
                }
            } else {
                for rq in client.by_ref() {
                    messages.push(rq.into());
                }
                if client.take_parked() {
                    park(client, messages.clone(), pool.clone());
                }
            }
        }
    })
}

/// iac-code-agui patch: leaves `client` parked until its responses in flight are done, then
/// resumes it on a pool thread (at once if they are already done), unless its client has ended
/// it meanwhile: it is closed then, on the thread that ended the last response. No thread for it
/// then: the connection ends (its socket closes with its last handle).
fn park(client: ClientConnection, messages: Arc<MessagesQueue<Message>>, pool: util::TaskPool) {
    let parking = client.parking();
    let resume = Box::new(move || {
        let mut client = client;
        if client.ended_by_peer() {
            return;
        }
        let task = connection_task(client, messages, pool.clone());
        if pool.spawn(task).is_err() {
            log::error!("no thread to resume a parked connection; it is closed");
        }
    });
    if let Err(resume) = parking.park(resume) {
        resume();
    }
}

enum Message {
    Error(IoError),
    NewRequest(Request),
}

impl From<IoError> for Message {
    fn from(e: IoError) -> Message {
        Message::Error(e)
    }
}

impl From<Request> for Message {
    fn from(rq: Request) -> Message {
        Message::NewRequest(rq)
    }
}

// this trait is to make sure that Server implements Share and Send
#[doc(hidden)]
trait MustBeShareDummy: Sync + Send {}
#[doc(hidden)]
impl MustBeShareDummy for Server {}

pub struct IncomingRequests<'a> {
    server: &'a Server,
}

/// Per-connection limits the server enforces (iac-code-agui patch; see PATCHES.md).
///
/// `Limits::default()` keeps tiny_http 0.12's behaviour (no limits).
#[derive(Clone)]
pub struct Limits {
    /// Request line plus headers, in bytes; beyond it the server answers 431 and closes.
    pub max_head_bytes: usize,
    /// Number of header lines; beyond it 431 and close.
    pub max_headers: usize,
    /// Length of the request target; beyond it 414 and close.
    pub max_url_bytes: usize,
    /// Time from a request's first byte to the end of its head; beyond it 408 and close.
    pub head_timeout: Option<Duration>,
    /// Idle time before a request's first byte (the first one and between keep-alive requests);
    /// beyond it the connection is closed without an answer.
    pub keepalive_timeout: Option<Duration>,
    /// Socket read timeout while the application reads a request body.
    pub body_timeout: Option<Duration>,
    /// Socket write timeout for every response write.
    pub write_timeout: Option<Duration>,
    /// Open connections; beyond it the accept thread answers 503 and closes.
    pub max_connections: usize,
    /// Builds the body (and its content type) of the answers the server gives by itself
    /// (400, 408, 414, 431, 503), from the status code.
    pub error_body: Arc<dyn Fn(u16) -> (Vec<u8>, &'static str) + Send + Sync>,
    /// Stack size of the connection threads (`None`: the platform's default, 2 MiB on Linux).
    pub thread_stack: Option<usize>,
    /// Called by a connection thread when it starts waiting for the next request while a
    /// response on its connection is still being written (a long stream keeps it waiting that
    /// long): the application can give back what the thread's stack no longer uses.
    pub on_stream_wait: Option<fn()>,
    /// iac-code-agui patch: set once another process took over the listening socket (a
    /// zero-downtime upgrade): the accept thread stops accepting (the other process accepts
    /// from the shared queue), and each connection ends once its response is written, instead
    /// of waiting for another request. Accepting stops within the listener's `SO_RCVTIMEO`
    /// (an accept that times out is retried quietly).
    pub draining: Arc<std::sync::atomic::AtomicBool>,
    /// A connection whose response is still being written when its thread would wait for the
    /// next request gives its thread back instead, and is resumed on a pool thread when the
    /// response is done: a long stream then holds no connection thread (`on_stream_wait` is not
    /// called). Plain TCP only.
    pub park_connections: bool,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_head_bytes: usize::MAX,
            max_headers: usize::MAX,
            max_url_bytes: usize::MAX,
            head_timeout: None,
            keepalive_timeout: None,
            body_timeout: None,
            write_timeout: None,
            max_connections: usize::MAX,
            error_body: Arc::new(|_| (Vec::new(), "text/plain")),
            thread_stack: None,
            on_stream_wait: None,
            draining: Arc::default(),
            park_connections: false,
        }
    }
}

/// Represents the parameters required to create a server.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The addresses to try to listen to.
    pub addr: ConfigListenAddr,

    /// If `Some`, then the server will use SSL to encode the communications.
    pub ssl: Option<SslConfig>,
}

/// Configuration of the server for SSL.
#[derive(Debug, Clone)]
pub struct SslConfig {
    /// Contains the public certificate to send to clients.
    pub certificate: Vec<u8>,
    /// Contains the ultra-secret private key used to decode communications.
    pub private_key: Vec<u8>,
}

impl Server {
    /// Shortcut for a simple server on a specific address.
    #[inline]
    pub fn http<A>(addr: A) -> Result<Server, Box<dyn Error + Send + Sync + 'static>>
    where
        A: ToSocketAddrs,
    {
        Server::new(ServerConfig {
            addr: ConfigListenAddr::from_socket_addrs(addr)?,
            ssl: None,
        })
    }

    /// Shortcut for an HTTPS server on a specific address.
    #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
    #[inline]
    pub fn https<A>(
        addr: A,
        config: SslConfig,
    ) -> Result<Server, Box<dyn Error + Send + Sync + 'static>>
    where
        A: ToSocketAddrs,
    {
        Server::new(ServerConfig {
            addr: ConfigListenAddr::from_socket_addrs(addr)?,
            ssl: Some(config),
        })
    }

    #[cfg(unix)]
    #[inline]
    /// Shortcut for a UNIX socket server at a specific path
    pub fn http_unix(
        path: &std::path::Path,
    ) -> Result<Server, Box<dyn Error + Send + Sync + 'static>> {
        Server::new(ServerConfig {
            addr: ConfigListenAddr::unix_from_path(path),
            ssl: None,
        })
    }

    /// Builds a new server that listens on the specified address.
    pub fn new(config: ServerConfig) -> Result<Server, Box<dyn Error + Send + Sync + 'static>> {
        let listener = config.addr.bind()?;
        Self::from_listener(listener, config.ssl)
    }

    /// Builds a new server using the specified TCP listener.
    ///
    /// This is useful if you've constructed TcpListener using some less usual method
    /// such as from systemd. For other cases, you probably want the `new()` function.
    pub fn from_listener<L: Into<Listener>>(
        listener: L,
        ssl_config: Option<SslConfig>,
    ) -> Result<Server, Box<dyn Error + Send + Sync + 'static>> {
        Self::from_listener_with_limits(listener, ssl_config, Limits::default())
    }

    /// Like [`Server::from_listener`], enforcing `limits` on every connection.
    pub fn from_listener_with_limits<L: Into<Listener>>(
        listener: L,
        ssl_config: Option<SslConfig>,
        limits: Limits,
    ) -> Result<Server, Box<dyn Error + Send + Sync + 'static>> {
        let listener = listener.into();
        // building the "close" variable
        let close_trigger = Arc::new(AtomicBool::new(false));

        // building the TcpListener
        let (server, local_addr) = {
            let local_addr = listener.local_addr()?;
            log::debug!("Server listening on {}", local_addr);
            (listener, local_addr)
        };

        // building the SSL capabilities
        #[cfg(all(feature = "ssl-openssl", feature = "ssl-rustls"))]
        compile_error!(
            "Features 'ssl-openssl' and 'ssl-rustls' must not be enabled at the same time"
        );
        #[cfg(not(any(feature = "ssl-openssl", feature = "ssl-rustls")))]
        type SslContext = ();
        #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
        type SslContext = crate::ssl::SslContextImpl;
        let ssl: Option<SslContext> = {
            match ssl_config {
                #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
                Some(config) => Some(SslContext::from_pem(
                    config.certificate,
                    Zeroizing::new(config.private_key),
                )?),
                #[cfg(not(any(feature = "ssl-openssl", feature = "ssl-rustls")))]
                Some(_) => return Err(
                    "Building a server with SSL requires enabling the `ssl` feature in tiny-http"
                        .into(),
                ),
                None => None,
            }
        };

        // creating a task where server.accept() is continuously called
        // and ClientConnection objects are pushed in the messages queue
        let messages = MessagesQueue::with_capacity(8);
        let open = Arc::new(AtomicUsize::new(0));

        let inside_close_trigger = close_trigger.clone();
        let inside_messages = messages.clone();
        let inside_open = open.clone();
        let limits = Arc::new(limits);
        thread::Builder::new()
            .name("tiny-http-accept".into())
            .spawn(move || {
                // a tasks pool is used to dispatch the connections into threads
                let tasks_pool = util::TaskPool::with_stack(limits.thread_stack);

                log::debug!("Running accept thread");
                // iac-code-agui patch: a failed accept (EMFILE, ENFILE, ENOMEM, ECONNABORTED...)
                // used to end this thread, and with it the server; now it is retried with backoff
                let mut backoff = None;
                while !inside_close_trigger.load(Relaxed) && !limits.draining.load(Relaxed) {
                    let sock = match server.accept() {
                        Ok((sock, _)) => {
                            backoff = None;
                            sock
                        }
                        // the listener's SO_RCVTIMEO: a chance to see `draining`
                        Err(e) if e.kind() == IoErrorKind::WouldBlock => continue,
                        Err(e) => {
                            let pause = util::conn_ctl::accept_backoff(backoff);
                            backoff = Some(pause);
                            log::error!(
                                "Error accepting new client: {}; retrying in {:?}",
                                e,
                                pause
                            );
                            thread::sleep(pause);
                            continue;
                        }
                    };
                    if inside_close_trigger.load(Relaxed) {
                        break;
                    }

                    let slot = match util::ConnSlot::try_take(&inside_open, limits.max_connections)
                    {
                        Some(slot) => slot,
                        None => {
                            // over the cap: a fast answer from this thread, no thread spawned
                            log::debug!("connection cap reached, refusing a connection");
                            if ssl.is_none() {
                                util::conn_ctl::refuse_connection(sock, &limits.error_body);
                            }
                            continue;
                        }
                    };
                    let _ = sock.set_write_timeout(limits.write_timeout.filter(|t| !t.is_zero()));
                    // an accepted socket inherits the listener's SO_RCVTIMEO (see `draining`);
                    // its reads get their own timeouts
                    let _ = sock.set_read_timeout(None);

                    use util::{ConnCtl, RefinedTcpStream};
                    let (read_closable, write_closable, ctl) = match ssl {
                        None => {
                            let sock = Arc::new(sock);
                            let ctl = ConnCtl::new(Some(sock.clone()), Some(slot));
                            let (r, w) = RefinedTcpStream::new(sock, ctl.clone());
                            (r, w, ctl)
                        }
                        #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
                        Some(ref ssl) => {
                            // a handle on the TCP socket for its options; the handshake happens
                            // on this thread, so bound it by the head timeout
                            let handle = sock.try_clone().ok().map(Arc::new);
                            if let Some(handle) = &handle {
                                let _ = handle.set_read_timeout(limits.head_timeout);
                            }
                            // trying to apply SSL over the connection
                            // if an error occurs, we just close the socket and resume listening
                            let sock = match ssl.accept(sock) {
                                Ok(s) => s,
                                Err(_) => continue,
                            };

                            let ctl = ConnCtl::new(handle, Some(slot));
                            let (r, w) = RefinedTcpStream::new(sock, ctl.clone());
                            (r, w, ctl)
                        }
                        #[cfg(not(any(feature = "ssl-openssl", feature = "ssl-rustls")))]
                        Some(ref _ssl) => unreachable!(),
                    };

                    let client = ClientConnection::new(
                        write_closable,
                        read_closable,
                        ctl.clone(),
                        limits.clone(),
                    );
                    let secure = client.secure();
                    let task = connection_task(client, inside_messages.clone(), tasks_pool.clone());
                    if tasks_pool.spawn(task).is_err() {
                        // no thread for it (the pool logged why): answer 503 rather than hang
                        if !secure {
                            ctl.refuse(&limits.error_body);
                        }
                    }
                }
                log::debug!("Terminating accept thread");
            })?;

        // result
        Ok(Server {
            messages,
            close: close_trigger,
            listening_addr: local_addr,
            open,
        })
    }

    /// Returns an iterator for all the incoming requests.
    ///
    /// The iterator will return `None` if the server socket is shutdown.
    #[inline]
    pub fn incoming_requests(&self) -> IncomingRequests<'_> {
        IncomingRequests { server: self }
    }

    /// Returns the address the server is listening to.
    #[inline]
    pub fn server_addr(&self) -> ListenAddr {
        self.listening_addr.clone()
    }

    /// Returns the number of clients currently connected to the server.
    ///
    /// iac-code-agui patch: implemented (it was `unimplemented!()`): connections accepted whose
    /// reader, writer, and requests are not all gone yet.
    pub fn num_connections(&self) -> usize {
        self.open.load(Relaxed)
    }

    /// Blocks until an HTTP request has been submitted and returns it.
    pub fn recv(&self) -> IoResult<Request> {
        match self.messages.pop() {
            Some(Message::Error(err)) => Err(err),
            Some(Message::NewRequest(rq)) => Ok(rq),
            None => Err(IoError::new(IoErrorKind::Other, "thread unblocked")),
        }
    }

    /// Same as `recv()` but doesn't block longer than timeout
    pub fn recv_timeout(&self, timeout: Duration) -> IoResult<Option<Request>> {
        match self.messages.pop_timeout(timeout) {
            Some(Message::Error(err)) => Err(err),
            Some(Message::NewRequest(rq)) => Ok(Some(rq)),
            None => Ok(None),
        }
    }

    /// Same as `recv()` but doesn't block.
    pub fn try_recv(&self) -> IoResult<Option<Request>> {
        match self.messages.try_pop() {
            Some(Message::Error(err)) => Err(err),
            Some(Message::NewRequest(rq)) => Ok(Some(rq)),
            None => Ok(None),
        }
    }

    /// Unblock thread stuck in recv() or incoming_requests().
    /// If there are several such threads, only one is unblocked.
    /// This method allows graceful shutdown of server.
    pub fn unblock(&self) {
        self.messages.unblock();
    }
}

impl Iterator for IncomingRequests<'_> {
    type Item = Request;
    fn next(&mut self) -> Option<Request> {
        self.server.recv().ok()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.close.store(true, Relaxed);
        // Connect briefly to ourselves to unblock the accept thread
        let maybe_stream = match &self.listening_addr {
            ListenAddr::IP(addr) => TcpStream::connect(addr).map(Connection::from),
            #[cfg(unix)]
            ListenAddr::Unix(addr) => {
                // TODO: use connect_addr when its stabilized.
                let path = addr.as_pathname().unwrap();
                std::os::unix::net::UnixStream::connect(path).map(Connection::from)
            }
        };
        if let Ok(stream) = maybe_stream {
            let _ = stream.shutdown(Shutdown::Both);
        }

        #[cfg(unix)]
        if let ListenAddr::Unix(addr) = &self.listening_addr {
            if let Some(path) = addr.as_pathname() {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}
