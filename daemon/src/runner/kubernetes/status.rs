//! What a pod's status says about a task: pure functions from the Pod the
//! watch delivered to where the run stands and, when the stream could not
//! deliver the ending, to the ending (termination message, else the
//! Kubernetes reason).

use k8s_openapi::api::core::v1::Pod;

use super::manifest::CONTAINER;
use super::pod::Ending;
use crate::supervisor::ExitRecord;

/// Where a pod's run stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodState {
    /// Not started yet (scheduling, pulling).
    Waiting,
    /// The image cannot be pulled or is not a valid name: the run never starts.
    ImageFailed { reason: String, message: String },
    /// The agent container runs: its log can be followed.
    Running,
    /// The agent container ended.
    Terminated { exit_code: i32, reason: String, message: Option<String> },
    /// The pod failed without its container ever ending (evicted while
    /// pending, node lost).
    Failed { reason: String, message: String },
}

/// The reasons of a waiting container that mean its image will not come.
const IMAGE_REASONS: &[&str] = &["ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"];

/// Reads a pod's state.
pub fn state(pod: &Pod) -> PodState {
    let Some(status) = &pod.status else { return PodState::Waiting };
    let cs = status.container_statuses.iter().flatten().find(|c| c.name == CONTAINER);
    if let Some(s) = cs.and_then(|c| c.state.as_ref()) {
        if let Some(t) = &s.terminated {
            return PodState::Terminated {
                exit_code: t.exit_code,
                reason: t.reason.clone().unwrap_or_default(),
                message: t.message.clone().filter(|m| !m.is_empty()),
            };
        }
        if s.running.is_some() {
            return PodState::Running;
        }
        if let Some(w) = &s.waiting {
            let reason = w.reason.clone().unwrap_or_default();
            if IMAGE_REASONS.contains(&reason.as_str()) {
                return PodState::ImageFailed { reason, message: w.message.clone().unwrap_or_default() };
            }
        }
    }
    if status.phase.as_deref() == Some("Failed") {
        return PodState::Failed {
            reason: status.reason.clone().unwrap_or_else(|| "Failed".to_owned()),
            message: status.message.clone().unwrap_or_default(),
        };
    }
    PodState::Waiting
}

/// The pod's own reason for failing (Evicted, NodeLost, DeadlineExceeded…), if it gives one.
pub fn pod_reason(pod: &Pod) -> Option<(String, String)> {
    let s = pod.status.as_ref()?;
    let reason = s.reason.clone().filter(|r| !r.is_empty())?;
    Some((reason, s.message.clone().unwrap_or_default()))
}

/// The ending of a terminated container whose stream did not carry one:
/// its termination message (written by `__kube pod`), else its reason.
pub fn ending_from_terminated(exit_code: i32, reason: &str, message: Option<&str>, now_ms: i64) -> Ending {
    if let Some(e) = message.and_then(|m| serde_json::from_str::<Ending>(m).ok()) {
        return e;
    }
    let why = match reason {
        "OOMKilled" => "the agent's container ran out of memory (Kubernetes: OOMKilled): raise runner.kubernetes.resources.limit_memory".to_owned(),
        "DeadlineExceeded" => "the Job passed its activeDeadlineSeconds (Kubernetes: DeadlineExceeded)".to_owned(),
        "" => format!("the agent's container ended with code {exit_code} and left no exit record"),
        r => format!("the agent's container ended with code {exit_code} (Kubernetes: {r}) and left no exit record"),
    };
    failed(why, now_ms)
}

/// An ending that fails the task with a reason.
pub fn failed(why: String, now_ms: i64) -> Ending {
    Ending {
        exit: ExitRecord { spawn_error: Some(why.clone()), finished_ms: now_ms, ..Default::default() },
        error: Some(why),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(json: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "p"}, "status": json})).expect("pod")
    }

    #[test]
    fn pod_statuses_map_to_states() {
        let waiting = |reason: &str| {
            pod(
                serde_json::json!({"phase": "Pending", "containerStatuses": [{"name": "agent", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"waiting": {"reason": reason, "message": "pull failed"}}}]}),
            )
        };
        assert_eq!(state(&waiting("ContainerCreating")), PodState::Waiting);
        assert_eq!(
            state(&waiting("ImagePullBackOff")),
            PodState::ImageFailed { reason: "ImagePullBackOff".into(), message: "pull failed".into() }
        );
        let term = pod(
            serde_json::json!({"phase": "Failed", "containerStatuses": [{"name": "agent", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}),
        );
        assert_eq!(state(&term), PodState::Terminated { exit_code: 137, reason: "OOMKilled".into(), message: None });
        let evicted = pod(serde_json::json!({"phase": "Failed", "reason": "Evicted", "message": "low on memory"}));
        assert_eq!(state(&evicted), PodState::Failed { reason: "Evicted".into(), message: "low on memory".into() });
        assert_eq!(state(&pod(serde_json::json!({"phase": "Pending"}))), PodState::Waiting);
    }

    #[test]
    fn endings_come_from_the_termination_message_else_the_reason() {
        let e = Ending {
            exit: ExitRecord { exit_code: Some(0), finished_ms: 5, ..Default::default() },
            result: Some("abc".into()),
            ..Default::default()
        };
        let msg = serde_json::to_string(&e).expect("json");
        assert_eq!(ending_from_terminated(0, "Completed", Some(&msg), 9), e);
        let oom = ending_from_terminated(137, "OOMKilled", None, 9);
        assert!(oom.exit.spawn_error.expect("failed").contains("OOMKilled"));
        let garbage = ending_from_terminated(1, "Error", Some("not json"), 9);
        assert!(garbage.exit.spawn_error.expect("failed").contains("code 1"));
    }
}
