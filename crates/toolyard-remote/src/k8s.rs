//! The Kubernetes link: one pod per session, its runners reached through the exec API.
//!
//! Lifecycle of a session's pod:
//! 1. the first runner the session needs creates it, from the Pod template (`{session}` expanded
//!    in its name, labels and annotations) or as an agent-sandbox `SandboxClaim` against a warm
//!    pool, and waits until it is Ready (at most `ready_timeout_s`; a pod that does not make it
//!    is deleted and the call fails saying what the pod was waiting for);
//! 2. each lane's runner is `exec`'d in its container (stdin, stdout and stderr, no tty), and
//!    that stream is the link;
//! 3. a watch on the pod ends every link into it as soon as the pod is deleted or ends: the
//!    router then fails the calls in flight, and the session's next call places a fresh pod;
//! 4. the pod (or claim) is deleted, with a grace period of 0, when the session ends or the
//!    server stops.
//!
//! RBAC the server's identity needs in the namespace: `pods` create, get, list, watch, delete
//! and `pods/exec` create; in claim mode also `sandboxclaims.extensions.agents.x-k8s.io`
//! create, get, list, watch, delete and `sandboxes.agents.x-k8s.io` get.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{
    ApiResource, AttachParams, DeleteParams, DynamicObject, GroupVersionKind, PostParams,
};
use kube::runtime::WatchStreamExt;
use kube::runtime::wait::{await_condition, conditions};
use kube::runtime::watcher::watch_object;
use kube::{Api, Client};
use tokio::io::{AsyncRead, ReadBuf};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use toolyard_core::{Lane, ToolError};
use toolyard_dispatch::remote_kube::{KubernetesConfig, Placement};
use toolyard_dispatch::{LinkIo, RunnerLink};

/// The label every placed pod (or claim) carries, with the session's token as its value.
pub const SESSION_LABEL: &str = "toolyard.dev/session";
/// The label that says Toolyard placed it (`kubectl delete pod -l app.kubernetes.io/managed-by=toolyard`
/// cleans up after a server that was killed).
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "toolyard");

/// The link's settings, resolved from `[remote.kubernetes]`: the template read and checked.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The namespace pods (or claims) are created in.
    pub namespace: String,
    /// Where a session's pod comes from.
    pub place: Place,
    /// The container runners are exec'd in (`None`: the pod's only one).
    pub container: Option<String>,
    /// The runner's argv in the pod; `{lane}` and `{session}` expand.
    pub runner: Vec<String>,
    /// How long a new pod may take to become Ready.
    pub ready_timeout: Duration,
    /// The protocol's heartbeat period.
    pub heartbeat: Duration,
}

/// Where a session's pod comes from, resolved.
#[derive(Debug, Clone)]
pub enum Place {
    /// A Pod from this template (its name holds `{session}`).
    Template(Box<Pod>),
    /// An agent-sandbox claim against this warm pool.
    Claim {
        /// The `SandboxWarmPool`'s name.
        warm_pool: String,
    },
}

impl Settings {
    /// Read the section's Pod template (relative to `base`, the catalog's directory) and
    /// check it: a v1 Pod whose name holds `{session}`, with the container to exec in.
    pub fn from_config(
        config: &KubernetesConfig,
        heartbeat: Duration,
        base: Option<&Path>,
    ) -> Result<Self, ToolError> {
        let mut container = config.container.clone();
        let place = match &config.placement {
            Placement::SandboxClaim { warm_pool } => Place::Claim {
                warm_pool: warm_pool.clone(),
            },
            Placement::PodTemplate(path) => {
                let path = match base {
                    Some(b) if path.is_relative() => b.join(path),
                    _ => path.clone(),
                };
                let text = std::fs::read_to_string(&path).map_err(|e| {
                    ToolError::InvalidArguments(format!(
                        "[remote.kubernetes] pod_template {}: cannot read it: {e}; give a path to a v1 Pod YAML file (relative to the catalog file)",
                        path.display()
                    ))
                })?;
                let pod = parse_template(&text, &config.namespace).map_err(|e| {
                    ToolError::InvalidArguments(format!(
                        "[remote.kubernetes] pod_template {}: {e}",
                        path.display()
                    ))
                })?;
                container = Some(pick_container(&pod, config.container.as_deref()).map_err(
                    |e| {
                        ToolError::InvalidArguments(format!(
                            "[remote.kubernetes] pod_template {}: {e}",
                            path.display()
                        ))
                    },
                )?);
                Place::Template(Box::new(pod))
            }
        };
        Ok(Self {
            namespace: config.namespace.clone(),
            place,
            container,
            runner: config.runner.clone(),
            ready_timeout: Duration::from_secs(config.ready_timeout_s),
            heartbeat,
        })
    }
}

