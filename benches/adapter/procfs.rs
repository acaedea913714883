//! What /proc says about a process (the adapter under test) and about the machine: memory,
//! threads, descriptors, CPU time, and where the machine's CPU went during a section.

use crate::support::mib;
use std::time::Instant;

// The readers the tests use as well: one copy, in the test support crate (tests/support).
pub(crate) use test_support::procfs::{cpu_secs, fd_count, proc_status, raise_own_nofile};

/// Resident memory of `pid` grouped by mapping kind (anonymous mappings by permission and size, so
/// that thread stacks and malloc arenas show up as groups), largest first.
pub(crate) fn rss_breakdown(pid: u32) -> String {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/smaps")) else {
        return "(no /proc/<pid>/smaps)".into();
    };
    let mut groups: std::collections::HashMap<String, (u64, u64)> = Default::default();
    let mut current = String::new();
    for line in text.lines() {
        let mut parts = line.split_whitespace();
        let first = parts.next().unwrap_or("");
        if first.contains('-') && first.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            let (a, b) = first.split_once('-').unwrap();
            let lo = u64::from_str_radix(a, 16).unwrap_or(0);
            let hi = u64::from_str_radix(b, 16).unwrap_or(0);
            let size = hi.saturating_sub(lo) / 1024;
            let perms = parts.next().unwrap_or("");
            let path = parts.nth(3).unwrap_or("");
            current = if path.starts_with('[') {
                path.to_string()
            } else if !path.is_empty() {
                "file-backed".into()
            } else {
                format!("anon {perms} {size} KiB")
            };
        } else if first == "Rss:" {
            let kb: u64 = parts.next().and_then(|v| v.parse().ok()).unwrap_or(0);
            let e = groups.entry(current.clone()).or_default();
            e.0 += 1;
            e.1 += kb;
        }
    }
    let mut v: Vec<(String, (u64, u64))> = groups.into_iter().filter(|g| g.1 .1 > 0).collect();
    v.sort_by_key(|g| std::cmp::Reverse(g.1 .1));
    v.iter()
        .take(6)
        .map(|(k, (n, kb))| format!("{k} ×{n}: {:.1} MiB", mib(*kb)))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Where the machine's CPU time went since `since`: the share of the 2 cores used by processes
/// other than the bench and its children, and the hypervisor's steal.
#[derive(Clone, Copy)]
pub(crate) struct CpuMark {
    pub(crate) at: Instant,
    pub(crate) busy: f64,
    pub(crate) steal: f64,
    pub(crate) ours: f64,
}

pub(crate) fn cpu_mark() -> CpuMark {
    // SAFETY: sysconf has no preconditions; getrusage fills a local struct.
    let tck = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let f: Vec<f64> = stat
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    let get = |i: usize| f.get(i).copied().unwrap_or(0.0) / tck;
    // user nice system idle iowait irq softirq steal
    let busy = get(0) + get(1) + get(2) + get(5) + get(6);
    let mut ours = 0.0;
    for who in [libc::RUSAGE_SELF, libc::RUSAGE_CHILDREN] {
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        if unsafe { libc::getrusage(who, &mut ru) } == 0 {
            let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
            ours += tv(ru.ru_utime) + tv(ru.ru_stime);
        }
    }
    CpuMark {
        at: Instant::now(),
        busy,
        steal: get(7),
        ours,
    }
}

pub(crate) fn ncpu() -> f64 {
    std::thread::available_parallelism()
        .map(|n| n.get() as f64)
        .unwrap_or(1.0)
}

/// "other processes used X% ..." since `m` (valid when no child of ours is running unreaped).
pub(crate) fn other_cpu(m: &CpuMark) -> String {
    let now = cpu_mark();
    let cap = now.at.duration_since(m.at).as_secs_f64() * ncpu();
    let other = ((now.busy - m.busy) - (now.ours - m.ours)).max(0.0);
    format!(
        "{:.0}% of the machine's CPU went to other processes, {:.0}% to this bench (fake kernel, clients, adapter), {:.0}% was stolen by the hypervisor; load average at its end {}",
        other / cap * 100.0,
        (now.ours - m.ours) / cap * 100.0,
        (now.steal - m.steal) / cap * 100.0,
        loadavg()
    )
}

/// The 1, 5 and 15 minute load averages, as /proc/loadavg gives them.
pub(crate) fn loadavg() -> String {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let v: Vec<&str> = text.split_whitespace().take(3).collect();
    v.join(" / ")
}
