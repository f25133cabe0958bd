//! The catalog's `[remote.kubernetes]` section: where the Kubernetes link (crate
//! `toolyard-remote`, feature `kube`) places a session's pod and how it starts runners there.
//! Only the settings live here, so that every build checks them with line and column, with or
//! without the heavy link compiled in.

use std::path::PathBuf;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};

use crate::template::CommandTemplate;

/// The default readiness timeout, in seconds.
pub const DEFAULT_READY_TIMEOUT_S: u64 = 120;

/// What a catalog with `[remote.kubernetes]` is told by a toolyard built without the link.
pub const NEEDS_KUBE_BUILD: &str = "the catalog's [remote.kubernetes] needs a toolyard built with the Kubernetes link: `cargo build -p toolyard --features kube`; or reach the pods with [remote] command = [\"kubectl\", \"exec\", \"-i\", ...]";

/// `[remote.kubernetes]`: one pod per session, from a Pod template or an agent-sandbox
/// `SandboxClaim`; its runners are reached through the exec API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubernetesConfig {
    /// The namespace the pods (or claims) are created in.
    pub namespace: String,
    /// Where the session's pod comes from.
    pub placement: Placement,
    /// The container the runners are exec'd in (default: the template's only container).
    pub container: Option<String>,
    /// The runner's argv inside the pod; `{lane}` and `{session}` expand.
    pub runner: Vec<String>,
    /// How long a new pod may take to become Ready, in seconds.
    pub ready_timeout_s: u64,
}

/// Where a session's pod comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// A Pod created from this YAML file (relative paths: to the catalog file's directory);
    /// `{session}` expands in its name, labels and annotations.
    PodTemplate(PathBuf),
    /// An agent-sandbox `SandboxClaim` (`extensions.agents.x-k8s.io/v1beta1`) against this
    /// `SandboxWarmPool`.
    SandboxClaim {
        /// The warm pool's name.
        warm_pool: String,
    },
}

/// The section as written, before the checks that span several keys.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    namespace: Option<String>,
    pod_template: Option<PathBuf>,
    sandbox_claim: Option<RawClaim>,
    container: Option<String>,
    runner: Option<CommandTemplate>,
    ready_timeout_s: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawClaim {
    warm_pool: String,
}

impl<'de> Deserialize<'de> for KubernetesConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = Raw::deserialize(d)?;
        let placement = match (raw.pod_template, raw.sandbox_claim) {
            (Some(path), None) => Placement::PodTemplate(path),
            (None, Some(claim)) if !claim.warm_pool.trim().is_empty() => Placement::SandboxClaim {
                warm_pool: claim.warm_pool,
            },
            (None, Some(_)) => {
                return Err(D::Error::custom(
                    "[remote.kubernetes] sandbox_claim.warm_pool is empty: name the SandboxWarmPool to claim from",
                ));
            }
            (Some(_), Some(_)) => {
                return Err(D::Error::custom(
                    "[remote.kubernetes] sets both pod_template and sandbox_claim: keep one (a Pod per session from the template, or a SandboxClaim against a warm pool)",
                ));
            }
            (None, None) => {
                return Err(D::Error::custom(
                    "[remote.kubernetes] needs pod_template = \"pod.yaml\" (a Pod per session) or sandbox_claim = { warm_pool = \"NAME\" } (an agent-sandbox claim)",
                ));
            }
        };
        let namespace = raw.namespace.unwrap_or_else(|| "default".into());
        if !is_dns_label(&namespace) {
            return Err(D::Error::custom(format!(
                "[remote.kubernetes] namespace `{namespace}` is not a Kubernetes namespace name: use lower-case letters, digits and '-', at most 63"
            )));
        }
        let ready_timeout_s = raw.ready_timeout_s.unwrap_or(DEFAULT_READY_TIMEOUT_S);
        if !(1..=3600).contains(&ready_timeout_s) {
            return Err(D::Error::custom(format!(
                "[remote.kubernetes] ready_timeout_s = {ready_timeout_s} is out of range: use 1 to 3600 (default {DEFAULT_READY_TIMEOUT_S})"
            )));
        }
        let runner = raw.runner.map(|r| r.0).unwrap_or_else(default_runner);
        Ok(Self {
            namespace,
            placement,
            container: raw.container.filter(|c| !c.is_empty()),
            runner,
            ready_timeout_s,
        })
    }
}

