//! The ids of the run a thread is working for, as log fields (`--log-format json`).
//!
//! A request, and the run it admits, live on one thread from the first byte to the end of the
//! stream (see `http::dispatch`), so a thread-local is the simplest sound carrier: every log line that
//! thread writes gets the ids, with no change to the `log::…!` call sites. Threads that serve many
//! runs (heartbeats, the kernel supervisor) never set it.

use std::cell::RefCell;

#[derive(Clone, Default, Debug, PartialEq)]
pub struct RunFields {
    pub thread_id: Option<String>,
    pub run_id: Option<String>,
    pub execution_id: Option<String>,
}

thread_local! {
    static CURRENT: RefCell<RunFields> = RefCell::new(RunFields::default());
}

/// Clears the calling thread's fields when dropped: held for one request's whole life.
pub(crate) struct Scope(());

impl Drop for Scope {
    fn drop(&mut self) {
        CURRENT.with(|c| *c.borrow_mut() = RunFields::default());
    }
}

pub(crate) fn scope() -> Scope {
    Scope(())
}

/// The request on this thread is for `thread_id`/`run_id` (once its body parsed).
pub(crate) fn set_run(thread_id: &str, run_id: &str) {
    CURRENT.with(|c| {
        let mut c = c.borrow_mut();
        c.thread_id = Some(thread_id.to_string());
        c.run_id = Some(run_id.to_string());
    });
}

/// The run on this thread drives `execution_id` (decided at admission).
pub(crate) fn set_execution(execution_id: &str) {
    CURRENT.with(|c| c.borrow_mut().execution_id = Some(execution_id.to_string()));
}

/// A copy of this thread's fields (for the log formatter).
pub fn current() -> RunFields {
    CURRENT.with(|c| c.borrow().clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_last_for_the_scope_only() {
        {
            let _scope = scope();
            set_run("t", "r");
            set_execution("e");
            let f = current();
            assert_eq!(
                (
                    f.thread_id.as_deref(),
                    f.run_id.as_deref(),
                    f.execution_id.as_deref()
                ),
                (Some("t"), Some("r"), Some("e"))
            );
        }
        assert_eq!(current(), RunFields::default());
    }
}
