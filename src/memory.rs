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
//! `trim_at_rest` does the same once the process has had no run for a moment (`main`'s idle
//! loop), and `heap` gives the allocator's figures for `/metrics`.

use std::cell::{Cell, RefCell};

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
    /// What this thread gives back when it starts waiting idle (a run: its conversation log).
    static ON_IDLE: RefCell<Option<Box<dyn Fn()>>> = const { RefCell::new(None) };
    /// This thread's stack (lowest address, size), once [`release_unused_stack`] asked glibc:
    /// `pthread_getattr_np` allocates, and touches several hundred bytes of stack below its
    /// caller, which a release at a held run's deepest point would leave resident.
    static STACK: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
}

/// Sets (or clears) what this thread gives back when it waits idle: see [`idle`].
pub(crate) fn on_idle(hook: Option<Box<dyn Fn()>>) {
    ON_IDLE.with(|h| *h.borrow_mut() = hook);
}

/// This thread starts a long wait with nothing to do (a held run whose upstream is silent): what
/// it registered with [`on_idle`] is given back now (a descriptor, a buffer), and taken again
/// when it is next needed.
pub(crate) fn idle() {
    ON_IDLE.with(|h| {
        if let Some(hook) = h.borrow().as_ref() {
            hook();
        }
    });
}

/// The glibc tunable that turns off the per-thread caches of freed blocks (tcache).
const NO_TCACHE: &str = "glibc.malloc.tcache_count=0";
/// Set across the re-execution: `=` and the caller's `GLIBC_TUNABLES`, or empty if it had none.
const TUNED: &str = "IAC_CODE_AGUI_MALLOC_TUNED";

/// At start-up, before any thread: glibc's per-thread caches of freed blocks turned off, by
/// executing this binary again with `GLIBC_TUNABLES` (read only when a process starts; no
/// `mallopt` sets it). Why: each thread keeps up to 7 freed blocks per size class for itself,
/// never given to another thread nor back to the system, and a held run's thread freed many
/// small blocks during its admission: ~10 KiB resident a held run, 100 MiB at 10,000
/// (benches/REPORT.md, issue 27). The caches speed up a thread that frees and allocates the
/// same sizes again, which the relay does not do per frame. The caller's own `GLIBC_TUNABLES`
/// wins when it sets the cache (as `glibc.malloc.tcache_count`), and the kernel and other child
/// processes get the caller's value back. Not called by the library's tests.
pub fn exec_without_thread_caches() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use std::os::unix::process::CommandExt;
        if let Some(before) = std::env::var_os(TUNED) {
            // The second start: the caller's environment back, for the processes we start.
            match before.to_str().and_then(|b| b.strip_prefix('=')) {
                Some(value) => std::env::set_var("GLIBC_TUNABLES", value),
                None => std::env::remove_var("GLIBC_TUNABLES"),
            }
            std::env::remove_var(TUNED);
            return;
        }
        let before = std::env::var("GLIBC_TUNABLES").ok();
        if before
            .as_deref()
            .is_some_and(|t| t.contains("glibc.malloc.tcache_count"))
        {
            return;
        }
        let tunables = match &before {
            Some(t) if !t.is_empty() => format!("{t}:{NO_TCACHE}"),
            _ => NO_TCACHE.to_string(),
        };
        let mark = before.as_ref().map_or(String::new(), |t| format!("={t}"));
        let mut args = std::env::args_os();
        let argv0 = args.next().unwrap_or_default();
        let err = std::process::Command::new("/proc/self/exe")
            .arg0(argv0)
            .args(args)
            .env("GLIBC_TUNABLES", tunables)
            .env(TUNED, mark)
            .exec();
        // Not executed again (no /proc): the caches stay; nothing else changes.
        eprintln!("iac-code-agui: running with glibc's thread caches ({err})");
    }
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

/// The process has been at rest (no run) for a moment: the free pages every arena kept from the
/// last burst go back to the system, once per rest. Without it, glibc keeps each arena's freed
/// middle resident (only a heap's free top beyond the trim threshold is returned), so the
/// resident size at rest is the high-water mark of what the bursts so far left scattered over up
/// to 8 arenas per core, and it grows in steps with each larger burst (benches/REPORT.md, the
/// chaos soak). What is still allocated stays; the figures are logged (debug).
pub fn trim_at_rest() {
    let before = rss_kib();
    let heap = heap();
    trim();
    log::debug!(
        "at rest: allocator trimmed, RSS {before} -> {} KiB (heap in use {} KiB, free {} KiB)",
        rss_kib(),
        heap.in_use >> 10,
        heap.free >> 10
    );
}