/// The template as a Pod, or what is wrong with it.
pub fn parse_template(text: &str, namespace: &str) -> Result<Pod, String> {
    let value: serde_json::Value = serde_saphyr::from_str(text)
        .map_err(|e| format!("not valid YAML: {e}; it must be one v1 Pod manifest"))?;
    let (api_version, kind) = (
        value.get("apiVersion").and_then(|v| v.as_str()),
        value.get("kind").and_then(|v| v.as_str()),
    );
    if (api_version, kind) != (Some("v1"), Some("Pod")) {
        return Err(format!(
            "it is not a v1 Pod (apiVersion {}, kind {}): write `apiVersion: v1` and `kind: Pod`",
            api_version.unwrap_or("missing"),
            kind.unwrap_or("missing")
        ));
    }
    let pod: Pod = serde_json::from_value(value).map_err(|e| format!("not a valid Pod: {e}"))?;
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    if !name.contains("{session}") {
        return Err(format!(
            "metadata.name `{name}` must contain {{session}} (e.g. `toolyard-{{session}}`), so each session gets its own pod"
        ));
    }
    if let Some(ns) = pod.metadata.namespace.as_deref()
        && ns != namespace
    {
        return Err(format!(
            "metadata.namespace `{ns}` differs from [remote.kubernetes] namespace `{namespace}`: drop it from the template or set namespace = \"{ns}\""
        ));
    }
    Ok(pod)
}

/// The container runners are exec'd in: `wanted` if the pod has it, else its only container.
fn pick_container(pod: &Pod, wanted: Option<&str>) -> Result<String, String> {
    let names: Vec<&str> = pod
        .spec
        .as_ref()
        .map(|s| s.containers.iter().map(|c| c.name.as_str()).collect())
        .unwrap_or_default();
    match wanted {
        Some(w) if names.contains(&w) => Ok(w.to_string()),
        Some(w) => Err(format!(
            "it has no container `{w}` (it has: {}); set [remote.kubernetes] container to one of them",
            names.join(", ")
        )),
        None if names.len() == 1 => Ok(names[0].to_string()),
        None => Err(format!(
            "it has {} containers ({}); set [remote.kubernetes] container to the one with toolyard",
            names.len(),
            names.join(", ")
        )),
    }
}

/// The session token made fit for pod names and label values: lower case, `-` for `_`,
/// starting with a letter or digit. Distinct sessions stay distinct: the token ends with a hash
/// of the session's id.
pub fn kube_token(token: &str) -> String {
    let t: String = token
        .chars()
        .map(|c| match c {
            '_' => '-',
            c => c.to_ascii_lowercase(),
        })
        .collect();
    let t = t.trim_start_matches('-');
    if t.is_empty() {
        "s".into()
    } else {
        t.to_string()
    }
}

