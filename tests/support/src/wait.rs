//! Waiting on a condition with a deadline, so that no test waits forever.

use std::time::{Duration, Instant};

/// Waits until `f` holds, up to `secs`; whether it did.
pub fn eventually(secs: u64, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}
