//! Processes in other pid and mount namespaces (containers): which
//! namespace a process is in, its thread ids as its own namespace numbers
//! them (`NSpid`), and, for a ring written inside a container, whether
//! its writer still runs — decided by namespace identity and start time,
//! never by comparing a namespace's pid with one of ours.

use std::{collections::HashMap, os::unix::fs::MetadataExt};

use crate::discover::{self, read_proc};

/// The inode naming namespace `kind` (`pid`, `mnt`) of process `pid`, or
/// of rip-probe itself for `None`. `None` when /proc does not say (the
/// process is gone, or we may not inspect it).
pub(crate) fn inode(pid: Option<u32>, kind: &str) -> Option<u64> {
    let who = pid.map_or_else(|| "self".to_string(), |p| p.to_string());
    std::fs::metadata(format!("/proc/{who}/ns/{kind}"))
        .ok()
        .map(|m| m.ino())
}

/// Whether process `pid` lives in another namespace of `kind` than
/// rip-probe (false when either cannot be read).
pub(crate) fn differs(pid: u32, kind: &str) -> bool {
    matches!((inode(Some(pid), kind), inode(None, kind)), (Some(a), Some(b)) if a != b)
}

/// The `NSpid` line of a status file: the id in each pid namespace the
/// task is in, from /proc's own namespace to the task's innermost.
pub(crate) fn parse_nspid(status: &str) -> Option<Vec<u64>> {
    let ids = status.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
    let ids: Option<Vec<u64>> = ids.split_whitespace().map(|n| n.parse().ok()).collect();
    ids.filter(|v| !v.is_empty())
}

/// The id of thread `tid` of process `pid` (tid 0: the process) in its
/// innermost pid namespace.
pub(crate) fn innermost_id(pid: u32, tid: u32) -> Option<u64> {
    parse_nspid(&read_proc(pid, tid, "status").ok()?)?
        .last()
        .copied()
}

/// The inodes the kernel gives its first namespaces (`PROC_PID_INIT_INO`,
/// `PROC_USER_INIT_INO`, fixed since Linux 3.8): the host's.
pub(crate) const HOST_PID_NS: u64 = 0xEFFF_FFFC;
/// See [`HOST_PID_NS`].
pub(crate) const HOST_USER_NS: u64 = 0xEFFF_FFFD;

/// The namespace of `kind` rip-probe runs in, when it is not the host's
/// (`host`): rip-probe is in a container.
pub(crate) fn ours_if_not_host(kind: &str, host: u64) -> Option<u64> {
    inode(None, kind).filter(|&n| n != host)
}

/// Process `pid`'s pid in its own pid namespace, when that is not ours.
pub(crate) fn ns_pid(pid: u32) -> Option<u32> {
    if !differs(pid, "pid") {
        return None;
    }
    innermost_id(pid, 0).and_then(|n| u32::try_from(n).ok())
}

/// Thread ids of a process in another pid namespace: its own (what its
/// ring records) against ours (what /proc and the kernel show here).
#[derive(Clone, Debug, Default)]
pub(crate) struct TidMap {
    to_host: HashMap<u64, u32>,
}

impl TidMap {
    /// The map for process `pid`, or `None` when it shares rip-probe's pid
    /// namespace (ids are the same; nothing is read). Reads one status
    /// file per thread.
    pub(crate) fn of(pid: u32) -> Option<TidMap> {
        if !differs(pid, "pid") {
            return None;
        }
        let mut to_host = HashMap::new();
        for tid in super::procfs::tids(pid).unwrap_or_default() {
            if let Some(ns) = innermost_id(pid, tid) {
                to_host.insert(ns, tid);
            }
        }
        Some(TidMap { to_host })
    }

    /// Our id of the thread its namespace calls `ns_tid`, if it is alive.
    pub(crate) fn host(&self, ns_tid: u64) -> Option<u32> {
        self.to_host.get(&ns_tid).copied()
    }

    /// The other way: each thread's id in its namespace, by ours.
    pub(crate) fn to_ns(&self) -> HashMap<u32, u64> {
        self.to_host.iter().map(|(&ns, &ours)| (ours, ns)).collect()
    }

    /// A map from pairs (tests).
    #[cfg(test)]
    pub(crate) fn from_pairs(pairs: &[(u64, u32)]) -> TidMap {
        TidMap {
            to_host: pairs.iter().copied().collect(),
        }
    }
}

/// Whether a ring's writer runs, found from its namespace identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Writer {
    /// It runs as this pid (ours).
    Alive(u32),
    /// No process has its identity: it is gone.
    Gone,
    /// /proc cannot tell; the reason, in words.
    Unknown(String),
}

/// Finds the writer of a ring recorded as pid `ns_pid` of pid namespace
/// `pid_ns`, started at `start_ticks`. Only processes started at that
/// tick are looked at closely (their namespace and `NSpid`).
pub(crate) fn find_writer(pid_ns: u64, ns_pid: u32, start_ticks: u64) -> Writer {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Writer::Unknown("/proc cannot be listed".into());
    };
    let mut unreadable = false;
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Some(st) = discover::stat(pid, 0) else {
            continue;
        };
        if st.start_time != start_ticks || matches!(st.state, 'Z' | 'X') {
            continue;
        }
        match inode(Some(pid), "pid") {
            Some(ns) if ns == pid_ns => {
                if innermost_id(pid, 0) == Some(u64::from(ns_pid)) {
                    return Writer::Alive(pid);
                }
            }
            Some(_) => {}
            None => unreadable = true,
        }
    }
    if unreadable {
        Writer::Unknown(
            "a process started when the writer did has a pid namespace rip-probe may not read \
             (run as root)"
                .into(),
        )
    } else if discover::hides_pids() {
        Writer::Unknown(
            "/proc is mounted with hidepid: processes of other users are invisible (run as root, \
             or mount /proc without hidepid)"
                .into(),
        )
    } else {
        Writer::Gone
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nspid_lines() {
        let s = "Name:\tx\nNSpid:\t4711\t3\nUid:\t0\n";
        assert_eq!(parse_nspid(s), Some(vec![4711, 3]));
        assert_eq!(parse_nspid("NSpid:\t12\n"), Some(vec![12]));
        assert_eq!(parse_nspid("NSpid:\t12 x\n"), None);
        assert_eq!(parse_nspid("Name:\tx\n"), None);
    }

    #[test]
    fn our_own_process_is_found_by_its_identity() {
        let me = std::process::id();
        let st = discover::stat(me, 0).unwrap();
        let ns = inode(None, "pid").unwrap();
        let nspid = innermost_id(me, 0).unwrap() as u32;
        assert_eq!(find_writer(ns, nspid, st.start_time), Writer::Alive(me));
        // Another namespace, same pid and start: not us.
        assert_ne!(find_writer(ns + 1, nspid, st.start_time), Writer::Alive(me));
        assert!(TidMap::of(me).is_none(), "our own namespace needs no map");
    }
}
