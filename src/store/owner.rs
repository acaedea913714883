//! Which adapter process runs an execution: during an upgrade two processes share the state
//! directory, and an execution the other one is still streaming must not be taken for one a
//! killed adapter left running (that one is repaired before the thread's next turn; this one is
//! busy until its run ends there).
//!
//! A process is named by its pid and its start time (`/proc/<pid>/stat`, field 22, clock ticks
//! since boot), so a reused pid is not mistaken for the owner.

use std::sync::OnceLock;

/// This process as it is recorded in the executions it runs: `"<pid>:<start ticks>"`.
pub(crate) fn this_process() -> &'static str {
    static ME: OnceLock<String> = OnceLock::new();
    ME.get_or_init(|| {
        let pid = std::process::id();
        format!("{pid}:{}", start_ticks(pid).unwrap_or_default())
    })
}

/// Whether `owner` names another process that is still running (not exited, not a zombie).
pub(crate) fn is_another_live_process(owner: &str) -> bool {
    if owner == this_process() {
        return false;
    }
    let Some((pid, ticks)) = owner.split_once(':') else {
        return false;
    };
    let Ok(pid) = pid.parse::<u32>() else {
        return false;
    };
    let Some(stat) = read_stat(pid) else {
        return false;
    };
    let (state, started) = (field(&stat, 3), field(&stat, 22));
    state.is_some_and(|s| s != "Z" && s != "X") && started == Some(ticks)
}

fn start_ticks(pid: u32) -> Option<String> {
    field(&read_stat(pid)?, 22).map(String::from)
}

fn read_stat(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()
}

/// Field `n` (1-based, as proc(5) numbers them) of a `stat` line; the command name (field 2) may
/// hold spaces and parentheses, so the fields after it are counted from its last `)`.
fn field(stat: &str, n: usize) -> Option<&str> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(n.checked_sub(3)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_not_another_and_a_dead_or_reused_pid_is_not_live() {
        assert!(!is_another_live_process(this_process()));
        let parent = std::os::unix::process::parent_id();
        let ticks = start_ticks(parent).unwrap();
        assert!(is_another_live_process(&format!("{parent}:{ticks}")));
        assert!(!is_another_live_process(&format!("{parent}:1{ticks}")));
        assert!(!is_another_live_process("999999999:1"));
        assert!(!is_another_live_process("garbage"));
    }

    #[test]
    fn a_command_name_with_spaces_and_parentheses_does_not_shift_the_fields() {
        let stat = "42 (a) b (c)) S 1 42 42 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 777 0";
        assert_eq!(field(stat, 3), Some("S"));
        assert_eq!(field(stat, 22), Some("777"));
    }
}
