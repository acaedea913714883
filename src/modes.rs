//! The client's choices for a turn that travel from `forwardedProps.iacCode` to the kernel: how
//! the turn runs (`runMode`) and how pipeline candidates are shown (`candidatePresentation`),
//! each with its names on the wire.
//!
//! A leaf: the request reader reads them, the thread store records the run mode, the A2A
//! message carries both, and none of those layers imports another to share them.

use serde::{Deserialize, Serialize};

/// `runMode`: the kernel runs a chat turn or a pipeline. Serialised as its name (`"pipeline"`),
/// in the request, the state file and the A2A message alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RunMode {
    Normal,
    Pipeline,
}

impl RunMode {
    /// Every mode with its name, in the order an error lists them.
    pub(crate) const NAMES: [(RunMode, &'static str); 2] =
        [(RunMode::Normal, "normal"), (RunMode::Pipeline, "pipeline")];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RunMode::Normal => "normal",
            RunMode::Pipeline => "pipeline",
        }
    }
}

/// `candidatePresentation`: how a pipeline's candidates are shown to the user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Presentation {
    Standard,
    Rich,
}

impl Presentation {
    /// Every presentation with the client's name for it, in the order an error lists them.
    pub(crate) const NAMES: [(Presentation, &'static str); 2] = [
        (Presentation::Standard, "standard"),
        (Presentation::Rich, "rich"),
    ];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_mode_is_written_and_read_by_its_name() {
        for (mode, name) in RunMode::NAMES {
            assert_eq!(mode.as_str(), name);
            assert_eq!(serde_json::to_value(mode).unwrap(), name);
            assert_eq!(
                serde_json::from_value::<RunMode>(name.into()).unwrap(),
                mode
            );
        }
    }
}
