//! Fault injection that needs privileges: a directory that refuses new files even for root
//! (`chattr +i`), a tiny tmpfs (a full disk). Where the machine does not allow it, a test is
//! skipped with one line on stderr, except under `CI=true`, where it must run.

use crate::dirs::temp_dir;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Fault injection that needs privileges: `chattr +i` (CAP_LINUX_IMMUTABLE) or a tmpfs mount
/// (CAP_SYS_ADMIN).
#[derive(Clone, Copy, Debug)]
pub enum Fault {
    Immutable,
    Tmpfs,
}

/// Whether `fault` can be injected here (probed once). Where it cannot, the test is skipped with
/// one line on stderr, except under `CI=true`, where it must run: there it fails loudly.
pub fn can_inject(fault: Fault, test: &str) -> bool {
    static PROBES: std::sync::OnceLock<(bool, bool)> = std::sync::OnceLock::new();
    let (immutable, tmpfs) = *PROBES.get_or_init(|| (probe_immutable(), probe_tmpfs()));
    let ok = match fault {
        Fault::Immutable => immutable,
        Fault::Tmpfs => tmpfs,
    };
    if ok || std::env::var("CI").is_ok_and(|v| v == "true") {
        return true;
    }
    // Straight to stderr, not `eprintln!`: libtest captures the macros' output of passing tests,
    // and this line must be seen.
    let _ = writeln!(
        std::io::stderr(),
        "skipped {test}: it needs root for {} (set CI=true to make it required)",
        match fault {
            Fault::Immutable => "`chattr +i` (CAP_LINUX_IMMUTABLE)",
            Fault::Tmpfs => "a tmpfs mount (CAP_SYS_ADMIN)",
        }
    );
    false
}

fn probe_immutable() -> bool {
    let dir = temp_dir("probe-chattr");
    let run = |flag: &str| {
        Command::new("chattr")
            .arg(flag)
            .arg(&dir)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let ok = run("+i");
    run("-i");
    ok
}

fn probe_tmpfs() -> bool {
    let dir = temp_dir("probe-tmpfs");
    let ok = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
        .arg(&dir)
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        let _ = Command::new("umount").arg(&dir).status();
    }
    ok
}

/// Makes `dir` refuse new files even for root (`chattr +i`), until the guard is dropped. Needs
/// CAP_LINUX_IMMUTABLE: tests check [`can_inject`] first.
pub struct Immutable(PathBuf);

impl Immutable {
    pub fn new(dir: &Path) -> Immutable {
        std::fs::create_dir_all(dir).unwrap();
        let ok = Command::new("chattr")
            .arg("+i")
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            ok,
            "chattr +i {} failed: these fault-injection tests need root with CAP_LINUX_IMMUTABLE",
            dir.display()
        );
        Immutable(dir.to_path_buf())
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        let _ = Command::new("chattr").arg("-i").arg(&self.0).status();
    }
}
