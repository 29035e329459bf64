//! The workspace over the API server (`[runner.kubernetes] workspace =
//! "api"`), for clusters without a git server both sides reach.
//!
//! In: the task's frozen base becomes a commit with no parent (the tree
//! alone: the smallest bundle) and a git bundle in the task directory; the
//! mirror streams it over `pods/exec` into `caesard __kube receive`, run in
//! the pod's init container, which waits for it. Out: the collector bundles
//! the result commit on `/git` (a volume the agent container does not
//! mount) and lingers; the mirror reads it with `caesard __kube result`
//! over `pods/exec`, checks that it is one commit on the base, keeps it as
//! `refs/caesar/tasks/<id>/result` in the local repository, lays it into
//! the worktree as the git path does, then says `caesard __kube taken`.
//! No credential is in the pod: the daemon's own right to `create` on
//! `pods/exec` carries both ways.

use std::path::Path;

use k8s_openapi::api::core::v1::Pod;
use kube::api::AttachParams;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::Meta;
use super::manifest::{COLLECT_CONTAINER, FETCH_CONTAINER, result_ref};
use super::phases::{BASE_CAP, BUNDLE_REF, RECEIVE_ARG, RESULT_ARG, TAKEN_ARG};
use super::pod::POD_ARG0;
use super::watch::Cluster;
use super::workspace::{self, git};

/// The base bundle's file in the task directory.
pub const BASE_FILE: &str = "kube-base.bundle";
/// The result bundle's file in the task directory.
pub const RESULT_FILE: &str = "kube-result.bundle";

/// Makes the base commit (no parent) and its bundle in `scratch`; the
/// commit's id.
pub fn make_base(workdir: &Path, task_id: &str, scratch: &Path) -> Result<String, String> {
    let oid = workspace::snapshot_commit(workdir, task_id, scratch, true)?;
    let top = workspace::top_of(workdir)?;
    // A bundle names its commits by refs: they are made in a scratch
    // repository, never in the user's.
    let tmp = scratch.join("kube-bundle.git");
    let _ = std::fs::remove_dir_all(&tmp);
    let tmp_s = tmp.display().to_string();
    git(scratch, None, &["init", "-q", "--bare", &tmp_s])?;
    git(&top, None, &["push", "-q", "--no-verify", &tmp_s, &format!("+{oid}:{BUNDLE_REF}")])?;
    let out = scratch.join(BASE_FILE).display().to_string();
    let made = git(&tmp, None, &["bundle", "create", "-q", &out, BUNDLE_REF]);
    let _ = std::fs::remove_dir_all(&tmp);
    made.map_err(|e| format!("cannot bundle the task's workspace: {e}"))?;
    let size = std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
    if size > BASE_CAP {
        let _ = std::fs::remove_file(&out);
        return Err(format!(
            "the task's workspace bundles to {size} bytes, more than the {BASE_CAP} a pod takes over pods/exec: use [runner.kubernetes] workspace = \"git\", or leave the large files out of the workspace"
        ));
    }
    Ok(oid)
}

/// The most bytes a result bundle may have: it is the agent's work tree
/// (untrusted), written to the task directory as it arrives, never held
/// in memory.
pub const RESULT_CAP: u64 = 1 << 30;

/// The most bytes of an exec's stderr kept (for its error).
const STDERR_CAP: u64 = 64 * 1024;

/// How many bytes of a file go into one write on an exec's stdin (kube
/// sends each as one websocket frame).
const STDIN_PIECE: usize = 64 * 1024;

