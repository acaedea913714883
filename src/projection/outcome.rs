//! How a run ended: the one [`End`] type shared by the projection, the run and the tests.

use crate::error::{Code, Error, Lang};
use crate::interrupts;
use crate::metrics::Outcome;
use serde_json::Value;

/// How a run ends, the one type for it: [`Projection::on_item`](super::Projection::on_item)
/// reports the A2A task's end, the run persists what must be durable, and
/// [`Projection::finish`](super::Projection::finish) writes the end it was handed.
///
/// An interrupt's list changes form on the way: `on_item` reports the kernel's input waits (reduced
/// envelopes, see [`interrupts::inputs_of`]); `finish` takes the AG-UI interrupt objects the run
/// announces ([`End::announced`] converts one into the other).
#[derive(Debug, Clone, PartialEq)]
pub enum End {
    Success,
    Interrupt(Vec<Value>),
    Failed(Error),
}

impl End {
    /// The error code a failed run ends with.
    pub(crate) fn code(&self) -> Option<Code> {
        match self {
            End::Failed(e) => Some(e.code),
            _ => None,
        }
    }

    /// The end as the metrics count it.
    pub(crate) fn outcome(&self) -> Outcome {
        match self {
            End::Success => Outcome::Success,
            End::Interrupt(_) => Outcome::Interrupt,
            End::Failed(e) => Outcome::Error(e.code),
        }
    }

    /// The end as announced to the client: input waits become AG-UI interrupts that expire at
    /// `expires_at`, with texts in `lang`.
    pub fn announced(self, expires_at: &str, lang: Lang) -> End {
        match self {
            End::Interrupt(inputs) => End::Interrupt(
                inputs
                    .iter()
                    .map(|i| interrupts::to_interrupt(i, expires_at, lang))
                    .collect(),
            ),
            end => end,
        }
    }
}
