//! The Kubernetes link's pod lifecycle against recorded API exchanges: a scripted API server
//! (kube's `tower_test::mock` style) answers create, list/watch, get and delete as a real one
//! would, and every request's method, path and body is kept for the assertions. The exec
//! WebSocket cannot be recorded: a stand-in [`Exec`] hands out in-memory pipes instead, and the
//! tests check what was exec'd where.
#![cfg(feature = "kube")]

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use http::{Request, Response};
use http_body_util::BodyExt;
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use toolyard_core::Lane;
use toolyard_dispatch::RunnerLink;
use toolyard_remote::k8s::{
    Exec, ExecIo, KubeLink, Place, SESSION_LABEL, Settings, parse_template,
};

type Reply = tower_test::mock::SendResponse<Response<Body>>;

/// One request as the server saw it.
#[derive(Debug, Clone)]
struct Recorded {
    method: String,
    path: String,
    query: String,
    body: Value,
}

#[derive(Default)]
struct State {
    log: Vec<Recorded>,
    /// (collection path, name) → object.
    objects: HashMap<(String, String), Value>,
    /// Status changes each new object of a collection goes through, one watch later.
    transitions: HashMap<String, Vec<Value>>,
    /// What is still to happen to each object, applied on its next watch.
    pending: HashMap<(String, String), VecDeque<Value>>,
    /// Watches with nothing to say yet, answered when their object is deleted.
    held: Vec<((String, String), Reply)>,
    /// The status a create answers with (201 unless a test refuses it).
    create_status: HashMap<String, u16>,
    rv: u64,
    uid: u64,
}

/// A scripted API server.
#[derive(Clone, Default)]
struct ApiServer(Arc<Mutex<State>>);

const PODS: &str = "/api/v1/namespaces/agents/pods";
const CLAIMS: &str = "/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/agents/sandboxclaims";
const SANDBOXES: &str = "/apis/agents.x-k8s.io/v1beta1/namespaces/agents/sandboxes";

fn merge(into: &mut Value, patch: &Value) {
    match (into, patch) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (a, b) => *a = b.clone(),
    }
}

fn respond(send: Reply, code: u16, body: &Value) {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let resp = Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(Body::from(bytes))
        .unwrap_or_else(|e| panic!("response: {e}"));
    send.send_response(resp);
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
           "message": message, "reason": reason, "code": code})
}

