//! The simulator's strictness: the fields of a batch/v1 Job (the subset of
//! the real schema that a Job may carry here), refused when unknown, of the
//! wrong type, or missing where required, and the API server's name and
//! label rules. Every refusal is the real server's Status: 400 for
//! undecodable or unknown fields (as with `fieldValidation=Strict`, which
//! this server always applies), 422 Invalid for a bad value.

use serde_json::Value;

/// A field's type.
pub enum S {
    Str,
    Int,
    Bool,
    /// A quantity or an int (`"500m"`, `2`).
    Quantity,
    Map(&'static S),
    List(&'static S),
    Obj(&'static [(&'static str, &'static S)]),
}

static STR: S = S::Str;
static INT: S = S::Int;
static BOOL: S = S::Bool;
static QTY: S = S::Quantity;
static STR_MAP: S = S::Map(&STR);
static STR_LIST: S = S::List(&STR);
static QTY_MAP: S = S::Map(&QTY);

static META: S = S::Obj(&[
    ("name", &STR),
    ("generateName", &STR),
    ("namespace", &STR),
    ("labels", &STR_MAP),
    ("annotations", &STR_MAP),
    ("resourceVersion", &STR),
    ("uid", &STR),
    ("finalizers", &STR_LIST),
]);
static KEY_REF: S = S::Obj(&[("name", &STR), ("key", &STR), ("optional", &BOOL)]);
static VALUE_FROM: S = S::Obj(&[("secretKeyRef", &KEY_REF), ("configMapKeyRef", &KEY_REF)]);
static ENV_VAR: S = S::Obj(&[("name", &STR), ("value", &STR), ("valueFrom", &VALUE_FROM)]);
static ENV: S = S::List(&ENV_VAR);
static NAME_REF: S = S::Obj(&[("name", &STR), ("optional", &BOOL)]);
static ENV_FROM_SRC: S = S::Obj(&[("prefix", &STR), ("secretRef", &NAME_REF), ("configMapRef", &NAME_REF)]);
static ENV_FROM: S = S::List(&ENV_FROM_SRC);
static RESOURCES: S = S::Obj(&[("requests", &QTY_MAP), ("limits", &QTY_MAP)]);
static CAPS: S = S::Obj(&[("add", &STR_LIST), ("drop", &STR_LIST)]);
static SECCOMP: S = S::Obj(&[("type", &STR), ("localhostProfile", &STR)]);
static CSC: S = S::Obj(&[
    ("allowPrivilegeEscalation", &BOOL),
    ("capabilities", &CAPS),
    ("privileged", &BOOL),
    ("readOnlyRootFilesystem", &BOOL),
    ("runAsNonRoot", &BOOL),
    ("runAsUser", &INT),
    ("runAsGroup", &INT),
    ("seccompProfile", &SECCOMP),
]);
static MOUNT: S = S::Obj(&[("name", &STR), ("mountPath", &STR), ("readOnly", &BOOL), ("subPath", &STR)]);
static MOUNTS: S = S::List(&MOUNT);
static CONTAINER: S = S::Obj(&[
    ("name", &STR),
    ("image", &STR),
    ("imagePullPolicy", &STR),
    ("command", &STR_LIST),
    ("args", &STR_LIST),
    ("workingDir", &STR),
    ("env", &ENV),
    ("envFrom", &ENV_FROM),
    ("resources", &RESOURCES),
    ("securityContext", &CSC),
    ("volumeMounts", &MOUNTS),
    ("terminationMessagePath", &STR),
    ("terminationMessagePolicy", &STR),
    ("stdin", &BOOL),
    ("stdinOnce", &BOOL),
    ("tty", &BOOL),
]);
static CONTAINERS: S = S::List(&CONTAINER);
static EMPTY_DIR: S = S::Obj(&[("medium", &STR), ("sizeLimit", &QTY)]);
static SECRET_VOL: S = S::Obj(&[("secretName", &STR), ("defaultMode", &INT), ("optional", &BOOL)]);
static VOLUME: S = S::Obj(&[("name", &STR), ("emptyDir", &EMPTY_DIR), ("secret", &SECRET_VOL)]);
static VOLUMES: S = S::List(&VOLUME);
static PSC: S = S::Obj(&[
    ("runAsNonRoot", &BOOL),
    ("runAsUser", &INT),
    ("runAsGroup", &INT),
    ("fsGroup", &INT),
    ("seccompProfile", &SECCOMP),
]);
static POD_SPEC: S = S::Obj(&[
    ("containers", &CONTAINERS),
    ("initContainers", &CONTAINERS),
    ("restartPolicy", &STR),
    ("serviceAccountName", &STR),
    ("automountServiceAccountToken", &BOOL),
    ("enableServiceLinks", &BOOL),
    ("terminationGracePeriodSeconds", &INT),
    ("activeDeadlineSeconds", &INT),
    ("nodeSelector", &STR_MAP),
    ("securityContext", &PSC),
    ("volumes", &VOLUMES),
    ("runtimeClassName", &STR),
]);
static TEMPLATE: S = S::Obj(&[("metadata", &META), ("spec", &POD_SPEC)]);
static JOB_SPEC: S = S::Obj(&[
    ("backoffLimit", &INT),
    ("activeDeadlineSeconds", &INT),
    ("ttlSecondsAfterFinished", &INT),
    ("completions", &INT),
    ("parallelism", &INT),
    ("suspend", &BOOL),
    ("template", &TEMPLATE),
]);
/// A Job as a client may send it.
pub static JOB: S = S::Obj(&[("apiVersion", &STR), ("kind", &STR), ("metadata", &META), ("spec", &JOB_SPEC)]);

/// A refusal: HTTP code, reason, message.
pub type Refusal = (u16, &'static str, String);

/// Checks a value against a schema; the first fault.
pub fn check(v: &Value, s: &S, path: &str) -> Result<(), Refusal> {
    let wrong = |want: &str| {
        Err((400, "BadRequest", format!("json: cannot unmarshal {} into Go value of type {want} at {path}", kind(v))))
    };
    match s {
        S::Str => v.is_string().then_some(()).map_or_else(|| wrong("string"), Ok),
        S::Int => v.as_i64().map(|_| ()).map_or_else(|| wrong("int64"), Ok),
        S::Bool => v.is_boolean().then_some(()).map_or_else(|| wrong("bool"), Ok),
        S::Quantity => {
            let ok = v.as_i64().is_some() || v.as_str().is_some_and(is_quantity);
            if ok { Ok(()) } else { Err((422, "Invalid", format!("{path}: Invalid value: {v}: must be a quantity"))) }
        }
        S::Map(inner) => {
            let Some(o) = v.as_object() else { return wrong("map[string]string") };
            for (k, x) in o {
                check(x, inner, &format!("{path}.{k}"))?;
            }
            Ok(())
        }
        S::List(inner) => {
            let Some(a) = v.as_array() else { return wrong("[]") };
            for (i, x) in a.iter().enumerate() {
                check(x, inner, &format!("{path}[{i}]"))?;
            }
            Ok(())
        }
        S::Obj(fields) => {
            let Some(o) = v.as_object() else { return wrong("struct") };
            for (k, x) in o {
                let Some((_, fs)) = fields.iter().find(|(n, _)| n == k) else {
                    return Err((
                        400,
                        "BadRequest",
                        format!("strict decoding error: unknown field \"{}{k}\"", dotted(path)),
                    ));
                };
                if x.is_null() {
                    continue;
                }
                check(x, fs, &format!("{path}.{k}"))?;
            }
            Ok(())
        }
    }
}

fn dotted(path: &str) -> String {
    let p = path.trim_start_matches('$').trim_start_matches('.');
    if p.is_empty() { String::new() } else { format!("{p}.") }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn is_quantity(s: &str) -> bool {
    let num_end = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (n, suffix) = s.split_at(num_end);
    !n.is_empty()
        && n.parse::<f64>().is_ok()
        && ["", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"].contains(&suffix)
}

/// A DNS-1123 label (Job, container and volume names): at most 63 of
/// `[a-z0-9-]`, alphanumeric at both ends.
pub fn dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// A label key (`[prefix/]name`) and value, as the API server checks them.
pub fn label_ok(k: &str, v: &str) -> bool {
    let name_ok = |n: &str| {
        !n.is_empty()
            && n.len() <= 63
            && n.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
            && n.starts_with(|c: char| c.is_ascii_alphanumeric())
            && n.ends_with(|c: char| c.is_ascii_alphanumeric())
    };
    let key_ok = match k.split_once('/') {
        Some((prefix, name)) => prefix.len() <= 253 && prefix.split('.').all(dns_label) && name_ok(name),
        None => name_ok(k),
    };
    key_ok && (v.is_empty() || name_ok(v))
}

/// The semantic checks of a decoded Job: required fields and values.
pub fn job_semantics(job: &Value) -> Result<(), Refusal> {
    let invalid = |m: String| Err((422, "Invalid", m));
    if job["apiVersion"] != "batch/v1" {
        return Err((
            400,
            "BadRequest",
            format!(
                "the API version in the data ({}) does not match the expected API version (batch/v1)",
                job["apiVersion"]
            ),
        ));
    }
    if job["kind"] != "Job" {
        return Err((
            400,
            "BadRequest",
            format!("the kind in the data ({}) does not match the expected kind (Job)", job["kind"]),
        ));
    }
    let name = job["metadata"]["name"].as_str().unwrap_or("");
    if name.is_empty() {
        return invalid(
            "Job.batch \"\" is invalid: metadata.name: Required value: name or generateName is required".into(),
        );
    }
    if !dns_label(name) {
        return invalid(format!(
            "Job.batch \"{name}\" is invalid: metadata.name: Invalid value: \"{name}\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (at most 63)"
        ));
    }
    for labels in [&job["metadata"]["labels"], &job["spec"]["template"]["metadata"]["labels"]] {
        for (k, v) in labels.as_object().into_iter().flatten() {
            if !label_ok(k, v.as_str().unwrap_or("")) {
                return invalid(format!(
                    "Job.batch \"{name}\" is invalid: metadata.labels: Invalid value: \"{k}={v}\""
                ));
            }
        }
    }
    let spec = &job["spec"]["template"]["spec"];
    match spec["restartPolicy"].as_str() {
        Some("Never" | "OnFailure") => {}
        other => {
            return invalid(format!(
                "Job.batch \"{name}\" is invalid: spec.template.spec.restartPolicy: Required value: valid values: \"OnFailure\", \"Never\" (got {other:?})"
            ));
        }
    }
    let containers = spec["containers"].as_array().cloned().unwrap_or_default();
    if containers.is_empty() {
        return invalid(format!("Job.batch \"{name}\" is invalid: spec.template.spec.containers: Required value"));
    }
    let volumes: Vec<&str> =
        spec["volumes"].as_array().into_iter().flatten().filter_map(|v| v["name"].as_str()).collect();
    // Init containers and containers are checked alike, and their names
    // are unique across both lists.
    let inits = spec["initContainers"].as_array().cloned().unwrap_or_default();
    let mut seen = std::collections::BTreeSet::new();
    let listed = inits.iter().enumerate().map(|(i, c)| ("initContainers", i, c));
    for (list, i, c) in listed.chain(containers.iter().enumerate().map(|(i, c)| ("containers", i, c))) {
        let cname = c["name"].as_str().unwrap_or("");
        if !dns_label(cname) {
            return invalid(format!(
                "Job.batch \"{name}\" is invalid: spec.template.spec.{list}[{i}].name: Invalid value: \"{cname}\""
            ));
        }
        if !seen.insert(cname.to_owned()) {
            return invalid(format!(
                "Job.batch \"{name}\" is invalid: spec.template.spec.{list}[{i}].name: Duplicate value: \"{cname}\""
            ));
        }
        if c["image"].as_str().is_none_or(|s| s.trim().is_empty()) {
            return invalid(format!(
                "Job.batch \"{name}\" is invalid: spec.template.spec.{list}[{i}].image: Required value"
            ));
        }
        for m in c["volumeMounts"].as_array().into_iter().flatten() {
            let v = m["name"].as_str().unwrap_or("");
            if !volumes.contains(&v) {
                return invalid(format!(
                    "Job.batch \"{name}\" is invalid: spec.template.spec.{list}[{i}].volumeMounts.name: Not found: \"{v}\""
                ));
            }
        }
        for e in c["env"].as_array().into_iter().flatten() {
            let n = e["name"].as_str().unwrap_or("");
            let ok = !n.is_empty()
                && n.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
                && !n.starts_with(|c: char| c.is_ascii_digit());
            if !ok {
                return invalid(format!(
                    "Job.batch \"{name}\" is invalid: spec.template.spec.{list}[{i}].env.name: Invalid value: \"{n}\""
                ));
            }
        }
    }
    for key in ["backoffLimit", "activeDeadlineSeconds", "ttlSecondsAfterFinished"] {
        if let Some(n) = job["spec"][key].as_i64()
            && (n < 0 || (key == "activeDeadlineSeconds" && n == 0))
        {
            return invalid(format!(
                "Job.batch \"{name}\" is invalid: spec.{key}: Invalid value: {n}: must be greater than or equal to 0"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job() -> Value {
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "caesar-t-1", "labels": {"caesar.dev/task-id": "t_1"}},
            "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "agent", "image": "i"}]}}}})
    }

    #[test]
    fn what_the_server_refuses() {
        assert!(check(&job(), &JOB, "$").is_ok());
        assert!(job_semantics(&job()).is_ok());
        let mut j = job();
        j["spec"]["template"]["spec"]["containers"][0]["imagePulPolicy"] = json!("Always");
        let e = check(&j, &JOB, "$").expect_err("unknown");
        assert_eq!(e.0, 400);
        assert!(e.2.contains("spec.template.spec.containers[0].imagePulPolicy"), "{}", e.2);
        let mut j = job();
        j["spec"]["backoffLimit"] = json!("0");
        assert_eq!(check(&j, &JOB, "$").expect_err("type").0, 400);
        let mut j = job();
        j["metadata"]["name"] = json!("Caesar_T");
        assert_eq!(job_semantics(&j).expect_err("name").0, 422);
        let mut j = job();
        j["kind"] = json!("Pod");
        assert_eq!(job_semantics(&j).expect_err("kind").0, 400);
        let mut j = job();
        j["spec"]["template"]["spec"]["restartPolicy"] = json!("Always");
        assert_eq!(job_semantics(&j).expect_err("restart").0, 422);
        let mut j = job();
        j["spec"]["template"]["spec"]["containers"][0]["image"] = json!("");
        assert_eq!(job_semantics(&j).expect_err("image").0, 422);
        assert!(!label_ok("caesar.dev/task-id", "t_1 x"));
    }
}