/// The Pod for session `token`: the template with `{session}` expanded in its name, labels and
/// annotations, and Toolyard's own labels added. Kubernetes mounts the service account's API
/// token into every pod unless told not to, where the model's commands could read it and call
/// the cluster: the pod gets none unless the template asks for it by name
/// (`automountServiceAccountToken: true`).
pub fn instantiate(template: &Pod, token: &str, namespace: &str) -> Pod {
    let mut pod = template.clone();
    if let Some(spec) = pod.spec.as_mut() {
        spec.automount_service_account_token.get_or_insert(false);
    }
    let meta = &mut pod.metadata;
    let expand = |s: &str| s.replace("{session}", token);
    meta.name = meta.name.as_deref().map(expand);
    meta.namespace = Some(namespace.to_string());
    for map in [&mut meta.labels, &mut meta.annotations] {
        if let Some(m) = map.as_mut() {
            *m = m.iter().map(|(k, v)| (expand(k), expand(v))).collect();
        }
    }
    let labels = meta.labels.get_or_insert_with(BTreeMap::new);
    labels.insert(SESSION_LABEL.into(), token.into());
    labels.insert(MANAGED_BY.0.into(), MANAGED_BY.1.into());
    pod
}

/// Whether the pod's Ready condition is True.
pub fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Why the pod can never serve again, if it cannot: it ended, or it is being deleted.
fn finished(pod: &Pod) -> Option<String> {
    if pod.metadata.deletion_timestamp.is_some() {
        return Some("is being deleted".into());
    }
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    match phase {
        Some(p @ ("Failed" | "Succeeded")) => Some(format!("ended ({p})")),
        _ => None,
    }
}

/// What the pod is waiting for, for the error of a pod that did not become ready.
pub fn pod_summary(pod: &Pod) -> String {
    let Some(status) = pod.status.as_ref() else {
        return "no status yet".into();
    };
    let mut parts = vec![format!(
        "phase {}",
        status.phase.as_deref().unwrap_or("unknown")
    )];
    for c in status.conditions.iter().flatten() {
        if c.status != "True"
            && let Some(m) = c.message.as_deref().or(c.reason.as_deref())
        {
            parts.push(format!("{}: {m}", c.type_));
        }
    }
    let statuses = status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten());
    for cs in statuses {
        if let Some(w) = cs.state.as_ref().and_then(|s| s.waiting.as_ref()) {
            let reason = w.reason.as_deref().unwrap_or("waiting");
            match w.message.as_deref() {
                Some(m) => parts.push(format!("container {} {reason}: {m}", cs.name)),
                None => parts.push(format!("container {} {reason}", cs.name)),
            }
        }
    }
    parts.join("; ")
}

/// Why an API call failed, said so the operator can act: a refusal names the verb and resource
/// to grant.
pub fn explain(e: &kube::Error, verb: &str, resource: &str, what: &str, ns: &str) -> ToolError {
    if let kube::Error::Api(status) = e
        && (status.is_forbidden() || status.code == 401)
    {
        return ToolError::Unavailable(format!(
            "Kubernetes refused to {verb} {what} in namespace {ns} ({} {}: {}): grant the server's identity `{verb}` on `{resource}` in namespace {ns} (a Role with resources [\"{resource}\"] and verbs [\"{verb}\"], bound to its service account or user)",
            status.code, status.reason, status.message
        ));
    }
    ToolError::Unavailable(format!(
        "Kubernetes: cannot {verb} {what} in namespace {ns}: {e}"
    ))
}

/// The error of a watch (an `await_condition`) that failed, with the verbs a watch needs.
fn explain_watch(
    e: &kube::runtime::wait::Error,
    resource: &str,
    what: &str,
    ns: &str,
) -> ToolError {
    let kube::runtime::wait::Error::ProbeFailed(w) = e;
    let inner = match w {
        kube::runtime::watcher::Error::InitialListFailed(k)
        | kube::runtime::watcher::Error::WatchStartFailed(k)
        | kube::runtime::watcher::Error::WatchFailed(k) => Some(k),
        _ => None,
    };
    match inner {
        Some(k) => match explain(k, "watch", resource, what, ns) {
            ToolError::Unavailable(m) if m.contains("refused") => ToolError::Unavailable(
                m.replace(
                    &format!("`watch` on `{resource}`"),
                    &format!("`get`, `list` and `watch` on `{resource}`"),
                )
                .replace("verbs [\"watch\"]", "verbs [\"get\", \"list\", \"watch\"]"),
            ),
            other => other,
        },
        None => ToolError::Unavailable(format!(
            "Kubernetes: cannot watch {what} in namespace {ns}: {e}"
        )),
    }
}

