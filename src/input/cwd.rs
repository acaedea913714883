//! The file-system checks of `iacCode.cwd`: absolute, no `..` nor control characters, and inside
//! an allowed root both as written and once its symlinks are resolved.

use crate::error::{Error, Msg};
use std::path::{Component, Path, PathBuf};

/// An absolute path without `..` or control characters, inside one of the allowed roots both as
/// written and once resolved: the longest existing prefix is canonicalized (following every
/// symlink in it) and the rest appended, so a link under a root cannot lead out of it even when the
/// path's tail does not exist yet.
pub(super) fn check_cwd(cwd: &str, roots: &[PathBuf]) -> Result<(), Error> {
    if cwd.chars().any(char::is_control) {
        return Err(Msg::CwdControlChars.err());
    }
    let path = Path::new(cwd);
    let lexical_ok =
        path.is_absolute() && !path.components().any(|c| matches!(c, Component::ParentDir));
    if !lexical_ok {
        return Err(Msg::CwdNotAbsolute.err());
    }
    let inside = |p: &Path| {
        roots.iter().any(|root| {
            p.starts_with(root)
                || root
                    .canonicalize()
                    .map(|r| p.starts_with(r))
                    .unwrap_or(false)
        })
    };
    if inside(path) && resolve_existing_prefix(path).is_some_and(|real| inside(&real)) {
        Ok(())
    } else {
        // Names the roots and the variable that sets them: the usual cause is an adapter
        // started elsewhere than the client's workspace (the default roots are its own cwd and
        // the temp dir).
        let shown = std::env::join_paths(roots)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        Err(Msg::CwdNotAllowed.with(&[&shown]))
    }
}

/// `path` with its longest existing prefix canonicalized and the remaining components appended;
/// `None` when the remainder holds `..` (a lexical `..` after a symlink would be resolved by the
/// kernel against the link's target, not against what we checked).
fn resolve_existing_prefix(path: &Path) -> Option<PathBuf> {
    for prefix in path.ancestors() {
        let Ok(real) = prefix.canonicalize() else {
            continue;
        };
        let rest = path.strip_prefix(prefix).ok()?;
        let mut out = real;
        for c in rest.components() {
            match c {
                Component::Normal(name) => out.push(name),
                Component::CurDir => {}
                _ => return None,
            }
        }
        return Some(out);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::fixtures::err_of;
    use serde_json::json;

    #[test]
    fn cwd_must_be_absolute_and_inside_a_root() {
        assert!(
            err_of(|v| v["forwardedProps"]["iacCode"]["cwd"] = json!("rel/path"))
                .contains("absolute")
        );
        assert!(
            err_of(|v| v["forwardedProps"]["iacCode"]["cwd"] = json!("/workspace/../etc"))
                .contains("absolute")
        );
        assert!(
            err_of(|v| v["forwardedProps"]["iacCode"]["cwd"] = json!("/etc")).contains("allowed")
        );
        assert!(
            err_of(|v| v["forwardedProps"]["iacCode"]["cwd"] = json!("/workspacex"))
                .contains("allowed")
        );
    }

    #[test]
    fn cwd_refuses_control_characters() {
        for cwd in [
            "/workspace/a\0b",
            "/workspace/a\nb",
            "/workspace/\t",
            "/workspace/\u{7f}",
        ] {
            let e = err_of(|v| v["forwardedProps"]["iacCode"]["cwd"] = json!(cwd));
            assert!(e.contains("control characters"), "{cwd:?}: {e}");
        }
    }

    #[test]
    fn cwd_symlinks_are_resolved_through_the_longest_existing_prefix() {
        let base = std::env::temp_dir().join(format!("agui-cwd-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let ws = base.join("ws");
        std::fs::create_dir_all(ws.join("real/sub")).unwrap();
        std::fs::create_dir_all(base.join("outside")).unwrap();
        std::os::unix::fs::symlink(base.join("outside"), ws.join("link-out")).unwrap();
        std::os::unix::fs::symlink(ws.join("real"), ws.join("link-in")).unwrap();
        let roots = [ws.clone()];
        let check = |rel: &str| check_cwd(ws.join(rel).to_str().unwrap(), &roots);
        assert!(check("real/sub").is_ok());
        assert!(check("real/not-yet/deeper").is_ok());
        assert!(check("link-in/not-yet").is_ok());
        assert!(check("link-out").is_err());
        assert!(check("link-out/nonexistent").is_err());
        assert!(check("link-out/nonexistent/deeper").is_err());
        let _ = std::fs::remove_dir_all(&base);
    }
}
