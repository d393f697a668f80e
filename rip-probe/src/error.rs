//! The error of rip-probe's library and CLI: one of the stages' typed
//! errors (discover, collect's kernel and cgroups, librip's ring reader),
//! an I/O error on a named file, or a command line that cannot be done.
//! The CLI's one-line messages, with what to do and the flags involved,
//! are made from it in `cli::messages`.

use std::path::PathBuf;

use crate::{
    collect::{self, cgroup, kernel},
    discover,
};

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The process cannot be observed (gone, hidden, a zombie, a kernel
    /// thread, another user's, in another namespace).
    #[error(transparent)]
    Discover(discover::Error),
    /// The kernel cannot be observed as asked (privileges, tracefs, BTF,
    /// BPF programs and maps, uprobes).
    #[error(transparent)]
    Kernel(kernel::Error),
    /// A cgroup's processes cannot be listed.
    #[error(transparent)]
    Cgroup(cgroup::Error),
    /// A ring file could not be read (librip's reader says why and what
    /// to do, its cause included).
    #[error("{0}")]
    Ring(librip::reader::ReadError),
    /// An I/O error on a named file (or `stdout`).
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
    /// The command line asks for something that cannot be done; the message
    /// says what to change.
    #[error("{0}")]
    Usage(String),
    /// The command line did not parse: clap's whole message (what is wrong,
    /// the near spelling, the usage line, which `--help` to read), printed
    /// as clap tools print it, on several lines.
    #[error("{0}")]
    Args(String),
}

impl From<discover::Error> for Error {
    fn from(e: discover::Error) -> Self {
        match e {
            // The permission check that stands for a ring's open reads as
            // the open's error.
            discover::Error::Ring(r) => Error::Ring(r),
            e => Error::Discover(e),
        }
    }
}

impl From<kernel::Error> for Error {
    fn from(e: kernel::Error) -> Self {
        Error::Kernel(e)
    }
}

impl From<cgroup::Error> for Error {
    fn from(e: cgroup::Error) -> Self {
        Error::Cgroup(e)
    }
}

impl From<librip::reader::ReadError> for Error {
    fn from(e: librip::reader::ReadError) -> Self {
        Error::Ring(e)
    }
}

impl From<collect::Error> for Error {
    fn from(e: collect::Error) -> Self {
        match e {
            collect::Error::Discover(e) => e.into(),
            collect::Error::Kernel(e) => e.into(),
            collect::Error::Ring(e) => e.into(),
        }
    }
}

impl Error {
    /// Wraps an I/O error with the path it happened on.
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// Whether this is a write to stdout that failed because its reader
    /// went away (`rip-probe … | head -1`): the end of the output, not a
    /// failure.
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, Error::Io { path, source }
            if path.as_os_str() == "stdout" && source.kind() == std::io::ErrorKind::BrokenPipe)
    }

    /// The error and its causes on one line, `: `-separated, without the
    /// CLI's advice (the CLI's message adds what to do).
    pub fn one_line(&self) -> String {
        let parts: Vec<String> = crate::util::chain(self).map(|e| e.to_string()).collect();
        parts.join(": ").replace('\n', " ")
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
        let e = Error::from(kernel::Error::map(
            kernel::MapOp::Read,
            "THREADS",
            aya::maps::MapError::SyscallError(aya::sys::SyscallError {
                call: "bpf_map_lookup_elem",
                io_error: std::io::Error::from_raw_os_error(22),
            }),
        ));
        let line = e.one_line();
        assert!(line.starts_with("BPF: reading THREADS: "), "{line}");
        assert!(line.contains("bpf_map_lookup_elem"), "{line}");
        assert!(!line.contains('\n'));
    }

    #[test]
    fn collect_errors_flatten_to_the_stage_that_raised_them() {
        let e = Error::from(collect::Error::from(discover::Error::NoSuchProcess(7)));
        assert!(matches!(
            e,
            Error::Discover(discover::Error::NoSuchProcess(7))
        ));
        let denied = librip::reader::ReadError::PermissionDenied("/dev/shm/x".into());
        let e = Error::from(collect::Error::from(discover::Error::Ring(denied)));
        assert!(matches!(
            e,
            Error::Ring(librip::reader::ReadError::PermissionDenied(_))
        ));
    }
}