/// A runner's stream inside a pod.
pub struct ExecIo {
    /// The runner's stdout.
    pub reader: Box<dyn AsyncRead + Send + Unpin>,
    /// The runner's stdin.
    pub writer: Box<dyn tokio::io::AsyncWrite + Send + Unpin>,
    /// The runner's stderr.
    pub stderr: Option<Box<dyn AsyncRead + Send + Unpin>>,
    /// What keeps the stream open; dropped with the reader.
    pub keep: Option<Box<dyn Send + Sync>>,
}

/// Starts a process in a pod's container with its stdio as a stream: the exec API, or a
/// stand-in in tests (the exec WebSocket cannot be recorded).
#[async_trait]
pub trait Exec: Send + Sync {
    /// Start `argv` in `container` of pod `pod` in namespace `ns`.
    async fn exec(
        &self,
        client: &Client,
        ns: &str,
        pod: &str,
        container: Option<&str>,
        argv: Vec<String>,
    ) -> Result<ExecIo, kube::Error>;
}

/// `Api::<Pod>::exec` with stdin, stdout and stderr, no tty.
pub struct KubeExec;

#[async_trait]
impl Exec for KubeExec {
    async fn exec(
        &self,
        client: &Client,
        ns: &str,
        pod: &str,
        container: Option<&str>,
        argv: Vec<String>,
    ) -> Result<ExecIo, kube::Error> {
        let mut ap = AttachParams::default()
            .stdin(true)
            .stdout(true)
            .stderr(true)
            .tty(false);
        if let Some(c) = container {
            ap = ap.container(c);
        }
        let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
        let mut process = pods.exec(pod, argv, &ap).await?;
        let missing =
            |what: &str| kube::Error::Service(format!("the exec stream has no {what}").into());
        let writer = process.stdin().ok_or_else(|| missing("stdin"))?;
        let reader = process.stdout().ok_or_else(|| missing("stdout"))?;
        let stderr = process.stderr();
        Ok(ExecIo {
            reader: Box::new(reader),
            writer: Box::new(writer),
            stderr: stderr.map(|s| Box::new(s) as Box<dyn AsyncRead + Send + Unpin>),
            // Dropping the process aborts the WebSocket task: the runner's stdin closes.
            keep: Some(Box::new(process)),
        })
    }
}

/// A session's placed pod.
struct Placed {
    pod: String,
    uid: String,
    /// The claim the pod came from, in claim mode: deleting it releases the pod.
    claim: Option<String>,
    /// Cancelled when the pod is gone: every reader into it then ends.
    gone: CancellationToken,
    watch: tokio::task::JoinHandle<()>,
}

type SessionSlot = Arc<tokio::sync::Mutex<Option<Placed>>>;

/// The Kubernetes link: a pod per session, runners through exec.
pub struct KubeLink {
    settings: Settings,
    client: tokio::sync::OnceCell<Client>,
    exec: Arc<dyn Exec>,
    sessions: Mutex<HashMap<String, SessionSlot>>,
}

impl KubeLink {
    /// A link that connects with the default kube config (KUBECONFIG, ~/.kube/config, or the
    /// in-cluster service account) on first use.
    pub fn new(settings: Settings) -> Self {
        Self {
            settings,
            client: tokio::sync::OnceCell::new(),
            exec: Arc::new(KubeExec),
            sessions: Mutex::default(),
        }
    }

