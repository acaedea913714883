//! Test support shared by the integration tests (`tests/*.rs`) and the benches.
//!
//! - [`Adapter`]: the adapter as a child process on a port of its own (`adapter`), in a
//!   directory removed when the test process exits (`dirs`).
//! - An AG-UI client over real HTTP ([`post_run`] → [`RunResult`]; `client`).
//! - [`sse`]: the one reader of SSE streams (the adapter's, and the recorded ones).
//! - [`raw`]: HTTP/1.x over a plain `TcpStream`, for clients that misbehave on purpose.
//! - [`procfs`]: what /proc says about a process, and its descriptor limit.
//! - Fault injection that needs privileges ([`can_inject`]; `faults`), a reproducible [`Rng`],
//!   [`without_ids`] to compare two streams, [`eventually`] to wait on a condition.

mod adapter;
mod client;
mod compare;
mod dirs;
mod faults;
pub mod procfs;
pub mod raw;
mod rng;
pub mod sse;
mod wait;

pub use adapter::{adapter_bin, free_port, wait_health, Adapter, Options};
pub use client::{
    agent, allow, long_agent, open_stream, post_json, post_run, post_subscribe, read_result,
    RunResult,
};
pub use compare::without_ids;
pub use dirs::temp_dir;
pub use faults::{can_inject, Fault, Immutable};
pub use rng::Rng;
pub use sse::data_lines;
pub use wait::eventually;
