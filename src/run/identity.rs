//! The ids a run projects under, and the pipeline facts it resumes from: built the same way for a
//! run and for an observer of it (`observe`).

use super::admit::{Admitted, Mode};
use crate::projection::{Durable, RunIds};
use crate::store::{Execution, ThreadDoc};

pub(super) fn admitted_ids(admitted: &Admitted) -> RunIds {
    let execution_id = match &admitted.mode {
        Mode::RepairThenNewTurn { next, .. } => &next.execution_id,
        _ => &admitted.active.execution_id,
    };
    let input = &admitted.input;
    run_ids(
        &admitted.doc,
        execution_id,
        &input.run_id,
        input.parent_run_id.as_deref(),
        &input.iac.ros_invocation_id,
    )
}

/// The ids of a run on `doc`'s thread (its thread and A2A context come from the document), in
/// one execution: what a run and an observer of it project under.
pub(crate) fn run_ids(
    doc: &ThreadDoc,
    execution_id: &str,
    run_id: &str,
    parent_run_id: Option<&str>,
    ros_invocation_id: &str,
) -> RunIds {
    RunIds {
        thread_id: doc.thread_id.clone(),
        run_id: run_id.to_string(),
        parent_run_id: parent_run_id.map(String::from),
        execution_id: execution_id.to_string(),
        context_id: doc.context_id.clone(),
        ros_invocation_id: ros_invocation_id.to_string(),
    }
}

/// The pipeline facts an execution persisted, for a projection that resumes it.
pub(crate) fn durable_of(exec: &Execution) -> Durable {
    Durable {
        pipeline_sequence: exec.pipeline_sequence,
        open_steps: exec.pipeline_open_steps.iter().cloned().collect(),
        text_digests: exec.text_snapshot_digests.iter().cloned().collect(),
    }
}