fn watch_body(events: &[(&str, Value)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (kind, obj) in events {
        out.extend(serde_json::to_vec(&json!({"type": kind, "object": obj})).unwrap_or_default());
        out.push(b'\n');
    }
    out
}

/// `metadata.name=X` from a query's fieldSelector.
fn selected_name(query: &str) -> Option<String> {
    query.split('&').find_map(|kv| {
        let v = kv.strip_prefix("fieldSelector=")?;
        let v = v.replace("%3D", "=").replace("%2F", "/");
        v.strip_prefix("metadata.name=").map(str::to_string)
    })
}

impl ApiServer {
    fn start() -> (Self, Client) {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let server = Self::default();
        let s = server.clone();
        tokio::spawn(async move {
            while let Some((req, send)) = handle.next_request().await {
                s.answer(req, send).await;
            }
        });
        (server, Client::new(service, "agents"))
    }

    fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        f(&mut self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn log(&self) -> Vec<Recorded> {
        self.with(|s| s.log.clone())
    }

    /// The requests that change things (not the list/watch/get traffic of the watches).
    fn writes(&self) -> Vec<(String, String)> {
        self.log()
            .into_iter()
            .filter(|r| r.method != "GET")
            .map(|r| (r.method, r.path))
            .collect()
    }

    fn seed(&self, collection: &str, name: &str, obj: Value) {
        self.with(|s| {
            s.objects.insert((collection.into(), name.into()), obj);
        });
    }

    /// The object is deleted by someone else (a `kubectl delete`, an eviction).
    fn vanish(&self, collection: &str, name: &str) {
        let key = (collection.to_string(), name.to_string());
        let (obj, held) = self.with(|s| {
            let obj = s.objects.remove(&key);
            let (mine, rest): (Vec<_>, Vec<_>) = s.held.drain(..).partition(|(k, _)| *k == key);
            s.held = rest;
            (obj, mine)
        });
        let obj = obj.unwrap_or(Value::Null);
        for (_, send) in held {
            let resp = Response::builder()
                .status(200)
                .body(Body::from(watch_body(&[("DELETED", obj.clone())])))
                .unwrap_or_else(|e| panic!("{e}"));
            send.send_response(resp);
        }
    }

    async fn answer(&self, req: Request<Body>, send: Reply) {
        let method = req.method().to_string();
        let path = req.uri().path().to_string();
        let query = req.uri().query().unwrap_or("").to_string();
        let bytes = req
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes().to_vec())
            .unwrap_or_default();
        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        self.with(|s| {
            s.log.push(Recorded {
                method: method.clone(),
                path: path.clone(),
                query: query.clone(),
                body: body.clone(),
            })
        });
        let (collection, name) = match [PODS, CLAIMS, SANDBOXES]
            .into_iter()
            .find(|c| path.starts_with(c))
        {
            Some(c) => {
                let rest = path[c.len()..].trim_start_matches('/');
                (c.to_string(), (!rest.is_empty()).then(|| rest.to_string()))
            }
            None => return respond(send, 404, &status(404, "NotFound", "no such path")),
        };
        match (method.as_str(), name) {
            ("POST", None) => {
                let code = self.with(|s| s.create_status.get(&collection).copied());
                if let Some(code) = code {
                    let msg = "pods is forbidden: User \"system:serviceaccount:agents:toolyard\" cannot create resource \"pods\" in API group \"\" in the namespace \"agents\"";
                    return respond(send, code, &status(code, "Forbidden", msg));
                }
                let mut obj = body;
                let name = obj
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                let created = self.with(|s| {
                    s.uid += 1;
                    s.rv += 1;
                    merge(
                        &mut obj,
                        &json!({"metadata": {"uid": format!("uid-{}", s.uid),
                                             "resourceVersion": s.rv.to_string()}}),
                    );
                    if collection == PODS {
                        merge(&mut obj, &json!({"status": {"phase": "Pending"}}));
                    }
                    let key = (collection.clone(), name.clone());
                    if s.objects.contains_key(&key) {
                        return None;
                    }
                    s.objects.insert(key.clone(), obj.clone());
                    let t = s.transitions.get(&collection).cloned().unwrap_or_default();
                    s.pending.insert(key, t.into());
                    Some(obj)
                });
                match created {
                    Some(obj) => respond(send, 201, &obj),
                    None => respond(send, 409, &status(409, "AlreadyExists", "already exists")),
                }
            }
            ("GET", None) => {
                let name = selected_name(&query).unwrap_or_default();
                let key = (collection.clone(), name);
                if query.contains("watch=true") {
                    let events = self.with(|s| {
                        let steps: Vec<Value> = s
                            .pending
                            .get_mut(&key)
                            .map(|q| q.drain(..).collect())
                            .unwrap_or_default();
                        let mut out = Vec::new();
                        for step in steps {
                            s.rv += 1;
                            let rv = s.rv.to_string();
                            if let Some(obj) = s.objects.get_mut(&key) {
                                merge(obj, &step);
                                merge(obj, &json!({"metadata": {"resourceVersion": rv}}));
                                out.push(obj.clone());
                            }
                        }
                        out
                    });
                    if events.is_empty() {
                        // Nothing to say until the object goes.
                        self.with(|s| s.held.push((key, send)));
                        return;
                    }
                    let events: Vec<(&str, Value)> =
                        events.into_iter().map(|o| ("MODIFIED", o)).collect();
                    let resp = Response::builder()
                        .status(200)
                        .body(Body::from(watch_body(&events)))
                        .unwrap_or_else(|e| panic!("{e}"));
                    send.send_response(resp);
                } else {
                    let (items, rv) = self.with(|s| {
                        (
                            s.objects.get(&key).cloned().into_iter().collect::<Vec<_>>(),
                            s.rv.to_string(),
                        )
                    });
                    respond(
                        send,
                        200,
                        &json!({"apiVersion": "v1", "kind": "List",
                                "metadata": {"resourceVersion": rv}, "items": items}),
                    );
                }
            }
            ("GET", Some(name)) => match self.with(|s| s.objects.get(&(collection, name)).cloned())
            {
                Some(obj) => respond(send, 200, &obj),
                None => respond(send, 404, &status(404, "NotFound", "not found")),
            },
            ("DELETE", Some(name)) => {
                let obj =
                    self.with(|s| s.objects.get(&(collection.clone(), name.clone())).cloned());
                match obj {
                    Some(obj) => {
                        self.vanish(&collection, &name);
                        respond(send, 200, &obj);
                    }
                    None => respond(send, 404, &status(404, "NotFound", "not found")),
                }
            }
            _ => respond(send, 405, &status(405, "MethodNotAllowed", "not scripted")),
        }
    }
}

/// One exec: the pod, the container, the argv.
type ExecCall = (String, Option<String>, Vec<String>);

/// What a stand-in exec was asked to start, and the test's ends of its pipes.
#[derive(Default)]
struct FakeExec {
    calls: Mutex<Vec<ExecCall>>,
    /// The runner side: what it reads (the router's lines) and where it writes.
    ends: Mutex<Vec<(DuplexStream, DuplexStream)>>,
}

#[async_trait]
impl Exec for FakeExec {
    async fn exec(
        &self,
        _client: &Client,
        _ns: &str,
        pod: &str,
        container: Option<&str>,
        argv: Vec<String>,
    ) -> Result<ExecIo, kube::Error> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner()).push((
            pod.to_string(),
            container.map(str::to_string),
            argv,
        ));
        let (to_runner, runner_in) = tokio::io::duplex(4096);
        let (runner_out, from_runner) = tokio::io::duplex(4096);
        self.ends
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((runner_in, runner_out));
        Ok(ExecIo {
            reader: Box::new(from_runner),
            writer: Box::new(to_runner),
            stderr: None,
            keep: None,
        })
    }
}

