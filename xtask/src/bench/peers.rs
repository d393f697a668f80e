//! The peers rip is compared with, as Debian packages: found installed, or
//! installed with apt-get, or "not available" with the reason.

use std::{collections::BTreeMap, process::Command};

use crate::util::{apt_install, is_root, output};

/// The packages the bench uses, and what for.
pub const PACKAGES: &[(&str, &str)] = &[
    ("bpftrace", "USDT and uprobe rows, syscall tracing"),
    ("systemtap-sdt-dev", "USDT markers (<sys/sdt.h>)"),
    ("lttng-tools", "LTTng sessions"),
    ("liblttng-ust-dev", "LTTng-UST tracepoints"),
    ("gdb", "breakpoint row, thread apply all bt"),
    ("elfutils", "eu-stack: every thread's stack"),
    ("valgrind", "instruction counts (callgrind)"),
    (
        "libbpf-tools",
        "BCC's offcputime (the libbpf build: BCC's Python tools need kernel headers)",
    ),
    (
        "heaptrack",
        "heap profiler (preload) beside rip-probe leaks",
    ),
    (
        "bpfcc-tools",
        "BCC's memleak (compiles its BPF at run time: needs this kernel's headers)",
    ),
];

/// Each package's installed version, or why it is not available.
#[derive(Clone, Debug, Default)]
pub struct Peers {
    found: BTreeMap<String, Result<String, String>>,
}

impl Peers {
    /// Checks every package of [`PACKAGES`] and installs the missing ones
    /// (when root).
    pub fn ensure() -> Peers {
        let all: Vec<&str> = PACKAGES.iter().map(|(p, _)| *p).collect();
        Peers::ensure_only(&all)
    }

    /// The same for `pkgs` only (a suite run alone installs what it uses).
    pub fn ensure_only(pkgs: &[&str]) -> Peers {
        let mut peers = Peers::default();
        let check = |pkg: &str| installed_version(pkg).ok_or_else(|| "not installed".to_string());
        for pkg in pkgs {
            peers.found.insert(pkg.to_string(), check(pkg));
        }
        let missing: Vec<&str> = pkgs
            .iter()
            .copied()
            .filter(|p| peers.get(p).is_err())
            .collect();
        if missing.is_empty() {
            return peers;
        }
        if !is_root() {
            for p in missing {
                peers.found.insert(
                    p.to_string(),
                    Err(format!(
                        "not installed, and not root to `apt-get install {p}`"
                    )),
                );
            }
            return peers;
        }
        // All at once; when that fails, one by one to learn which cannot be had.
        if apt_install(&missing).is_err() {
            for p in &missing {
                if let Err(e) = apt_install(&[p]) {
                    peers.found.insert(p.to_string(), Err(format!("{e:#}")));
                }
            }
        }
        for p in missing {
            if let Some(v) = installed_version(p) {
                peers.found.insert(p.to_string(), Ok(v));
            } else if peers.get(p).is_err_and(|e| e == "not installed") {
                peers.found.insert(
                    p.to_string(),
                    Err(format!("`apt-get install {p}` did not install it")),
                );
            }
        }
        peers
    }

    /// The version of `pkg`, or why it is not available.
    pub fn get(&self, pkg: &str) -> Result<&str, &str> {
        match self.found.get(pkg) {
            Some(Ok(v)) => Ok(v),
            Some(Err(e)) => Err(e),
            None => Err("not checked"),
        }
    }

    /// `Ok` when every one of `pkgs` is available, else the first reason.
    pub fn need(&self, pkgs: &[&str]) -> Result<(), String> {
        for p in pkgs {
            if let Err(e) = self.get(p) {
                return Err(format!("{p}: {e}"));
            }
        }
        Ok(())
    }

    /// Every package with its version or reason, in [`PACKAGES`] order.
    pub fn all(&self) -> Vec<(&'static str, Result<&str, &str>)> {
        PACKAGES.iter().map(|(p, _)| (*p, self.get(p))).collect()
    }
}

/// The installed version of Debian package `pkg`, from dpkg.
fn installed_version(pkg: &str) -> Option<String> {
    let out = output(Command::new("dpkg-query").args([
        "-W",
        "-f",
        "${db:Status-Status}\t${Version}",
        pkg,
    ]))?;
    parse_dpkg_status(&out)
}

/// Parses dpkg-query's `status<TAB>version`: the version, if installed.
fn parse_dpkg_status(s: &str) -> Option<String> {
    let (status, version) = s.trim().split_once('\t')?;
    (status == "installed" && !version.is_empty()).then(|| version.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dpkg_status() {
        assert_eq!(
            parse_dpkg_status("installed\t0.17.0-1\n").as_deref(),
            Some("0.17.0-1")
        );
        assert_eq!(parse_dpkg_status("config-files\t1.0"), None);
        assert_eq!(parse_dpkg_status("not-installed\t"), None);
        assert_eq!(parse_dpkg_status(""), None);
    }

    #[test]
    fn need_names_the_first_missing() {
        let mut p = Peers::default();
        p.found.insert("gdb".into(), Ok("13.1-3".into()));
        p.found.insert("bpftrace".into(), Err("no mirror".into()));
        assert_eq!(p.need(&["gdb"]), Ok(()));
        assert_eq!(
            p.need(&["gdb", "bpftrace"]),
            Err("bpftrace: no mirror".into())
        );
        assert_eq!(p.get("lttng-tools"), Err("not checked"));
    }
}
