//! `forwardedProps.iacCode`, the iac-code extension: read strictly (an unknown or repeated key is
//! refused), every field typed, its secrets located for the digest to leave out.

use super::cwd::check_cwd;
use super::json::{
    bool_field, choice, kind, missing, non_empty, object, string_field, value, wrong_type, Kind,
};
use crate::error::{Error, Msg};
use crate::modes::{Presentation, RunMode};
use serde_json::value::RawValue;
use std::path::PathBuf;

pub(crate) const MAX_ROS_INVOCATION_ID: usize = 256;

/// `forwardedProps.iacCode`, every field checked.
#[derive(Debug, Clone, Default)]
pub(crate) struct IacCode {
    pub(crate) ros_invocation_id: String,
    pub(crate) cwd: String,
    pub(crate) model: Option<String>,
    pub(crate) llm_api_key: Option<String>,
    pub(crate) thinking: Option<ThinkingOptions>,
    pub(crate) user_id: Option<String>,
    pub(crate) channel: Option<String>,
    pub(crate) preferred_language: Option<String>,
    pub(crate) candidate_presentation: Option<Presentation>,
    pub(crate) run_mode: Option<RunMode>,
    pub(crate) pipeline_name: Option<String>,
    pub(crate) cleanup_only: Option<bool>,
    pub(crate) alibaba_cloud: Option<AlibabaCloud>,
}

/// `forwardedProps.iacCode.thinking`: how much the client wants the model to think.
#[derive(Debug, Clone, Default)]
pub(crate) struct ThinkingOptions {
    pub(crate) enabled: Option<bool>,
    pub(crate) effort: Option<String>,
    pub(crate) budget: Option<u64>,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct AlibabaCloud {
    pub(crate) access_key_id: Option<String>,
    pub(crate) access_key_secret: Option<String>,
    pub(crate) security_token: Option<String>,
    pub(crate) region_id: Option<String>,
}

const IAC_CODE_FIELDS: &[&str] = &[
    "schemaVersion",
    "rosInvocationId",
    "cwd",
    "model",
    "llmApiKey",
    "thinking",
    "userId",
    "channel",
    "preferredLanguage",
    "candidatePresentation",
    "runMode",
    "pipelineName",
    "cleanupOnly",
    "alibabaCloud",
];

/// The fields the reference declares `X | None = None` (`iac_code/agui/inputs.py`,
/// `IacCodeForwardedProps`): `null` is "not given". Not `schemaVersion`, `rosInvocationId`, `cwd`
/// (required) nor `cleanupOnly` (a plain `bool = False`, where the reference refuses `null`).
const NULLABLE: &[&str] = &[
    "model",
    "llmApiKey",
    "thinking",
    "userId",
    "channel",
    "preferredLanguage",
    "candidatePresentation",
    "runMode",
    "pipelineName",
    "alibabaCloud",
];

/// The validated extension and the raw values of its secrets (for the digest to leave out).
pub(super) fn parse_iac_code<'a>(
    raw: &'a RawValue,
    allowed_cwds: &[PathBuf],
) -> Result<(IacCode, Vec<&'a RawValue>), Error> {
    const P: &str = "forwardedProps.iacCode";
    let obj = object(raw, IAC_CODE_FIELDS, P)?
        .strict(P)?
        .null_is_absent(NULLABLE);
    let mut secrets: Vec<&RawValue> = obj.get("llmApiKey").into_iter().collect();
    match obj.get("schemaVersion") {
        None => return Err(missing("forwardedProps.iacCode.schemaVersion")),
        Some(n) if kind(n) == Kind::Number && value(n)?.as_f64() == Some(1.0) => {}
        Some(_) => return Err(Msg::SchemaVersion.err()),
    }
    let ros_invocation_id = non_empty(
        &obj,
        "rosInvocationId",
        "forwardedProps.iacCode.rosInvocationId",
    )?;
    if ros_invocation_id.chars().count() > MAX_ROS_INVOCATION_ID {
        return Err(Msg::RosInvocationIdTooLong.with(&[&MAX_ROS_INVOCATION_ID]));
    }
    let cwd = non_empty(&obj, "cwd", "forwardedProps.iacCode.cwd")?;
    check_cwd(&cwd, allowed_cwds)?;
    let s = |key: &str| string_field(&obj, key, &format!("{P}.{key}"));
    let thinking = match obj.get("thinking") {
        None => None,
        Some(t) => Some(parse_thinking(t)?),
    };
    let alibaba_cloud = match obj.get("alibabaCloud") {
        None => None,
        Some(c) => Some(parse_alibaba_cloud(c, &mut secrets)?),
    };
    let iac = IacCode {
        ros_invocation_id,
        cwd,
        model: s("model")?,
        llm_api_key: s("llmApiKey")?,
        thinking,
        user_id: s("userId")?,
        channel: s("channel")?,
        preferred_language: s("preferredLanguage")?,
        candidate_presentation: choice(
            &obj,
            "candidatePresentation",
            "forwardedProps.iacCode.candidatePresentation",
            &Presentation::NAMES,
        )?,
        run_mode: choice(
            &obj,
            "runMode",
            "forwardedProps.iacCode.runMode",
            &RunMode::NAMES,
        )?,
        pipeline_name: s("pipelineName")?,
        cleanup_only: bool_field(&obj, "cleanupOnly", "forwardedProps.iacCode.cleanupOnly")?,
        alibaba_cloud,
    };
    Ok((iac, secrets))
}

