//! What an option's definition says (the rows of `defs.rs`'s table): names, what it takes, where
//! it may be given, its default, its origin, and how its value reaches `Config`.

use super::values::Value;
use super::{Command, Config};

/// One option.
pub(crate) struct Def {
    /// `--name`; the variable is `IAC_CODE_AGUI_<NAME>` ([`Def::variable`]) and the YAML key the
    /// name itself (`_` and `-` alike).
    pub(crate) name: &'static str,
    /// `-x`, the same as `--name` without a value.
    pub(crate) short: Option<char>,
    /// `--no-name`: a switch turned off (the reference's click `--x/--no-x` form).
    pub(crate) negated: Option<&'static str>,
    pub(crate) takes: Takes,
    pub(crate) given_by: Sources,
    pub(crate) default: Fallback,
    /// Which README table lists it; only the README test reads it.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) origin: Origin,
    /// The help line's text; `--help` adds the repeat rule and the default.
    pub(crate) help: &'static str,
    /// Checks the value (given, or the default) and stores it in the option's `Config` field;
    /// the error names the option.
    pub(crate) set: fn(&mut Config, Value<'_>) -> Result<(), String>,
}

/// What an option takes on the command line.
pub(crate) enum Takes {
    /// No value: `--name` is true (`--name=false` also works; the variable and YAML take
    /// true/false, 1/0, yes/no, on/off).
    Switch,
    /// One value, shown in the help as this placeholder; the last one given wins.
    One(&'static str),
    /// A repeatable value: the values add up (the variable and YAML take them comma-separated).
    Many(&'static str),
}

/// Where an option may be given; the command line wins over the variable, the variable over the
/// YAML file.
pub(crate) enum Sources {
    /// The flag, the variable and the YAML key.
    All,
    /// Only the flag: `--config` names the YAML file, so it cannot be in it.
    FlagOnly,
    /// The variable and the YAML key, no flag: a secret on a command line is readable by any local
    /// user in /proc (the reference's rule too).
    NoFlag,
}

impl Sources {
    pub(crate) fn flag(&self) -> bool {
        matches!(self, Sources::All | Sources::FlagOnly)
    }

    pub(crate) fn variable(&self) -> bool {
        matches!(self, Sources::All | Sources::NoFlag)
    }

    pub(crate) fn yaml(&self) -> bool {
        matches!(self, Sources::All | Sources::NoFlag)
    }
}

/// The value an option has when no source gives one.
pub(crate) enum Fallback {
    /// None: the setter sees no text (a switch is off, a list empty, an optional value `None`).
    Empty,
    /// This text, checked by the setter as if it were given (so the help cannot drift from it).
    Value(&'static str),
    /// Worked out by the setter from the environment; the text says how, for the help.
    Computed(&'static str),
}

impl Fallback {
    /// The text a setter is given when no source has one.
    pub(crate) fn text(&self) -> Option<&'static str> {
        match self {
            Fallback::Value(text) => Some(text),
            Fallback::Empty | Fallback::Computed(_) => None,
        }
    }
}

/// Whether the reference adapter (`iac-code agui`) has the option: README lists its options and
/// ours in two tables.
pub(crate) enum Origin {
    Reference,
    Ours,
}

impl Def {
    /// `IAC_CODE_AGUI_` and the name in upper snake case (`max-connections` →
    /// `IAC_CODE_AGUI_MAX_CONNECTIONS`), the reference's own rule for the options it gives
    /// variables; one rule, so a new option cannot forget its variable.
    pub(crate) fn variable(&self) -> String {
        format!(
            "IAC_CODE_AGUI_{}",
            self.name.to_ascii_uppercase().replace('-', "_")
        )
    }
}

/// A flag that answers at once and reads nothing else.
pub(crate) struct Answer {
    pub(crate) short: char,
    pub(crate) name: &'static str,
    pub(crate) help: &'static str,
    pub(crate) command: fn() -> Command,
}

/// A variable with no flag and no YAML key, read under its own name (the kernel reads it too).
pub(crate) struct Variable {
    pub(crate) name: &'static str,
    pub(crate) help: &'static str,
}
