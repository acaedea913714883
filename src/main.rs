//! `iac-code-agui`: parse the configuration, start (or reach) the A2A kernel, serve AG-UI.
//!
//! `main` is the list of start-up phases, one function each; the functions follow in that order.

use iac_code_agui::a2a::A2aClient;
use iac_code_agui::app::{App, Runs};
use iac_code_agui::config::{usage, Command, Config, LogFormat};
use iac_code_agui::feed::Feeds;
use iac_code_agui::history::History;
use iac_code_agui::http;
use iac_code_agui::kernel::{self, Kernel};
use iac_code_agui::kernel_drain;
use iac_code_agui::logctx;
use iac_code_agui::run;
use iac_code_agui::store::Store;
use iac_code_agui::stream::Heartbeats;
use iac_code_agui::threadfeed::ThreadFeeds;
use iac_code_agui::upgrade::{self, Inherited};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn main() {
    if std::env::var_os(kernel::GUARD_ENV).is_some() {
        kernel::guard_main();
    }
    // Before any thread: large blocks in mappings of their own, freed memory given back.
    // Before any thread: no per-thread caches of freed blocks (this binary executed again with
    // the glibc tunable), large blocks in mappings of their own, freed memory given back.
    iac_code_agui::memory::exec_without_thread_caches();
    iac_code_agui::memory::tune();
    upgrade::remember_binary();
    let mut inherited = upgrade::take_inherited();
    let mut config = parse_command_line();
    init_logging(&config);
    install_signal_handlers();
    fit_host_limits(&mut config);
    let draining = Arc::new(AtomicBool::new(false));
    let (server, listen_fd) = listen_or_exit(&config, &mut inherited, &draining);
    log_configuration(&config);
    let kernel = reach_kernel(&config, &mut inherited);
    let app = build_app(config, &kernel, draining);
    serve(&app, &server);
    inherited.index_what_the_old_process_wrote(&app);
    inherited.announce_ready();
    loop {
        match wait_for_stop_or_idle(&app) {
            Wake::Upgrade => {
                if upgrade_and_drain(&app, listen_fd, &kernel) {
                    return;
                }
            }
            Wake::KernelDrain => {
                let signals = kernel_drain::Signals {
                    stop: &|| STOP.load(Ordering::SeqCst),
                    again: &|| KERNEL_DRAIN.swap(false, Ordering::SeqCst),
                };
                kernel_drain::drain_kernel(&app, kernel.managed.as_ref(), &signals);
            }
            Wake::Stop => break,
        }
    }
    shut_down(&app, kernel);
}

/// The configuration, or the help, the version or a usage error (exit 2) printed and the process
/// ended.
fn parse_command_line() -> Config {
    match Command::parse(std::env::args().skip(1), |k| std::env::var(k).ok()) {
        Ok(Command::Run(c)) => *c,
        Ok(Command::Help) => {
            print!("{}", usage());
            std::process::exit(0);
        }
        Ok(Command::Version) => {
            println!("iac-code-agui {}", env!("CARGO_PKG_VERSION"));
            std::process::exit(0);
        }
        Err(msg) => {
            eprintln!("iac-code-agui: {msg}\n\n{}", usage());
            std::process::exit(2);
        }
    }
}

/// Text lines (env_logger's) or JSON lines with the run's ids as fields.
fn init_logging(config: &Config) {
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
    if config.log_format == LogFormat::Json {
        logger.format(|buf, record| {
            let mut line = serde_json::Map::new();
            let ts = buf.timestamp_millis().to_string();
            line.insert("ts".into(), ts.into());
            line.insert("level".into(), record.level().as_str().into());
            line.insert("target".into(), record.target().into());
            line.insert("message".into(), record.args().to_string().into());
            let ids = logctx::current();
            for (k, v) in [
                ("threadId", ids.thread_id),
                ("runId", ids.run_id),
                ("executionId", ids.execution_id),
            ] {
                if let Some(v) = v {
                    line.insert(k.into(), v.into());
                }
            }
            writeln!(buf, "{}", serde_json::Value::Object(line))
        });
    }
    logger.init();
}

