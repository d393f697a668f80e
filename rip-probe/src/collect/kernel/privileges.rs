//! Whether this process may load and attach BPF programs, checked up front
//! so the user gets one clear line instead of a verifier-level EPERM.

use crate::error::{Error, Result};

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// Succeeds when the effective capabilities include CAP_SYS_ADMIN, or both
/// CAP_BPF and CAP_PERFMON.
pub fn check() -> Result<()> {
    let path = "/proc/self/status";
    let status = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .ok_or_else(|| Error::Kernel {
            path: path.into(),
            what: "no CapEff line".into(),
        })?;
    if has(eff, CAP_SYS_ADMIN) || (has(eff, CAP_BPF) && has(eff, CAP_PERFMON)) {
        Ok(())
    } else {
        Err(Error::NotPrivileged)
    }
}

fn has(mask: u64, cap: u32) -> bool {
    mask & (1 << cap) != 0
}

#[cfg(test)]
mod tests {
    #[test]
    fn capability_bits() {
        assert!(super::has(1 << 39, super::CAP_BPF));
        assert!(!super::has(1 << 38, super::CAP_BPF));
    }
}
