//! Discovery: the target process, held by a pidfd so that its exit — or the
//! reuse of its pid by another process — during observation is detected
//! instead of silently misattributing threads.

use std::{
    os::fd::OwnedFd,
    path::{Path, PathBuf},
};

use rustix::{
    event::{PollFd, PollFlags, poll},
    io::Errno,
    process::{Pid, PidfdFlags, pidfd_open},
};

mod error;
pub mod maps;

pub use error::{Denied, Error, Lacks, NotYoursBecause, Result};

/// Reads `/proc/<pid>/task/<tid>/<file>` (or `/proc/<pid>/<file>` for
/// tid 0) to a string.
pub(crate) fn read_proc(pid: u32, tid: u32, file: &str) -> std::io::Result<String> {
    let p = if tid == 0 {
        format!("/proc/{pid}/{file}")
    } else {
        format!("/proc/{pid}/task/{tid}/{file}")
    };
    std::fs::read_to_string(p)
}

/// The fields of `/proc/<pid>/task/<tid>/stat` we use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Stat {
    /// Thread name.
    pub(crate) comm: String,
    /// State letter (`R`, `S`, `D`, `T`, `t`, `Z`, `X`, `I`, `P`).
    pub(crate) state: char,
    /// Start time in clock ticks since boot (identifies a pid across reuse).
    pub(crate) start_time: u64,
    /// The parent's pid.
    pub(crate) ppid: u32,
    /// The kernel's `PF_*` flags (field 9).
    pub(crate) flags: u64,
}

/// `PF_KTHREAD`: the task is a kernel thread (no user space).
const PF_KTHREAD: u64 = 0x0020_0000;

impl Stat {
    /// Whether the task is a kernel thread.
    pub(crate) fn kernel_thread(&self) -> bool {
        self.flags & PF_KTHREAD != 0
    }

    /// Whether the task has exited (a zombie, or dead).
    pub(crate) fn exited(&self) -> bool {
        matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// Parses a stat line. The comm may contain spaces and parentheses, so the
/// fields are found from the last `)`.
pub(crate) fn parse_stat(text: &str) -> Option<Stat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_string();
    let rest: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    // rest[0] is field 3 (state); start time is field 22.
    let state = rest.first()?.chars().next()?;
    let ppid = rest.get(1)?.parse().ok()?;
    let flags = rest.get(6)?.parse().ok()?;
    let start_time = rest.get(19)?.parse().ok()?;
    Some(Stat {
        comm,
        state,
        start_time,
        ppid,
        flags,
    })
}

/// `stat` of a thread (tid 0: of the process). The process's fields we
/// use (comm, state, start time) are its leader thread's, which the kernel
/// prints without summing every thread's times as /proc/PID/stat does
/// (35 ms a read at 100,000 threads).
pub(crate) fn stat(pid: u32, tid: u32) -> Option<Stat> {
    let tid = if tid == 0 { pid } else { tid };
    parse_stat(&read_proc(pid, tid, "stat").ok()?)
}

/// The executable path of a process.
pub(crate) fn exe(pid: u32) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/exe")).ok()
}

/// Fails when /proc numbers processes as another pid namespace than
/// rip-probe's does (`unshare --pid --fork` without `--mount-proc` keeps
/// the parent's /proc): pids given to rip-probe, read from /proc and
/// passed to the kernel would then name different processes. A /proc that
/// cannot be read is left to the steps that need it to report.
pub(crate) fn check_proc() -> Result<()> {
    let Ok(link) = std::fs::read_link("/proc/self") else {
        return Ok(());
    };
    if link.to_str().and_then(|p| p.parse::<u32>().ok()) == Some(std::process::id()) {
        return Ok(());
    }
    use std::os::unix::fs::MetadataExt;
    let ns = std::fs::metadata("/proc/self/ns/pid").map_or(0, |m| m.ino());
    Err(Error::ProcOfAnotherPidNamespace(ns))
}

/// Refuses to run set-user-ID or set-group-ID ([`Error::SetId`]): the
/// user who starts rip-probe is who it works for, with capabilities when
/// not root.
pub(crate) fn check_not_set_id() -> Result<()> {
    use rustix::process::{getegid, geteuid, getgid, getuid};
    let (ruid, euid, rgid, egid) = (getuid(), geteuid(), getgid(), getegid());
    if ruid == euid && rgid == egid {
        return Ok(());
    }
    Err(Error::SetId {
        ruid: ruid.as_raw(),
        euid: euid.as_raw(),
        rgid: rgid.as_raw(),
        egid: egid.as_raw(),
    })
}