/// Runs `caesard __kube <arg>` in a container of the pod over `pods/exec`,
/// with the file `input` streamed on its stdin in [`STDIN_PIECE`]s (never
/// read whole) and its stdout copied into `out` (at most `cap` bytes); the
/// bytes copied when it succeeded, else why not.
async fn exec<W>(
    cluster: &Cluster,
    pod: &str,
    (container, arg): (&str, &str),
    input: Option<&Path>,
    out: &mut W,
    cap: u64,
) -> Result<u64, String>
where
    W: tokio::io::AsyncWrite + Unpin + Send,
{
    let ap = AttachParams {
        container: Some(container.to_owned()),
        stdin: input.is_some(),
        stdout: true,
        stderr: true,
        tty: false,
        max_stdin_buf_size: Some(STDIN_PIECE),
        max_stdout_buf_size: Some(64 * 1024),
        ..Default::default()
    };
    let command = ["caesard", POD_ARG0, arg];
    let file = match input {
        Some(path) => {
            Some(tokio::fs::File::open(path).await.map_err(|e| format!("cannot read {}: {e}", path.display()))?)
        }
        None => None,
    };
    let mut p = cluster
        .pod_api()
        .exec(pod, command, &ap)
        .await
        .map_err(|e| super::client::explain(&e, "create", "pods/exec", &cluster.namespace))?;
    let status = p.take_status();
    let (stdin, stdout, stderr) = (p.stdin(), p.stdout(), p.stderr());
    let write = async move {
        if let (Some(mut w), Some(f)) = (stdin, file) {
            let mut r = tokio::io::BufReader::with_capacity(STDIN_PIECE, f);
            tokio::io::copy_buf(&mut r, &mut w).await?;
            w.shutdown().await?;
        }
        Ok::<_, std::io::Error>(())
    };
    // Past the cap the reader is dropped: the exec fails, nothing waits.
    let read_out = async move {
        match stdout {
            Some(r) => tokio::io::copy(&mut r.take(cap + 1), out).await,
            None => Ok(0),
        }
    };
    let read_err = async move {
        let mut v = Vec::new();
        if let Some(r) = stderr {
            r.take(STDERR_CAP).read_to_end(&mut v).await?;
        }
        Ok::<_, std::io::Error>(v)
    };
    let (w, copied, err) = tokio::join!(write, read_out, read_err);
    let status = match status {
        Some(s) => s.await,
        None => None,
    };
    let _ = p.join().await;
    let err = err.unwrap_or_default();
    // The command's own word first: a receiver that refused the input ends
    // the stream it was being sent on, and says why.
    let failed = status.as_ref().is_some_and(|s| s.status.as_deref() != Some("Success"));
    if !failed {
        w.map_err(|e| format!("cannot send to `{arg}` in container {container}: {e}"))?;
    }
    let copied = copied.map_err(|e| format!("cannot keep what `{arg}` sent: {e}"))?;
    if copied > cap {
        return Err(format!("`caesard __kube {arg}` in container {container} sent more than {cap} bytes: refused"));
    }
    match status {
        Some(s) if s.status.as_deref() == Some("Success") => Ok(copied),
        Some(s) => Err(format!(
            "`caesard __kube {arg}` in container {container} failed ({}): {}",
            s.message.unwrap_or_default(),
            String::from_utf8_lossy(&err).trim()
        )),
        None => Err(format!("`caesard __kube {arg}` in container {container} ended with no status")),
    }
}

/// Where the init container that waits for the base stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fetcher {
    /// Not started yet.
    Waiting,
    /// Running: it takes the bundle now.
    Running,
    /// Ended: the base is (or will never be) in.
    Ended,
}

/// Reads the init container's state from the pod.
pub fn fetcher(pod: &Pod) -> Fetcher {
    let st = pod.status.as_ref().and_then(|s| s.init_container_statuses.as_ref());
    let c = st.and_then(|l| l.iter().find(|c| c.name == FETCH_CONTAINER)).and_then(|c| c.state.as_ref());
    match c {
        Some(s) if s.terminated.is_some() => Fetcher::Ended,
        Some(s) if s.running.is_some() => Fetcher::Running,
        _ => {
            // Past its init containers, the pod has no fetcher to wait on.
            let started = pod.status.as_ref().and_then(|s| s.phase.as_deref()).is_some_and(|p| p != "Pending");
            if started { Fetcher::Ended } else { Fetcher::Waiting }
        }
    }
}

/// Whether the pod's collector container has run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Collector {
    /// Never started: no agent ran beside it, no result was made.
    NeverRan,
    /// Running or ended: a result may be (or have been) there.
    Started,
}

