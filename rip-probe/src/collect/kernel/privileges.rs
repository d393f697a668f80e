//! Whether this process may load and attach BPF programs, checked up front
//! so the user gets one clear line instead of a verifier-level EPERM.

use rustix::thread::{CapabilitySet, capabilities};

use crate::{
    collect::namespaces,
    collect::{
        Result,
        kernel::{Error, ProgramOp},
    },
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

/// A uprobe attach's error: [`Error::UprobeNeedsSysAdmin`] when the kernel
/// refused it (EACCES from `perf_event_open`) and rip-probe lacks
/// CAP_SYS_ADMIN — the uprobe events refuse CAP_BPF and CAP_PERFMON alone
/// (measured: CAP_SYS_PTRACE, CAP_DAC_OVERRIDE, CAP_SYSLOG or
/// CAP_CHECKPOINT_RESTORE do not help either) — else the error as it is.
pub(crate) fn uprobe_error(op: String, source: aya::programs::ProgramError) -> Error {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&source);
    let mut refused = false;
    while let Some(e) = cause {
        refused |= e
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.raw_os_error() == Some(rustix::io::Errno::ACCESS.raw_os_error()));
        cause = e.source();
    }
    let admin = capabilities(None).is_ok_and(|c| c.effective.contains(CapabilitySet::SYS_ADMIN));
    if refused && !admin {
        Error::UprobeNeedsSysAdmin { program: op }
    } else {
        Error::program(ProgramOp::Attach, op, source)
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
