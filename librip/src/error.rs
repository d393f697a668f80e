//! The writer's errors: each displays as one line that says what to do.

use std::{fmt, io, path::PathBuf};

use crate::format::SlotKind;

/// Why a ring could not be created or a slot taken.
#[derive(Debug)]
pub enum Error {
    /// Something already exists at the ring's path.
    Exists(PathBuf),
    /// The path, its directory or the file is not what librip may safely use.
    Unsafe {
        /// The offending path.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A system call failed.
    Io {
        /// What librip was doing.
        what: &'static str,
        /// The file or directory involved.
        path: PathBuf,
        /// The error.
        err: io::Error,
    },
    /// The filesystem holding the ring is full.
    NoSpace(PathBuf),
    /// This process already has a ring (librip keeps one per process).
    AlreadyCreated(PathBuf),
    /// No ring exists (or it belongs to the parent of a fork).
    NoRing,
    /// Every slot of a kind is taken.
    SlotsFull {
        /// Which kind.
        kind: SlotKind,
        /// How many there are.
        capacity: u32,
    },
    /// A live coroutine already has this id.
    IdInUse(u64),
    /// Unusable options.
    BadOptions(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Exists(p) => write!(
                f,
                "{} already exists (it may hold a crashed run's snaps): move it away, or pick another path",
                p.display()
            ),
            Error::Unsafe { path, reason } => {
                write!(f, "refusing to use {}: {reason}", path.display())
            }
            Error::Io { what, path, err } => {
                let hint = match err.kind() {
                    std::io::ErrorKind::NotFound => ": create the directory or fix the path",
                    std::io::ErrorKind::PermissionDenied => {
                        ": check the directory's owner and mode"
                    }
                    _ => "",
                };
                write!(f, "cannot {what} {}: {err}{hint}", path.display())
            }
            Error::NoSpace(p) => write!(
                f,
                "no space left for {}: enlarge its tmpfs (mount -o remount,size=...) or free space there",
                p.display()
            ),
            Error::AlreadyCreated(p) => write!(
                f,
                "this process already records into {} (one ring per process): use Ring::get()",
                p.display()
            ),
            Error::NoRing => write!(
                f,
                "no ring in this process: create one first with Ring::create (C: rip_create_ring)"
            ),
            Error::SlotsFull { kind, capacity } => write!(
                f,
                "all {capacity} {} slots are taken: create the ring with more; until then these snaps go to the sink (counted as dropped)",
                match kind {
                    SlotKind::Thread => "thread",
                    SlotKind::Coroutine => "coroutine",
                }
            ),
            Error::IdInUse(id) => write!(
                f,
                "coroutine id {id} is already live: end that coroutine first, or pass 0 for a fresh id"
            ),
            Error::BadOptions(why) => write!(f, "bad ring options: {why}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { err, .. } => Some(err),
            _ => None,
        }
    }
}

impl Error {
    /// An I/O error, turned into `NoSpace` when the disk is full.
    pub(crate) fn io(what: &'static str, path: impl Into<PathBuf>, err: io::Error) -> Error {
        let path = path.into();
        if err.raw_os_error() == Some(libc::ENOSPC) {
            Error::NoSpace(path)
        } else {
            Error::Io { what, path, err }
        }
    }
}
