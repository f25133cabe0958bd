//! Opt-in end to end through a real Kubernetes cluster: runs only when `KUBECONFIG` is set
//! (else it prints "skipped: KUBECONFIG is not set" and passes), and only with the `kube`
//! feature: `KUBECONFIG=~/.kube/config cargo test -p toolyard-remote --features kube --test
//! kube_e2e -- --nocapture`.
//!
//! The cluster needs an image with `toolyard` on its PATH (`TOOLYARD_K8S_IMAGE`, default
//! `localhost/toolyard-runner:e2e`, e.g. the podman recipe's image loaded into kind), and the
//! identity of `KUBECONFIG` the RBAC of docs/architecture.md in `TOOLYARD_K8S_NAMESPACE`
//! (default `default`). It places a pod for a session, runs `run_command` and `read_file` in
//! it, checks that the server's own workspace stayed untouched, ends the session and checks
//! that the pod is deleted.

#[cfg(not(feature = "kube"))]
#[test]
fn through_a_real_cluster() {
    println!(
        "skipped: built without the kube feature (cargo test -p toolyard-remote --features kube)"
    );
}

#[cfg(feature = "kube")]
#[test]
fn through_a_real_cluster() {
    if std::env::var_os("KUBECONFIG").is_none() {
        println!("skipped: KUBECONFIG is not set");
        return;
    }
    real::run();
}

#[cfg(feature = "kube")]
mod real {
    use std::sync::Arc;
    use std::time::Duration;

    use k8s_openapi::api::core::v1::Pod;
    use kube::Api;
    use serde_json::json;
    use toolyard_core::Catalog;
    use toolyard_dispatch::{CallRequest, Dispatcher, DispatcherConfig, Mode};

    pub fn run() {
        let image = std::env::var("TOOLYARD_K8S_IMAGE")
            .unwrap_or_else(|_| "localhost/toolyard-runner:e2e".into());
        let ns = std::env::var("TOOLYARD_K8S_NAMESPACE").unwrap_or_else(|_| "default".into());
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let ws = dir.path().join("server-ws");
        let state = dir.path().join("state");
        std::fs::create_dir_all(&ws).unwrap_or_else(|e| panic!("{e}"));
        // SAFETY: set before any thread of this test reads the environment.
        unsafe {
            std::env::set_var("TOOLYARD_STATE_DIR", &state);
            std::env::set_var("HOME", dir.path());
        }
        let template = format!(
            "apiVersion: v1
kind: Pod
metadata:
  name: toolyard-e2e-{{session}}
  labels:
    app: toolyard-e2e
spec:
  restartPolicy: Never
  securityContext:
    runAsUser: 65534
    runAsGroup: 65534
  containers:
    - name: runner
      image: {image}
      imagePullPolicy: IfNotPresent
      command: [sleep, infinity]
      env:
        - name: TOOLYARD_STATE_DIR
          value: /tmp/state
      volumeMounts:
        - {{name: workspace, mountPath: /workspace}}
        - {{name: tmp, mountPath: /tmp}}
  volumes:
    - {{name: workspace, emptyDir: {{}}}}
    - {{name: tmp, emptyDir: {{}}}}
"
        );
        let template_path = dir.path().join("pod.yaml");
        std::fs::write(&template_path, template).unwrap_or_else(|e| panic!("{e}"));
        let catalog_path = dir.path().join("catalog.toml");
        let text = format!(
            "[remote.kubernetes]\nnamespace = \"{ns}\"\npod_template = \"pod.yaml\"\ncontainer = \"runner\"\nready_timeout_s = 300\n"
        );
        std::fs::write(&catalog_path, &text).unwrap_or_else(|e| panic!("{e}"));
        let catalog = Catalog::load(&catalog_path).unwrap_or_else(|e| panic!("catalog: {e}"));

        let rt = tokio::runtime::Runtime::new().unwrap_or_else(|e| panic!("{e}"));
        rt.block_on(async {
            let link = toolyard_remote::link_for(&catalog, Some(&catalog_path))
                .unwrap_or_else(|e| panic!("link: {e}"))
                .unwrap_or_else(|| panic!("the catalog has a [remote.kubernetes] section"));
            let mut config = DispatcherConfig::new(&ws);
            config.catalog = catalog;
            config.catalog_path = Some(catalog_path.clone());
            config.state_dir = Some(state.clone());
            // The runners are exec'd in the pod: this executable is never started.
            config.mode = Mode::Lanes {
                exe: "/nonexistent/toolyard".into(),
            };
            let d = Arc::new(
                Dispatcher::with_link(config, Some(link))
                    .unwrap_or_else(|e| panic!("dispatcher: {e}")),
            );
            let session = "e2e-session";
            let call = |tool: &str, args: serde_json::Value| {
                let d = d.clone();
                let tool = tool.to_string();
                async move { d.call(CallRequest::new(session, tool, args)).await }
            };
            let r = call(
                "run_command",
                json!({"command": "echo made in the pod > note.txt; hostname; pwd"}),
            )
            .await;
            assert!(r.success, "run_command: {}", r.output);
            assert!(r.output.contains("/workspace"), "{}", r.output);
            let r = call("read_file", json!({"path": "note.txt"})).await;
            assert!(r.success, "read_file: {}", r.output);
            assert!(r.output.contains("made in the pod"), "{}", r.output);
            assert!(
                !ws.join("note.txt").exists(),
                "the server's own workspace was written"
            );

            let client = kube::Client::try_default()
                .await
                .unwrap_or_else(|e| panic!("client: {e}"));
            let pods: Api<Pod> = Api::namespaced(client, &ns);
            let listed = pods
                .list(&kube::api::ListParams::default().labels("app=toolyard-e2e"))
                .await
                .unwrap_or_else(|e| panic!("list: {e}"));
            assert_eq!(listed.items.len(), 1, "one pod for the session");

            d.end_session(session).await;
            d.shutdown().await;
            // Deleted with grace 0: gone within the kubelet's next sync.
            let mut left = usize::MAX;
            for _ in 0..60 {
                left = pods
                    .list(&kube::api::ListParams::default().labels("app=toolyard-e2e"))
                    .await
                    .map(|l| l.items.len())
                    .unwrap_or(usize::MAX);
                if left == 0 {
                    break;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            assert_eq!(left, 0, "the session's pod outlived the session");
        });
    }
}
