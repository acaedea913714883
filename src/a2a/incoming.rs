//! The incoming side of the `metadata.iac_code` key table: the keys the kernel sends on tasks,
//! status updates and artifacts, as the frame view, the projection and the interrupts read them.
//! A leaf: everything that reads the kernel's metadata names its keys from here.

/// Where the object sits in an A2A task, status update or artifact update (a JSON pointer).
pub(crate) const POINTER: &str = "/metadata/iac_code";
/// The iac-code session id (also inside a pipeline envelope).
pub(crate) const SESSION_ID: &str = "iacCodeSessionId";
/// A tool call's update.
pub(crate) const TOOL: &str = "tool";
/// An MCP tool's progress.
pub(crate) const MCP_PROGRESS: &str = "mcpProgress";
/// Token usage of the turn.
pub(crate) const USAGE: &str = "usage";
/// Reasoning (`{type: "raw_thinking", text}`).
pub(crate) const THINKING: &str = "thinking";
/// One pipeline envelope.
pub(crate) const PIPELINE: &str = "pipeline";
/// Several pipeline envelopes, under `events`.
pub(crate) const PIPELINE_BATCH: &str = "pipelineBatch";
/// The input the task waits for.
pub(crate) const INPUT: &str = "input";
/// Further permission inputs waiting at the same time.
pub(crate) const PENDING_PERMISSIONS: &str = "pendingPermissions";
