//! The A2A 1.0 side: the JSON-RPC client of the kernel and the typed view of what it streams.
//!
//! One job per file, read bottom-up: `incoming` the `metadata.iac_code` keys the kernel sends (a
//! leaf), `lenient` the JSON reading the view is built on, `frame` and `envelope` the view of one
//! streamed `result` and of a pipeline envelope, `message` the outgoing message and its
//! `metadata.iac_code`, `rpc` a JSON-RPC reply taken apart, `failure` upstream failures as the
//! spec's three A2A codes, `reader` the stream of a streaming call, `transport` the kernel connection (buffers freed
//! while it is silent), `client` the calls.
//!
//! Every upstream failure becomes one of three spec codes: the service cannot be reached or stops
//! mid-stream (`A2A_UNAVAILABLE`), it answers something that is not the protocol
//! (`A2A_PROTOCOL_ERROR`), or it refuses or fails the execution (`A2A_EXECUTION_FAILED`).

mod client;
mod envelope;
mod failure;
pub(crate) mod frame;
pub(crate) mod incoming;
mod lenient;
mod message;
mod reader;
mod rpc;
mod transport;

pub(crate) use client::streaming_body;
pub use client::A2aClient;
pub(crate) use envelope::{Coord, Envelope};
pub(crate) use message::{
    user_message, CloudCredentials, ExecutionMode, ThinkingMetadata, Turn, TurnOptions,
};
pub(crate) use reader::{A2aStream, Next};
pub(crate) use rpc::parse_rpc;
pub(crate) use rpc::{Rpc, SESSION_BACKUP_NOT_READY};