/// Set by SIGINT and SIGTERM; the idle loop polls it.
static STOP: AtomicBool = AtomicBool::new(false);
/// Set by SIGUSR2: replace this process by the binary now at its path (`upgrade.rs`).
static UPGRADE: AtomicBool = AtomicBool::new(false);
/// Set by SIGHUP: drain, then restart the kernel or wait for it (`kernel_drain.rs`).
static KERNEL_DRAIN: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

extern "C" fn on_upgrade(_: libc::c_int) {
    UPGRADE.store(true, Ordering::SeqCst);
}

extern "C" fn on_kernel_drain(_: libc::c_int) {
    KERNEL_DRAIN.store(true, Ordering::SeqCst);
}

/// SIGINT and SIGTERM ask for a graceful stop (`STOP`), SIGUSR2 for an upgrade, SIGHUP for a
/// kernel drain; a client gone mid-write is an error on the write, not a SIGPIPE.
fn install_signal_handlers() {
    // SAFETY: the handlers only store to an atomic.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGUSR2, on_upgrade as *const () as libc::sighandler_t);
        libc::signal(
            libc::SIGHUP,
            on_kernel_drain as *const () as libc::sighandler_t,
        );
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

/// What the host's limits hold, checked before any connection: each held run costs 2 descriptors
/// (its client connection and its upstream stream; its conversation log is closed while it
/// waits, and a managed kernel is its own process) and 1 thread (the run's: its connection waits parked, without
/// one), each thread 4 memory mappings (its stack and guard page, and the alternate signal stack
/// and its guard page Rust gives every thread). The open-file limit is raised to the hard limit (an unprivileged process cannot go
/// further); `vm.max_map_count` is the host's. Out of descriptors, an accept or a connect fails
/// and is answered; out of mappings, a new thread cannot get its stacks and Rust aborts the whole
/// process, so `--max-connections` is lowered to what the mappings hold (beyond it a fast 503),
/// with a warning; a warning too when fewer than `RUNS_WANTED` runs fit.
fn fit_host_limits(config: &mut Config) {
    let by_fds = runs_within(raise_fd_limit());
    let maps = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok());
    let by_maps = maps.map_or(u64::MAX, |m| m.saturating_sub(MAP_RESERVE) / MAPS_PER_RUN);
    let room = by_fds.min(by_maps);
    let limits = format!(
        "open-file limit {} ({FDS_PER_RUN} a run: room for {by_fds} runs), vm.max_map_count {} \
         ({MAPS_PER_RUN} a run: room for {} runs)",
        by_fds * FDS_PER_RUN + FD_RESERVE,
        maps.map_or("unknown".into(), |m| m.to_string()),
        if by_maps == u64::MAX {
            "?".into()
        } else {
            by_maps.to_string()
        }
    );
    if room < RUNS_WANTED {
        log::warn!(
            "{limits}: about {room} concurrent runs fit, fewer than {RUNS_WANTED}; raise the hard \
             open-file limit (LimitNOFILE= in a systemd unit, docker run --ulimit nofile=N:N) or \
             vm.max_map_count (sysctl) for more"
        );
    } else {
        log::info!("{limits}: about {room} concurrent runs fit");
    }
    let cap = usize::try_from(by_maps).unwrap_or(usize::MAX);
    if let Some(before) = config.cap_connections(cap) {
        log::warn!(
            "--max-connections {before} lowered to {cap}: more connections than \
             vm.max_map_count holds would abort the process when a thread cannot be started"
        );
    }
}

