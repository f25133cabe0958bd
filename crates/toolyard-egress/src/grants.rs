//! Hosts the user approved: let through on top of the [`Policy`](crate::Policy) while the calls
//! they were approved for run. The gate consults them only for a host the policy refuses as
//! "not in allow": a `deny` entry and the internal addresses stay refused whatever was approved.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::policy::{Host, Pattern};

/// How long an approval holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// The one call that asked.
    Call,
    /// Every call of the session that asked.
    Session,
    /// Every call in this workspace, kept in Toolyard's state.
    Always,
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Call => "this call",
            Self::Session => "this session",
            Self::Always => "always for this workspace",
        })
    }
}

/// One approved host pattern and how long the approval holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The host pattern, as `[network] allow` takes them.
    pub pattern: Pattern,
    /// The approval's scope (said in the `network:` line).
    pub scope: Scope,
}

type Active = Vec<(u64, Arc<[Grant]>)>;

/// The approvals active on one gate: each call that runs holds its own set until it ends.
#[derive(Debug, Default)]
pub struct Grants {
    active: Mutex<Active>,
    next: AtomicU64,
}

impl Grants {
    /// Let `grants` through until the returned guard is dropped.
    pub fn hold(self: &Arc<Self>, grants: Arc<[Grant]>) -> Held {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut a) = self.active.lock() {
            a.push((id, grants));
        }
        Held {
            grants: self.clone(),
            id,
        }
    }

    /// The narrowest scope under which an active approval names `host` on `port`, if any.
    pub fn find(&self, host: &Host, port: u16) -> Option<Scope> {
        let active = self.active.lock().ok()?;
        active
            .iter()
            .flat_map(|(_, g)| g.iter())
            .filter(|g| g.pattern.matches_name(host, port))
            .map(|g| g.scope)
            .min()
    }

    /// How many sets of approvals are held now.
    pub fn held(&self) -> usize {
        self.active.lock().map_or(0, |a| a.len())
    }
}

/// Approvals held on a gate; dropping it withdraws them.
#[derive(Debug)]
pub struct Held {
    grants: Arc<Grants>,
    id: u64,
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Ok(mut a) = self.grants.active.lock() {
            a.retain(|(id, _)| *id != self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(p: &str, scope: Scope) -> Grant {
        Grant {
            pattern: Pattern::parse(p).unwrap(),
            scope,
        }
    }

    #[test]
    fn a_held_approval_lets_its_hosts_through_until_it_is_dropped() {
        let grants = Arc::new(Grants::default());
        let host = Host::parse("registry.test").unwrap();
        assert_eq!(grants.find(&host, 80), None);
        let call = grants.hold(Arc::from(vec![grant("registry.test", Scope::Call)]));
        let session = grants.hold(Arc::from(vec![
            grant("*.test", Scope::Session),
            grant("other.test:8080", Scope::Always),
        ]));
        assert_eq!(grants.find(&host, 80), Some(Scope::Call));
        let other = Host::parse("other.test").unwrap();
        assert_eq!(grants.find(&other, 8080), Some(Scope::Session));
        assert_eq!(grants.find(&Host::parse("x.org").unwrap(), 80), None);
        drop(call);
        assert_eq!(grants.find(&host, 80), Some(Scope::Session));
        drop(session);
        assert_eq!(grants.find(&host, 80), None);
        assert_eq!(grants.held(), 0);
    }
}