/// Reads the collector's state from the pod.
pub fn collector(pod: &Pod) -> Collector {
    let st = pod.status.as_ref().and_then(|s| s.container_statuses.as_ref());
    let c = st.and_then(|l| l.iter().find(|c| c.name == COLLECT_CONTAINER)).and_then(|c| c.state.as_ref());
    match c {
        Some(s) if s.running.is_some() || s.terminated.is_some() => Collector::Started,
        _ => Collector::NeverRan,
    }
}

/// Streams the base bundle from the task directory into the init
/// container, a piece at a time.
pub async fn send_base(cluster: &Cluster, pod: &str, task_dir: &Path) -> Result<(), String> {
    let path = task_dir.join(BASE_FILE);
    let mut sink = tokio::io::sink();
    exec(cluster, pod, (FETCH_CONTAINER, RECEIVE_ARG), Some(&path), &mut sink, STDERR_CAP).await.map(|_| ())
}

/// Takes the result from the collector, checks it, keeps it as the task's
/// result ref in the local repository and lays it into the workdir; the
/// result commit (the base when the agent changed nothing).
pub async fn bring_back(cluster: &Cluster, pod: &str, meta: &Meta, task_dir: &Path) -> Result<String, String> {
    let taken = take_result(cluster, pod, meta, task_dir).await;
    // Taken or refused, the collector may end now (a retry would read the
    // same bundle); if this is lost, it ends at its linger.
    let mut sink = tokio::io::sink();
    if let Err(e) = exec(cluster, pod, (COLLECT_CONTAINER, TAKEN_ARG), None, &mut sink, STDERR_CAP).await {
        tracing::debug!("cannot tell the collector its result was taken: {e}");
    }
    taken
}

async fn take_result(cluster: &Cluster, pod: &str, meta: &Meta, task_dir: &Path) -> Result<String, String> {
    let path = task_dir.join(RESULT_FILE);
    let mut file = tokio::fs::File::create(&path).await.map_err(|e| format!("cannot keep the result bundle: {e}"))?;
    let got = exec(cluster, pod, (COLLECT_CONTAINER, RESULT_ARG), None, &mut file, RESULT_CAP).await;
    let synced = file.sync_all().await;
    drop(file);
    let got = got?;
    synced.map_err(|e| format!("cannot keep the result bundle: {e}"))?;
    let (meta, dir) = (meta.clone(), task_dir.to_path_buf());
    tokio::task::spawn_blocking(move || apply_bundle(&meta, got, &path, &dir)).await.map_err(|e| e.to_string())?
}

