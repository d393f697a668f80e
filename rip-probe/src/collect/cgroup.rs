//! Control groups (v2): the processes of a cgroup and its descendants (a
//! Kubernetes pod, a systemd service, a container), and the cgroup a
//! process is in.

use std::path::{Path, PathBuf};

/// Why a cgroup's processes cannot be listed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No cgroup has this path.
    #[error("{}: no such cgroup under {ROOT}", path.display())]
    NotFound {
        /// The path as given.
        path: PathBuf,
    },
    /// The path is not a cgroup v2 directory.
    #[error("{}: not a cgroup v2 directory under {ROOT}", path.display())]
    NotCgroup {
        /// The path as given.
        path: PathBuf,
    },
    /// The cgroup holds too many cgroups to walk.
    #[error("{}: more than {max} cgroups below it", dir.display())]
    TooMany {
        /// The cgroup's directory.
        dir: PathBuf,
        /// The most that are walked.
        max: usize,
    },
}

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Where cgroup file systems are mounted.
pub(crate) const ROOT: &str = "/sys/fs/cgroup";

/// Where the cgroup v2 hierarchy is mounted: /sys/fs/cgroup, or on hosts
/// that still mount v1 controllers there, its `unified` directory (as
/// /proc/self/mounts says).
pub(crate) fn v2_root() -> PathBuf {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    mounts
        .lines()
        .map(|l| l.split(' ').collect::<Vec<_>>())
        .find(|f| f.get(2) == Some(&"cgroup2") && f.get(1).is_some_and(|p| p.starts_with(ROOT)))
        .and_then(|f| f.get(1).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(ROOT))
}

/// More cgroups than this under one path is not a pod or a service:
/// the walk stops there instead of reading the whole machine.
const MAX_CGROUPS: usize = 10_000;

/// The directory of cgroup `path`: absolute under /sys/fs/cgroup, or
/// relative to the cgroup v2 root (`system.slice/nginx.service`, as
/// `systemctl status` and /proc/PID/cgroup print it, with or without the
/// leading `/`).
pub(crate) fn resolve(path: &Path) -> Result<PathBuf> {
    let root = Path::new(ROOT);
    let joined = if path.starts_with(root) {
        path.to_path_buf()
    } else {
        v2_root().join(path.strip_prefix("/").unwrap_or(path))
    };
    let dir = joined.canonicalize().map_err(|_| Error::NotFound {
        path: path.to_path_buf(),
    })?;
    if !dir.starts_with(root) || !dir.join("cgroup.procs").is_file() {
        return Err(Error::NotCgroup {
            path: path.to_path_buf(),
        });
    }
    Ok(dir)
}

/// The processes of cgroup `dir` and of every cgroup below it, sorted.
pub(crate) fn processes(dir: &Path) -> Result<Vec<u32>> {
    let mut pids = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    let mut seen = 0;
    while let Some(d) = todo.pop() {
        seen += 1;
        if seen > MAX_CGROUPS {
            return Err(Error::TooMany {
                dir: dir.to_path_buf(),
                max: MAX_CGROUPS,
            });
        }
        let procs = d.join("cgroup.procs");
        // A cgroup removed during the walk has no processes left.
        let Ok(text) = std::fs::read_to_string(&procs) else {
            continue;
        };
        pids.extend(text.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
        if let Ok(entries) = std::fs::read_dir(&d) {
            for e in entries.flatten() {
                // Not following symlinks: cgroupfs has none, and a
                // directory entry is what a child cgroup is.
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    todo.push(e.path());
                }
            }
        }
    }
    pids.sort_unstable();
    pids.dedup();
    Ok(pids)
}

/// The cgroup (v2) process `pid` is in, as /proc/PID/cgroup says it
/// (`/system.slice/docker-<id>.scope`).
pub(crate) fn of_process(pid: u32) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_cgroup_holds_us() {
        let ours = of_process(std::process::id()).expect("cgroup v2");
        let dir = resolve(Path::new(&ours)).unwrap();
        assert_eq!(resolve(&dir).unwrap(), dir, "absolute and relative alike");
        assert!(processes(&dir).unwrap().contains(&std::process::id()));
        assert!(resolve(Path::new("/etc")).is_err());
        assert!(resolve(Path::new("../../etc")).is_err());
        assert!(resolve(Path::new("no-such-cgroup-here")).is_err());
    }
}