    /// A link through `client`, starting runners with `exec`.
    pub fn with_client(settings: Settings, client: Client, exec: Arc<dyn Exec>) -> Self {
        Self {
            settings,
            client: tokio::sync::OnceCell::new_with(Some(client)),
            exec,
            sessions: Mutex::default(),
        }
    }

    async fn client(&self) -> Result<&Client, ToolError> {
        self.client
            .get_or_try_init(|| async {
                Client::try_default().await.map_err(|e| {
                    ToolError::Unavailable(format!(
                        "cannot reach Kubernetes for [remote.kubernetes]: {e}; set KUBECONFIG (or ~/.kube/config), or run the server in a pod with a service account"
                    ))
                })
            })
            .await
    }

    fn slot(&self, token: &str) -> SessionSlot {
        let mut s = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        s.entry(token.to_string()).or_default().clone()
    }

    /// The names of the pods placed for live sessions, for tests and diagnostics.
    pub async fn placed_pods(&self) -> Vec<String> {
        let slots: Vec<SessionSlot> = {
            let s = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
            s.values().cloned().collect()
        };
        let mut pods = Vec::new();
        for slot in slots {
            if let Some(p) = slot.lock().await.as_ref() {
                pods.push(p.pod.clone());
            }
        }
        pods.sort();
        pods
    }

    /// Place a pod for `token` and wait until it is Ready.
    async fn place(&self, token: &str) -> Result<Placed, ToolError> {
        let client = self.client().await?.clone();
        let ns = &self.settings.namespace;
        let deadline = tokio::time::Instant::now() + self.settings.ready_timeout;
        let (pod, claim) = match &self.settings.place {
            Place::Template(template) => {
                let pod = instantiate(template, token, ns);
                let name = pod.metadata.name.clone().unwrap_or_default();
                let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
                pods.create(&PostParams::default(), &pod)
                    .await
                    .map_err(|e| explain(&e, "create", "pods", &format!("pod {name}"), ns))?;
                (name, None)
            }
            Place::Claim { warm_pool } => {
                let claim = format!("toolyard-{token}");
                let pod = self
                    .claim(&client, &claim, warm_pool, token, deadline)
                    .await?;
                (pod, Some(claim))
            }
        };
        match self.wait_ready(&client, &pod, deadline).await {
            Ok(uid) => {
                let gone = CancellationToken::new();
                let watch = tokio::spawn(watch_gone(
                    Api::namespaced(client, ns),
                    pod.clone(),
                    uid.clone(),
                    gone.clone(),
                ));
                Ok(Placed {
                    pod,
                    uid,
                    claim,
                    gone,
                    watch,
                })
            }
            Err(e) => {
                // A pod that did not make it is not left behind.
                self.delete(&client, &pod, claim.as_deref()).await;
                Err(e)
            }
        }
    }

