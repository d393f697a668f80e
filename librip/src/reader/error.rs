//! The reader's errors: each displays as one line that says what to do.

use std::{fmt, io, path::PathBuf};

/// Why a ring could not be read.
#[derive(Debug)]
pub enum ReadError {
    /// No such file.
    NotFound(PathBuf),
    /// A FIFO, device, directory or socket (or a symlink where none is
    /// followed): never opened for reading.
    NotRegular(PathBuf, &'static str),
    /// Not allowed to read it.
    PermissionDenied(PathBuf),
    /// The file does not start with the ring magic.
    NotARing,
    /// Written by the original header-only librip (no header, fixed
    /// 320-byte slots): read it with [`super::OriginalRing`].
    OriginalFormat,
    /// The magic is not there yet: the ring is being created, or its
    /// creation was interrupted.
    Incomplete,
    /// Written by a newer librip.
    VersionTooNew {
        /// The file's layout version.
        found: u32,
        /// The newest this reader knows.
        supported: u32,
    },
    /// Shorter than its header says.
    Truncated {
        /// Bytes needed.
        needed: u64,
        /// Bytes there.
        len: u64,
    },
    /// Sizes, offsets or counts that contradict each other.
    Inconsistent(String),
    /// No process with this pid.
    NoSuchProcess(u32),
    /// The process maps no ring.
    NoRing(u32),
    /// Another I/O error.
    Io(PathBuf, io::Error),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::NotFound(p) => write!(
                f,
                "{}: no such file: check the path (rings live in /dev/shm/rip-<uid>/ by default)",
                p.display()
            ),
            ReadError::NotRegular(p, what) => write!(
                f,
                "{}: {what}, not a ring file: pass the path of a regular file",
                p.display()
            ),
            ReadError::PermissionDenied(p) => write!(
                f,
                "{}: permission denied: run as the ring's owner or as root",
                p.display()
            ),
            ReadError::NotARing => write!(
                f,
                "not a librip ring file (bad magic): pass a .ring file written by librip"
            ),
            ReadError::OriginalFormat => write!(
                f,
                "a ring of the original header-only librip (no header, 320-byte slots): read it with rip-probe dump FILE [--exe BINARY]"
            ),
            ReadError::Incomplete => write!(
                f,
                "the ring's header is not complete: it is being created (retry) or its creation was interrupted"
            ),
            ReadError::VersionTooNew { found, supported } => write!(
                f,
                "ring layout version {found} is newer than this reader's {supported}: upgrade rip"
            ),
            ReadError::Truncated { needed, len } => write!(
                f,
                "ring file truncated: {len} bytes where {needed} are needed: it was cut short, perhaps while being read (copy it whole, or retry)"
            ),
            ReadError::Inconsistent(why) => write!(
                f,
                "corrupt ring file: {why}: it was damaged or not written by librip, and cannot be read"
            ),
            ReadError::NoSuchProcess(pid) => write!(
                f,
                "no process {pid}: check the pid (it may have exited; read its ring file instead)"
            ),
            ReadError::NoRing(pid) => write!(
                f,
                "process {pid} maps no librip ring: is it built with librip and did it create its ring?"
            ),
            ReadError::Io(p, e) => write!(
                f,
                "cannot read {}: {e}: check the path and that it is a readable file",
                p.display()
            ),
        }
    }
}

impl std::error::Error for ReadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReadError::Io(_, e) => Some(e),
            _ => None,
        }
    }
}

impl ReadError {
    /// Classifies an I/O error on `path`.
    /// An error reading `/proc/PID/maps` (or asking it): the process is
    /// gone ([`ReadError::NoSuchProcess`]), or another.
    pub fn reading_maps(pid: u32, e: io::Error) -> ReadError {
        // ESRCH: the process exited between the open and the read.
        if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH) {
            ReadError::NoSuchProcess(pid)
        } else {
            ReadError::io(PathBuf::from(format!("/proc/{pid}/maps")), e)
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, e: io::Error) -> ReadError {
        let path = path.into();
        match e.kind() {
            io::ErrorKind::NotFound => ReadError::NotFound(path),
            io::ErrorKind::PermissionDenied => ReadError::PermissionDenied(path),
            _ => ReadError::Io(path, e),
        }
    }

    /// Names `path` in an I/O error raised without one (by a source).
    pub(crate) fn at(self, path: &std::path::Path) -> ReadError {
        match self {
            ReadError::Io(p, e) if p.as_os_str().is_empty() => ReadError::io(path, e),
            e => e,
        }
    }

    pub(crate) fn inconsistent(why: impl Into<String>) -> ReadError {
        ReadError::Inconsistent(why.into())
    }
}
