//! What a sandbox enforces, feature by feature, for `toolyard doctor` and the logs.

use std::fmt;

use toolyard_core::Lane;

/// Whether one feature of the sandbox is in effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeatureStatus {
    /// Applied to this process (and everything it starts).
    Enforced,
    /// Applied in part; the detail says what is missing.
    Partial,
    /// Wanted but not applied; the detail says why.
    NotEnforced,
    /// This kernel can enforce it (from [`super::probe`]).
    Available,
    /// This kernel cannot enforce it (from [`super::probe`]).
    Unavailable,
    /// Not part of this lane's policy.
    NotRequested,
}

impl FeatureStatus {
    fn label(self) -> &'static str {
        match self {
            FeatureStatus::Enforced => "enforced",
            FeatureStatus::Partial => "partial",
            FeatureStatus::NotEnforced => "NOT ENFORCED",
            FeatureStatus::Available => "available",
            FeatureStatus::Unavailable => "unavailable",
            FeatureStatus::NotRequested => "not requested",
        }
    }
}

/// One feature's status and the reason for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeatureReport {
    /// Short name, e.g. `"landlock-fs"`.
    pub name: &'static str,
    /// Whether it is in effect.
    pub status: FeatureStatus,
    /// What exactly, or why not.
    pub detail: String,
}

/// Per feature: enforced or not, and why.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SandboxReport {
    /// The lane applied, or `None` for a [`super::probe`] of the kernel.
    pub lane: Option<Lane>,
    /// The features, in the order they were applied.
    pub features: Vec<FeatureReport>,
}

impl SandboxReport {
    /// Record a feature.
    pub(crate) fn add(
        &mut self,
        name: &'static str,
        status: FeatureStatus,
        detail: impl Into<String>,
    ) {
        self.features.push(FeatureReport {
            name,
            status,
            detail: detail.into(),
        });
    }

    /// The report of feature `name`.
    pub fn feature(&self, name: &str) -> Option<&FeatureReport> {
        self.features.iter().find(|f| f.name == name)
    }

    /// Whether feature `name` is enforced.
    pub fn is_enforced(&self, name: &str) -> bool {
        self.feature(name)
            .is_some_and(|f| f.status == FeatureStatus::Enforced)
    }
}

impl fmt::Display for SandboxReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.lane {
            Some(lane) => writeln!(f, "sandbox of lane {lane}:")?,
            None => writeln!(f, "sandbox features of this kernel:")?,
        }
        for feat in &self.features {
            writeln!(
                f,
                "  {:<16} {:<13} {}",
                feat.name,
                feat.status.label(),
                feat.detail
            )?;
        }
        Ok(())
    }
}
