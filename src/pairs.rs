//! Several adapter + kernel pairs behind one balancer: the two checks that keep a thread on the
//! pair that holds it.
//!
//! A kernel cannot take over another kernel's conversation (its context → session link lives only
//! in its own `persistence_dir`), so a thread that reaches a pair which never held it must be
//! refused loudly, never started afresh: the client would get `success` on an empty session and
//! the history it shows would silently stop being the model's. Two rules, both before admission:
//!
//! - `X-AGUI-Thread-Id` (always honoured when present): a balancer that cannot read JSON bodies
//!   (nginx) hashes on it, so it must name the body's thread, or the request is a 400.
//! - `X-AGUI-User-Id` (always honoured when present): a balancer that routes a user's requests by
//!   user (so that all of a user's threads live on one pair and the thread list there is complete)
//!   hashes on it, so it must name the user the request binds or asks for (the body's
//!   `forwardedProps.iacCode.userId`, the query's `userId`), or the request is a 400.
//! - `--pair-mode`: a thread with no state file here whose request carries a `resume` or
//!   conversation history is answered 503 `STATE_UNAVAILABLE` — its state is on another pair (down,
//!   or the pairs changed); the client retries later. A thread with no history is new: admitted.

use crate::config::PairMode;
use crate::error::{Error, Msg};
use crate::input::RunInput;
use crate::store::Store;
use serde::Deserialize;

/// The optional header naming the request's thread, for balancers that hash on headers.
pub(crate) const THREAD_HEADER: &str = "X-AGUI-Thread-Id";

/// The optional header naming the request's user, for balancers that route a user's requests to
/// one pair (contrib/deploy/haproxy.cfg).
pub(crate) const USER_HEADER: &str = "X-AGUI-User-Id";

/// `X-AGUI-User-Id`, when present, must name the user of the request: `user` is the body's
/// `forwardedProps.iacCode.userId` of `POST /` (absent there is a mismatch too: the balancer
/// would put a thread bound to nobody, or to another user, on this user's pair), or a route's
/// `userId` query (checked only when given; such a route may be asked by `rosInvocationId`).
pub(crate) fn check_user_header(header: Option<&str>, user: Option<&str>) -> Result<(), Error> {
    match header.map(str::trim).filter(|h| !h.is_empty()) {
        Some(h) if user != Some(h) => Err(Msg::UserHeaderMismatch.with(&[&USER_HEADER])),
        _ => Ok(()),
    }
}

/// Both checks for `POST /`, once the body parsed: header against body, then ownership.
pub(crate) fn check_run(
    pair_mode: PairMode,
    store: &Store,
    header: Option<&str>,
    input: &RunInput,
    body: &[u8],
) -> Result<(), Error> {
    check_header(header, Some(&input.thread_id))?;
    if pair_mode == PairMode::Single || held_here(store, &input.thread_id) {
        return Ok(());
    }
    if input.resume.is_some() || has_history(body) {
        log::info!("refused a thread this pair never held (pair mode)");
        return Err(not_held());
    }
    Ok(())
}

/// Both checks for the cancel extension: its body names the thread too. A body that does not
/// parse is left to the cancel handler, which says what is wrong with it.
pub(crate) fn check_cancel(
    pair_mode: PairMode,
    store: &Store,
    header: Option<&str>,
    body: &[u8],
) -> Result<(), Error> {
    #[derive(Deserialize)]
    struct Cancel {
        #[serde(rename = "threadId")]
        thread_id: Option<String>,
    }
    let thread = serde_json::from_slice::<Cancel>(body)
        .ok()
        .and_then(|c| c.thread_id)
        .filter(|t| !t.is_empty());
    check_header(header, thread.as_deref())?;
    match thread {
        Some(t) if pair_mode == PairMode::Several && !held_here(store, &t) => Err(not_held()),
        _ => Ok(()),
    }
}

/// The header, when present, must equal the body's thread id byte for byte.
fn check_header(header: Option<&str>, body_thread: Option<&str>) -> Result<(), Error> {
    match (header.map(str::trim), body_thread) {
        (Some(h), Some(b)) if h != b => Err(Msg::ThreadHeaderMismatch.with(&[&THREAD_HEADER])),
        _ => Ok(()),
    }
}

/// Whether this pair has a state file for the thread. A file that cannot be examined counts as
/// held: admission then reads it and answers the real error.
fn held_here(store: &Store, thread_id: &str) -> bool {
    match std::fs::metadata(store.path_of(thread_id)) {
        Ok(_) => true,
        Err(e) => e.kind() != std::io::ErrorKind::NotFound,
    }
}

/// Whether `messages` shows an earlier turn: any message that is not a user, system or developer
/// message (an assistant reply, a tool result…), or a second user message (a turn cancelled before
/// any reply). `@ag-ui/client` sends the whole history with every run.
fn has_history(body: &[u8]) -> bool {
    #[derive(Deserialize)]
    struct Probe {
        #[serde(default)]
        messages: Vec<Message>,
    }
    #[derive(Deserialize)]
    struct Message {
        #[serde(default)]
        role: String,
    }
    let Ok(probe) = serde_json::from_slice::<Probe>(body) else {
        return false; // parse_run accepted it; unreachable in practice
    };
    let users = probe.messages.iter().filter(|m| m.role == "user").count();
    users > 1
        || probe
            .messages
            .iter()
            .any(|m| !matches!(m.role.as_str(), "user" | "system" | "developer"))
}

