//! Why a process cannot be observed: it is gone, hidden, a zombie, a kernel
//! thread, another user's, or rip-probe runs where it cannot see it.
//! Each variant names the process or file; what the user should do about
//! it is added by the CLI's messages.

use std::path::PathBuf;

/// Why a process, or a file of it, cannot be observed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No process has this pid.
    #[error("no process with pid {0}")]
    NoSuchProcess(u32),
    /// /proc is mounted with hidepid and hides the process.
    #[error("process {0} exists but /proc hides it (mounted with hidepid)")]
    Hidden(u32),
    /// The process has exited and waits for its parent to reap it.
    #[error(
        "process {pid} is a zombie: it has exited and its parent (pid {ppid}) has not reaped it \
         yet, so no thread, memory or binary of it is left to observe"
    )]
    Zombie {
        /// The process.
        pid: u32,
        /// Its parent, which should wait() for it.
        ppid: u32,
    },
    /// The process is a kernel thread: what was asked needs user space.
    #[error("process {pid} ({comm}) is a kernel thread: it has no user space, so {lacks}")]
    KernelThread {
        /// The kernel thread.
        pid: u32,
        /// Its name.
        comm: String,
        /// What it lacks for what was asked.
        lacks: Lacks,
    },
    /// A file of the process under /proc exists but may not be read.
    #[error("cannot read {path}: {why}")]
    ProcUnreadable {
        /// The file, e.g. /proc/4711/maps.
        path: PathBuf,
        /// Why the kernel refused.
        why: Denied,
    },
    /// A file of the process under /proc could not be read.
    #[error("{path}")]
    ReadProc {
        /// The file, e.g. /proc/4711/maps.
        path: PathBuf,
        /// The kernel's answer.
        #[source]
        source: std::io::Error,
    },
    /// pidfd_open failed for a reason other than the process being gone.
    #[error("pidfd_open({pid})")]
    OpenPidfd {
        /// The process.
        pid: u32,
        /// The kernel's answer.
        #[source]
        source: std::io::Error,
    },
    /// The process maps no librip ring.
    #[error("process {0} maps no librip ring")]
    NoRing(u32),
    /// A ring file of the process may not be read by the user running
    /// rip-probe (librip's reader's error, so that it reads as the open's).
    #[error("{0}")]
    Ring(librip::reader::ReadError),
    /// rip-probe runs in a user namespace other than the host's.
    #[error("rip-probe runs in user namespace user:[{0}], not the host's")]
    UserNamespace(u64),
    /// rip-probe runs in a pid namespace other than the host's and the
    /// /proc it sees numbers processes in another one.
    #[error("rip-probe runs in pid namespace pid:[{0}] but /proc belongs to another pid namespace")]
    ProcOfAnotherPidNamespace(u64),
    /// rip-probe runs in a pid namespace other than the host's and BPF
    /// finds no process with that pid there.
    #[error("process {pid} is not in rip-probe's pid namespace pid:[{ns}] as BPF sees it")]
    NotInOurPidNamespace {
        /// The pid asked for, in rip-probe's namespace.
        pid: u32,
        /// rip-probe's pid namespace (its inode).
        ns: u64,
    },
    /// rip-probe runs set-user-ID or set-group-ID.
    #[error(
        "rip-probe runs set-user-ID or set-group-ID (user {ruid}, effective user {euid}; group \
         {rgid}, effective group {egid})"
    )]
    SetId {
        /// The real user.
        ruid: u32,
        /// The effective user.
        euid: u32,
        /// The real group.
        rgid: u32,
        /// The effective group.
        egid: u32,
    },
    /// rip-probe runs for a user other than root (with capabilities) and
    /// the process is not that user's to observe.
    #[error("process {pid} {why}, and rip-probe runs for user {uid}")]
    NotYours {
        /// The process.
        pid: u32,
        /// Why the user may not observe it.
        why: NotYoursBecause,
        /// The real user running rip-probe.
        uid: u32,
    },
}

/// What a kernel thread lacks, having no user space, for what was asked
/// of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Lacks {
    /// Memory maps, for anything read from them.
    #[error("it maps nothing")]
    Maps,
    /// A ring, for `dump`.
    #[error("it maps no ring")]
    Ring,
    /// Functions, for timing calls.
    #[error("it has no functions to probe")]
    Functions,
    /// Functions, for the session's uprobe.
    #[error("it has no functions for a uprobe to probe")]
    UprobeFunctions,
}

/// Why the kernel refuses to let rip-probe read a process's files.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    /// rip-probe is root and still refused.
    #[error(
        "permission denied although rip-probe runs as root: the kernel does not let it \
         inspect process {pid} (it lacks CAP_SYS_PTRACE over it, a security module forbids \
         it, or the process belongs to a user namespace rip-probe's capabilities do not reach)"
    )]
    AsRoot {
        /// The process.
        pid: u32,
    },
    /// The process belongs to another user.
    #[error(
        "permission denied: process {pid} belongs to {} and rip-probe runs as uid {uid}; \
         run it as root or as that user",
        owner.map_or_else(|| "another user".to_string(), |u| format!("uid {u}"))
    )]
    OtherUser {
        /// The process.
        pid: u32,
        /// Its owner, when /proc says.
        owner: Option<u32>,
        /// The real user running rip-probe.
        uid: u32,
    },
    /// A file the process shares (maybe its ring) that rip-probe may not
    /// open.
    #[error(
        "it is a file process {pid} shares (maybe its ring) that rip-probe may not open: {denied}"
    )]
    SharedFile {
        /// The process.
        pid: u32,
        /// Why opening it is refused.
        denied: Box<Denied>,
    },
}

/// Why a user with capabilities may not observe a process (the rules
/// `ptrace_may_access` applies).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotYoursBecause {
    /// Its user ids are not all the user's.
    #[error("runs as user {}", owner.map_or_else(|| "unknown".to_string(), |u| u.to_string()))]
    User {
        /// Its real user, when /proc says.
        owner: Option<u32>,
    },
    /// Its group ids are not all the user's group.
    #[error("runs with group ids {gids:?}, not only group {gid}")]
    Groups {
        /// Its real, effective and saved groups.
        gids: Vec<u32>,
        /// The user's group.
        gid: u32,
    },
    /// It is not dumpable.
    #[error("is not dumpable (it changed privileges or cleared PR_SET_DUMPABLE)")]
    NotDumpable,
}

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
