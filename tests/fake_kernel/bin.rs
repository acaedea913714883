//! The fake kernel as a process: `cargo run --example fake-kernel -- --port P [--host H] [--token T]`
//! (`--host` is accepted for `iac-code a2a` compatibility and must be loopback; `--persist FILE`
//! keeps sessions and waiting tasks in FILE, read back at start).
//! Prints `listening on http://127.0.0.1:P` once ready.

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    if value("--host").is_some_and(|h| h != "127.0.0.1" && h != "localhost") {
        eprintln!("the fake kernel only binds loopback");
        std::process::exit(2);
    }
    let port = value("--port").and_then(|p| p.parse().ok()).unwrap_or(0);
    let persist = value("--persist").map(std::path::PathBuf::from);
    let kernel = fake_kernel::FakeKernel::start_persisted(port, value("--token"), persist);
    println!("listening on {}", kernel.url);
    loop {
        std::thread::park();
    }
}