/// Fails with [`Error::NotYours`] unless the user running rip-probe may
/// observe process `pid` (read its memory, stacks and rings) by the rules
/// `ptrace_may_access` applies to a user without capabilities: root may;
/// anyone else only when the process's real, effective and saved user and
/// group ids are theirs and the process is dumpable (else the kernel owns
/// its /proc/PID by root). Capabilities rip-probe was given (CAP_BPF,
/// CAP_PERFMON, perhaps CAP_SYS_PTRACE) do not widen whom it observes.
/// Without capabilities, the kernel's own checks stand.
pub(crate) fn may_observe(pid: u32) -> Result<()> {
    let uid = rustix::process::getuid().as_raw();
    // Without any effective capability the kernel applies these rules
    // itself (and loading BPF is refused with its own message).
    let caps = rustix::thread::capabilities(None)
        .map(|c| c.effective)
        .unwrap_or(rustix::thread::CapabilitySet::empty());
    if uid == 0 || caps.is_empty() {
        return Ok(());
    }
    let gid = rustix::process::getgid().as_raw();
    let not_yours = |why| Error::NotYours { pid, why, uid };
    let status = read_proc(pid, 0, "status").map_err(|_| Error::NoSuchProcess(pid))?;
    let ids = |key: &str| -> Vec<u32> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .map(|l| {
                l.split_whitespace()
                    .take(3)
                    .filter_map(|v| v.parse().ok())
                    .collect()
            })
            .unwrap_or_default()
    };
    let (uids, gids) = (ids("Uid:"), ids("Gid:"));
    if uids.len() != 3 || uids.iter().any(|&u| u != uid) {
        return Err(not_yours(NotYoursBecause::User {
            owner: uids.first().copied(),
        }));
    }
    if gids.len() != 3 || gids.iter().any(|&g| g != gid) {
        return Err(not_yours(NotYoursBecause::Groups { gids, gid }));
    }
    use std::os::unix::fs::MetadataExt;
    let owner = std::fs::metadata(format!("/proc/{pid}"))
        .map_err(|_| Error::NoSuchProcess(pid))?
        .uid();
    if owner != uid {
        return Err(not_yours(NotYoursBecause::NotDumpable));
    }
    Ok(())
}

/// Fails unless the user running rip-probe may read file `path` by its
/// own rights (the real user and groups, capabilities left out: access(2)
/// checks exactly that), so that a capability rip-probe was given does
/// not open another user's ring: the error is the one the open would give
/// without the capability. A path that does not exist is left to the
/// open that follows to report.
pub(crate) fn may_read(path: &std::path::Path) -> Result<()> {
    if rustix::process::getuid().is_root() {
        return Ok(());
    }
    match rustix::fs::access(path, rustix::fs::Access::READ_OK) {
        Ok(()) | Err(Errno::NOENT) => Ok(()),
        Err(_) => Err(Error::Ring(librip::reader::ReadError::PermissionDenied(
            path.to_path_buf(),
        ))),
    }
}

/// Whether our /proc hides other users' processes (`hidepid=` 1, 2,
/// `invisible` or `noaccess`) from a caller that is not root.
pub(crate) fn hides_pids() -> bool {
    if rustix::process::geteuid().is_root() {
        return false;
    }
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    mounts.lines().any(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        f.get(1) == Some(&"/proc")
            && f.get(3).is_some_and(|o| {
                o.split(',')
                    .any(|o| o.starts_with("hidepid=") && o != "hidepid=0" && o != "hidepid=off")
            })
    })
}

/// Whether `path` exists and is a directory (a cheap liveness test).
pub(crate) fn exists(path: impl AsRef<Path>) -> bool {
    path.as_ref().is_dir()
}

/// A thread of process `pid` other than its leader that has not exited,
/// if any: through its /proc entry, a process whose leader exited still
/// shows its memory, maps and executable.
pub(crate) fn live_thread(pid: u32) -> Option<u32> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&tid| tid != pid)
        .find(|&tid| stat(pid, tid).is_some_and(|st| !st.exited()))
}

/// The id whose /proc entry shows process `pid`'s memory, maps and
/// executable: `pid`, or one of its live threads when its leader exited
/// (an exited leader's maps are empty).
pub(crate) fn view_pid(pid: u32) -> u32 {
    match stat(pid, 0) {
        Some(st) if st.exited() => live_thread(pid).unwrap_or(pid),
        _ => pid,
    }
}