/// The allocator's own figures, in bytes, over all arenas.
#[derive(Clone, Copy, Debug, Default)]
pub struct Heap {
    /// Handed out and not freed (small blocks in the arenas, large ones in their own mappings).
    pub in_use: usize,
    /// Free in the arenas, still mapped (resident where it was touched, until a trim).
    pub free: usize,
}

/// glibc's `mallinfo2` (zeros elsewhere): what the heap holds, live and free.
pub fn heap() -> Heap {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallinfo2(3) takes each arena's lock itself and returns a plain struct.
    unsafe {
        let m = libc::mallinfo2();
        return Heap {
            in_use: m.uordblks + m.hblkhd,
            free: m.fordblks,
        };
    }
    #[allow(unreachable_code)]
    Heap::default()
}

/// This process's resident size in KiB (`/proc/self/statm`; 0 if unreadable).
fn rss_kib() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * (PAGE as u64 / 1024)
}

/// `malloc_trim(0)`: free pages of every arena returned to the system.
pub fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim(3) takes each arena's lock itself.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Pages of this thread's stack below the current frame (less a margin) are given back to the
/// system: a long-lived thread (a held run) keeps resident only what its idle wait needs, not what
/// its deepest call once touched (admission parses and validates the request, writes the state,
/// logs). Later calls touch fresh zero pages again. The guard page below the stack is never
/// touched: the range starts one page above the stack's lowest address. A cheap call (one
/// `madvise`; the stack's bounds are asked of glibc once per thread); callers rate-limit it all
/// the same. Never inlined: the margin below its marker then covers only the rest of its own
/// frame and what it calls, not the rest of a caller's frame it would be inlined into.
#[inline(never)]
pub(crate) fn release_unused_stack() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: madvise(MADV_DONTNEED) covers only addresses below the live frames (STACK_MARGIN
    // under this function's own frame), inside this thread's stack.
    unsafe {
        let marker = 0u8;
        let here = std::ptr::addr_of!(marker) as usize;
        let Some((low, size)) = stack_bounds() else {
            return;
        };
        if here <= low || here >= low + size {
            return;
        }
        let start = (low + 2 * PAGE - 1) & !(PAGE - 1);
        let end = here.saturating_sub(STACK_MARGIN) & !(PAGE - 1);
        if end > start {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED);
        }
    }
}

/// This thread's stack, (lowest address, size), asked of glibc once per thread.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn stack_bounds() -> Option<(usize, usize)> {
    let known = STACK.with(Cell::get);
    if known.1 != 0 {
        return Some(known);
    }
    // SAFETY: pthread_getattr_np fills a local attribute object for this thread (a spawned
    // thread: no /proc read), destroyed after use.
    let (ok, low, size) = unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return None;
        }
        let mut low: *mut libc::c_void = std::ptr::null_mut();
        let mut size: libc::size_t = 0;
        let ok = libc::pthread_attr_getstack(&attr, &mut low, &mut size) == 0;
        libc::pthread_attr_destroy(&mut attr);
        (ok, low as usize, size)
    };
    if !ok || size == 0 {
        return None;
    }
    STACK.with(|s| s.set((low, size)));
    Some((low, size))
}

/// The whole pages inside `buf` are given back to the system (`MADV_DONTNEED`): the buffer stays
/// allocated, and those pages read as zeros when next touched. For a long-lived buffer that sits
/// unused (a held run's upstream buffers): freeing it would leave a hole in glibc's arena, still
/// resident. Its contents are lost: only for a buffer whose bytes no longer matter.
pub(crate) fn release_pages(buf: &mut [u8]) {
    #[cfg(target_os = "linux")]
    {
        let low = buf.as_mut_ptr() as usize;
        let start = (low + PAGE - 1) & !(PAGE - 1);
        let end = (low + buf.len()) & !(PAGE - 1);
        if end > start {
            // SAFETY: [start, end) lies inside `buf`, which this call borrows mutably, so no one
            // reads it meanwhile; anonymous private pages read back as zeros, a valid `u8` each.
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED);
            }
        }
    }
}

/// A zero-filled byte buffer on whole pages of its own (its start page-aligned, its allocation
/// rounded up to pages), so that [`release_pages`] gives back every page of it. Why: a buffer
/// inside a glibc arena shares its first and last page with its neighbours, and those two partial
/// pages stay resident when the rest is given back: ~4 KiB a buffer on average, 8 KiB a held run
/// for its two upstream buffers (benches/REPORT.md, issue 27, third pass). The allocation is
/// still glibc's (`posix_memalign`), in the thread's arena: no mapping of its own.
pub(crate) struct PageBuf {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

// SAFETY: PageBuf owns its allocation as a Box<[u8]> would; no shared state.
unsafe impl Send for PageBuf {}
// SAFETY: as above: `&PageBuf` only reads the bytes.
unsafe impl Sync for PageBuf {}

impl PageBuf {
    pub(crate) const fn new() -> PageBuf {
        PageBuf {
            ptr: std::ptr::NonNull::dangling(),
            len: 0,
        }
    }