/// `toolyard runner --lane {lane} --workspace /workspace`.
pub fn default_runner() -> Vec<String> {
    [
        "toolyard",
        "runner",
        "--lane",
        "{lane}",
        "--workspace",
        "/workspace",
    ]
    .map(String::from)
    .to_vec()
}

/// Whether `s` is an RFC 1123 label (what namespace names must be).
fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::RemoteConfig;
    use toolyard_core::Catalog;

    fn remote(text: &str) -> Result<RemoteConfig, String> {
        let catalog = Catalog::parse_over_builtin(text, "c.toml").map_err(|e| e.to_string())?;
        crate::check_catalog(&catalog).map_err(|e| e.to_string())?;
        catalog
            .section::<RemoteConfig>("remote")
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_pod_template_section_reads_with_defaults() {
        let c = remote("[remote.kubernetes]\npod_template = \"pod.yaml\"\n").unwrap();
        let k = c.kubernetes.unwrap();
        assert_eq!(k.placement, Placement::PodTemplate("pod.yaml".into()));
        assert_eq!(k.namespace, "default");
        assert_eq!(k.runner, default_runner());
        assert_eq!(k.ready_timeout_s, DEFAULT_READY_TIMEOUT_S);
        assert_eq!(k.container, None);
        let c = remote(
            "[remote]\nheartbeat_ms = 1000\n[remote.kubernetes]\nnamespace = \"agents\"\nsandbox_claim = { warm_pool = \"swe\" }\ncontainer = \"box\"\nrunner = [\"/bin/toolyard\", \"runner\", \"--lane\", \"{lane}\", \"--workspace\", \"/w\"]\nready_timeout_s = 30\n",
        )
        .unwrap();
        let k = c.kubernetes.unwrap();
        assert_eq!(
            k.placement,
            Placement::SandboxClaim {
                warm_pool: "swe".into()
            }
        );
        assert_eq!(
            (
                k.namespace.as_str(),
                k.container.as_deref(),
                k.ready_timeout_s
            ),
            ("agents", Some("box"), 30)
        );
        assert_eq!(k.runner[0], "/bin/toolyard");
    }

    #[test]
    fn a_bad_kubernetes_section_names_its_line_and_column() {
        let cases = [
            (
                "[remote.kubernetes]\npod_template = \"p.yaml\"\nsandbox_claim = { warm_pool = \"w\" }\n",
                "line 1, column 1",
                "both pod_template and sandbox_claim",
            ),
            (
                "[remote.kubernetes]\nnamespace = \"x\"\n",
                "line 1, column 1",
                "needs pod_template",
            ),
            (
                "[remote.kubernetes]\npod_template = \"p.yaml\"\nready_timeout_s = 0\n",
                "line 1, column 1",
                "ready_timeout_s = 0 is out of range",
            ),
            (
                "[remote.kubernetes]\npod_template = \"p.yaml\"\nnamespace = \"Bad_NS\"\n",
                "line 1, column 1",
                "not a Kubernetes namespace name",
            ),
            (
                "[remote.kubernetes]\npod_template = \"p.yaml\"\nrunner = [\"toolyard\", \"{lanes}\"]\n",
                "line 3, column 10",
                "unknown placeholder `{lanes}`",
            ),
            (
                "[remote.kubernetes]\npod_tempalte = \"p.yaml\"\n",
                "line 2, column 1",
                "pod_tempalte",
            ),
            (
                "[remote]\ncommand = [\"x\"]\n[remote.kubernetes]\npod_template = \"p.yaml\"\n",
                "[remote]",
                "both `command` and [remote.kubernetes]",
            ),
        ];
        for (text, place, what) in cases {
            let e = remote(text).unwrap_err();
            assert!(e.contains(place) && e.contains(what), "{text}\n=> {e}");
        }
    }
}
