//! How a run ended: [`End`] as the A2A task reported it, [`FinishAs`] as the AG-UI stream closes.

use crate::error::{Code, Error};
use serde_json::Value;

/// How the A2A task ended this run.
#[derive(Debug, Clone, PartialEq)]
pub enum End {
    Success,
    /// Input waits (reduced envelopes, see [`crate::interrupts::inputs_of`]).
    Interrupt(Vec<Value>),
    Failed(Error),
}

/// How a run ends on the AG-UI side.
#[derive(Debug, Clone)]
pub enum FinishAs {
    Success,
    /// AG-UI interrupt objects, already persisted.
    Interrupt(Vec<Value>),
    Error(Error),
}

impl FinishAs {
    pub fn code(&self) -> Option<Code> {
        match self {
            FinishAs::Error(e) => Some(e.code),
            _ => None,
        }
    }
}