/// The true reason a file of process `pid` under /proc (`path`) could not
/// be read with `e`: the process is gone, a zombie, a kernel thread (which
/// has no user space: it `lacks` what was asked), or reading it is not
/// permitted (and why); else the I/O error.
pub(crate) fn unreadable(pid: u32, path: &str, e: std::io::Error, lacks: Lacks) -> Error {
    match stat(pid, 0) {
        None if !exists(format!("/proc/{pid}")) => return Error::NoSuchProcess(pid),
        Some(st) if st.kernel_thread() => {
            return Error::KernelThread {
                pid,
                comm: st.comm,
                lacks,
            };
        }
        Some(st) if st.exited() && live_thread(pid).is_none() => {
            return Error::Zombie { pid, ppid: st.ppid };
        }
        _ => {}
    }
    match e.raw_os_error() {
        Some(libc::EACCES | libc::EPERM) => Error::ProcUnreadable {
            path: path.into(),
            why: denied_reason(pid),
        },
        _ => Error::ReadProc {
            path: path.into(),
            source: e,
        },
    }
}

/// Why reading process `pid`'s files is denied, and what to do.
pub(crate) fn denied_reason(pid: u32) -> Denied {
    if rustix::process::geteuid().is_root() {
        return Denied::AsRoot { pid };
    }
    let owner = read_proc(pid, 0, "status").ok().and_then(|s| {
        let ids = s.lines().find_map(|l| l.strip_prefix("Uid:"))?;
        ids.split_whitespace().next()?.parse().ok()
    });
    Denied::OtherUser {
        pid,
        owner,
        uid: rustix::process::getuid().as_raw(),
    }
}

/// What kind of process a [`Target`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A user process.
    Process,
    /// A kernel thread: no user space, no system call of its own.
    KernelThread,
    /// Its leader thread exited (and is a zombie) while other threads run
    /// on; its memory, maps and executable are read through thread
    /// `live`'s /proc entry (the leader's show none).
    LeaderExited {
        /// A thread that still runs.
        live: u32,
    },
}

/// A live process, pinned by a pidfd.
pub struct Target {
    pid: u32,
    pidfd: OwnedFd,
    start_time: u64,
    comm: String,
    exe: Option<String>,
    kind: Kind,
}

/// Why a target is no longer the process we attached to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lost {
    /// It exited.
    Exited,
    /// It exited and another process now has its pid.
    PidReused,
}

impl Target {
    /// Opens process `pid`, or [`Error::NoSuchProcess`].
    pub fn open(pid: u32) -> Result<Self> {
        let raw = i32::try_from(pid)
            .ok()
            .and_then(Pid::from_raw)
            .ok_or(Error::NoSuchProcess(pid))?;
        // pidfd_open takes our pid namespace's ids; /proc must agree.
        check_proc()?;
        let pidfd = pidfd_open(raw, PidfdFlags::empty()).map_err(|e| match e {
            Errno::SRCH | Errno::INVAL => Error::NoSuchProcess(pid),
            e => Error::OpenPidfd {
                pid,
                source: e.into(),
            },
        })?;
        // Read identity after the pidfd exists: if the pid was reused in
        // between, the start time below belongs to the process the pidfd
        // refers to... unless it exited already, which `lost` reports.
        let st = stat(pid, 0).ok_or(if hides_pids() {
            // pidfd_open found it: /proc hides it from us.
            Error::Hidden(pid)
        } else {
            Error::NoSuchProcess(pid)
        })?;
        let kind = if st.kernel_thread() {
            Kind::KernelThread
        } else if st.exited() {
            // A zombie leader: the process lives on in its other threads,
            // or it is all gone and only waits for its parent's wait().
            match live_thread(pid) {
                Some(live) => Kind::LeaderExited { live },
                None => return Err(Error::Zombie { pid, ppid: st.ppid }),
            }
        } else {
            Kind::Process
        };
        may_observe(pid)?;
        let mut t = Target {
            pid,
            pidfd,
            start_time: st.start_time,
            comm: st.comm,
            exe: None,
            kind,
        };
        t.exe = exe(t.view_pid()).map(|p| p.display().to_string());
        Ok(t)
    }

    /// What kind of process it is (as found when it was opened).
    pub(crate) fn kind(&self) -> Kind {
        self.kind
    }

