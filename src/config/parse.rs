//! Precedence and parsing: the command line, then the environment, then the `--config` YAML file,
//! then the table's defaults, each option through its own setter.

use std::collections::HashMap;

use super::defs::{ANSWERS, CONFIG, DEFS};
use super::paths::allowed_cwds;
use super::schema::{Def, Takes};
use super::values::Value;
use super::yaml::parse_yaml;
use super::{Command, Config};

impl Command {
    /// Parses `args` (without the program name) with `env` as the environment.
    pub fn parse<I, E>(args: I, env: E) -> Result<Command, String>
    where
        I: IntoIterator<Item = String>,
        E: Fn(&str) -> Option<String>,
    {
        let given = match read_flags(args)? {
            Flags::Given(given) => given,
            Flags::Early(command) => return Ok(command),
        };
        let yaml = match given.get(CONFIG) {
            Some(path) => parse_yaml(path)?,
            None => HashMap::new(),
        };
        build(&given, &env, &yaml).map(|config| Command::Run(Box::new(config)))
    }
}

/// The configuration the sources give, each option from the first source that has it.
fn build(
    given: &HashMap<&'static str, String>,
    env: &impl Fn(&str) -> Option<String>,
    yaml: &HashMap<String, String>,
) -> Result<Config, String> {
    let mut config = Config::default();
    for def in DEFS {
        let text = resolve(def, given, env, yaml);
        (def.set)(&mut config, Value::new(def.name, text, env))?;
    }
    config.allowed_cwds = allowed_cwds(env);
    if config.auth_token.is_some() && config.cors_allow_origins.iter().any(|o| o == "*") {
        return Err(
            "'--cors-allow-origin *' is refused while IAC_CODE_AGUI_AUTH_TOKEN is set: \
                    list the console origins exactly"
                .into(),
        );
    }
    Ok(config)
}

/// The configuration a `--config` file's keys give alone (no flag, no variable): for the fuzz
/// target of the YAML subset (`crate::untrusted`).
pub(crate) fn yaml_config(yaml: &HashMap<String, String>) -> Result<Config, String> {
    build(&HashMap::new(), &|_: &str| None, yaml)
}

/// The option's text from the first source that has it: the command line, the variable (an empty
/// one counts as unset), the YAML file, the table's default. Only flags are ever given and only
/// known YAML keys read, so the variable is the one source to check against the option's.
fn resolve(
    def: &Def,
    given: &HashMap<&'static str, String>,
    env: &impl Fn(&str) -> Option<String>,
    yaml: &HashMap<String, String>,
) -> Option<String> {
    let variable = || {
        if def.given_by.variable() {
            env(&def.variable()).filter(|v| !v.is_empty())
        } else {
            None
        }
    };
    given
        .get(def.name)
        .cloned()
        .or_else(variable)
        .or_else(|| yaml.get(def.name).cloned())
        .or_else(|| def.default.text().map(String::from))
}

/// What the command line says before any other source is read.
enum Flags {
    /// `--help` or `--version`: nothing else is read.
    Early(Command),
    /// Each given flag's value (a repeatable one's values joined by ',', like its variable's).
    Given(HashMap<&'static str, String>),
}

/// Reads `args` into flag values, without looking at the environment or the YAML file.
fn read_flags<I: IntoIterator<Item = String>>(args: I) -> Result<Flags, String> {
    let mut given: HashMap<&'static str, String> = HashMap::new();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        if let Some(answer) = ANSWERS
            .iter()
            .find(|a| arg == format!("-{}", a.short) || arg == format!("--{}", a.name))
        {
            return Ok(Flags::Early((answer.command)()));
        }
        let (def, inline) = recognise(&arg)?;
        let value = match (&def.takes, inline) {
            (_, Some(v)) => v,
            (Takes::Switch, None) => "true".to_string(),
            (Takes::One(_) | Takes::Many(_), None) => args
                .next()
                .ok_or_else(|| format!("option '--{}' needs a value", def.name))?,
        };
        match (&def.takes, given.get_mut(def.name)) {
            (Takes::Many(_), Some(values)) => {
                values.push(',');
                values.push_str(&value);
            }
            _ => {
                given.insert(def.name, value);
            }
        }
    }
    Ok(Flags::Given(given))
}

/// The option `arg` names and the value it carries: `--name=value`, `--name` (none), `-x` (none),
/// `--no-name` (false).
fn recognise(arg: &str) -> Result<(&'static Def, Option<String>), String> {
    let flags = || DEFS.iter().filter(|d| d.given_by.flag());
    if let Some(def) = flags().find(|d| d.negated.is_some_and(|n| arg == format!("--{n}"))) {
        return Ok((def, Some("false".to_string())));
    }
    if let Some(def) = flags().find(|d| d.short.is_some_and(|s| arg == format!("-{s}"))) {
        return Ok((def, None));
    }
    let Some(body) = arg.strip_prefix("--") else {
        return Err(format!("unexpected argument '{arg}'"));
    };
    let (name, inline) = match body.split_once('=') {
        Some((n, v)) => (n, Some(v.to_string())),
        None => (body, None),
    };
    match flags().find(|d| d.name == name) {
        Some(def) => Ok((def, inline)),
        None => Err(format!("unknown option '--{name}'")),
    }
}
