//! Errors a user can act on. Each variant renders as one line that says what
//! is wrong and what to do about it.

use std::path::PathBuf;

/// What went wrong, phrased for the person at the terminal.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Loading BPF needs privileges this process does not have.
    #[error(
        "not permitted to load BPF programs: run as root, or grant CAP_BPF, CAP_PERFMON and \
         CAP_DAC_READ_SEARCH (`setcap cap_bpf,cap_perfmon,cap_dac_read_search+ep <rip-probe>`; \
         for one run, as root: `setpriv --reuid=USER --init-groups \
         --inh-caps=+bpf,+perfmon,+dac_read_search \
         --ambient-caps=+bpf,+perfmon,+dac_read_search rip-probe …`)"
    )]
    NotPrivileged,
    /// tracefs (where the tracepoints' ids and record layouts are) is
    /// root's, and rip-probe runs for another user without
    /// CAP_DAC_READ_SEARCH.
    #[error(
        "permission denied reading {0} (tracefs is root's: mode 0700, its files 0440): grant \
         CAP_DAC_READ_SEARCH beside CAP_BPF and CAP_PERFMON \
         (`setcap cap_bpf,cap_perfmon,cap_dac_read_search+ep <rip-probe>`), or run as root"
    )]
    TracefsDenied(PathBuf),
    /// The kernel refused a uprobe (`--uprobe`, `calls`) and rip-probe
    /// lacks CAP_SYS_ADMIN: the kernel's uprobe events want it, CAP_PERFMON
    /// does not do.
    #[error(
        "the kernel refused a uprobe ({0}): uprobes (--uprobe, calls) need CAP_SYS_ADMIN, \
         which CAP_BPF and CAP_PERFMON do not replace; run as root, or grant it too \
         (`setcap cap_bpf,cap_perfmon,cap_dac_read_search,cap_sys_admin+ep <rip-probe>`)"
    )]
    UprobeNeedsSysAdmin(String),
    /// tracefs is not mounted and we could not mount it.
    #[error("tracefs is not mounted: run `mount -t tracefs nodev /sys/kernel/tracing` as root")]
    TracefsMissing,
    /// The kernel exposes no BTF.
    #[error(
        "the kernel has no BTF (/sys/kernel/btf/vmlinux is missing): \
         use a kernel built with CONFIG_DEBUG_INFO_BTF=y"
    )]
    NoBtf,
    /// The kernel lacks a BPF feature rip's design rests on.
    #[error(
        "this kernel ({release}) lacks {missing}: rip-probe needs Linux {minimum} or later, \
         built with CONFIG_BPF_SYSCALL, CONFIG_BPF_EVENTS and CONFIG_DEBUG_INFO_BTF"
    )]
    KernelTooOld {
        /// The running kernel, as `uname -r` prints it.
        release: String,
        /// The missing feature.
        missing: String,
        /// The oldest kernel that has everything.
        minimum: &'static str,
    },
    /// rip-probe runs in a user namespace other than the host's: its
    /// capabilities do not reach the kernel's BPF nor other namespaces'
    /// processes.
    #[error(
        "rip-probe runs in user namespace user:[{0}], not the host's: loading BPF and reading other \
         processes' /proc/PID/map_files and /proc/PID/root need CAP_BPF, CAP_PERFMON and \
         CAP_SYS_ADMIN in the host's user namespace; run it on the host or in a privileged \
         container (docker run --privileged)"
    )]
    UserNamespace(u64),
    /// rip-probe runs in a pid namespace other than the host's, and the
    /// /proc it sees numbers processes in another namespace: pids given
    /// to it, and read from /proc, cannot be matched with BPF's.
    #[error(
        "rip-probe runs in pid namespace pid:[{0}] but /proc belongs to another pid namespace: \
         mount a /proc for it (unshare --pid --fork --mount-proc, or `mount -t proc proc /proc` \
         in a mount namespace of its own), or run it in the host's pid namespace"
    )]
    ProcOfAnotherPidNamespace(u64),
    /// rip-probe runs in a pid namespace other than the host's and BPF
    /// finds no process with that pid there.
    #[error(
        "process {pid} is not in rip-probe's pid namespace pid:[{ns}] as BPF sees it: give the \
         pid as `ps` shows it in this namespace, or run rip-probe in the target's pid namespace \
         (kubectl debug --target=CONTAINER, docker run --pid=container:X) or the host's"
    )]
    NotInOurPidNamespace {
        /// The pid asked for, in rip-probe's namespace.
        pid: u32,
        /// rip-probe's pid namespace (its inode).
        ns: u64,
    },
    /// /proc is mounted with hidepid and hides the target.
    #[error(
        "process {0} exists but /proc hides it (mounted with hidepid): run as root, or mount \
         /proc with hidepid=0 (or gid=GROUP for a group you are in)"
    )]
    Hidden(u32),
    /// The target process does not exist.
    #[error("no process with pid {0}: check the pid with `ps -p {0}`")]
    NoSuchProcess(u32),
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
    #[error(
        "process {pid} ({comm}) is a kernel thread: it has no user space, so {what}; \
         `rip-probe --pid {pid}` shows its kernel state and stack"
    )]
    KernelThread {
        /// The kernel thread.
        pid: u32,
        /// Its name.
        comm: String,
        /// What cannot be done, e.g. "it has no functions to probe".
        what: &'static str,
    },
    /// A file of a process under /proc exists but may not be read.
    #[error("cannot read {path}: {why}")]
    ProcUnreadable {
        /// The file, e.g. /proc/4711/maps.
        path: String,
        /// Why, and what to do.
        why: String,
    },
    /// A kernel interface answered something we cannot parse.
    #[error("unexpected contents in {path}: {what}")]
    Kernel {
        /// The file that was read.
        path: PathBuf,
        /// What was wrong with it.
        what: String,
    },
    /// An I/O error on a named file.
    #[error("{path}")]
    Io {
        /// The file involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// `--help` or `--version` was asked for: the text to print.
    #[error("{0}")]
    Help(String),
    /// The process has no ring file mapped.
    #[error(
        "process {0} maps no librip ring: it must link librip and create a ring \
         (rip_create_ring / librip::Ring::create); `rip-probe --pid {0}` still shows kernel state"
    )]
    NoRing(u32),
    /// A ring file could not be read (librip's reader says why and what to do).
    #[error("{0}")]
    Ring(librip::reader::ReadError),
    /// The command line asks for something that cannot be done; the message
    /// says what to change.
    #[error("{0}")]
    Usage(String),
    /// The command line did not parse: clap's whole message (what is wrong,
    /// the near spelling, the usage line, which `--help` to read), printed
    /// as clap tools print it, on several lines.
    #[error("{0}")]
    Args(String),
    /// Loading rip-ebpf's object (its maps, BTF and relocations) failed.
    #[error("BPF: loading rip-ebpf")]
    LoadObject(#[source] aya::EbpfError),
    /// A program could not be loaded (the verifier refused it), attached or
    /// detached; `op` names which and what.
    #[error("BPF: {op}")]
    Program {
        /// The operation, e.g. `attaching sched:sched_switch`.
        op: String,
        /// aya's error.
        #[source]
        source: aya::programs::ProgramError,
    },
    /// A map of the programs could not be opened, read or written.
    #[error("BPF: {op}")]
    Map {
        /// The operation, e.g. `seeding THREADS`.
        op: String,
        /// aya's error.
        #[source]
        source: aya::maps::MapError,
    },
    /// A whole map could not be read or written in batches.
    #[error("BPF: {op}")]
    MapBatch {
        /// The operation, e.g. `seeding THREADS`.
        op: String,
        /// The kernel's answer.
        #[source]
        source: std::io::Error,
    },
    /// A link (an attachment) could not be turned into what was asked of it.
    #[error("BPF: {op}")]
    Link {
        /// The operation, e.g. `creating the task iterator`.
        op: String,
        /// aya's error.
        #[source]
        source: aya::programs::links::LinkError,
    },
    /// The kernel's BTF could not be parsed (the task iterator needs it).
    #[error("BPF: reading kernel BTF")]
    KernelBtf(#[source] aya::BtfError),
    /// The kernel's BTF parse is gone: it failed or panicked before.
    #[error("BPF: the kernel BTF parse did not finish ({0})")]
    KernelBtfLost(&'static str),
    /// The embedded object lacks a program or map rip-probe looks for (a
    /// build mismatch).
    #[error("BPF: {0} is missing from the embedded BPF object")]
    MissingFromObject(String),
    /// rip-probe runs set-user-ID or set-group-ID: whoever starts it would
    /// get root's reach (other users' memory, files written as root).
    #[error(
        "rip-probe runs set-user-ID or set-group-ID (user {ruid}, effective user {euid}; group \
         {rgid}, effective group {egid}): remove the bit (chmod u-s,g-s) and grant capabilities \
         instead (`setcap cap_bpf,cap_perfmon,cap_dac_read_search+ep <rip-probe>`), or run it \
         as root"
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
    /// the process is not that user's to observe: the kernel would not let
    /// the user ptrace it.
    #[error(
        "process {pid} {why}, and rip-probe runs for user {uid}: with capabilities it observes \
         only what that user may ptrace; run it as root (sudo) to observe this process"
    )]
    NotYours {
        /// The process.
        pid: u32,
        /// Why the user may not observe it.
        why: String,
        /// The real user running rip-probe.
        uid: u32,
    },
}

