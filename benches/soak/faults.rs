//! The faults: the fake kernel as a process of its own (this bench's executable run again with
//! `SOAK_KERNEL_PORT`), SIGKILLed and restarted on its port; the kernel hung (its
//! `/__control/hang`); the state directory's small tmpfs filled with a ballast file and freed.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// When this executable runs as the kernel: serves the fake kernel on the port, forever.
pub fn kernel_role() {
    let Some(port) = std::env::var("SOAK_KERNEL_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
    else {
        return;
    };
    let k = fake_kernel::FakeKernel::start_on(port, None);
    println!("listening on {}", k.url);
    loop {
        std::thread::park();
    }
}

pub struct Kernel {
    child: Option<Child>,
    pub port: u16,
    pub url: String,
}

impl Kernel {
    pub fn start() -> Kernel {
        let port = test_support::free_port();
        let mut k = Kernel {
            child: None,
            port,
            url: format!("http://127.0.0.1:{port}"),
        };
        k.spawn();
        k
    }

    fn spawn(&mut self) {
        let exe = std::env::current_exe().unwrap();
        let child = Command::new(exe)
            .env("SOAK_KERNEL_PORT", self.port.to_string())
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn the fake kernel");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while test_support::raw::health(&self.url, Duration::from_millis(200)).is_err() {
            assert!(
                Instant::now() < deadline,
                "the fake kernel did not start on {}",
                self.url
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// The kernel hangs (`on`) or works again.
    pub fn hang(&self, on: bool) {
        let path = format!("/__control/hang?on={}", u8::from(on));
        let req = test_support::raw::head("POST", &path, &["Content-Length: 0"]);
        let _ = test_support::raw::exchange(&self.url, &req);
    }
}

impl Drop for Kernel {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A small tmpfs for the state directory; unmounted when dropped.
pub struct Disk {
    pub mount: PathBuf,
}

impl Disk {
    /// `None` when this machine does not allow a tmpfs mount (not root).
    pub fn mount(size_mb: u64) -> Option<Disk> {
        let mount = test_support::temp_dir("soak-disk");
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size_mb}m"), "tmpfs"])
            .arg(&mount)
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(Disk { mount })
    }

    fn ballast(&self) -> PathBuf {
        self.mount.join("ballast")
    }

    /// Fills the disk: writes the ballast until the file system says it is full; bytes written.
    pub fn fill(&self) -> u64 {
        let mut f = std::fs::File::create(self.ballast()).expect("create the ballast");
        let chunk = vec![0x5a_u8; 1 << 20];
        let mut written = 0;
        while let Ok(n) = f.write(&chunk) {
            if n == 0 {
                break;
            }
            written += n as u64;
        }
        written
    }

    pub fn free(&self) {
        let _ = std::fs::remove_file(self.ballast());
    }

    pub fn state_dir(&self) -> PathBuf {
        self.mount.join("state")
    }
}

impl Drop for Disk {
    fn drop(&mut self) {
        self.free();
        let _ = Command::new("umount").arg(&self.mount).status();
    }
}

pub fn free_bytes(path: &Path) -> u64 {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: statvfs into a zeroed struct, a valid NUL-terminated path.
    unsafe {
        let mut s: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(c.as_ptr(), &mut s) != 0 {
            return 0;
        }
        s.f_bavail as u64 * s.f_frsize as u64
    }
}