    /// Fails with [`Error::KernelThread`] for a kernel thread, which
    /// `lacks` what was asked for want of user space.
    pub(crate) fn require_user_space(&self, lacks: Lacks) -> Result<()> {
        match self.kind {
            Kind::KernelThread => Err(Error::KernelThread {
                pid: self.pid,
                comm: self.comm.clone(),
                lacks,
            }),
            _ => Ok(()),
        }
    }

    /// The id whose /proc entry shows the process's memory, maps and
    /// executable: the pid, or a live thread's id when the leader exited
    /// (/proc/PID/maps of an exited leader is empty).
    pub(crate) fn view_pid(&self) -> u32 {
        match self.kind {
            Kind::LeaderExited { live } if exists(format!("/proc/{live}")) => live,
            Kind::LeaderExited { .. } => view_pid(self.pid),
            _ => self.pid,
        }
    }

    /// What the report says about the kind of process, if anything.
    pub(crate) fn kind_note(&self) -> Option<String> {
        match self.kind {
            Kind::Process => None,
            Kind::KernelThread => Some(format!(
                "pid {} ({}) is a kernel thread: it has no user space, so no system call, user \
                 location or user stack; its state and kernel stack are shown",
                self.pid, self.comm
            )),
            Kind::LeaderExited { live } => Some(format!(
                "the leader thread of pid {} has exited (a zombie, shown as exited) while its \
                 other threads run on: their code is read through thread {live}'s maps",
                self.pid
            )),
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Process name.
    pub fn comm(&self) -> &str {
        &self.comm
    }

    /// Executable path, when readable.
    pub fn exe(&self) -> Option<&str> {
        self.exe.as_deref()
    }

    /// Start time in clock ticks since boot (from /proc/PID/stat).
    pub fn start_time(&self) -> u64 {
        self.start_time
    }

    /// `None` while the process we opened is alive; otherwise whether it
    /// exited or its pid now belongs to someone else.
    pub fn lost(&self) -> Option<Lost> {
        if self.wait_exit(std::time::Duration::ZERO) {
            // The pidfd turns readable when the process exits.
            return Some(match stat(self.pid, 0) {
                Some(st) if st.start_time != self.start_time => Lost::PidReused,
                _ => Lost::Exited,
            });
        }
        None
    }

    /// Blocks up to `timeout` or until the process exits; returns whether
    /// it exited.
    pub fn wait_exit(&self, timeout: std::time::Duration) -> bool {
        let mut fds = [PollFd::new(&self.pidfd, PollFlags::IN)];
        let timeout = rustix::time::Timespec::try_from(timeout).unwrap_or(rustix::time::Timespec {
            tv_sec: i64::MAX,
            tv_nsec: 0,
        });
        // The pidfd turns readable when the process exits. EINTR reads as
        // "not yet": the caller loops.
        poll(&mut fds, Some(&timeout)).is_ok_and(|n| n > 0)
            && fds[0].revents().contains(PollFlags::IN)
    }
}

impl Lost {
    /// A sentence for reports.
    pub fn describe(&self, pid: u32) -> String {
        match self {
            Lost::Exited => format!("process {pid} exited during observation"),
            Lost::PidReused => format!(
                "process {pid} exited during observation and its pid was reused; \
                 nothing from the new process is reported"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_proc_is_ours() {
        assert!(check_proc().is_ok());
    }

    #[test]
    fn stat_with_odd_comm() {
        let s = parse_stat(
            "4711 (a) b (c)) S 1 4711 4711 0 -1 4194560 107 0 0 0 0 0 0 0 20 0 1 0 123456 0 0",
        )
        .unwrap();
        assert_eq!(s.comm, "a) b (c)");
        assert_eq!(s.state, 'S');
        assert_eq!(s.start_time, 123456);
        assert!(parse_stat("garbage").is_none());
    }

    #[test]
    fn own_process_is_alive() {
        let t = Target::open(std::process::id()).unwrap();
        assert!(t.lost().is_none());
        assert!(t.start_time() > 0);
        assert!(t.exe().is_some());
    }

    #[test]
    fn missing_process() {
        assert!(matches!(Target::open(0), Err(Error::NoSuchProcess(0))));
        assert!(matches!(
            Target::open(u32::MAX),
            Err(Error::NoSuchProcess(_))
        ));
    }

    #[test]
    fn detects_exit() {
        let mut child = std::process::Command::new("sleep")
            .arg("0.2")
            .spawn()
            .unwrap();
        let t = Target::open(child.id()).unwrap();
        assert!(t.lost().is_none());
        assert!(t.wait_exit(std::time::Duration::from_secs(5)));
        child.wait().unwrap();
        assert!(t.lost().is_some());
    }
}