    /// Create the claim and wait until agent-sandbox says it is Ready; the pod's name.
    async fn claim(
        &self,
        client: &Client,
        claim: &str,
        warm_pool: &str,
        token: &str,
        deadline: tokio::time::Instant,
    ) -> Result<String, ToolError> {
        let ns = &self.settings.namespace;
        let claims: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), ns, &claim_resource());
        let labels = serde_json::json!({ SESSION_LABEL: token, MANAGED_BY.0: MANAGED_BY.1 });
        let mut obj = DynamicObject::new(claim, &claim_resource()).data(serde_json::json!({
            "spec": {
                "warmPoolRef": { "name": warm_pool },
                "additionalPodMetadata": { "labels": labels.clone() },
            }
        }));
        obj.metadata.labels = serde_json::from_value(labels).ok();
        let what = format!("SandboxClaim {claim}");
        claims
            .create(&PostParams::default(), &obj)
            .await
            .map_err(|e| explain(&e, "create", "sandboxclaims", &what, ns))?;
        let last: Arc<Mutex<Option<DynamicObject>>> = Arc::default();
        let seen = last.clone();
        let cond = move |o: Option<&DynamicObject>| {
            if let Ok(mut l) = seen.lock() {
                *l = o.cloned();
            }
            o.is_none_or(|o| condition_true(o, "Ready"))
        };
        let waited =
            tokio::time::timeout_at(deadline, await_condition(claims.clone(), claim, cond));
        let ready = match waited.await {
            Ok(Ok(Some(obj))) => obj,
            Ok(Ok(None)) => {
                return Err(ToolError::Unavailable(format!(
                    "the {what} was deleted before it became Ready"
                )));
            }
            Ok(Err(e)) => {
                self.delete(client, "", Some(claim)).await;
                return Err(explain_watch(&e, "sandboxclaims", &what, ns));
            }
            Err(_) => {
                self.delete(client, "", Some(claim)).await;
                let state = last
                    .lock()
                    .ok()
                    .and_then(|l| l.as_ref().map(claim_summary))
                    .unwrap_or_else(|| "never seen".into());
                return Err(ToolError::Unavailable(format!(
                    "the {what} (warm pool {warm_pool}) did not become Ready within {} s ({state}); check that the SandboxWarmPool exists and has ready sandboxes (`kubectl -n {ns} get sandboxwarmpool {warm_pool}`), or raise [remote.kubernetes] ready_timeout_s",
                    self.settings.ready_timeout.as_secs()
                )));
            }
        };
        let sandbox = ready
            .data
            .pointer("/status/sandbox/name")
            .and_then(|v| v.as_str())
            .map(str::to_string)
            .ok_or_else(|| {
                ToolError::Unavailable(format!(
                    "the {what} is Ready but names no sandbox (status.sandbox.name); is the agent-sandbox controller v1beta1?"
                ))
            })?;
        let sandboxes: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), ns, &sandbox_resource());
        let sb = sandboxes
            .get(&sandbox)
            .await
            .map_err(|e| explain(&e, "get", "sandboxes", &format!("Sandbox {sandbox}"), ns))?;
        // A sandbox adopted from the warm pool names its pod; otherwise the pod is the sandbox's namesake.
        Ok(sb
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(POD_NAME_ANNOTATION))
            .filter(|n| !n.is_empty())
            .cloned()
            .unwrap_or(sandbox))
    }

    /// Wait until `pod` is Ready; its uid.
    async fn wait_ready(
        &self,
        client: &Client,
        pod: &str,
        deadline: tokio::time::Instant,
    ) -> Result<String, ToolError> {
        let ns = &self.settings.namespace;
        let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
        let last: Arc<Mutex<Option<Pod>>> = Arc::default();
        let seen = last.clone();
        let cond = move |p: Option<&Pod>| {
            if let Ok(mut l) = seen.lock() {
                *l = p.cloned();
            }
            p.is_none_or(|p| is_ready(p) || finished(p).is_some())
        };
        let what = format!("pod {pod}");
        match tokio::time::timeout_at(deadline, await_condition(pods, pod, cond)).await {
            Ok(Ok(Some(p))) => {
                if let Some(why) = finished(&p) {
                    return Err(ToolError::Unavailable(format!(
                        "the {what} {why} before it became Ready ({}); see `kubectl -n {ns} describe pod {pod}`",
                        pod_summary(&p)
                    )));
                }
                Ok(p.metadata.uid.unwrap_or_default())
            }
            Ok(Ok(None)) => Err(ToolError::Unavailable(format!(
                "the {what} was deleted before it became Ready"
            ))),
            Ok(Err(e)) => Err(explain_watch(&e, "pods", &what, ns)),
            Err(_) => {
                let state = last
                    .lock()
                    .ok()
                    .and_then(|l| l.as_ref().map(pod_summary))
                    .unwrap_or_else(|| "never seen".into());
                Err(ToolError::Unavailable(format!(
                    "the {what} did not become Ready within {} s ({state}); it was deleted. See `kubectl -n {ns} describe pod {pod}` (image pull, scheduling, readiness probe), or raise [remote.kubernetes] ready_timeout_s",
                    self.settings.ready_timeout.as_secs()
                )))
            }
        }
    }

    /// Delete the pod (grace 0), or the claim that placed it; failures are logged, not raised.
    async fn delete(&self, client: &Client, pod: &str, claim: Option<&str>) {
        let ns = &self.settings.namespace;
        let dp = DeleteParams::default().grace_period(0);
        let (result, what) = match claim {
            Some(c) => {
                let claims: Api<DynamicObject> =
                    Api::namespaced_with(client.clone(), ns, &claim_resource());
                (
                    claims.delete(c, &dp).await.map(|_| ()),
                    format!("SandboxClaim {c}"),
                )
            }
            None => {
                let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
                (
                    pods.delete(pod, &dp).await.map(|_| ()),
                    format!("pod {pod}"),
                )
            }
        };
        match result {
            Ok(()) => tracing::info!(%ns, %what, "kubernetes link: deleted"),
            Err(kube::Error::Api(s)) if s.is_not_found() => {}
            Err(e) => {
                let resource = if claim.is_some() {
                    "sandboxclaims"
                } else {
                    "pods"
                };
                tracing::warn!(%ns, %what, error = %explain(&e, "delete", resource, &what, ns), "kubernetes link: could not delete; delete it by hand")
            }
        }
    }

    /// Release a session's pod: end its links, delete it, and when `wait`, wait until it is
    /// gone (its name is about to be reused).
    async fn release(&self, placed: Placed, wait: bool) {
        placed.gone.cancel();
        placed.watch.abort();
        let Ok(client) = self.client().await.cloned() else {
            return;
        };
        self.delete(&client, &placed.pod, placed.claim.as_deref())
            .await;
        if wait && placed.claim.is_none() {
            let pods: Api<Pod> = Api::namespaced(client, &self.settings.namespace);
            let gone = await_condition(pods, &placed.pod, conditions::is_deleted(&placed.uid));
            if tokio::time::timeout(self.settings.ready_timeout, gone)
                .await
                .is_err()
            {
                tracing::warn!(pod = %placed.pod, "kubernetes link: the old pod is still there");
            }
        }
    }
}

