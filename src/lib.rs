//! # iac-code-agui
//!
//! An [AG-UI](https://docs.ag-ui.com) adapter for the iac-code A2A execution kernel. Web consoles
//! POST a `RunAgentInput` and read an SSE stream of AG-UI events; the adapter turns each run into
//! A2A 1.0 JSON-RPC calls (`SendStreamingMessage`, `GetTask`, `CancelTask`) on a loopback kernel and
//! projects the task updates back. It never runs an agent itself.
//!
//! The crate is plain blocking Rust: a tiny_http worker pool hands every request to an OS thread
//! of its own; an admitted run goes on on that thread, reading the upstream with ureq and writing
//! the client's stream; one heartbeat thread serves every open stream. Each module is one concern,
//! listed here in the layer order (ARCHITECTURE.md's "Layers", enforced by `tests/tidy.rs`): a
//! module imports only from the rows below its own layer.
//!
//! | module | concern |
//! |---|---|
//! | [`http`] | the HTTP surface: dispatch, routes, guards (Host, CORS, bearer), body limits, pre-SSE errors |
//! | [`hotpath`] | the relay's hot path without sockets, for the frames bench (hidden) |
//! | [`untrusted`] | the parsers of untrusted bytes and their properties, for the fuzz targets (hidden) |
//! | `observe` | re-attach after a reload: the thread lookup and the observe stream |
//! | `pairs` | several pairs: the thread header, unknown threads with history refused |
//! | [`run`] | admission, the life of a run, resume, crash repair, the cancel extension, shutdown |
//! | [`app`] | what every request shares: configuration, clients, store, runs in progress |
//! | [`kernel`] | supervision of a managed `iac-code a2a` |
//! | [`threadfeed`] | the live feed of a thread: every run, from any client, on one open stream |
//! | [`projection`] | A2A update in, AG-UI events out: a pure state machine |
//! | [`feed`] | replay buffers: SSE cursors kept per execution, exact resume, join, detach grace |
//! | [`history`] | the kept conversations: per-thread append-only logs of AG-UI messages, join snapshots, history pages |
//! | `interrupts` | input waits as interrupts, resume answers as A2A messages |
//! | [`stream`] | the client's SSE response and the heartbeat thread |
//! | [`a2a`] | the JSON-RPC client, the typed view of a streamed frame, the `metadata.iac_code` keys |
//! | [`store`] | per-thread JSON state files, atomically replaced; the thread list's index of them |
//! | [`input`] | validation of `RunAgentInput` and `forwardedProps.iacCode` |
//! | [`sse`] | the SSE parser (upstream) and frame writer (downstream) |
//! | [`config`] | flags, environment, YAML (`--config`): one flag table |
//! | `metrics` | counters and histograms for `GET /metrics` (Prometheus text) |
//! | [`logctx`] | the run's ids as log fields (`--log-format json`) |
//! | [`error`] | the one error type (a catalogue message and its parameters) |
//! | `messages` | the one catalogue of user-visible messages (code, status, a sentence per language) |
//! | `code`, `lang` | the spec's error codes; the seven languages and the one language decision |
//! | `ids`, `events`, `modes` | ids, digests, clocks; AG-UI event types and serialised events; the client's `runMode` and `candidatePresentation` |
//! | [`memory`] | glibc told to give memory back (start-up thresholds, a trim after a large request) |
//!
//! The projection can be driven without sockets:
//!
//! ```
//! use iac_code_agui::error::Lang;
//! use iac_code_agui::projection::{End, Projection, RunIds};
//! use serde_json::json;
//!
//! let ids = RunIds { thread_id: "t".into(), run_id: "r".into(), context_id: "ctx".into(), ..Default::default() };
//! let mut p = Projection::new(ids, Lang::En);
//! let mut events = Vec::new();
//! p.start(&mut events);
//! let update = json!({"statusUpdate": {"taskId": "task-1", "contextId": "ctx",
//!     "status": {"state": "TASK_STATE_WORKING",
//!                "message": {"messageId": "m1", "role": "ROLE_AGENT", "parts": [{"text": "Hello"}]}}}});
//! assert_eq!(p.on_item(&update, &mut events).unwrap(), None);
//! let done = json!({"statusUpdate": {"taskId": "task-1", "contextId": "ctx",
//!     "status": {"state": "TASK_STATE_INPUT_REQUIRED"}}});
//! assert_eq!(p.on_item(&done, &mut events).unwrap(), Some(End::Success));
//! p.finish(&End::Success, &mut events);
//! let types: Vec<_> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
//! assert_eq!(types, ["RUN_STARTED", "CUSTOM", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT",
//!                    "TEXT_MESSAGE_END", "RUN_FINISHED"]);
//! ```

// `pub` is the crate's API; everything else is `pub(crate)`, and the compiler keeps it so.
#![warn(unreachable_pub)]

pub mod a2a;
pub mod app;
pub(crate) mod catchup;
pub mod config;
pub(crate) mod descriptors;
pub mod error;
pub(crate) mod events;
pub mod feed;
pub mod history;

pub(crate) mod code;
#[doc(hidden)]
pub mod hotpath;
pub mod http;
pub(crate) mod ids;
pub mod input;
pub(crate) mod interrupts;
pub mod kernel;
pub mod kernel_drain;
pub(crate) mod lang;
pub mod logctx;
pub mod memory;
pub(crate) mod messages;
pub(crate) mod metrics;
pub(crate) mod modes;
pub(crate) mod observe;
pub(crate) mod pairs;
pub mod projection;
pub mod run;
pub mod sse;
pub mod store;
pub mod stream;
#[doc(hidden)]
pub mod testing;
pub mod threadfeed;
#[doc(hidden)]
pub mod untrusted;
pub mod upgrade;
