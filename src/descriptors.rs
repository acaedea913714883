//! An operation that finds the process out of descriptors (`EMFILE`, or the system's table full,
//! `ENFILE`) waits for one, bounded, instead of failing at once.
//!
//! Why: when thousands of runs start or end together, the descriptors they open beside the
//! ones they hold (a state file, a conversation log, a connection to the kernel) can briefly
//! reach the open-file limit. They come back within moments, as other runs settle; failing the
//! request meanwhile would turn a burst into errors a user sees and has to retry. The wait is
//! short ([`OUT_OF_DESCRIPTORS_WAIT`]): a process that stays out of descriptors fails as before.

use std::time::{Duration, Instant};

/// How long an operation that found no descriptor free keeps trying.
pub(crate) const OUT_OF_DESCRIPTORS_WAIT: Duration = Duration::from_secs(3);
/// Between two tries.
const STEP: Duration = Duration::from_millis(20);

/// Runs `op` (one that opens a descriptor and has done nothing else when that fails), and again
/// while it fails for want of a descriptor, for at most `wait`.
pub(crate) fn waiting_out_exhaustion<T>(
    wait: Duration,
    mut op: impl FnMut() -> std::io::Result<T>,
) -> std::io::Result<T> {
    let deadline = Instant::now() + wait;
    loop {
        match op() {
            Err(e) if out_of_descriptors(&e) && Instant::now() < deadline => {
                std::thread::sleep(STEP);
            }
            done => return done,
        }
    }
}

/// Whether `e` says the process (or the system) has no descriptor left.
pub(crate) fn out_of_descriptors(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE))
}

/// For tests: descriptors exhausted for real, in a child process of their own (this test binary
/// again, running one test), so that the other tests keep theirs.
#[cfg(test)]
pub(crate) mod exhaustion {
    use std::fs::File;

    const CHILD: &str = "IAC_AGUI_TEST_EXHAUSTED_CHILD";

    /// In the test binary: runs the test `name` (its path as the harness lists it) alone in a
    /// child and asserts that it passed. In that child: runs `body`.
    pub(crate) fn in_child(name: &str, body: impl FnOnce()) {
        if std::env::var_os(CHILD).is_some() {
            body();
            return;
        }
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([name, "--exact", "--test-threads=1", "--nocapture"])
            .env(CHILD, "1")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && text.contains("1 passed"),
            "the child failed:\n{text}"
        );
    }

    /// Every descriptor the process may open, held: the soft `RLIMIT_NOFILE` lowered to what is
    /// open now plus a few, and those few opened. Dropped, it gives them back (the limit stays).
    pub(crate) struct Exhausted(#[allow(dead_code)] Vec<File>);

    pub(crate) fn exhaust() -> Exhausted {
        let open = std::fs::read_dir("/proc/self/fd").unwrap().count() as u64;
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit/setrlimit on a local struct.
        unsafe {
            assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
            lim.rlim_cur = open + 8;
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
        }
        let mut held = Vec::new();
        loop {
            match File::open("/dev/null") {
                Ok(f) => held.push(f),
                Err(e) => {
                    assert!(super::out_of_descriptors(&e), "{e}");
                    break;
                }
            }
        }
        assert!(!held.is_empty());
        Exhausted(held)
    }

    /// Gives the descriptors back after `after`, from another thread.
    pub(crate) fn give_back_after(held: Exhausted, after: std::time::Duration) {
        std::thread::spawn(move || {
            std::thread::sleep(after);
            drop(held);
        });
    }
}
