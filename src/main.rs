//! `iac-code-agui`: parse the configuration, start (or reach) the A2A kernel, serve AG-UI.

use iac_code_agui::a2a::A2aClient;
use iac_code_agui::app::{App, Runs};
use iac_code_agui::config::{Command, Config, USAGE};
use iac_code_agui::http;
use iac_code_agui::kernel::Kernel;
use iac_code_agui::run;
use iac_code_agui::store::Store;
use iac_code_agui::stream::Heartbeats;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

fn main() {
    let config = match Command::parse(std::env::args().skip(1), |k| std::env::var(k).ok()) {
        Ok(Command::Run(c)) => *c,
        Ok(Command::Help) => {
            print!("{USAGE}");
            return;
        }
        Ok(Command::Version) => {
            println!("iac-code-agui {}", env!("CARGO_PKG_VERSION"));
            return;
        }
        Err(msg) => {
            eprintln!("iac-code-agui: {msg}\n\n{USAGE}");
            std::process::exit(2);
        }
    };
    // The HTTP libraries stay at warn whatever --debug or RUST_LOG say: their debug lines carry
    // request headers, and the upstream request carries the bearer token.
    let level = if config.debug { "debug" } else { "info" };
    let mut logger =
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(level));
    for noisy in ["ureq", "ureq_proto", "tiny_http"] {
        logger.filter_module(noisy, log::LevelFilter::Warn);
    }
    if config.log_stdout {
        logger.target(env_logger::Target::Stdout);
    }
    logger.init();
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    raise_fd_limit();
    let server = match listen(&config) {
        Ok(s) => Arc::new(s),
        Err(e) => {
            eprintln!(
                "iac-code-agui: cannot listen on {}:{}: {e}",
                config.host, config.port
            );
            std::process::exit(1);
        }
    };
    let (url, managed) = match &config.a2a_url {
        Some(url) => (url.clone(), None),
        None => match Kernel::start(&config) {
            Ok(k) => (k.url(), Some(k)),
            Err(e) => {
                eprintln!("iac-code-agui: {e}");
                std::process::exit(1);
            }
        },
    };
    if let Some(k) = &managed {
        k.supervise();
    }
    let app = Arc::new(App {
        a2a: A2aClient::new(
            &url,
            managed
                .as_ref()
                .map(|k| k.token().to_string())
                .or(config.a2a_token.clone()),
            config.a2a_idle_timeout,
        ),
        store: Store::new(config.state_dir.clone()),
        heartbeats: Heartbeats::start(config.heartbeat),
        runs: Runs::default(),
        config,
    });
    http::serve(app.clone(), server.clone(), app.config.workers);
    let addr = server.server_addr();
    log::info!("iac-code-agui listening on http://{addr} (A2A {url})");
    let mut idle_since = Instant::now();
    while !STOP.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(50));
        if app.store.active_runs() > 0 {
            idle_since = Instant::now();
        }
        let idle = app.config.idle_shutdown;
        if !idle.is_zero() && idle_since.elapsed() >= idle {
            log::info!("idle for {idle:?}; shutting down");
            break;
        }
    }
    // Every active run ends with RUN_ERROR and a proper end of stream, its task cancelled;
    // then the kernel stops.
    log::info!("stopping");
    run::shutdown(&app, SHUTDOWN_GRACE);
    if let Some(k) = managed {
        k.stop();
    }
    log::info!("stopped");
}

/// How long active runs get to end themselves on SIGTERM/SIGINT before their streams are ended
/// for them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Each SSE run holds two sockets (client and upstream); the default soft limit of 1024 open files
/// would cap us near 500 concurrent runs, so take the hard limit.
fn raise_fd_limit() {
    // SAFETY: getrlimit/setrlimit on a local struct.
    unsafe {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// Binds with a deep accept queue: a burst of clients (a console reconnecting hundreds of tabs)
/// must wait in the queue, not in SYN retries that add seconds. The HTTP limits (head size, URL,
/// timeouts, connection cap) are enforced by tiny_http from the configuration.
fn listen(config: &Config) -> Result<tiny_http::Server, Box<dyn std::error::Error + Send + Sync>> {
    use std::os::fd::AsRawFd;
    let listener = std::net::TcpListener::bind((config.host.as_str(), config.port))?;
    // SAFETY: listen(2) again on our own listening socket only changes its backlog.
    unsafe { libc::listen(listener.as_raw_fd(), 4096) };
    tiny_http::Server::from_listener_with_limits(listener, None, http::limits(config))
}