const TEMPLATE: &str = "\
apiVersion: v1
kind: Pod
metadata:
  name: toolyard-{session}
  labels:
    app: toolyard-runner
    toolyard.dev/for: 'ws-{session}'
spec:
  securityContext:
    runAsUser: 65534
  containers:
    - name: runner
      image: localhost/toolyard-runner:e2e
      command: [sleep, infinity]
";

fn settings(place: Place) -> Settings {
    Settings {
        namespace: "agents".into(),
        place,
        container: Some("runner".into()),
        runner: [
            "toolyard",
            "runner",
            "--lane",
            "{lane}",
            "--workspace",
            "/workspace",
        ]
        .map(String::from)
        .to_vec(),
        ready_timeout: Duration::from_secs(3),
        heartbeat: Duration::from_secs(5),
    }
}

fn template_place() -> Place {
    Place::Template(Box::new(
        parse_template(TEMPLATE, "agents").unwrap_or_else(|e| panic!("template: {e}")),
    ))
}

/// A pod going Pending → Running (not ready) → Running and Ready.
fn ready_transitions() -> Vec<Value> {
    vec![
        json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}}),
        json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}),
    ]
}

fn link(server: &ApiServer, client: Client, place: Place, exec: Arc<FakeExec>) -> KubeLink {
    server.with(|s| {
        s.transitions.insert(PODS.into(), ready_transitions());
    });
    KubeLink::with_client(settings(place), client, exec)
}

