//! The house rules that a reader relies on, checked on the source itself (in the spirit of
//! rust-analyzer's tidy tests): the layer order ARCHITECTURE.md writes down, one job per file, and
//! functions that fit on a screen. Each failure names the file, the line and the rule.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// Lines a src file may have; the message catalogue is data, one row a message.
const MAX_FILE_LINES: usize = 600;
const LONG_FILES: &[&str] = &["src/messages.rs"];
/// Lines a function may have, its signature and closing brace included.
const MAX_FN_LINES: usize = 80;
/// Functions that are data tables, read as a table, not as code.
const DATA_TABLES: &[(&str, &str)] = &[("src/messages.rs", "row")];

/// The layer order: the block after ARCHITECTURE.md's "## Layers" heading, top line first.
fn layers() -> BTreeMap<String, usize> {
    let doc = fs::read_to_string(Path::new(ROOT).join("ARCHITECTURE.md")).unwrap();
    let section = doc
        .split("\n## Layers")
        .nth(1)
        .expect("ARCHITECTURE.md has a \"## Layers\" section");
    let block = section
        .split("```")
        .nth(1)
        .expect("the Layers section has a fenced block");
    let mut order = BTreeMap::new();
    for (depth, line) in block
        .lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .enumerate()
    {
        for module in line.split_whitespace() {
            assert!(
                order.insert(module.to_string(), depth).is_none(),
                "ARCHITECTURE.md's layer order names `{module}` twice"
            );
        }
    }
    order
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// `src/run/admit.rs` → `run`; `src/lib.rs` → `None` (the crate root declares, it imports nothing).
fn top_module(rel: &str) -> Option<String> {
    let first = rel.strip_prefix("src/")?.split('/').next()?;
    let name = first.trim_end_matches(".rs");
    (name != "lib").then(|| name.to_string())
}

/// One file's lines as numbered code: comments removed, and `#[cfg(test)]` items (a test module,
/// a test-only constant or import) left out, since tests may reach anywhere.
fn production_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut skip_depth: Option<i64> = None;
    let mut pending_cfg_test = false;
    let mut depth: i64 = 0;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split("//").next().unwrap_or("");
        let opens = line.matches('{').count() as i64;
        let closes = line.matches('}').count() as i64;
        if skip_depth.is_none() && raw.trim() == "#[cfg(test)]" {
            pending_cfg_test = true;
            continue;
        }
        if pending_cfg_test && skip_depth.is_none() {
            pending_cfg_test = false;
            let ends_here = opens == closes && line.trim_end().ends_with([';', '}']);
            if !ends_here {
                skip_depth = Some(depth);
            }
            depth += opens - closes;
            continue;
        }
        depth += opens - closes;
        if let Some(d) = skip_depth {
            let item_closed = depth == d && (closes > 0 || line.trim_end().ends_with(';'));
            if item_closed {
                skip_depth = None;
            }
            continue;
        }
        out.push((i + 1, line.to_string()));
    }
    out
}

/// The top-level modules a line names after `crate::`: `crate::a2a::X`, `crate::{error::Y, ids}`.
fn crate_paths(line: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().last();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue; // `iac_code_agui::…` or a longer name ending in "crate"
        }
        if let Some(group) = rest.strip_prefix('{') {
            let group = group.split('}').next().unwrap_or("");
            for item in group.split(',') {
                let name = item.trim().split("::").next().unwrap_or("").trim();
                if !name.is_empty() && name != "self" {
                    found.push(name.to_string());
                }
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                found.push(name);
            }
        }
    }
    found
}

