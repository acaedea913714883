//! A valid run request and the helpers the input tests build their cases from.

use super::{parse_run, RunInput};
use crate::error::{Error, Lang};
use serde_json::{json, Value};
use std::path::PathBuf;

pub(super) fn roots() -> Vec<PathBuf> {
    vec![PathBuf::from("/workspace")]
}

pub(super) fn base() -> Value {
    json!({
        "threadId": "t1", "runId": "r1", "state": {}, "tools": [], "context": [],
        "messages": [{"id": "m1", "role": "user", "content": "hi"}],
        "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "inv-1", "cwd": "/workspace/s1"}}
    })
}

pub(super) fn parse(v: &Value) -> Result<RunInput, Error> {
    parse_run(&serde_json::to_vec(v).unwrap(), &roots(), None).1
}

pub(super) fn err_of(mut f: impl FnMut(&mut Value)) -> String {
    let mut v = base();
    f(&mut v);
    parse(&v).unwrap_err().message(Lang::En).to_string()
}