impl Error {
    /// Wraps an I/O error with the path it happened on.
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// A program operation's error, or [`Error::NotPrivileged`] when the
    /// kernel answered EPERM (EACCES is what the verifier answers to a
    /// program it rejects: not a privilege issue).
    pub(crate) fn program(op: impl Into<String>, source: aya::programs::ProgramError) -> Self {
        Self::unless_denied(Error::Program {
            op: op.into(),
            source,
        })
    }

    /// A map operation's error, or [`Error::NotPrivileged`] on EPERM.
    pub(crate) fn map(op: impl Into<String>, source: aya::maps::MapError) -> Self {
        Self::unless_denied(Error::Map {
            op: op.into(),
            source,
        })
    }

    /// A batch map operation's error, or [`Error::NotPrivileged`] on EPERM.
    pub(crate) fn map_batch(op: impl Into<String>, source: std::io::Error) -> Self {
        Self::unless_denied(Error::MapBatch {
            op: op.into(),
            source,
        })
    }

    /// An object load's error, or [`Error::NotPrivileged`] on EPERM.
    pub(crate) fn load(source: aya::EbpfError) -> Self {
        Self::unless_denied(Error::LoadObject(source))
    }

    fn unless_denied(e: Error) -> Self {
        let denied = Chain::new(&e).any(|s| {
            s.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.raw_os_error() == Some(rustix::io::Errno::PERM.raw_os_error()))
        });
        if denied { Error::NotPrivileged } else { e }
    }

    /// Whether this is a write to stdout that failed because its reader
    /// went away (`rip-probe … | head -1`): the end of the output, not a
    /// failure.
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, Error::Io { path, source }
            if path.as_os_str() == "stdout" && source.kind() == std::io::ErrorKind::BrokenPipe)
    }

    /// The error and its causes on one line, `: `-separated: what the CLI
    /// prints.
    pub fn one_line(&self) -> String {
        let mut s = String::new();
        for (i, e) in Chain::new(self).enumerate() {
            if i > 0 {
                s.push_str(": ");
            }
            s.push_str(&e.to_string());
        }
        s.replace('\n', " ")
    }
}