/// A file declared with `#[cfg(test)] mod x;` is test code as a whole.
fn test_only_files(files: &[PathBuf]) -> Vec<PathBuf> {
    let mut tests = Vec::new();
    for file in files {
        let text = fs::read_to_string(file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for pair in lines.windows(2) {
            let Some(name) = pair[1].trim().strip_prefix("mod ") else {
                continue;
            };
            if pair[0].trim() != "#[cfg(test)]" || !name.ends_with(';') {
                continue;
            }
            let name = name.trim_end_matches(';');
            let dir = match file.file_name().and_then(|n| n.to_str()) {
                Some("mod.rs") | Some("lib.rs") | Some("main.rs") => file.parent().unwrap().into(),
                _ => file.with_extension(""),
            };
            tests.push(dir.join(format!("{name}.rs")));
        }
    }
    tests
}

fn src_files() -> Vec<(String, String)> {
    let all = rust_files(&Path::new(ROOT).join("src"));
    let tests = test_only_files(&all);
    all.into_iter()
        .filter(|f| !tests.contains(f))
        .map(|f| {
            let rel = f.strip_prefix(ROOT).unwrap().to_string_lossy().into_owned();
            (rel, fs::read_to_string(&f).unwrap())
        })
        .collect()
}

#[test]
fn every_src_module_is_in_architecture_md_layer_order() {
    let order = layers();
    let mut missing: Vec<String> = src_files()
        .iter()
        .filter_map(|(rel, _)| top_module(rel))
        .filter(|m| !order.contains_key(m))
        .collect();
    missing.dedup();
    assert!(
        missing.is_empty(),
        "modules missing from ARCHITECTURE.md's layer order: {missing:?}"
    );
    for module in order.keys() {
        let file = Path::new(ROOT).join("src").join(format!("{module}.rs"));
        let dir = Path::new(ROOT).join("src").join(module);
        assert!(
            file.exists() || dir.is_dir(),
            "ARCHITECTURE.md's layer order names `{module}`, which src/ does not have"
        );
    }
}

#[test]
fn no_module_imports_one_on_or_above_its_own_layer() {
    let order = layers();
    let mut broken = Vec::new();
    for (rel, text) in src_files() {
        let Some(module) = top_module(&rel) else {
            continue;
        };
        let Some(&own) = order.get(&module) else {
            continue; // reported by every_src_module_is_in_architecture_md_layer_order
        };
        for (n, line) in production_lines(&text) {
            for target in crate_paths(&line) {
                let Some(&theirs) = order.get(&target) else {
                    continue; // a crate-root item (a macro, `crate::VERSION`)
                };
                if target != module && theirs <= own {
                    broken.push(format!(
                        "{rel}:{n}: `{module}` imports `{target}`, which is not below it: {}",
                        line.trim()
                    ));
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "imports against ARCHITECTURE.md's layer order:\n{}",
        broken.join("\n")
    );
}

#[test]
fn no_src_file_is_longer_than_600_lines_but_the_catalogue() {
    let long: Vec<String> = rust_files(&Path::new(ROOT).join("src"))
        .into_iter()
        .map(|f| {
            let rel = f.strip_prefix(ROOT).unwrap().to_string_lossy().into_owned();
            let lines = fs::read_to_string(&f).unwrap().lines().count();
            (rel, lines)
        })
        .filter(|(rel, lines)| *lines > MAX_FILE_LINES && !LONG_FILES.contains(&rel.as_str()))
        .map(|(rel, lines)| format!("{rel}: {lines} lines"))
        .collect();
    assert!(
        long.is_empty(),
        "files over {MAX_FILE_LINES} lines (one job per file):\n{}",
        long.join("\n")
    );
}

/// The name of the function a line declares, if it declares one with a body.
fn fn_name(line: &str) -> Option<&str> {
    let at = line.find("fn ")?;
    let head = line[..at].trim();
    let qualifiers = [
        "pub",
        "pub(crate)",
        "pub(super)",
        "const",
        "unsafe",
        "extern",
        "async",
    ];
    if !head.split_whitespace().all(|w| qualifiers.contains(&w)) {
        return None;
    }
    let name = line[at + 3..]
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .next()?;
    (!name.is_empty()).then_some(name)
}

#[test]
fn no_function_is_longer_than_80_lines_but_data_tables() {
    let mut long = Vec::new();
    for (rel, text) in src_files() {
        let lines = production_lines(&text);
        for (k, (n, line)) in lines.iter().enumerate() {
            let Some(name) = fn_name(line) else {
                continue;
            };
            if DATA_TABLES.contains(&(rel.as_str(), name)) {
                continue;
            }
            // A declaration without a body (a trait method) ends with `;` before any `{`.
            let opening = lines[k..]
                .iter()
                .find(|(_, l)| l.contains('{') || l.trim_end().ends_with(';'));
            if opening.is_none_or(|(_, l)| !l.contains('{')) {
                continue;
            }
            let indent = line.len() - line.trim_start().len();
            // The body ends at the first `}` at the signature's own indentation.
            let end = lines[k..].iter().find(|(_, l)| {
                let l_indent = l.len() - l.trim_start().len();
                l_indent == indent && l.trim_start().starts_with('}')
            });
            let Some((last, _)) = end else {
                continue; // a body on the signature's own line
            };
            if last - n + 1 > MAX_FN_LINES {
                long.push(format!("{rel}:{n}: fn {name} has {} lines", last - n + 1));
            }
        }
    }
    assert!(
        long.is_empty(),
        "functions over {MAX_FN_LINES} lines (one function per phase):\n{}",
        long.join("\n")
    );
}
