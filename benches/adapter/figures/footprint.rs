//! The static release binary (benches/run.sh builds it): its start-up beside ours in figure 4's
//! table, its size, and whether it is really static.

use crate::figures::startup::{startup, startup_line};
use crate::report::Report;
use crate::server::Impl;
use crate::support::sh;
use crate::{ROOT, STARTS};
use std::path::Path;

pub(crate) fn static_binary(rep: &mut Report, kernel: &str, root: &Path) {
    let static_bin = Path::new(ROOT).join("target/x86_64-unknown-linux-gnu/release/iac-code-agui");
    if static_bin.exists() {
        let s_imp = Impl::Ours(static_bin.to_string_lossy().into_owned());
        match startup(&s_imp, kernel, STARTS, root) {
            Ok(s) => startup_line(rep, &format!("`{}` (static)", static_bin.display()), &s),
            Err(e) => rep.line(format!("| static | failed: {e} |")),
        }
        let size = std::fs::metadata(&static_bin).map(|m| m.len()).unwrap_or(0);
        let file = sh("file", &[&static_bin.to_string_lossy()]);
        let is_static = file.contains("statically linked") || file.contains("static-pie linked");
        rep.line(format!(
            "\nstatic release binary: {} bytes ({:.2} MiB)\n\n`file`: `{}`\n",
            size,
            size as f64 / 1048576.0,
            file
        ));
        rep.row(
            "static binary size",
            format!(
                "{:.2} MiB{}",
                size as f64 / 1048576.0,
                if is_static {
                    ", statically linked"
                } else {
                    ", NOT statically linked"
                }
            ),
            "< 10 MiB, static",
            Some(size < 10 * 1024 * 1024 && is_static),
        );
    } else {
        rep.line(format!(
            "\nstatic binary: {} does not exist (build it with `RUSTFLAGS=\"-C target-feature=+crt-static\" \
             cargo build --release --target x86_64-unknown-linux-gnu`, or use benches/run.sh)\n",
            static_bin.display()
        ));
        rep.row("static binary size", "not built".into(), "< 10 MiB", None);
    }
}
