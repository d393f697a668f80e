//! What can fail when observing the kernel: privileges, the kernel's own
//! interfaces (tracefs, BTF, BPF features), loading and attaching
//! rip-ebpf's programs, reading their maps, and finding the functions a
//! uprobe is asked for. Each variant names the operation and its object;
//! the CLI's messages add what the user should do (and which flag).

use std::path::PathBuf;

/// What was being done to a BPF program (or its link) when it failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgramOp {
    /// Looking it up in the embedded object.
    Find,
    /// Loading it (the verifier may refuse it).
    Load,
    /// Attaching it.
    Attach,
    /// Detaching it.
    Detach,
    /// Taking its link (to hold the attachment as a file).
    TakeLink,
}

impl std::fmt::Display for ProgramOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ProgramOp::Find => "finding program",
            ProgramOp::Load => "loading",
            ProgramOp::Attach => "attaching",
            ProgramOp::Detach => "detaching",
            ProgramOp::TakeLink => "taking",
        })
    }
}

/// What was being done to a BPF map when it failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapOp {
    /// Opening it as the kind of map it should be.
    Open,
    /// Filling it with entries.
    Fill,
    /// Setting one of its values.
    Set,
    /// Reading it.
    Read,
}

impl std::fmt::Display for MapOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MapOp::Open => "opening",
            MapOp::Fill => "filling",
            MapOp::Set => "setting",
            MapOp::Read => "reading",
        })
    }
}

