//! # toolyard-remote
//!
//! Links that place runners on an engine. With the cargo feature `kube`: the Kubernetes link
//! ([`k8s::KubeLink`]), one pod per session created from a Pod template (or an agent-sandbox
//! `SandboxClaim` against a warm pool), its runners reached through the exec API. Without the
//! feature this crate holds only [`link_for`], which says how to get the link.

use std::path::Path;
use std::sync::Arc;

use toolyard_core::{Catalog, ToolError};
use toolyard_dispatch::RemoteConfig;
use toolyard_dispatch::RunnerLink;

#[cfg(feature = "kube")]
pub mod k8s;

/// The link the catalog's `[remote.kubernetes]` section describes, if it has one; `catalog_path`
/// is the catalog's file (a relative `pod_template` is read beside it). An error names what to
/// fix: the section, the template, or a build without the `kube` feature.
pub fn link_for(
    catalog: &Catalog,
    catalog_path: Option<&Path>,
) -> Result<Option<Arc<dyn RunnerLink>>, ToolError> {
    let remote: RemoteConfig = catalog
        .section("remote")
        .map_err(|e| ToolError::InvalidArguments(e.to_string()))?;
    let Some(kube) = remote.kubernetes else {
        return Ok(None);
    };
    #[cfg(feature = "kube")]
    {
        let heartbeat = std::time::Duration::from_millis(
            remote
                .heartbeat_ms
                .map_or(toolyard_runner::protocol::DEFAULT_HEARTBEAT_MS, |h| h.0),
        );
        let base = catalog_path.and_then(Path::parent);
        let settings = k8s::Settings::from_config(&kube, heartbeat, base)?;
        Ok(Some(Arc::new(k8s::KubeLink::new(settings))))
    }
    #[cfg(not(feature = "kube"))]
    {
        let _ = (kube, catalog_path);
        Err(ToolError::InvalidArguments(
            toolyard_dispatch::remote_kube::NEEDS_KUBE_BUILD.into(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_kubernetes_section_means_no_link() {
        let c = Catalog::parse_over_builtin("[remote]\ncommand = [\"x\"]\n", "c.toml").unwrap();
        assert!(link_for(&c, None).unwrap().is_none());
    }

    #[cfg(not(feature = "kube"))]
    #[test]
    fn without_the_feature_the_section_says_how_to_build() {
        let c = Catalog::parse_over_builtin(
            "[remote.kubernetes]\npod_template = \"pod.yaml\"\n",
            "c.toml",
        )
        .unwrap();
        let e = link_for(&c, None).err().unwrap().to_string();
        assert!(e.contains("--features kube"), "{e}");
    }
}
