//! One module per measured figure, in the report's order; each has one entry function that
//! measures, writes its section and summary rows, and returns what later sections compare with.

pub(crate) mod curve;
pub(crate) mod footprint;
pub(crate) mod frames;
pub(crate) mod held_runs;
pub(crate) mod kernel_limit;
pub(crate) mod large;
pub(crate) mod latency;
pub(crate) mod reference;
pub(crate) mod run_latency;
pub(crate) mod startup;
pub(crate) mod throughput;
