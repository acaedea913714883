//! The allocator's side of large requests (a leaf): glibc told at start-up to serve large blocks
//! from their own mappings and to give freed memory back, and trimmed after a large request.
//!
//! Why: every request runs on a thread of its own, and glibc gives threads arenas of their own
//! (up to 8 per core). A 12 MiB body, its parsed text and the A2A request bytes are large blocks;
//! glibc's default mmap threshold is dynamic (it rises to the size of the largest block freed, up
//! to 32 MiB), so after the first large request such blocks come from the arenas' heaps, and a
//! heap's freed middle is kept, not returned: RSS then grows round after round of large pastes.
//! A fixed threshold keeps large blocks in mappings of their own (unmapped when freed), a fixed
//! trim threshold returns a heap's free top, and `malloc_trim(0)` after a large request returns
//! the free pages inside every arena. All of it is plain glibc (also in a crt-static build).

use std::cell::Cell;

/// Blocks from this size on get a mapping of their own, unmapped when freed (glibc's default is
/// 128 KiB, but dynamic; setting it also fixes the trim threshold).
const MMAP_THRESHOLD: i32 = 256 * 1024;
/// A heap's free top beyond this is given back at once.
const TRIM_THRESHOLD: i32 = 1024 * 1024;
/// A request body from this size on trims the allocator when its request ends.
pub(crate) const LARGE_BODY: usize = 1024 * 1024;

thread_local! {
    /// This thread read a large body (its request trims the allocator when it ends).
    static LARGE: Cell<bool> = const { Cell::new(false) };
}

/// At start-up, before any thread: the thresholds above. Not called by the library's tests.
pub fn tune() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt(3) with documented parameters, before other threads allocate.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
        libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
    }
}

/// The request on this thread read a body of `len` bytes.
pub(crate) fn note_body(len: usize) {
    if len >= LARGE_BODY {
        LARGE.with(|l| l.set(true));
    }
}

/// The request on this thread ended: after a large one, the free memory of every arena goes
/// back to the system (a few milliseconds, only after large requests).
pub(crate) fn after_request() {
    if LARGE.with(|l| l.replace(false)) {
        trim();
    }
}

/// `malloc_trim(0)`: free pages of every arena returned to the system.
pub fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim(3) takes each arena's lock itself.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_large_body_trims_once_when_its_request_ends() {
        super::note_body(super::LARGE_BODY - 1);
        assert!(!super::LARGE.with(|l| l.get()));
        super::note_body(super::LARGE_BODY);
        assert!(super::LARGE.with(|l| l.get()));
        super::after_request();
        assert!(!super::LARGE.with(|l| l.get()));
    }
}