    fn layout(len: usize) -> std::alloc::Layout {
        let size = len.div_ceil(PAGE) * PAGE;
        std::alloc::Layout::from_size_align(size, PAGE).expect("a buffer size within isize")
    }

    /// Grows the buffer to `len` bytes (never shrinks): its bytes kept, the new ones zero.
    pub(crate) fn grow_to(&mut self, len: usize) {
        if len <= self.len {
            return;
        }
        let layout = Self::layout(len);
        // SAFETY: `layout` has a non-zero size (len > 0); the old bytes are copied from a live
        // allocation of `self.len` bytes into a new one of at least `len`, then the old one is
        // freed with the layout it was allocated with.
        unsafe {
            let new = std::alloc::alloc_zeroed(layout);
            let Some(new) = std::ptr::NonNull::new(new) else {
                std::alloc::handle_alloc_error(layout);
            };
            if self.len > 0 {
                std::ptr::copy_nonoverlapping(self.ptr.as_ptr(), new.as_ptr(), self.len);
                std::alloc::dealloc(self.ptr.as_ptr(), Self::layout(self.len));
            }
            self.ptr = new;
        }
        self.len = len;
    }
}

impl Default for PageBuf {
    fn default() -> PageBuf {
        PageBuf::new()
    }
}

impl std::fmt::Debug for PageBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PageBuf({} bytes)", self.len)
    }
}

impl std::ops::Deref for PageBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` is a live allocation of at least `len` initialised bytes (or dangling
        // with len 0, a valid empty slice).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for PageBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` makes the borrow unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for PageBuf {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: allocated in `grow_to` with this very layout.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr(), Self::layout(self.len)) }
        }
    }
}

const PAGE: usize = 4096;
/// What stays below `release_unused_stack`'s marker: the rest of its own frame (never inlined:
/// 15 bytes below the marker in the LTO build, 87 in a debug build) and the `madvise` call (its
/// return address; the kernel's side does not use this stack). 256 bytes, not more: the page
/// under a held run's deepest frame is then given back too (issue 27).
const STACK_MARGIN: usize = 256;

#[cfg(test)]
mod tests {
    #[test]
    fn releasing_the_unused_stack_keeps_the_live_frames_intact() {
        // Touch a deep frame, release what lies below, and use both the caller's data and a
        // fresh deep frame again: the released pages come back as zero pages, the live ones keep
        // their contents.
        fn deep(n: usize) -> u64 {
            let buf = [n as u8; 4096];
            if n == 0 {
                return buf[17] as u64;
            }
            deep(n - 1) + buf[100] as u64
        }
        let live = [7u8; 1024];
        assert_eq!(deep(32), (1..=32).sum::<u64>());
        std::thread::Builder::new()
            .stack_size(512 * 1024)
            .spawn(move || {
                let mine = [9u8; 2048];
                assert_eq!(deep(48), (1..=48).sum::<u64>());
                super::release_unused_stack();
                assert!(mine.iter().all(|b| *b == 9));
                assert_eq!(deep(48), (1..=48).sum::<u64>());
            })
            .unwrap()
            .join()
            .unwrap();
        assert!(live.iter().all(|b| *b == 7));
    }

    #[test]
    fn released_pages_read_as_zeros_and_the_buffer_stays_usable() {
        let mut buf = vec![7u8; 64 * 1024];
        super::release_pages(&mut buf[..100]);
        // A slice holding no whole page keeps its bytes; the whole pages of the rest read as zeros.
        assert!(buf[..100].iter().all(|b| *b == 7));
        super::release_pages(&mut buf);
        assert_eq!(buf[32 * 1024], 0);
        buf.fill(3);
        assert!(buf.iter().all(|b| *b == 3));
    }

    #[test]
    fn a_page_buffer_grows_keeping_its_bytes_and_gives_back_every_page() {
        let mut buf = super::PageBuf::new();
        assert!(buf.is_empty());
        buf.grow_to(5000);
        assert_eq!(buf.len(), 5000);
        assert_eq!(buf.as_ptr() as usize % super::PAGE, 0, "page-aligned");
        assert!(buf.iter().all(|b| *b == 0));
        buf[..3].copy_from_slice(b"abc");
        buf.grow_to(100);
        assert_eq!(buf.len(), 5000, "never shrinks");
        buf.grow_to(9000);
        assert_eq!(&buf[..3], b"abc");
        assert!(buf[3..].iter().all(|b| *b == 0));
        super::release_pages(&mut buf);
        assert!(
            buf.iter().all(|b| *b == 0),
            "every page given back, even the first"
        );
    }

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