/// The concurrent runs the adapter should hold on a host that allows it (issue 27).
const RUNS_WANTED: u64 = 10_000;
/// Descriptors that are not a held run's: stdio, the listener, the log, /health and other short
/// requests in flight (64); state files being read or written (at most 16 at once,
/// `store::io_gate::AT_ONCE`); `CancelTask` calls in flight (at most 32 at once,
/// `run::cancel::CANCELS_AT_ONCE`); and a burst of admissions (1,024): a run keeps its
/// conversation log open until its upstream first falls silent (half a second: ~500 runs at
/// 1,000 admissions a second), and each admission in flight holds its client's connection
/// before it counts as a held run (512 at once from the bench's clients). With 512 for the
/// burst, 9,688 runs here, a few dozen upstream connects failed on `EMFILE`.
const FD_RESERVE: u64 = 64 + 16 + 32 + 1024;
/// Mappings that are not a run's: the binary and libraries, malloc arenas, the other threads.
const MAP_RESERVE: u64 = 2_000;
/// A run's mappings: its thread's (stack, its guard, signal stack, its guard), and a second
/// thread for a moment when its client leaves (the `CancelTask`): when thousands leave at once,
/// their cancels need mappings too (when these were not counted, 7,941 runs here, only 457 of the
/// cancels got a thread).
const MAPS_PER_RUN: u64 = 8;
/// A held run's descriptors: its client connection and its upstream stream.
const FDS_PER_RUN: u64 = 2;

/// How many runs fit in `limit` open files.
fn runs_within(limit: u64) -> u64 {
    limit.saturating_sub(FD_RESERVE) / FDS_PER_RUN
}

/// The soft open-file limit raised to the hard limit; the limit in force.
fn raise_fd_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit on a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 1024;
        }
        if lim.rlim_cur < lim.rlim_max {
            let wanted = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &wanted) == 0 {
                lim.rlim_cur = lim.rlim_max;
            }
        }
    }
    lim.rlim_cur
}

/// The bound server and its listening descriptor, or the reason on stderr and exit 1.
fn listen_or_exit(
    config: &Config,
    inherited: &mut Inherited,
    draining: &Arc<AtomicBool>,
) -> (Arc<tiny_http::Server>, std::os::fd::RawFd) {
    match listen(config, inherited.listener.take(), draining) {
        Ok(s) => s,
        Err(e) => {
            eprintln!(
                "iac-code-agui: cannot listen on {}:{}: {e}",
                config.host, config.port
            );
            std::process::exit(1);
        }
    }
}

/// Binds with a deep accept queue: a burst of clients (a console reconnecting hundreds of tabs)
/// must wait in the queue, not in SYN retries that add seconds; or takes the socket an upgrade
/// handed over (the same queue: no connection is refused meanwhile). The HTTP limits (head
/// size, URL, timeouts, connection cap) are enforced by tiny_http from the configuration.
fn listen(
    config: &Config,
    inherited: Option<std::net::TcpListener>,
    draining: &Arc<AtomicBool>,
) -> Result<(Arc<tiny_http::Server>, std::os::fd::RawFd), Box<dyn std::error::Error + Send + Sync>>
{
    use std::os::fd::AsRawFd;
    let listener = match inherited {
        Some(l) => l,
        None => std::net::TcpListener::bind((config.host.as_str(), config.port))?,
    };
    let fd = listener.as_raw_fd();
    // SAFETY: listen(2) again on our own listening socket only changes its backlog; the receive
    // timeout makes accept(2) return now and then, so an upgrade can stop this process accepting.
    unsafe {
        libc::listen(fd, 4096);
        let tv = libc::timeval {
            tv_sec: 0,
            tv_usec: 250_000,
        };
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        );
    }
    let mut limits = http::limits(config);
    limits.draining = draining.clone();
    let server = tiny_http::Server::from_listener_with_limits(listener, None, limits)?;
    Ok((Arc::new(server), fd))
}

/// One INFO line each for what an operator checks first: the state dir, the allowed workspace
/// roots (and the variable that sets them), and for a managed kernel whether the LLM settings it
/// needs are anywhere (else the first turn fails with "Authentication required").
fn log_configuration(config: &Config) {
    log::info!("state dir: {}", config.state_dir.display());
    let roots = std::env::join_paths(&config.allowed_cwds)
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    let source = if std::env::var_os("IAC_CODE_AGUI_ALLOWED_CWDS").is_some() {
        "from IAC_CODE_AGUI_ALLOWED_CWDS"
    } else if std::env::var_os("IACCODE_A2A_ALLOWED_CWDS").is_some() {
        "from IACCODE_A2A_ALLOWED_CWDS"
    } else {
        "default: the current directory and the temp dir; set IAC_CODE_AGUI_ALLOWED_CWDS to change"
    };
    log::info!("allowed workspace roots: {roots} ({source})");
    Store::new(config.state_dir.clone()).check_permissions();
    if config.a2a_url.is_none() {
        if let Some(warning) = missing_llm_settings(|k| std::env::var(k).ok()) {
            log::warn!("{warning}");
        }
    }
}