/// What is left on `reader` up to its end; fails (in paused time, so at once) if it never ends.
async fn read_to_eof(reader: &mut (dyn tokio::io::AsyncRead + Send + Unpin)) -> String {
    let mut rest = Vec::new();
    match tokio::time::timeout(Duration::from_secs(600), reader.read_to_end(&mut rest)).await {
        Ok(_) => String::from_utf8_lossy(&rest).into_owned(),
        Err(_) => panic!("the link never ended"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_session_pod_is_created_from_the_template_waited_for_reused_and_deleted() {
    let (server, client) = ApiServer::start();
    let exec = Arc::new(FakeExec::default());
    let link = link(&server, client, template_place(), exec.clone());

    // The router's token for a session: upper case and '_' are not valid in pod names.
    let mut io = link
        .open(Lane::NoNet, "Alice_7-0123456789abcdef")
        .await
        .unwrap_or_else(|e| panic!("open: {e}"));
    let token = "alice-7-0123456789abcdef";
    let pod = format!("toolyard-{token}");

    let log = server.log();
    let create = log
        .iter()
        .find(|r| r.method == "POST")
        .unwrap_or_else(|| panic!("no create in {log:?}"));
    assert_eq!(create.path, PODS);
    let body = &create.body;
    assert_eq!(body["metadata"]["name"], pod);
    assert_eq!(body["metadata"]["namespace"], "agents");
    let labels = &body["metadata"]["labels"];
    assert_eq!(labels[SESSION_LABEL], token);
    assert_eq!(labels["toolyard.dev/for"], format!("ws-{token}"));
    assert_eq!(labels["app"], "toolyard-runner");
    assert_eq!(labels["app.kubernetes.io/managed-by"], "toolyard");
    assert_eq!(
        body["spec"]["containers"][0]["image"],
        "localhost/toolyard-runner:e2e"
    );
    // No service account token in the pod, where the model's commands could read it.
    assert_eq!(body["spec"]["automountServiceAccountToken"], false);
    // It waited on that pod by name: a list, then a watch that saw it become Ready.
    let watched: Vec<&Recorded> = log
        .iter()
        .filter(|r| r.method == "GET" && r.path == PODS)
        .collect();
    assert!(
        watched
            .iter()
            .any(|r| r.query.contains("watch=true") && r.query.contains(&pod)),
        "{watched:?}"
    );

    // The runner was exec'd in the pod's container, with the lane in its argv.
    let calls = exec.calls.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert_eq!(
        calls,
        [(
            pod.clone(),
            Some("runner".to_string()),
            [
                "toolyard",
                "runner",
                "--lane",
                "no-net",
                "--workspace",
                "/workspace"
            ]
            .map(String::from)
            .to_vec()
        )]
    );
    // The link carries bytes both ways.
    io.writer.write_all(b"hello\n").await.unwrap_or_default();
    let (mut runner_in, mut runner_out) = exec
        .ends
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(0);
    let mut buf = [0u8; 6];
    runner_in.read_exact(&mut buf).await.unwrap_or_default();
    assert_eq!(&buf, b"hello\n");
    runner_out.write_all(b"ready\n").await.unwrap_or_default();
    io.reader.read_exact(&mut buf).await.unwrap_or_default();
    assert_eq!(&buf, b"ready\n");

    // A second lane of the same session shares the pod: no second create.
    let _net = link
        .open(Lane::Net, "Alice_7-0123456789abcdef")
        .await
        .unwrap_or_else(|e| panic!("open net: {e}"));
    assert_eq!(server.writes(), [("POST".to_string(), PODS.to_string())]);
    assert_eq!(link.placed_pods().await, std::slice::from_ref(&pod));

    // The session ends: its pod is deleted at once (grace 0), and its links end.
    link.end_session("Alice_7-0123456789abcdef").await;
    let log = server.log();
    let delete = log
        .iter()
        .find(|r| r.method == "DELETE")
        .unwrap_or_else(|| panic!("no delete in {log:?}"));
    assert_eq!(delete.path, format!("{PODS}/{pod}"));
    assert_eq!(delete.body["gracePeriodSeconds"], 0, "{:?}", delete.body);
    assert!(link.placed_pods().await.is_empty());
    assert_eq!(read_to_eof(&mut io.reader).await, "");
}

#[tokio::test(start_paused = true)]
async fn a_pod_that_never_becomes_ready_times_out_says_why_and_is_deleted() {
    let (server, client) = ApiServer::start();
    let exec = Arc::new(FakeExec::default());
    let link = KubeLink::with_client(settings(template_place()), client, exec.clone());
    server.with(|s| {
        s.transitions.insert(
            PODS.into(),
            vec![json!({"status": {"phase": "Pending", "containerStatuses": [{
                "name": "runner", "ready": false, "restartCount": 0, "image": "x", "imageID": "",
                "state": {"waiting": {"reason": "ImagePullBackOff",
                                      "message": "Back-off pulling image \"localhost/toolyard-runner:e2e\""}}}]}})],
        );
    });
    let e = link
        .open(Lane::NoNet, "bob-1")
        .await
        .err()
        .unwrap_or_else(|| panic!("a pod that never gets ready must fail the open"))
        .to_string();
    assert!(e.contains("did not become Ready within 3 s"), "{e}");
    assert!(
        e.contains("ImagePullBackOff") && e.contains("phase Pending"),
        "{e}"
    );
    assert!(
        e.contains("kubectl -n agents describe pod toolyard-bob-1"),
        "{e}"
    );
    assert!(e.contains("ready_timeout_s"), "{e}");
    assert_eq!(
        server.writes(),
        [
            ("POST".to_string(), PODS.to_string()),
            ("DELETE".to_string(), format!("{PODS}/toolyard-bob-1"))
        ]
    );
    assert!(
        exec.calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    );
    assert!(link.placed_pods().await.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_create_refused_by_rbac_names_the_verb_and_resource_to_grant() {
    let (server, client) = ApiServer::start();
    let link = KubeLink::with_client(
        settings(template_place()),
        client,
        Arc::new(FakeExec::default()),
    );
    server.with(|s| {
        s.create_status.insert(PODS.into(), 403);
    });
    let e = link
        .open(Lane::NoNet, "carol")
        .await
        .err()
        .unwrap_or_else(|| panic!("a refused create must fail the open"))
        .to_string();
    assert!(
        e.contains("refused to create pod toolyard-carol in namespace agents"),
        "{e}"
    );
    assert!(
        e.contains("grant the server's identity `create` on `pods` in namespace agents"),
        "{e}"
    );
    assert!(e.contains("403"), "{e}");
}

#[tokio::test(start_paused = true)]
async fn a_pod_that_disappears_ends_its_links_and_the_next_open_places_a_fresh_one() {
    let (server, client) = ApiServer::start();
    let exec = Arc::new(FakeExec::default());
    let link = link(&server, client, template_place(), exec.clone());
    let mut io = link
        .open(Lane::NoNet, "dave")
        .await
        .unwrap_or_else(|e| panic!("open: {e}"));
    let first_uid = server.with(|s| {
        s.objects
            .get(&(PODS.to_string(), "toolyard-dave".to_string()))
            .and_then(|p| p.pointer("/metadata/uid").cloned())
    });

    // Someone deletes the pod: the runner's stream ends (the router then fails the calls in
    // flight on it), though the runner side of the pipe is still open.
    server.vanish(PODS, "toolyard-dave");
    assert_eq!(read_to_eof(&mut io.reader).await, "");
    assert_eq!(exec.ends.lock().unwrap_or_else(|p| p.into_inner()).len(), 1);

    // The next runner of the session gets a fresh pod under the same name.
    let _io = link
        .open(Lane::NoNet, "dave")
        .await
        .unwrap_or_else(|e| panic!("reopen: {e}"));
    let creates = server
        .writes()
        .into_iter()
        .filter(|(m, _)| m == "POST")
        .count();
    assert_eq!(creates, 2, "{:?}", server.writes());
    let second_uid = server.with(|s| {
        s.objects
            .get(&(PODS.to_string(), "toolyard-dave".to_string()))
            .and_then(|p| p.pointer("/metadata/uid").cloned())
    });
    assert_ne!(first_uid, second_uid);
    assert_eq!(
        exec.calls.lock().unwrap_or_else(|p| p.into_inner()).len(),
        2
    );
}

#[tokio::test(start_paused = true)]
async fn shutdown_deletes_every_session_pod() {
    let (server, client) = ApiServer::start();
    let link = link(
        &server,
        client,
        template_place(),
        Arc::new(FakeExec::default()),
    );
    for s in ["erin", "frank"] {
        link.open(Lane::NoNet, s)
            .await
            .unwrap_or_else(|e| panic!("open {s}: {e}"));
    }
    link.shutdown().await;
    let mut deletes: Vec<String> = server
        .writes()
        .into_iter()
        .filter(|(m, _)| m == "DELETE")
        .map(|(_, p)| p)
        .collect();
    deletes.sort();
    assert_eq!(
        deletes,
        [
            format!("{PODS}/toolyard-erin"),
            format!("{PODS}/toolyard-frank")
        ]
    );
    assert!(link.placed_pods().await.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_sandbox_claim_against_a_warm_pool_places_the_pod_the_sandbox_adopted() {
    let (server, client) = ApiServer::start();
    let exec = Arc::new(FakeExec::default());
    let link = KubeLink::with_client(
        Settings {
            container: None,
            ..settings(Place::Claim {
                warm_pool: "swe-pool".into(),
            })
        },
        client,
        exec.clone(),
    );
    server.with(|s| {
        s.transitions.insert(
            CLAIMS.into(),
            vec![json!({"status": {
                "conditions": [{"type": "Ready", "status": "True", "reason": "Ready",
                                "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                "sandbox": {"name": "sb-1"}}})],
        );
    });
    server.seed(
        SANDBOXES,
        "sb-1",
        json!({"apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox",
               "metadata": {"name": "sb-1", "namespace": "agents",
                            "annotations": {"agents.x-k8s.io/pod-name": "swe-pool-x7k2"}}}),
    );
    server.seed(
        PODS,
        "swe-pool-x7k2",
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "swe-pool-x7k2", "namespace": "agents", "uid": "pool-uid",
                            "resourceVersion": "1"},
               "status": {"phase": "Running",
                          "conditions": [{"type": "Ready", "status": "True"}]}}),
    );
    let _io = link
        .open(Lane::Heavy, "gina")
        .await
        .unwrap_or_else(|e| panic!("open: {e}"));
    let log = server.log();
    let create = log
        .iter()
        .find(|r| r.method == "POST")
        .unwrap_or_else(|| panic!("no create in {log:?}"));
    assert_eq!(create.path, CLAIMS);
    assert_eq!(
        create.body["apiVersion"],
        "extensions.agents.x-k8s.io/v1beta1"
    );
    assert_eq!(create.body["kind"], "SandboxClaim");
    assert_eq!(create.body["metadata"]["name"], "toolyard-gina");
    assert_eq!(create.body["spec"]["warmPoolRef"]["name"], "swe-pool");
    assert_eq!(
        create.body["spec"]["additionalPodMetadata"]["labels"][SESSION_LABEL],
        "gina"
    );
    assert!(
        log.iter()
            .any(|r| r.method == "GET" && r.path == format!("{SANDBOXES}/sb-1")),
        "{log:?}"
    );
    let calls = exec.calls.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].0, "swe-pool-x7k2");
    assert_eq!(calls[0].1, None);
    assert_eq!(calls[0].2[3], "heavy");

    // The session ends: the claim goes (agent-sandbox deletes its sandbox and pod).
    link.end_session("gina").await;
    let deletes: Vec<(String, String)> = server
        .writes()
        .into_iter()
        .filter(|(m, _)| m == "DELETE")
        .collect();
    assert_eq!(
        deletes,
        [("DELETE".to_string(), format!("{CLAIMS}/toolyard-gina"))]
    );
}

#[test]
fn a_template_is_checked_when_the_catalog_loads() {
    let e = parse_template(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: fixed\n",
        "agents",
    )
    .unwrap_err();
    assert!(e.contains("must contain {session}"), "{e}");
    let e = parse_template("apiVersion: apps/v1\nkind: Deployment\n", "agents").unwrap_err();
    assert!(
        e.contains("not a v1 Pod") && e.contains("Deployment"),
        "{e}"
    );
    let e = parse_template(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: t-{session}\n  namespace: other\n",
        "agents",
    )
    .unwrap_err();
    assert!(
        e.contains("differs from [remote.kubernetes] namespace `agents`"),
        "{e}"
    );
    let e = parse_template("apiVersion: v1\nkind: Pod\nmetadata: [\n", "agents").unwrap_err();
    assert!(e.contains("not valid YAML"), "{e}");
}

#[test]
fn a_template_that_asks_for_the_service_account_token_by_name_keeps_it() {
    let asked = TEMPLATE.replace("spec:\n", "spec:\n  automountServiceAccountToken: true\n");
    assert_ne!(asked, TEMPLATE, "the template has a spec to add to");
    let pod = toolyard_remote::k8s::instantiate(
        &parse_template(&asked, "agents").unwrap_or_else(|e| panic!("template: {e}")),
        "s1",
        "agents",
    );
    let spec = pod.spec.unwrap_or_default();
    assert_eq!(spec.automount_service_account_token, Some(true));
}
