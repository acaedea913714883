//! Dispatch: each request on its own short-lived thread, its handler under `catch_unwind`, a
//! panic answered with a JSON 500 and logged with a backtrace.

use super::answer::{reply_error, Stream};
use super::request::handle;
use crate::app::App;
use crate::error::{Lang, Msg};
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;
use tiny_http::Request;

/// Stack of a request thread, which is also the run's thread: runs are many and long-lived, and
/// only touched pages cost memory (a held run gives back what admission touched below its read
/// loop: `memory::release_unused_stack`). 512 KiB is address space for the deep paths: serde's
/// recursion on a nested request or frame (its depth limit is 128), a large pipeline frame
/// through the projection, and a panic's backtrace symbolized on this thread before
/// `catch_unwind` answers it (tests/stacks.rs runs both in a debug build); glibc puts a guard
/// page below it, so an overflow is a crash, never a silent corruption.
const RUN_STACK: usize = 512 * 1024;
/// Name of request threads; the panic hook logs their panics with a backtrace.
const REQUEST_THREAD: &str = "http-req";

/// Starts `dispatchers` threads taking requests from `server`; each request gets its own thread.
pub fn serve(app: &Arc<App>, server: &Arc<tiny_http::Server>, dispatchers: usize) {
    log_request_panics();
    let weak = Arc::downgrade(server);
    crate::metrics::count_connections_with(move || {
        weak.upgrade().map_or(0, |s| s.num_connections())
    });
    for i in 0..dispatchers {
        let (app, server) = (app.clone(), server.clone());
        let spawned = std::thread::Builder::new()
            .name(format!("http-{i}"))
            .spawn(move || loop {
                match server.recv() {
                    Ok(req) => dispatch(&app, req),
                    Err(e) => {
                        log::error!("accept failed: {e}");
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
            });
        if let Err(e) = spawned {
            log::error!("cannot spawn HTTP dispatcher {i}: {e}");
        }
    }
}

/// Hands `req` to a new thread. When no thread can be started the dispatcher answers 503 itself:
/// the request is kept in a cell the failed closure shared, so it is not lost with the closure.
fn dispatch(app: &Arc<App>, req: Request) {
    let cell = Arc::new(Mutex::new(Some(req)));
    let (app2, cell2) = (app.clone(), cell.clone());
    let spawned = std::thread::Builder::new()
        .name(REQUEST_THREAD.into())
        .stack_size(RUN_STACK)
        .spawn(move || {
            let req = cell2.lock().take();
            if let Some(req) = req {
                handle_guarded(&app2, req);
            }
        });
    if let Err(e) = spawned {
        log::error!("cannot spawn a request thread: {e}");
        if let Some(req) = cell.lock().take() {
            reply_error(req, &Msg::Overloaded.err(), Lang::En);
        }
    }
}

/// Installs (once) a panic hook that logs a request thread's panic with a backtrace; other
/// threads keep the previous hook.
fn log_request_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if std::thread::current().name() == Some(REQUEST_THREAD) {
                let bt = std::backtrace::Backtrace::force_capture();
                log::error!("request handler panicked: {info}\n{bt}");
            } else {
                previous(info);
            }
        }));
    });
}

/// Runs the handler; a panic (logged by the hook) answers a JSON 500 if the request was not
/// answered yet. A stream the handler returned runs after it, from this small frame.
fn handle_guarded(app: &Arc<App>, req: Request) {
    if let Some(stream) = check_guarded(app, req) {
        // A panic is logged by the hook; the response has begun, there is nothing to answer.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(stream));
    }
    // After a large body (a run included): the allocator's free pages go back to the system.
    crate::memory::after_request();
}

/// The checks and the answer, in frames of their own that are gone before a stream runs (never
/// inlined: their frames are large, and a held stream would keep them resident).
#[inline(never)]
fn check_guarded(app: &Arc<App>, req: Request) -> Option<Stream> {
    let mut stream = None;
    guarded(
        req,
        |slot| stream = handle(app, slot),
        |req| reply_error(req, &Msg::Internal.err(), Lang::En),
    );
    stream
}

/// Runs `f` on `item` held in a slot that outlives a panic of `f`: `f` takes the item out when it
/// is done with it, and whatever is left after a panic goes to `on_panic` (a request dropped
/// during the unwinding would send tiny_http's bare 500 instead of ours).
fn guarded<T>(item: T, f: impl FnOnce(&mut Option<T>), on_panic: impl FnOnce(T)) {
    let mut slot = Some(item);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&mut slot)));
    if outcome.is_err() {
        if let Some(item) = slot.take() {
            on_panic(item);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panicking_handler_leaves_the_request_to_the_panic_answer() {
        let answered = std::cell::Cell::new(None);
        guarded(
            "req",
            |_slot| panic!("handler bug"),
            |r| answered.set(Some(r)),
        );
        assert_eq!(answered.get(), Some("req"));
        // A handler that took the request (answered it) leaves nothing to answer twice.
        let answered = std::cell::Cell::new(None);
        guarded(
            "req",
            |slot| {
                slot.take();
                panic!("after answering")
            },
            |r| answered.set(Some(r)),
        );
        assert_eq!(answered.get(), None);
    }
}
