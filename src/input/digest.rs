//! The request's digest for run-id idempotency: the body's bytes with every secret blanked.

use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

/// SHA-256 of the request's bytes with each secret's value replaced by `null`, so neither the
/// state file nor a digest of a low-entropy secret can leak it. No tree of the body is built:
/// `secrets` are the raw values, borrowed from `body`, located by the one parse.
pub(super) fn request_digest(body: &str, secrets: &[&RawValue]) -> String {
    let base = body.as_ptr() as usize;
    let mut spans: Vec<(usize, usize)> = secrets
        .iter()
        .map(|raw| {
            let start = raw.get().as_ptr() as usize - base;
            (start, start + raw.get().len())
        })
        .collect();
    spans.sort_unstable();
    let mut hasher = Sha256::new();
    let mut at = 0;
    for (start, end) in spans {
        if start < at || end > body.len() {
            continue; // never: secrets are distinct values inside the body
        }
        hasher.update(&body.as_bytes()[at..start]);
        hasher.update(b"null");
        at = end;
    }
    hasher.update(&body.as_bytes()[at..]);
    crate::ids::hex(&hasher.finalize())
}

#[cfg(test)]
mod tests {
    use crate::error::Lang;
    use crate::input::fixtures::{base, err_of, parse, roots};
    use crate::input::parse_run;
    use serde_json::json;

    #[test]
    fn errors_never_echo_secret_values_and_digest_ignores_them() {
        let e = err_of(|v| v["forwardedProps"]["iacCode"]["llmApiKey"] = json!(12345));
        assert!(!e.contains("12345"));
        let mut a = base();
        a["forwardedProps"]["iacCode"]["llmApiKey"] = json!("sk-one");
        let mut b = base();
        b["forwardedProps"]["iacCode"]["llmApiKey"] = json!("sk-two");
        assert_eq!(parse(&a).unwrap().digest, parse(&b).unwrap().digest);
        b["messages"][0]["content"] = json!("other");
        assert_ne!(parse(&a).unwrap().digest, parse(&b).unwrap().digest);
    }

    #[test]
    fn digest_blanks_every_secret_and_nothing_else() {
        let with = |key: &str, secret: &str| {
            let mut v = base();
            v["forwardedProps"]["iacCode"]["llmApiKey"] = json!("sk-x");
            v["forwardedProps"]["iacCode"]["alibabaCloud"] =
                json!({"accessKeyId": "AK", "accessKeySecret": "S1", "securityToken": "T1"});
            match key {
                "llmApiKey" => v["forwardedProps"]["iacCode"][key] = json!(secret),
                _ => v["forwardedProps"]["iacCode"]["alibabaCloud"][key] = json!(secret),
            }
            parse(&v).unwrap().digest
        };
        for key in ["llmApiKey", "accessKeySecret", "securityToken"] {
            assert_eq!(with(key, "one"), with(key, "two"), "{key}");
        }
        assert_ne!(with("accessKeyId", "one"), with("accessKeyId", "two"));
        // state and context are part of the request's identity, though never built.
        let mut a = base();
        a["state"] = json!({"k": 1});
        assert_ne!(parse(&a).unwrap().digest, parse(&base()).unwrap().digest);
    }

    #[test]
    fn repeated_fields_are_refused_so_no_secret_escapes_the_blanking() {
        let body = br#"{"threadId":"t","runId":"r","state":{},"tools":[],"context":[],
            "messages":[{"id":"m","role":"user","content":"hi"}],
            "forwardedProps":{"iacCode":{"schemaVersion":1,"rosInvocationId":"i",
            "cwd":"/workspace/a","llmApiKey":"sk-1","llmApiKey":"sk-2"}}}"#;
        let e = parse_run(body, &roots(), None).1.unwrap_err();
        assert!(e.message(Lang::En).contains("appears twice"), "{e}");
        let body = br#"{"threadId":"t","threadId":"u"}"#;
        let e = parse_run(body, &roots(), None).1.unwrap_err();
        assert!(
            e.message(Lang::En).contains("`threadId` appears twice"),
            "{e}"
        );
    }
}
