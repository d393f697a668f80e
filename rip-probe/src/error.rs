//! Errors a user can act on. Each variant renders as one line that says what
//! is wrong and what to do about it.

use std::path::PathBuf;

/// What went wrong, phrased for the person at the terminal.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Loading BPF needs privileges this process does not have.
    #[error(
        "not permitted to load BPF programs: run as root, or grant CAP_BPF and CAP_PERFMON \
         (`setcap cap_bpf,cap_perfmon+ep <rip-probe>`)"
    )]
    NotPrivileged,
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
    /// The target process does not exist.
    #[error("no process with pid {0}: check the pid with `ps -p {0}`")]
    NoSuchProcess(u32),
    /// A kernel interface answered something we cannot parse.
    #[error("unexpected contents in {path}: {what}")]
    Kernel {
        /// The file that was read.
        path: PathBuf,
        /// What was wrong with it.
        what: String,
    },
    /// An I/O error on a named file.
    #[error("{path}: {source}")]
    Io {
        /// The file involved.
        path: PathBuf,
        /// The underlying error.
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
    /// The BPF loader or verifier refused something.
    #[error("BPF: {0}")]
    Bpf(String),
}

impl Error {
    /// Wraps an I/O error with the path it happened on.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// Maps an aya error to [`Error::NotPrivileged`] when it is EPERM, and to
    /// [`Error::Bpf`] with its full cause chain otherwise. (EACCES is what
    /// the verifier answers to a program it rejects: not a privilege issue.)
    pub fn bpf(context: &str, err: impl std::error::Error) -> Self {
        let mut msg = format!("{context}: {err}");
        let mut src = err.source();
        let mut denied = false;
        while let Some(s) = src {
            msg.push_str(&format!(": {s}"));
            if let Some(io) = s.downcast_ref::<std::io::Error>() {
                denied |= io.raw_os_error() == Some(libc::EPERM);
            }
            src = s.source();
        }
        if denied {
            Error::NotPrivileged
        } else {
            Error::Bpf(msg)
        }
    }
}

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
