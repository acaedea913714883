//! What /proc says about a process (memory, CPU time, descriptors) and about a loopback
//! connection (its send queue), and the descriptor limits of a child and of this process.

use std::process::Command;

/// A numeric field of `/proc/<pid>/status`: kB for `VmRSS`, `VmHWM`, …, a count for `Threads`.
pub fn proc_status(pid: u32, key: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// A `kB` field of `/proc/<pid>/status` (`VmRSS`, `VmHWM`, …), 0 if unreadable.
pub fn proc_kb(pid: u32, key: &str) -> u64 {
    proc_status(pid, key).unwrap_or(0)
}

/// Resets `VmHWM` to the current RSS (`echo 5 > /proc/<pid>/clear_refs`); false if refused.
pub fn reset_hwm(pid: u32) -> bool {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
}

/// User + system CPU seconds of `pid`.
pub fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest: Vec<&str> = stat
        .rsplit_once(')')
        .map(|r| r.1)
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|&i| rest.get(i)?.parse::<f64>().ok())
        .sum();
    // SAFETY: sysconf has no preconditions.
    ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

pub fn fd_count(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count() as u64)
        .unwrap_or(0)
}

/// Runs the child with `RLIMIT_NOFILE` = `n` (soft and hard, so it cannot raise it back).
pub fn limit_nofile(cmd: &mut Command, n: u64) {
    use std::os::unix::process::CommandExt;
    // SAFETY: setrlimit is async-signal-safe; the closure touches nothing else.
    unsafe {
        cmd.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: n as libc::rlim_t,
                rlim_max: n as libc::rlim_t,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Raises this process's soft `RLIMIT_NOFILE` to its hard limit; returns the new soft limit.
pub fn raise_own_nofile() -> u64 {
    // SAFETY: getrlimit/setrlimit on a local struct.
    unsafe {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 0;
        }
        if lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
        lim.rlim_cur
    }
}

/// The send queue (bytes not yet acknowledged) of the loopback connection from `local_port` to
/// `peer_port`, from `/proc/net/tcp`; `None` if there is no such connection.
pub fn send_queue(local_port: u16, peer_port: u16) -> Option<u64> {
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    let port = |addr: &str| u16::from_str_radix(addr.rsplit(':').next()?, 16).ok();
    table.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 5 || port(f[1])? != local_port || port(f[2])? != peer_port {
            return None;
        }
        u64::from_str_radix(f[4].split(':').next()?, 16).ok()
    })
}
