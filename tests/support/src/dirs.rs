//! Scratch directories: one root per test process, `$TMPDIR/agui-it-<pid>/`, removed when the
//! process exits (pass or fail); roots left by killed runs (their pid gone) are removed by the
//! next run. `AGUI_KEEP_TEST_DIRS` keeps them.

use std::path::{Path, PathBuf};

/// A fresh directory `name-<n>` under this process's root.
pub fn temp_dir(name: &str) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let d = run_root().join(format!("{name}-{n}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

const ROOT_PREFIX: &str = "agui-it-";

fn run_root() -> &'static Path {
    static ROOT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    ROOT.get_or_init(|| {
        remove_stale_roots();
        let root = std::env::temp_dir().join(format!("{ROOT_PREFIX}{}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        // SAFETY: registers a plain extern "C" function; libtest's main returns (or calls
        // exit) when the tests are done, which runs it.
        unsafe { libc::atexit(remove_run_root) };
        root
    })
}

extern "C" fn remove_run_root() {
    let root = std::env::temp_dir().join(format!("{ROOT_PREFIX}{}", std::process::id()));
    if std::env::var_os("AGUI_KEEP_TEST_DIRS").is_none() {
        let _ = std::fs::remove_dir_all(root);
    }
}

/// `agui-it-<pid>` roots whose process is gone (a killed or crashed earlier run).
fn remove_stale_roots() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in entries.flatten().take(100_000) {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(ROOT_PREFIX) else {
            continue;
        };
        // `agui-it-<pid>`, or the older per-test `agui-it-<name>-<pid>-<port>`.
        let pid = match rest.rsplitn(3, '-').collect::<Vec<_>>()[..] {
            [_port, pid, _name] => pid,
            _ => rest,
        };
        if pid.parse::<u32>().is_ok() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}
