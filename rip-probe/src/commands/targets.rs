//! Which processes a command names: `--pid` (repeated, or a comma
//! list), `--comm NAME`, `--cgroup PATH`, or (`serve` without any) every
//! process that maps a librip ring. Listed anew each time they are
//! asked for: a service's processes come and go.

use std::path::{Path, PathBuf};

use crate::{
    collect::cgroup,
    discover,
    error::{Error, Result},
};

/// The processes named on the command line.
#[derive(Clone, Debug, Default)]
pub(crate) struct Named {
    /// `--pid`.
    pub(crate) pids: Vec<u32>,
    /// `--comm`.
    pub(crate) comms: Vec<String>,
    /// `--cgroup`.
    pub(crate) cgroup: Option<PathBuf>,
}

/// The processes [`Named`] names now.
#[derive(Clone, Debug, Default)]
pub(crate) struct Listed {
    /// Their pids, ascending, each once.
    pub(crate) pids: Vec<u32>,
    /// The cgroup's directory, when one named them.
    pub(crate) cgroup: Option<PathBuf>,
    /// What named them, as the command line says it.
    pub(crate) described: Vec<String>,
}

impl Named {
    /// Whether more than one process may be named (every form but a
    /// single `--pid`).
    pub(crate) fn several(&self) -> bool {
        self.pids.len() > 1 || !self.comms.is_empty() || self.cgroup.is_some()
    }

    /// Whether nothing is named.
    pub(crate) fn is_empty(&self) -> bool {
        self.pids.is_empty() && self.comms.is_empty() && self.cgroup.is_none()
    }

    /// The processes named now: `--pid`s as given (one that is gone is
    /// the session's to report), with every live program (not a kernel
    /// thread, not rip-probe itself) of the `--comm` names and the
    /// cgroup. `rings`: with nothing named, every process that maps a
    /// ring it wrote.
    pub(crate) fn list(&self, rings: bool) -> Result<Listed> {
        let mut out = Listed::default();
        let mut pids = self.pids.clone();
        if !self.pids.is_empty() {
            let list: Vec<String> = self.pids.iter().map(u32::to_string).collect();
            out.described.push(format!("--pid {}", list.join(",")));
        }
        if let Some(path) = &self.cgroup {
            let dir = cgroup::resolve(path)?;
            pids.extend(
                cgroup::processes(&dir)?
                    .into_iter()
                    .filter(|&p| discover::exe(p).is_some()),
            );
            out.described.push(format!("--cgroup {}", dir.display()));
            out.cgroup = Some(dir);
        }
        if !self.comms.is_empty() {
            pids.extend(by_comm(&self.comms)?);
            for c in &self.comms {
                out.described.push(format!("--comm {c}"));
            }
        }
        if rings && self.is_empty() {
            pids.extend(super::list::ring_pids()?);
            out.described
                .push("every process with a librip ring".into());
        }
        let me = std::process::id();
        pids.retain(|&p| p != me);
        pids.sort_unstable();
        pids.dedup();
        out.pids = pids;
        Ok(out)
    }
}

/// The error for names that name no process.
pub(crate) fn none_named(listed: &Listed) -> Error {
    Error::Usage(format!(
        "{}: no process to observe (is it running? `rip-probe list` shows the processes with a ring)",
        listed.described.join(" ")
    ))
}

/// The programs (not kernel threads) whose name (`comm`, as ps -o comm
/// shows it, at most 15 bytes) is one of `names`.
fn by_comm(names: &[String]) -> Result<Vec<u32>> {
    let dir = std::fs::read_dir("/proc").map_err(|e| Error::io("/proc", e))?;
    let mut pids = Vec::new();
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(comm) =
            std::fs::read_to_string(Path::new("/proc").join(pid.to_string()).join("comm"))
        else {
            continue;
        };
        let comm = comm.trim_end_matches('\n');
        // The kernel cuts names to 15 bytes: a longer name given matches
        // what the kernel kept of it.
        let matches = names.iter().any(|n| {
            n == comm
                || (comm.len() == 15 && n.len() > 15 && n.as_bytes().starts_with(comm.as_bytes()))
        });
        if matches && discover::exe(pid).is_some() {
            pids.push(pid);
        }
    }
    Ok(pids)
}