/// Fetches the bundle's one commit into the workdir's repository as
/// `refs/caesar/tasks/<id>/result`, checks it is a child of the base, and
/// lays its changes into the files.
fn apply_bundle(meta: &Meta, len: u64, path: &Path, scratch: &Path) -> Result<String, String> {
    let (workdir, base) = (meta.workdir.as_path(), meta.base.as_str());
    // Nothing sent: the agent changed nothing.
    if len == 0 {
        return Ok(base.to_owned());
    }
    let top = workspace::top_of(workdir)?;
    let path_s = path.display().to_string();
    let heads = git(&top, None, &["bundle", "list-heads", &path_s, BUNDLE_REF])
        .map_err(|e| format!("the result bundle is not one: {e}"))?;
    let oid = heads
        .lines()
        .find_map(|l| l.strip_suffix(BUNDLE_REF).map(|o| o.trim().to_owned()))
        .filter(|o| o.len() >= 40 && o.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or_else(|| format!("the result bundle names no {BUNDLE_REF}"))?;
    // Checked before any ref names it: a bundle that is not one commit on
    // the base leaves nothing behind but unreachable objects.
    git(&top, None, &["fetch", "-q", "--no-tags", "--no-write-fetch-head", &path_s, BUNDLE_REF])
        .map_err(|e| format!("the result bundle does not fetch: {e}"))?;
    workspace::check_parent(&top, &oid, base).map_err(|e| format!("the result bundle is refused: {e}"))?;
    git(&top, None, &["update-ref", &result_ref(&meta.task_id), &oid])
        .map_err(|e| format!("cannot keep the result as {}: {e}", result_ref(&meta.task_id)))?;
    workspace::lay_changes(workdir, base, &oid, scratch)?;
    Ok(oid)
}

/// Deletes the task's local result ref (apply, discard, gc); no ref is no error.
pub fn delete_local_ref(repo: &Path, task_id: &str) -> Result<(), String> {
    let top = workspace::top_of(repo)?;
    let r = result_ref(task_id);
    if git(&top, None, &["rev-parse", "-q", "--verify", &r]).is_err() {
        return Ok(());
    }
    git(&top, None, &["update-ref", "-d", &r]).map(|_| ()).map_err(|e| format!("cannot delete {r}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(dir: &Path, args: &[&str]) -> String {
        let c = ["-c", "user.name=t", "-c", "user.email=t@t"];
        git(dir, None, &[&c[..], args].concat()).expect("git")
    }

    /// The collector's side, by hand: the base bundle fetched into a fresh
    /// repository, a commit on it (or on something else), bundled back.
    fn result_bundle(base_bundle: &Path, base: &str, dir: &Path, on_base: bool) -> std::path::PathBuf {
        std::fs::create_dir_all(dir).expect("mkdir");
        sh(dir, &["init", "-q"]);
        sh(dir, &["fetch", "-q", &base_bundle.display().to_string(), &format!("+{BUNDLE_REF}:refs/caesar/base")]);
        if on_base {
            sh(dir, &["checkout", "-q", "--detach", base]);
        } else {
            sh(dir, &["checkout", "-q", "--orphan", "other"]);
        }
        std::fs::write(dir.join("README.md"), "changed\n").expect("write");
        sh(dir, &["add", "-A"]);
        sh(dir, &["commit", "-q", "-m", "result"]);
        sh(dir, &["update-ref", BUNDLE_REF, "HEAD"]);
        let out = dir.join("r.bundle");
        let not_base = format!("^{base}");
        let mut args = vec!["bundle", "create", "-q", out.to_str().expect("utf-8"), BUNDLE_REF];
        if on_base {
            args.push(&not_base);
        }
        sh(dir, &args);
        out
    }

    #[test]
    fn a_result_bundle_is_kept_as_the_result_ref_only_when_it_is_one_commit_on_the_base() {
        let t = tempfile::tempdir().expect("tempdir");
        let (work, scratch) = (t.path().join("work"), t.path().join("task"));
        std::fs::create_dir_all(&work).expect("mkdir");
        std::fs::create_dir_all(&scratch).expect("mkdir");
        sh(&work, &["init", "-q"]);
        std::fs::write(work.join("README.md"), "hello\n").expect("write");
        sh(&work, &["add", "-A"]);
        sh(&work, &["commit", "-q", "-m", "base"]);
        let base = make_base(&work, "t_1", &scratch).expect("base");
        let meta = Meta { task_id: "t_1".into(), base: base.clone(), workdir: work.clone(), ..Default::default() };
        let r = result_ref("t_1");

        // Not on the base: refused, no ref, the files untouched.
        let foreign = result_bundle(&scratch.join(BASE_FILE), &base, &t.path().join("foreign"), false);
        let len = std::fs::metadata(&foreign).expect("bundle").len();
        let e = apply_bundle(&meta, len, &foreign, &scratch).expect_err("refused");
        assert!(e.contains("not a child of the task's base"), "{e}");
        assert!(git(&work, None, &["rev-parse", "-q", "--verify", &r]).is_err());
        assert_eq!(std::fs::read_to_string(work.join("README.md")).expect("read"), "hello\n");

        // One commit on the base: kept as the result ref, laid into the files.
        let good = result_bundle(&scratch.join(BASE_FILE), &base, &t.path().join("good"), true);
        let len = std::fs::metadata(&good).expect("bundle").len();
        let oid = apply_bundle(&meta, len, &good, &scratch).expect("applied");
        assert_eq!(git(&work, None, &["rev-parse", &r]).expect("ref"), oid);
        assert_eq!(std::fs::read_to_string(work.join("README.md")).expect("read"), "changed\n");
        delete_local_ref(&work, "t_1").expect("deleted");
        assert!(git(&work, None, &["rev-parse", "-q", "--verify", &r]).is_err());
        // Nothing sent: the base, nothing fetched.
        assert_eq!(apply_bundle(&meta, 0, &good, &scratch).expect("unchanged"), base);
    }
}