/// The kernel takes its LLM key from `IAC_CODE_API_KEY` (with `IAC_CODE_PROVIDER`,
/// `IAC_CODE_MODEL`, `IAC_CODE_BASE_URL` beside it), else from the provider saved by `iac-code`'s
/// `/auth` in `<config-dir>/settings.yml`. With neither, only requests that carry
/// `forwardedProps.iacCode.llmApiKey` can run.
fn missing_llm_settings(env: impl Fn(&str) -> Option<String>) -> Option<String> {
    let set = |k: &str| env(k).is_some_and(|v| !v.trim().is_empty());
    if set("IAC_CODE_API_KEY") {
        return None;
    }
    let config_dir = env("IAC_CODE_CONFIG_DIR")
        .filter(|d| !d.trim().is_empty())
        .map(std::path::PathBuf::from)
        .or_else(|| env("HOME").map(|h| std::path::Path::new(&h).join(".iac-code")))?;
    let settings = config_dir.join("settings.yml");
    if settings.is_file() {
        return None;
    }
    let partly: Vec<&str> = ["IAC_CODE_PROVIDER", "IAC_CODE_MODEL", "IAC_CODE_BASE_URL"]
        .into_iter()
        .filter(|k| set(k))
        .collect();
    let partly = if partly.is_empty() {
        String::new()
    } else {
        format!(" ({} set, but no key)", partly.join(", "))
    };
    Some(format!(
        "no LLM configuration for the managed kernel: IAC_CODE_API_KEY is not set{partly} and \
         {} does not exist; runs will end with RUN_ERROR (\"Authentication required\") unless \
         each request carries forwardedProps.iacCode.llmApiKey. Set IAC_CODE_PROVIDER (e.g. \
         \"OpenAI Compatible\"), IAC_CODE_MODEL, IAC_CODE_BASE_URL and IAC_CODE_API_KEY, or run \
         `iac-code` once and use /auth",
        settings.display()
    ))
}

/// The A2A kernel the runs talk to: the external one at `--a2a-url`, or one started here and
/// supervised (restarted if it exits).
struct Upstream {
    url: String,
    managed: Option<Arc<Kernel>>,
}

/// Reaches the kernel (adopting the one an upgrade handed over, else starting a managed one;
/// exit 1 when it cannot start) and logs which.
fn reach_kernel(config: &Config, inherited: &mut Inherited) -> Upstream {
    let upstream = match &config.a2a_url {
        Some(url) => Upstream {
            url: url.clone(),
            managed: None,
        },
        None if inherited.kernel.is_some() => {
            let k = Kernel::adopt(config, inherited.kernel.take().expect("checked"));
            Upstream {
                url: k.url(),
                managed: Some(k),
            }
        }
        None => match Kernel::start(config) {
            Ok(k) => Upstream {
                url: k.url(),
                managed: Some(k),
            },
            Err(e) => {
                eprintln!("iac-code-agui: {e}");
                std::process::exit(1);
            }
        },
    };
    match &upstream.managed {
        Some(k) => {
            log::info!(
                "A2A kernel: managed `{}` on 127.0.0.1:{} (iac-code {}), restarted if it exits",
                k.command(),
                k.port(),
                k.version().as_deref().unwrap_or("version unknown")
            );
            k.supervise();
        }
        None => log::info!("A2A kernel: external at {}", upstream.url),
    }
    upstream
}

