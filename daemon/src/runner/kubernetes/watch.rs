//! One watch per cluster and namespace over all of caesar's Jobs and Pods
//! (by label), not a poll per task: whatever the number of remote tasks,
//! the daemon holds two watch connections per namespace plus one log stream
//! per running task. Each task's mirror reads its Job and Pod from here and
//! is woken when anything changes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

use super::manifest::{MANAGED_LABEL, TASK_LABEL};

/// A cluster namespace as the daemon sees it.
pub struct Cluster {
    pub client: Client,
    pub namespace: String,
    pub jobs: Objects<Job>,
    pub pods: Objects<Pod>,
    /// Woken on every change of a Job or Pod.
    pub changed: tokio::sync::Notify,
    /// The pod logs followed at once ([`log_streams`]): each holds a
    /// connection to the API server (kube-client speaks HTTP/1.1), so past
    /// this bound a task's log is read in turns instead (`follow.rs`).
    pub follows: Arc<tokio::sync::Semaphore>,
    /// The reads in turns at once ([`POLLS`]), so that the tasks past the
    /// bound of followed logs add a few connections, not one each.
    pub polls: Arc<tokio::sync::Semaphore>,
}

/// How many logs past the bound of followed ones are read at the same moment.
pub const POLLS: usize = 4;

/// How many pod logs of one namespace are followed at once:
/// `CAESAR_KUBE_LOG_STREAMS`, else 64. The tasks past it have their log read
/// every [`POLL_EVERY`](super::follow::POLL_EVERY) until a stream frees.
pub fn log_streams() -> usize {
    std::env::var("CAESAR_KUBE_LOG_STREAMS").ok().and_then(|v| v.parse().ok()).filter(|n| *n > 0).unwrap_or(64)
}

/// The latest of each object, by task id.
pub struct Objects<K> {
    map: Mutex<HashMap<String, Vec<K>>>,
    synced: AtomicBool,
}

impl<K: Clone + Resource> Objects<K> {
    fn new() -> Objects<K> {
        Objects { map: Mutex::new(HashMap::new()), synced: AtomicBool::new(false) }
    }

    /// Whether a full list has been read at least once.
    pub fn synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// The task's objects (a Job: one; Pods: the Job's, usually one).
    pub fn of(&self, task_id: &str) -> Vec<K> {
        self.map.lock().unwrap_or_else(|p| p.into_inner()).get(task_id).cloned().unwrap_or_default()
    }

    /// How many objects are known, for the benchmarks.
    pub fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|p| p.into_inner()).values().map(Vec::len).sum()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn task_of(o: &K) -> Option<String> {
        o.meta().labels.as_ref()?.get(TASK_LABEL).cloned()
    }

    fn replace_all(&self, items: Vec<K>) {
        let mut next: HashMap<String, Vec<K>> = HashMap::new();
        for o in items {
            if let Some(t) = Self::task_of(&o) {
                next.entry(t).or_default().push(o);
            }
        }
        *self.map.lock().unwrap_or_else(|p| p.into_inner()) = next;
        self.synced.store(true, Ordering::Release);
    }

    fn upsert(&self, o: K) {
        let Some(t) = Self::task_of(&o) else { return };
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let v = map.entry(t).or_default();
        let name = o.meta().name.clone();
        match v.iter_mut().find(|x| x.meta().name == name) {
            Some(slot) => *slot = o,
            None => v.push(o),
        }
    }

    fn remove(&self, o: &K) {
        let Some(t) = Self::task_of(o) else { return };
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(v) = map.get_mut(&t) {
            v.retain(|x| x.meta().name != o.meta().name);
            if v.is_empty() {
                map.remove(&t);
            }
        }
    }
}

impl Cluster {
    /// Starts watching the namespace (on the current runtime).
    pub fn start(client: Client, namespace: &str) -> Arc<Cluster> {
        let cluster = Arc::new(Cluster {
            client,
            namespace: namespace.to_owned(),
            jobs: Objects::new(),
            pods: Objects::new(),
            changed: tokio::sync::Notify::new(),
            follows: Arc::new(tokio::sync::Semaphore::new(log_streams())),
            polls: Arc::new(tokio::sync::Semaphore::new(POLLS)),
        });
        let weak = Arc::downgrade(&cluster);
        tokio::spawn(watch_loop::<Job>(weak.clone(), |c| &c.jobs));
        tokio::spawn(watch_loop::<Pod>(weak, |c| &c.pods));
        cluster
    }

    /// The Jobs API of the namespace.
    pub fn job_api(&self) -> Api<Job> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// The Pods API of the namespace.
    pub fn pod_api(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }
}

async fn watch_loop<K>(cluster: std::sync::Weak<Cluster>, objects: fn(&Cluster) -> &Objects<K>)
where
    K: Clone + Resource + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    let selector = format!("{MANAGED_LABEL}=caesar");
    loop {
        let Some(c) = cluster.upgrade() else { return };
        let api: Api<K> = Api::namespaced(c.client.clone(), &c.namespace);
        drop(c);
        let version = match api.list(&ListParams::default().labels(&selector)).await {
            Ok(list) => {
                let Some(c) = cluster.upgrade() else { return };
                objects(&c).replace_all(list.items);
                c.changed.notify_waiters();
                list.metadata.resource_version.unwrap_or_else(|| "0".to_owned())
            }
            Err(e) => {
                tracing::debug!("kubernetes list failed: {e}");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        let wp = WatchParams::default().labels(&selector).timeout(290);
        let stream = match api.watch(&wp, &version).await {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!("kubernetes watch failed: {e}");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        let mut stream = stream.boxed();
        while let Ok(Some(ev)) = stream.try_next().await {
            let Some(c) = cluster.upgrade() else { return };
            match ev {
                WatchEvent::Added(o) | WatchEvent::Modified(o) => objects(&c).upsert(o),
                WatchEvent::Deleted(o) => objects(&c).remove(&o),
                WatchEvent::Bookmark(_) => continue,
                // Expired (410): list again.
                WatchEvent::Error(_) => break,
            }
            c.changed.notify_waiters();
        }
    }
}