/// Why the kernel could not be observed as asked.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Loading BPF needs privileges this process does not have.
    #[error("not permitted to load BPF programs")]
    NotPrivileged,
    /// rip-probe's capabilities could not be read.
    #[error("capget")]
    Capabilities(#[source] std::io::Error),
    /// tracefs is not mounted and could not be mounted.
    #[error("tracefs is not mounted")]
    TracefsMissing,
    /// tracefs (where the tracepoints' ids and record layouts are) is
    /// root's, and rip-probe runs for another user without
    /// CAP_DAC_READ_SEARCH.
    #[error("permission denied reading {0} (tracefs is root's: mode 0700, its files 0440)")]
    TracefsDenied(PathBuf),
    /// The kernel refused a uprobe (EACCES from `perf_event_open`) and
    /// rip-probe lacks CAP_SYS_ADMIN: the kernel's uprobe events want it,
    /// CAP_BPF and CAP_PERFMON do not do.
    #[error("the kernel refused a uprobe (attaching {program})")]
    UprobeNeedsSysAdmin {
        /// The attachment, e.g. `a uprobe to malloc`.
        program: String,
    },
    /// The kernel exposes no BTF.
    #[error("the kernel has no BTF (/sys/kernel/btf/vmlinux is missing)")]
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
        missing: &'static str,
        /// The oldest kernel that has everything.
        minimum: &'static str,
    },
    /// A kernel file (tracefs, BTF) could not be read.
    #[error("{path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The kernel's answer.
        #[source]
        source: std::io::Error,
    },
    /// A kernel file (a tracepoint's format, BTF) says something rip-probe
    /// cannot use.
    #[error("unexpected contents in {path}: {what}")]
    Unexpected {
        /// The file that was read.
        path: PathBuf,
        /// What was wrong with it.
        what: String,
    },
    /// Loading rip-ebpf's object (its maps, BTF and relocations) failed.
    #[error("BPF: loading rip-ebpf")]
    LoadObject(#[source] aya::EbpfError),
    /// A program could not be found, loaded (the verifier refused it),
    /// attached or detached.
    #[error("BPF: {op} {program}")]
    Program {
        /// What was being done.
        op: ProgramOp,
        /// The program or attachment, e.g. `sched:sched_switch`.
        program: String,
        /// aya's error.
        #[source]
        source: aya::programs::ProgramError,
    },
    /// A map of the programs could not be opened, read or written.
    #[error("BPF: {op} {map}")]
    Map {
        /// What was being done.
        op: MapOp,
        /// The map, e.g. `THREADS`.
        map: String,
        /// aya's error.
        #[source]
        source: aya::maps::MapError,
    },
    /// A whole map could not be read or written in batches.
    #[error("BPF: {op} {map}")]
    MapBatch {
        /// What was being done.
        op: MapOp,
        /// The map.
        map: String,
        /// The kernel's answer.
        #[source]
        source: std::io::Error,
    },
    /// The task iterator's link could not be turned into a file.
    #[error("BPF: creating the task iterator")]
    IteratorLink(#[source] aya::programs::links::LinkError),
    /// The task iterator could not be read.
    #[error("BPF task iterator")]
    ReadIterator(#[source] std::io::Error),
    /// The events ring buffer could not be polled.
    #[error("EVENTS ring buffer")]
    PollEvents(#[source] std::io::Error),
    /// The embedded object lacks a program or map rip-probe looks for (a
    /// build mismatch).
    #[error("BPF: {0} is missing from the embedded BPF object")]
    MissingFromObject(String),
    /// The process maps no library whose name holds `lib`.
    #[error("{spec}: pid {pid} maps no library matching `{lib}`")]
    NoSuchLibrary {
        /// The probe's specification, as asked (shortened).
        spec: String,
        /// The process.
        pid: u32,
        /// The library part of the specification (shortened).
        lib: String,
    },
    /// The library is mapped but cannot be opened from rip-probe's mount
    /// namespace nor through /proc.
    #[error("{spec}: {} cannot be opened from here", binary.display())]
    Unreachable {
        /// The probe's specification (shortened).
        spec: String,
        /// The library as the process maps it.
        binary: PathBuf,
    },
    /// The function pattern is not a glob.
    #[error("{spec}: bad pattern")]
    BadPattern {
        /// The probe's specification (shortened).
        spec: String,
        /// glob's error.
        #[source]
        source: glob::PatternError,
    },
    /// The binary's symbol tables could not be read.
    #[error("cannot read {}: {why}", binary.display())]
    Symbols {
        /// The binary as the process maps it.
        binary: PathBuf,
        /// The symbol reader's explanation.
        why: String,
    },
    /// No function of the binary matches the pattern.
    #[error(
        "{spec}: no function in {} matches `{pattern}`{}",
        binary.display(),
        if near.is_empty() { String::new() } else { format!(" (near: {})", near.join(", ")) }
    )]
    NoMatch {
        /// The probe's specification (shortened).
        spec: String,
        /// The binary as the process maps it.
        binary: PathBuf,
        /// The function pattern (shortened).
        pattern: String,
        /// The nearest function names, for a typo.
        near: Vec<String>,
    },
    /// More functions match than uprobes are attached at once.
    #[error("{spec}: {count} functions match (at most {max})")]
    TooManyMatches {
        /// The probe's specification (shortened).
        spec: String,
        /// How many match.
        count: usize,
        /// The most that are probed.
        max: usize,
    },
    /// More functions than a kernel without `uprobe_multi` links takes
    /// one uprobe at a time: each costs the kernel a grace period to
    /// detach, one after the other, and all of them must detach within
    /// a bound. None was attached.
    #[error("{}", one_by_one(*count, what, *max, *each, why))]
    TooManyOneByOne {
        /// How many functions.
        count: usize,
        /// `uprobe` or `uretprobe`.
        what: &'static str,
        /// The most attached one by one.
        max: usize,
        /// What detaching one took, measured on this kernel (`None`: the
        /// most was set by `RIP_PROBE_ONE_BY_ONE_MAX`).
        each: Option<std::time::Duration>,
        /// Why the kernel took no `uprobe_multi` link.
        why: String,
    },
    /// A signal (Ctrl-C) stopped attaching uprobes one by one; the ones
    /// attached were detached.
    #[error(
        "{signal} while attaching {what}s one by one: stopped after {attached} of {count}, and detached them"
    )]
    Interrupted {
        /// `SIGINT` or `SIGTERM`.
        signal: &'static str,
        /// `uprobe` or `uretprobe`.
        what: &'static str,
        /// How many were attached when it came.
        attached: usize,
        /// How many were to be.
        count: usize,
    },
    /// More functions match than can be timed at once.
    #[error("{count} functions match, at most {max} can be timed at once")]
    TooManyToTime {
        /// How many match.
        count: usize,
        /// The most that are timed.
        max: u32,
    },
    /// A function's binary is no longer mapped executable in the process.
    #[error("{} is not mapped executable in pid {pid}: cannot probe {function}", binary.display())]
    NotMappedExecutable {
        /// The binary as the process maps it.
        binary: PathBuf,
        /// The process.
        pid: u32,
        /// The function.
        function: String,
    },
}