/// `agents.x-k8s.io/pod-name`: on a Sandbox, the pod it adopted from a warm pool.
pub const POD_NAME_ANNOTATION: &str = "agents.x-k8s.io/pod-name";

/// agent-sandbox's `SandboxClaim` (`extensions.agents.x-k8s.io/v1beta1`).
pub fn claim_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "extensions.agents.x-k8s.io",
        "v1beta1",
        "SandboxClaim",
    ))
}

/// agent-sandbox's `Sandbox` (`agents.x-k8s.io/v1beta1`).
pub fn sandbox_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "agents.x-k8s.io",
        "v1beta1",
        "Sandbox",
    ))
}

/// Whether `obj`'s status condition `type_` is True.
fn condition_true(obj: &DynamicObject, type_: &str) -> bool {
    obj.data
        .pointer("/status/conditions")
        .and_then(|c| c.as_array())
        .is_some_and(|c| {
            c.iter().any(|c| {
                c.get("type").and_then(|t| t.as_str()) == Some(type_)
                    && c.get("status").and_then(|s| s.as_str()) == Some("True")
            })
        })
}

/// A claim's conditions, for the error of one that did not become Ready.
fn claim_summary(obj: &DynamicObject) -> String {
    let conds: Vec<String> = obj
        .data
        .pointer("/status/conditions")
        .and_then(|c| c.as_array())
        .into_iter()
        .flatten()
        .map(|c| {
            let get = |k: &str| c.get(k).and_then(|v| v.as_str()).unwrap_or("");
            format!("{} {} {}", get("type"), get("status"), get("message"))
                .trim()
                .to_string()
        })
        .collect();
    if conds.is_empty() {
        "no conditions yet".into()
    } else {
        conds.join("; ")
    }
}