/// `alibabaCloud`, strictly; its secret and token join `secrets`.
fn parse_alibaba_cloud<'a>(
    raw: &'a RawValue,
    secrets: &mut Vec<&'a RawValue>,
) -> Result<AlibabaCloud, Error> {
    let path = "forwardedProps.iacCode.alibabaCloud";
    let keys = [
        "accessKeyId",
        "accessKeySecret",
        "securityToken",
        "regionId",
    ];
    // All four are `str | None = None` in the reference's `AlibabaCloudOptions`.
    let c = object(raw, &keys, path)?
        .strict(path)?
        .null_is_absent(&keys);
    secrets.extend(c.get("accessKeySecret"));
    secrets.extend(c.get("securityToken"));
    let f = |k: &str| string_field(&c, k, &format!("{path}.{k}"));
    Ok(AlibabaCloud {
        access_key_id: f("accessKeyId")?,
        access_key_secret: f("accessKeySecret")?,
        security_token: f("securityToken")?,
        region_id: f("regionId")?,
    })
}

fn parse_thinking(raw: &RawValue) -> Result<ThinkingOptions, Error> {
    let path = "forwardedProps.iacCode.thinking";
    // `effort` and `budget` are `X | None = None` in the reference's `ThinkingOptions`;
    // `enabled` is a plain `bool = False` (`null` refused there and here).
    let t = object(raw, &["enabled", "effort", "budget"], path)?
        .strict(path)?
        .null_is_absent(&["effort", "budget"]);
    let budget = match t.get("budget") {
        None => None,
        Some(b) => match (kind(b) == Kind::Number).then(|| value(b)).transpose()? {
            Some(n) if n.as_u64().is_some_and(|n| n > 0) => n.as_u64(),
            _ => {
                return Err(wrong_type(
                    "forwardedProps.iacCode.thinking.budget",
                    Msg::MustBePositiveInteger,
                ))
            }
        },
    };
    Ok(ThinkingOptions {
        enabled: bool_field(&t, "enabled", "forwardedProps.iacCode.thinking.enabled")?,
        effort: string_field(&t, "effort", "forwardedProps.iacCode.thinking.effort")?,
        budget,
    })
}

#[cfg(test)]
mod tests {
    use crate::input::fixtures::err_of;
    use serde_json::json;

    #[test]
    fn unknown_iac_code_fields_are_rejected() {
        let e = err_of(|v| v["forwardedProps"]["iacCode"]["extra"] = json!(1));
        assert!(
            e.contains("Unknown field `forwardedProps.iacCode.extra`"),
            "{e}"
        );
        let e = err_of(|v| v["forwardedProps"]["iacCode"]["thinking"] = json!({"x": 1}));
        assert!(e.contains("thinking.x"), "{e}");
    }

    #[test]
    fn a_null_optional_field_is_absent_as_in_the_reference() {
        use crate::input::fixtures::{base, parse};
        let mut v = base();
        let iac = &mut v["forwardedProps"]["iacCode"];
        for key in super::NULLABLE {
            iac[*key] = json!(null);
        }
        iac["thinking"] = json!({"enabled": true, "effort": null, "budget": null});
        iac["alibabaCloud"] = json!({"accessKeyId": null, "accessKeySecret": null,
                                     "securityToken": null, "regionId": null});
        let r = parse(&v).unwrap();
        assert!(r.iac.model.is_none() && r.iac.llm_api_key.is_none() && r.iac.run_mode.is_none());
        assert_eq!(r.iac.thinking.as_ref().unwrap().enabled, Some(true));
        assert!(r.iac.thinking.unwrap().budget.is_none());
        assert!(r.iac.alibaba_cloud.unwrap().access_key_secret.is_none());
        v["forwardedProps"]["iacCode"]["thinking"] = json!(null);
        v["forwardedProps"]["iacCode"]["alibabaCloud"] = json!(null);
        let r = parse(&v).unwrap();
        assert!(r.iac.thinking.is_none() && r.iac.alibaba_cloud.is_none());
        // Required fields and the reference's plain booleans still refuse null.
        for key in ["rosInvocationId", "cwd", "cleanupOnly", "schemaVersion"] {
            let e = err_of(|v| v["forwardedProps"]["iacCode"][key] = json!(null));
            assert!(e.contains(key), "{key}: {e}");
        }
        let e = err_of(|v| v["forwardedProps"]["iacCode"]["thinking"] = json!({"enabled": null}));
        assert!(e.contains("thinking.enabled"), "{e}");
    }

    #[test]
    fn iac_code_limits_and_types() {
        let long = "x".repeat(257);
        assert!(
            err_of(|v| v["forwardedProps"]["iacCode"]["rosInvocationId"] = json!(long))
                .contains("256")
        );
        assert!(
            err_of(|v| v["forwardedProps"]["iacCode"]["schemaVersion"] = json!(2))
                .contains("must be 1")
        );
        assert!(
            err_of(|v| v["forwardedProps"]["iacCode"]["runMode"] = json!("fast"))
                .contains("normal, pipeline")
        );
        assert!(
            err_of(|v| v["forwardedProps"]["iacCode"]["thinking"] = json!({"budget": 0}))
                .contains("positive integer")
        );
        assert!(
            err_of(|v| v["forwardedProps"]["iacCode"]["cleanupOnly"] = json!("yes"))
                .contains("boolean")
        );
        assert!(err_of(
            |v| v["forwardedProps"]["iacCode"]["candidatePresentation"] = json!("fancy")
        )
        .contains("standard, rich"));
    }
}