impl Error {
    /// A program operation's error, or [`Error::NotPrivileged`] when the
    /// kernel answered EPERM (EACCES is what the verifier answers to a
    /// program it rejects: not a privilege issue).
    pub(crate) fn program(
        op: ProgramOp,
        program: impl Into<String>,
        source: aya::programs::ProgramError,
    ) -> Self {
        Self::unless_denied(Error::Program {
            op,
            program: program.into(),
            source,
        })
    }

    /// A map operation's error, or [`Error::NotPrivileged`] on EPERM.
    pub(crate) fn map(op: MapOp, map: impl Into<String>, source: aya::maps::MapError) -> Self {
        Self::unless_denied(Error::Map {
            op,
            map: map.into(),
            source,
        })
    }

    /// A batch map operation's error, or [`Error::NotPrivileged`] on EPERM.
    pub(crate) fn map_batch(op: MapOp, map: impl Into<String>, source: std::io::Error) -> Self {
        Self::unless_denied(Error::MapBatch {
            op,
            map: map.into(),
            source,
        })
    }

    /// An object load's error, or [`Error::NotPrivileged`] on EPERM.
    pub(crate) fn load(source: aya::EbpfError) -> Self {
        Self::unless_denied(Error::LoadObject(source))
    }

    fn unless_denied(e: Error) -> Self {
        let denied = crate::util::chain(&e).any(|s| {
            s.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.raw_os_error() == Some(rustix::io::Errno::PERM.raw_os_error()))
        });
        if denied { Error::NotPrivileged } else { e }
    }
}

/// [`Error::TooManyOneByOne`]'s text: how long detaching would take, the
/// bound, and that nothing was attached.
fn one_by_one(
    count: usize,
    what: &str,
    max: usize,
    each: Option<std::time::Duration>,
    why: &str,
) -> String {
    use crate::util::timefmt::duration;
    let cost = match each {
        Some(each) => {
            let total = each.saturating_mul(count.try_into().unwrap_or(u32::MAX));
            format!(
                "would take about {} to detach on this kernel ({} each, measured; at most {max} in {})",
                duration(total.as_nanos() as u64),
                duration(each.as_nanos() as u64),
                duration(super::uprobe::DETACH_BUDGET.as_nanos() as u64),
            )
        }
        None => format!("are more than RIP_PROBE_ONE_BY_ONE_MAX={max}"),
    };
    format!("{count} {what}s one by one {cost}, so none was attached ({why})")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_map_error_names_the_operation_and_the_map() {
        let e = Error::map(
            MapOp::Read,
            "THREADS",
            aya::maps::MapError::SyscallError(aya::sys::SyscallError {
                call: "bpf_map_lookup_elem",
                io_error: std::io::Error::from_raw_os_error(22),
            }),
        );
        assert!(matches!(e, Error::Map { op: MapOp::Read, ref map, .. } if map == "THREADS"));
        assert_eq!(e.to_string(), "BPF: reading THREADS");
    }

    #[test]
    fn eperm_anywhere_in_the_chain_is_a_missing_privilege() {
        let e = Error::map(
            MapOp::Fill,
            "THREADS",
            aya::maps::MapError::SyscallError(aya::sys::SyscallError {
                call: "bpf_map_update_elem",
                io_error: std::io::Error::from_raw_os_error(1),
            }),
        );
        assert!(matches!(e, Error::NotPrivileged));
    }
}
