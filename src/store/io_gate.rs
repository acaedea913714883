//! The descriptors state files take at once, bounded, and an open that finds none left waited
//! for rather than failed.
//!
//! A held run costs 2 descriptors; what admission and a run's end open beside them (a state file
//! read, a temporary file and its directory for a write) is transient, and when thousands of
//! runs start or end at once those opens are what runs into the open-file limit (at 9,000 held
//! runs under a 20,000 limit, a few dozen admissions failed with `STATE_PERSISTENCE_FAILED`).
//! So at most [`AT_ONCE`] state file operations hold a descriptor at a time (the start-up check
//! counts them in its reserve, `main.rs`), and one that still meets `EMFILE`/`ENFILE` (another
//! part of the process took the last one: an accept, an upstream connect) is tried again for up
//! to [`OUT_OF_DESCRIPTORS_WAIT`] (`descriptors.rs`, as the conversation log's open and the
//! kernel connect are): descriptors come back as soon as other runs settle, and the request then
//! succeeds instead of failing.

use crate::descriptors::{waiting_out_exhaustion, OUT_OF_DESCRIPTORS_WAIT};
use parking_lot::{Condvar, Mutex};

/// State file operations holding a descriptor at once (each holds one at a time: a read's file,
/// a write's temporary file, then its directory).
pub(crate) const AT_ONCE: usize = 16;

static IN_USE: Mutex<usize> = Mutex::new(0);
static FREED: Condvar = Condvar::new();

/// Runs `op` (a state file read or write) within the bound, again while the process is out of
/// descriptors (bounded).
pub(super) fn with_descriptor<T>(op: impl FnMut() -> std::io::Result<T>) -> std::io::Result<T> {
    let _permit = Permit::take();
    waiting_out_exhaustion(OUT_OF_DESCRIPTORS_WAIT, op)
}

struct Permit;

impl Permit {
    fn take() -> Permit {
        let mut n = IN_USE.lock();
        while *n >= AT_ONCE {
            FREED.wait(&mut n);
        }
        *n += 1;
        Permit
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        *IN_USE.lock() -= 1;
        FREED.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn no_more_than_the_bound_hold_a_descriptor_at_once() {
        let now = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..AT_ONCE * 3)
            .map(|_| {
                let (now, most) = (now.clone(), most.clone());
                std::thread::spawn(move || {
                    with_descriptor(|| {
                        let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(n, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(5));
                        now.fetch_sub(1, Ordering::SeqCst);
                        Ok(())
                    })
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap().unwrap();
        }
        let most = most.load(Ordering::SeqCst);
        assert!((1..=AT_ONCE).contains(&most), "{most} at once");
    }

    #[test]
    fn an_open_out_of_descriptors_is_tried_again_and_other_errors_are_not() {
        let mut tries = 0;
        let r = with_descriptor(|| {
            tries += 1;
            match tries {
                1 | 2 => Err(std::io::Error::from_raw_os_error(libc::EMFILE)),
                _ => Ok(tries),
            }
        });
        assert_eq!(r.unwrap(), 3);
        let mut tries = 0;
        let r: std::io::Result<()> = with_descriptor(|| {
            tries += 1;
            Err(std::io::Error::from_raw_os_error(libc::ENOENT))
        });
        assert!(r.is_err());
        assert_eq!(tries, 1);
    }
}
