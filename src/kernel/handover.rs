//! An upgrade hands the managed kernel from one adapter process to the next (`upgrade.rs`): the
//! old one stops supervising it, the new one adopts it (supervises and one day stops it), and
//! the guard (`guard.rs`) keeps it alive while either owns it.

use super::*;

/// A managed kernel as one adapter process hands it to the next (`upgrade.rs`).
pub struct Handover {
    /// The guard's pid, also the kernel's process group.
    pub guard: libc::pid_t,
    pub port: u16,
    pub token: String,
    /// The owners pipe's write end, inherited by the new process.
    pub owners_fd: RawFd,
    /// The read ends of the kernel's output pipes (`--log-format json`), inherited too.
    pub outputs: Vec<RawFd>,
}

impl Handover {
    /// One line: `<guard pid> <port> <owners fd> <token> [<output fd>...]`.
    pub fn encode(&self) -> String {
        let mut line = format!(
            "{} {} {} {}",
            self.guard, self.port, self.owners_fd, self.token
        );
        for fd in &self.outputs {
            line.push_str(&format!(" {fd}"));
        }
        line
    }

    pub fn decode(text: &str) -> Option<Handover> {
        let mut words = text.split_whitespace();
        Some(Handover {
            guard: words.next()?.parse().ok()?,
            port: words.next()?.parse().ok()?,
            owners_fd: words.next()?.parse().ok()?,
            token: words.next()?.to_string(),
            outputs: words.filter_map(|w| w.parse().ok()).collect(),
        })
    }
}

impl Kernel {
    /// A kernel another adapter process started and handed over (`upgrade.rs`): supervised and
    /// stopped from here on, as if started here; its guard keeps it alive while either process
    /// owns it.
    pub fn adopt(config: &Config, handover: Handover) -> Arc<Kernel> {
        // SAFETY: the old process passed us this write end; ours alone to own.
        let owners = unsafe { OwnedFd::from_raw_fd(handover.owners_fd) };
        // SAFETY: fcntl(2) on it: not inherited by the kernels we start.
        unsafe { libc::fcntl(owners.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) };
        let allowed = std::env::join_paths(&config.allowed_cwds)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        log::info!(
            "adopted the A2A kernel (guard pid {}) on port {} from the previous process",
            handover.guard,
            handover.port
        );
        let kernel = Arc::new(Kernel {
            command: config.a2a_command.clone(),
            port: handover.port,
            token: handover.token,
            allowed_cwds: allowed,
            child: Mutex::new(None),
            stopping: AtomicBool::new(false),
            start_timeout: config.kernel_start_timeout,
            version: Mutex::new(None),
            relog_output: config.log_format == crate::config::LogFormat::Json,
            owners: Mutex::new(Some(owners)),
            adopted: Mutex::new(Some(handover.guard)),
            handed_over: AtomicBool::new(false),
            restarting: AtomicBool::new(false),
            outputs: Mutex::new(Vec::new()),
        });
        // SAFETY: the old process passed us these read ends; ours alone to own.
        let outputs = handover
            .outputs
            .iter()
            .map(|&fd| unsafe { OwnedFd::from_raw_fd(fd) });
        let outputs: Vec<OwnedFd> = outputs.collect();
        for fd in &outputs {
            // SAFETY: fcntl(2) on a descriptor we own.
            unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) };
        }
        kernel.relog_all(outputs);
        kernel
    }

    /// What the new process needs to adopt the kernel; from now on this process neither
    /// restarts nor stops it (until [`Kernel::take_back`]).
    pub fn hand_over(&self) -> Handover {
        self.handed_over.store(true, Ordering::SeqCst);
        let guard = self
            .adopted
            .lock()
            .or_else(|| self.child.lock().as_ref().map(|c| c.id() as libc::pid_t))
            .unwrap_or(0);
        Handover {
            guard,
            port: self.port,
            token: self.token.clone(),
            owners_fd: self.owners.lock().as_ref().map_or(-1, |f| f.as_raw_fd()),
            outputs: self.outputs.lock().iter().map(|f| f.as_raw_fd()).collect(),
        }
    }

    /// The upgrade failed: the kernel is this process's again.
    pub fn take_back(&self) {
        self.handed_over.store(false, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handover_reads_back_as_written_with_or_without_output_pipes() {
        let h = Handover {
            guard: 4242,
            port: 39001,
            token: "a-B_c".repeat(8),
            owners_fd: 7,
            outputs: vec![9, 11],
        };
        let back = Handover::decode(&h.encode()).unwrap();
        assert_eq!(
            (
                back.guard,
                back.port,
                back.owners_fd,
                back.token.as_str(),
                back.outputs
            ),
            (4242, 39001, 7, h.token.as_str(), vec![9, 11])
        );
        let plain = Handover::decode("1 2 3 tok").unwrap();
        assert!(plain.outputs.is_empty());
        assert!(Handover::decode("1 2 3").is_none());
        assert!(Handover::decode("x 2 3 tok").is_none());
    }
}