/// Watch the pod until it is deleted, replaced or ends, then cancel `gone`.
async fn watch_gone(pods: Api<Pod>, name: String, uid: String, gone: CancellationToken) {
    let mut events = std::pin::pin!(watch_object(pods, &name).default_backoff());
    let why = loop {
        let Some(event) = events.next().await else {
            break "is no longer watched".to_string();
        };
        match event {
            Ok(None) => break "was deleted".to_string(),
            Ok(Some(p)) if p.metadata.uid.as_deref() != Some(uid.as_str()) => {
                break "was replaced".to_string();
            }
            Ok(Some(p)) => {
                if let Some(why) = finished(&p) {
                    break why;
                }
            }
            Err(e) => tracing::debug!(pod = %name, error = %e, "kubernetes link: watch error"),
        }
    };
    tracing::warn!(pod = %name, %why, "kubernetes link: the session's pod is gone; its runners' links end");
    gone.cancel();
}

/// A runner's output that ends (EOF) as soon as its pod is gone, and keeps the stream open
/// while it is read.
struct PodReader {
    inner: Box<dyn AsyncRead + Send + Unpin>,
    gone: Pin<Box<WaitForCancellationFutureOwned>>,
    _keep: Option<Box<dyn Send + Sync>>,
}

impl AsyncRead for PodReader {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.gone.as_mut().poll(cx).is_ready() {
            // End of stream: the router fails the calls in flight on this link.
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

#[async_trait]
impl RunnerLink for KubeLink {
    async fn open(&self, lane: Lane, session: &str) -> Result<LinkIo, ToolError> {
        let token = kube_token(session);
        let slot = self.slot(&token);
        let mut placed = slot.lock().await;
        if placed.as_ref().is_some_and(|p| p.gone.is_cancelled()) {
            // The pod died: a fresh one, under the same name once the old is gone.
            if let Some(old) = placed.take() {
                self.release(old, true).await;
            }
        }
        let p = match placed.as_mut() {
            Some(p) => p,
            None => placed.insert(self.place(&token).await?),
        };
        let argv: Vec<String> = self
            .settings
            .runner
            .iter()
            .map(|a| {
                a.replace("{lane}", lane.as_str())
                    .replace("{session}", &token)
            })
            .collect();
        let client = self.client().await?;
        let ns = &self.settings.namespace;
        let io = self
            .exec
            .exec(client, ns, &p.pod, self.settings.container.as_deref(), argv)
            .await
            .map_err(|e| {
                explain(
                    &e,
                    "create",
                    "pods/exec",
                    &format!("exec in pod {}", p.pod),
                    ns,
                )
            })?;
        Ok(LinkIo {
            reader: Box::new(PodReader {
                inner: io.reader,
                gone: Box::pin(p.gone.clone().cancelled_owned()),
                _keep: io.keep,
            }),
            writer: io.writer,
            stderr: io.stderr,
            child: None,
            egress: None,
        })
    }

    fn per_session(&self) -> bool {
        true
    }

    fn is_remote(&self) -> bool {
        true
    }

    fn heartbeat(&self) -> Duration {
        self.settings.heartbeat
    }

    fn describe(&self) -> String {
        format!(
            "the Kubernetes link (namespace {})",
            self.settings.namespace
        )
    }

    async fn end_session(&self, session: &str) {
        let token = kube_token(session);
        let slot = {
            let mut s = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
            s.remove(&token)
        };
        let Some(slot) = slot else { return };
        let placed = slot.lock().await.take();
        if let Some(p) = placed {
            self.release(p, false).await;
        }
    }

    async fn shutdown(&self) {
        let slots: Vec<SessionSlot> = {
            let mut s = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
            s.drain().map(|(_, v)| v).collect()
        };
        let releases = slots.into_iter().map(|slot| async move {
            let placed = slot.lock().await.take();
            if let Some(p) = placed {
                self.release(p, false).await;
            }
        });
        futures::future::join_all(releases).await;
    }
}
