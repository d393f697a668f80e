//! Whether this process may load and attach BPF programs, checked up front
//! so the user gets one clear line instead of a verifier-level EPERM.

use rustix::thread::{CapabilitySet, capabilities};

use crate::{
    collect::namespaces,
    collect::{Result, kernel::Error},
};

/// Succeeds when the effective capabilities include CAP_SYS_ADMIN, or both
/// CAP_BPF and CAP_PERFMON, in the host's user namespace. Another pid
/// namespace is fine: the programs translate BPF's global ids (see
/// `super::pidns`).
pub(crate) fn check() -> Result<()> {
    // Capabilities inside a user namespace are the namespace's own: BPF
    // wants them in the host's, whatever capget says.
    if let Some(ns) = namespaces::ours_if_not_host("user", namespaces::HOST_USER_NS) {
        return Err(crate::discover::Error::UserNamespace(ns).into());
    }
    let caps = capabilities(None).map_err(|e| Error::Capabilities(e.into()))?;
    if permitted(caps.effective) {
        Ok(())
    } else {
        Err(Error::NotPrivileged.into())
    }
}

fn permitted(eff: CapabilitySet) -> bool {
    eff.contains(CapabilitySet::SYS_ADMIN)
        || eff.contains(CapabilitySet::BPF | CapabilitySet::PERFMON)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capability_bits() {
        assert!(permitted(CapabilitySet::SYS_ADMIN));
        assert!(permitted(CapabilitySet::BPF | CapabilitySet::PERFMON));
        assert!(!permitted(CapabilitySet::BPF));
    }
}