/// An error followed by its sources.
struct Chain<'a>(Option<&'a (dyn std::error::Error + 'static)>);

impl<'a> Chain<'a> {
    fn new(e: &'a (dyn std::error::Error + 'static)) -> Self {
        Chain(Some(e))
    }
}

impl<'a> Iterator for Chain<'a> {
    type Item = &'a (dyn std::error::Error + 'static);
    fn next(&mut self) -> Option<Self::Item> {
        let e = self.0?;
        self.0 = e.source();
        Some(e)
    }
}

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chain_is_one_line_with_each_cause() {
        let e = Error::io(
            "/sys/kernel/btf/vmlinux",
            std::io::Error::new(std::io::ErrorKind::NotFound, "gone"),
        );
        assert_eq!(e.one_line(), "/sys/kernel/btf/vmlinux: gone");
        let e = Error::map(
            "reading THREADS",
            aya::maps::MapError::SyscallError(aya::sys::SyscallError {
                call: "bpf_map_lookup_elem",
                io_error: std::io::Error::from_raw_os_error(22),
            }),
        );
        let line = e.one_line();
        assert!(line.starts_with("BPF: reading THREADS: "), "{line}");
        assert!(line.contains("bpf_map_lookup_elem"), "{line}");
        assert!(!line.contains('\n'));
    }

    #[test]
    fn eperm_anywhere_in_the_chain_says_how_to_get_privileges() {
        let e = Error::map(
            "seeding THREADS",
            aya::maps::MapError::SyscallError(aya::sys::SyscallError {
                call: "bpf_map_update_elem",
                io_error: std::io::Error::from_raw_os_error(1),
            }),
        );
        assert!(matches!(e, Error::NotPrivileged));
        assert!(e.one_line().contains("run as root"));
    }
}
