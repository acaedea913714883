//! `--help`, written from the flag table: one line per option with its default and repeat rule,
//! then the variables without a flag.

use super::defs::{ANSWERS, DEFS, VARIABLES};
use super::schema::{Def, Fallback, Sources, Takes};

/// Where a help line's text starts, and where every line ends at the latest.
const COLUMN: usize = 30;
const WIDTH: usize = 100;

const HEAD: &str = "\
Usage: iac-code-agui [OPTIONS]

AG-UI (HTTP + SSE) adapter for the iac-code A2A execution kernel.

Options:
";

const PRECEDENCE: &str = "Each option but --config also reads IAC_CODE_AGUI_<OPTION> in upper \
snake case, e.g. IAC_CODE_AGUI_MAX_CONNECTIONS; the command line wins over the variable, the \
variable over the file; an empty variable counts as unset.";

/// The help text (`--help`, and after a usage error).
pub fn usage() -> String {
    let mut out = String::from(HEAD);
    for def in DEFS.iter().filter(|d| d.given_by.flag()) {
        entry(&mut out, &names(def), &text(def));
    }
    for answer in ANSWERS {
        let names = format!("-{}, --{}", answer.short, answer.name);
        entry(&mut out, &names, answer.help);
    }
    out.push('\n');
    wrap(&mut out, String::new(), 0, PRECEDENCE);
    out.push_str("\nWithout a flag (a YAML key where one is named; the variable wins over it):\n");
    for def in DEFS
        .iter()
        .filter(|d| matches!(d.given_by, Sources::NoFlag))
    {
        let text = format!("YAML {}; {}", def.name, text(def));
        entry(&mut out, &def.variable(), &text);
    }
    for variable in VARIABLES {
        entry(&mut out, variable.name, variable.help);
    }
    out
}

/// `-x, --name VALUE, --no-name`.
fn names(def: &Def) -> String {
    let mut names = String::new();
    if let Some(short) = def.short {
        names.push_str(&format!("-{short}, "));
    }
    names.push_str(&format!("--{}", def.name));
    if let Takes::One(placeholder) | Takes::Many(placeholder) = def.takes {
        names.push_str(&format!(" {placeholder}"));
    }
    if let Some(negated) = def.negated {
        names.push_str(&format!(", --{negated}"));
    }
    names
}

/// The option's help, its repeat rule and its default.
fn text(def: &Def) -> String {
    let mut text = def.help.to_string();
    if let Takes::Many(_) = def.takes {
        text.push_str("; repeatable, the variable and the YAML key take a comma-separated list");
    }
    match def.default {
        Fallback::Value(v) if v.contains(' ') => text.push_str(&format!(" (default \"{v}\")")),
        Fallback::Value(v) | Fallback::Computed(v) => text.push_str(&format!(" (default {v})")),
        Fallback::Empty => {}
    }
    text
}

/// `  names  text`, the text from `COLUMN` on (on the next line when the names reach it).
fn entry(out: &mut String, names: &str, text: &str) {
    let mut line = format!("  {names}");
    if line.len() >= COLUMN {
        out.push_str(&line);
        out.push('\n');
        line.clear();
    }
    let pad = COLUMN - line.len();
    line.push_str(&" ".repeat(pad));
    wrap(out, line, COLUMN, text);
}

/// Appends `text` to `line` word by word, breaking before `WIDTH` and indenting each further line
/// by `indent`; a `quoted`, "quoted" or (bracketed) span stays on one line.
fn wrap(out: &mut String, mut line: String, indent: usize, text: &str) {
    let mut words = words(text).into_iter();
    line.push_str(words.next().unwrap_or(""));
    for word in words {
        if line.chars().count() + 1 + word.chars().count() > WIDTH {
            out.push_str(&line);
            out.push('\n');
            line = " ".repeat(indent);
        } else {
            line.push(' ');
        }
        line.push_str(word);
    }
    out.push_str(&line);
    out.push('\n');
}

/// `text` split at the spaces outside `…`, "…" and (…).
fn words(text: &str) -> Vec<&str> {
    let mut words = Vec::new();
    let (mut start, mut quote) = (0, None);
    for (i, c) in text.char_indices() {
        match (c, quote) {
            ('`' | '"', None) => quote = Some(c),
            ('(', None) => quote = Some(')'),
            (c, Some(q)) if c == q => quote = None,
            (' ', None) => {
                words.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    words.push(&text[start..]);
    words
}