fn not_held() -> Error {
    Msg::NotThisPair.err()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Code;

    fn input(thread: &str) -> RunInput {
        RunInput {
            thread_id: thread.into(),
            run_id: "r".into(),
            parent_run_id: None,
            iac: Default::default(),
            user_message: None,
            resume: None,
            digest: String::new(),
        }
    }

    /// A resume (with no answers) on `thread`.
    fn resume(thread: &str) -> RunInput {
        RunInput {
            resume: Some(Vec::new()),
            ..input(thread)
        }
    }

    fn body(roles: &[&str]) -> Vec<u8> {
        let messages: Vec<_> = roles
            .iter()
            .map(|r| serde_json::json!({"id": "m", "role": r, "content": "x"}))
            .collect();
        serde_json::to_vec(&serde_json::json!({"threadId": "t", "messages": messages})).unwrap()
    }

    /// A store in a fresh directory of its own, removed when the guard drops.
    fn store(name: &str) -> (Dir, Store) {
        let dir = std::env::temp_dir().join(format!("agui-pairs-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = Store::new(dir.clone());
        (Dir(dir), store)
    }

    struct Dir(std::path::PathBuf);

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn a_thread_header_that_disagrees_with_the_body_is_invalid_input() {
        let (_d, s) = store("header");
        let e = check_run(
            PairMode::Single,
            &s,
            Some("other"),
            &input("t"),
            &body(&["user"]),
        );
        let e = e.unwrap_err();
        assert_eq!((e.code, e.status()), (Code::InvalidInput, 400));
        assert!(check_run(
            PairMode::Single,
            &s,
            Some("t"),
            &input("t"),
            &body(&["user"])
        )
        .is_ok());
        assert!(check_run(PairMode::Single, &s, None, &input("t"), &body(&["user"])).is_ok());
        let cancel = br#"{"threadId":"t","rosInvocationId":"i"}"#;
        assert!(check_cancel(PairMode::Single, &s, Some("u"), cancel).is_err());
        assert!(check_cancel(PairMode::Single, &s, Some("t"), cancel).is_ok());
        assert!(check_cancel(PairMode::Single, &s, Some("t"), b"not json").is_ok());
    }

    #[test]
    fn a_user_header_that_disagrees_with_the_body_or_query_is_invalid_input() {
        let e = check_user_header(Some("alice"), Some("bob")).unwrap_err();
        assert_eq!((e.code, e.status()), (Code::InvalidInput, 400));
        assert!(e.to_string().contains(USER_HEADER), "{e}");
        assert!(check_user_header(Some("alice"), None).is_err());
        assert!(check_user_header(Some(" alice "), Some("alice")).is_ok());
        assert!(check_user_header(Some("alice"), Some("alice")).is_ok());
        assert!(check_user_header(None, Some("bob")).is_ok());
        assert!(check_user_header(Some(""), None).is_ok());
    }

    #[test]
    fn pair_mode_refuses_an_unknown_thread_with_history_or_resume_only() {
        let (_d, s) = store("refuse");
        let refused = |e: Result<(), Error>| {
            let e = e.unwrap_err();
            (e.code, e.status()) == (Code::StateUnavailable, 503)
        };
        let first = body(&["system", "user"]);
        assert!(check_run(PairMode::Several, &s, None, &input("t"), &first).is_ok());
        for history in [
            &["user", "assistant", "user"][..],
            &["user", "user"],
            &["tool"],
        ] {
            let b = body(history);
            assert!(refused(check_run(
                PairMode::Several,
                &s,
                None,
                &input("t"),
                &b
            )));
            assert!(check_run(PairMode::Single, &s, None, &input("t"), &b).is_ok());
        }
        assert!(refused(check_run(
            PairMode::Several,
            &s,
            None,
            &resume("t"),
            &body(&[])
        )));
        let cancel = br#"{"threadId":"t","rosInvocationId":"i"}"#;
        assert!(refused(check_cancel(PairMode::Several, &s, None, cancel)));
    }

    #[test]
    fn pair_mode_is_a_flag_an_env_var_and_a_yaml_key() {
        use crate::config::Command;
        let parse = |args: &[&str], env: Option<&str>| {
            let args = args.iter().map(|s| s.to_string());
            let env = |k: &str| (k == "IAC_CODE_AGUI_PAIR_MODE").then(|| env.map(String::from))?;
            match Command::parse(args, env).unwrap() {
                Command::Run(c) => c.pair_mode == PairMode::Several,
                _ => unreachable!(),
            }
        };
        assert!(!parse(&[], None));
        assert!(parse(&["--pair-mode"], None));
        assert!(parse(&[], Some("true")));
        assert!(!parse(&["--pair-mode=false"], Some("true")));
        let (dir, _s) = store("yaml");
        std::fs::create_dir_all(&dir.0).unwrap();
        let yaml = dir.0.join("agui.yaml");
        std::fs::write(&yaml, "pair_mode: true\n").unwrap();
        assert!(parse(&["--config", yaml.to_str().unwrap()], None));
    }

    #[test]
    fn pair_mode_admits_history_for_a_thread_it_holds() {
        let (_d, s) = store("held");
        s.save(&crate::store::ThreadDoc::new("t", "/w", None))
            .unwrap();
        let b = body(&["user", "assistant", "user"]);
        assert!(check_run(PairMode::Several, &s, None, &input("t"), &b).is_ok());
        assert!(check_run(PairMode::Several, &s, None, &resume("t"), &b).is_ok());
        let cancel = br#"{"threadId":"t","rosInvocationId":"i"}"#;
        assert!(check_cancel(PairMode::Several, &s, None, cancel).is_ok());
    }
}