/// What every request shares; a managed kernel's own token replaces `a2a-token`.
fn build_app(config: Config, kernel: &Upstream, draining: Arc<AtomicBool>) -> Arc<App> {
    let token = match &kernel.managed {
        Some(k) => Some(k.token().to_string()),
        None => config.a2a_token.clone(),
    };
    Arc::new(App {
        a2a: A2aClient::new(&kernel.url, token, config.a2a_idle_timeout),
        store: Store::new(config.state_dir.clone()),
        heartbeats: Heartbeats::start(config.heartbeat),
        feeds: Feeds::start(config.replay_buffer_bytes, config.detach_grace),
        history: History::new(&config.state_dir, config.history_max_messages),
        threads: ThreadFeeds::start(),
        runs: Runs::default(),
        draining,
        config,
    })
}

/// Starts the dispatcher threads and says where the adapter listens; then the scan that builds
/// the thread list's index, in the background (start-up waits for none of it).
fn serve(app: &Arc<App>, server: &Arc<tiny_http::Server>) {
    http::serve(app, server, app.config.workers);
    log::info!(
        "iac-code-agui {} listening on http://{}",
        env!("CARGO_PKG_VERSION"),
        server.server_addr()
    );
    app.store.start_index();
}

/// Why the idle loop returned.
enum Wake {
    /// SIGINT/SIGTERM, or idle for `--idle-shutdown`.
    Stop,
    /// SIGUSR2.
    Upgrade,
    /// SIGHUP.
    KernelDrain,
}

/// Returns on SIGINT/SIGTERM, SIGUSR2, SIGHUP, or once no run has been active for `--idle-shutdown`
/// (when set). Each time the runs stop for [`REST`], the allocator gives back what the last burst
/// left free.
fn wait_for_stop_or_idle(app: &App) -> Wake {
    let mut idle_since = Instant::now();
    // Nothing to give back before the first run.
    let mut trimmed = true;
    // A run shorter than one 50 ms look at `active_runs` is seen by the count of ended runs.
    let mut ended = app.runs_ended();
    while !STOP.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(50));
        if UPGRADE.swap(false, Ordering::SeqCst) {
            return Wake::Upgrade;
        }
        if KERNEL_DRAIN.swap(false, Ordering::SeqCst) {
            return Wake::KernelDrain;
        }
        if app.store.active_runs() > 0 || app.runs_ended() != ended {
            ended = app.runs_ended();
            idle_since = Instant::now();
            trimmed = false;
        }
        if !trimmed && idle_since.elapsed() >= REST {
            iac_code_agui::memory::trim_at_rest();
            trimmed = true;
        }
        let idle = app.config.idle_shutdown;
        if !idle.is_zero() && idle_since.elapsed() >= idle {
            log::info!("idle for {idle:?}; shutting down");
            return Wake::Stop;
        }
    }
    Wake::Stop
}

/// SIGUSR2: hands the listener (and a managed kernel) to a new process, then drains and returns
/// true (the process then exits, leaving the kernel to the new one); false when the new process
/// did not come up (this one goes on serving). Runs still active at `--drain-timeout`, or when
/// SIGTERM comes meanwhile, end as at a shutdown.
fn upgrade_and_drain(app: &Arc<App>, listen_fd: std::os::fd::RawFd, kernel: &Upstream) -> bool {
    log::info!("SIGUSR2: upgrading");
    if let Err(e) = upgrade::hand_over(listen_fd, kernel.managed.as_ref()) {
        log::error!("upgrade abandoned, this process goes on serving: {e}");
        return false;
    }
    let left = upgrade::drain(app, app.config.drain_timeout, &|| {
        STOP.load(Ordering::SeqCst)
    });
    if left > 0 {
        run::shutdown(app, SHUTDOWN_GRACE);
    }
    log::info!("upgraded: this process exits");
    true
}

/// No run for this long: the process is at rest (a burst is over).
const REST: Duration = Duration::from_secs(2);

/// How long active runs get to end themselves on SIGTERM/SIGINT before their streams are ended
/// for them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Every active run ends with RUN_ERROR and a proper end of stream, its task cancelled; then the
/// kernel stops.
fn shut_down(app: &Arc<App>, kernel: Upstream) {
    log::info!("stopping");
    run::shutdown(app, SHUTDOWN_GRACE);
    if let Some(k) = kernel.managed {
        k.stop();
    }
    log::info!("stopped");
}
