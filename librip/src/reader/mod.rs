//! Reading ring files: live (while the writer runs) or post-mortem.
//!
//! Shared memory is hostile: the file is never mapped. It is read with
//! `pread` into private buffers, and only those are parsed, so a file
//! truncated during the read is a short read, not SIGBUS, and holes are
//! never populated. Sizes in the header are held to the writer's own
//! limits and to what the file really stores; every offset and count is
//! bounds-checked; a corrupt file is a [`ReadError`], never a panic.

pub mod alloc;
mod error;
mod find;
mod open;
pub mod original;
mod parse;
pub mod perf_map;
pub mod poll;
mod ranges;
mod source;

use std::{path::Path, path::PathBuf};

pub use error::ReadError;
pub use find::{
    MappedRing, MapsLine, Via, find_rings, open_mapped, open_mapped_via, open_rings, open_rings_in,
    parse_maps,
};
pub use open::{Follow, OpenError, RegularFile, file_kind};
pub use original::OriginalRing;
pub use perf_map::{PerfMap, PerfMapSymbol};
pub use poll::{Fresh, Poller};
pub use ranges::RangeIndex;

pub use crate::format::{Entry, SlotKind};

/// The header of a ring: who wrote it, when, and how it is laid out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// Layout version.
    pub version: u32,
    /// The writer's pid.
    pub pid: u32,
    /// The writer's start time in clock ticks after boot (/proc/PID/stat
    /// field 22): with `pid`, tells a live writer from a reused pid.
    pub process_start_ticks: u64,
    /// Clock ticks per second for `process_start_ticks`.
    pub clock_ticks_per_sec: u32,
    /// The writer's executable.
    pub exe: PathBuf,
    /// Its GNU build-id.
    pub build_id: Option<Vec<u8>>,
    /// CLOCK_REALTIME at creation, ns since the epoch.
    pub created_realtime_ns: u64,
    /// CLOCK_MONOTONIC at creation, ns (the clock of registration and poll times).
    pub created_monotonic_ns: u64,
    /// Entries per slot.
    pub depth: u32,
    /// Thread slots in the file.
    pub thread_slots: u32,
    /// Coroutine slots in the file.
    pub coroutine_slots: u32,
    /// Thread slots ever taken (the rest are free).
    pub thread_high_water: u32,
    /// Coroutine slots ever taken.
    pub coroutine_high_water: u32,
    /// Snaps of threads without a slot, as last published (a lower bound).
    pub dropped_snaps: u64,
    /// The sink counter's address in the writer (readable live through
    /// /proc/PID/mem for a fresher dropped count).
    pub sink_addr: u64,
    /// Some modules did not fit in the module table.
    pub modules_truncated: bool,
    /// Inode of the writer's pid namespace: `pid` is a pid of that
    /// namespace. 0 when the file does not say (written before it was
    /// recorded).
    pub pid_ns: u64,
    /// Inode of the writer's mount namespace (0: not recorded): the
    /// paths in the file (executable, modules) are paths of that namespace.
    pub mnt_ns: u64,
}

/// An executable mapping of the writer, for symbolization.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Module {
    /// The object's path (for the vDSO, its soname).
    pub path: PathBuf,
    /// First address of the mapping.
    pub start: u64,
    /// First address past it.
    pub end: u64,
    /// File offset mapped at `start`.
    pub file_offset: u64,
    /// The object's load bias: `addr - load_bias` is the ELF virtual address.
    pub load_bias: u64,
    /// The object's GNU build-id.
    pub build_id: Option<Vec<u8>>,
    /// The main executable.
    pub is_main: bool,
    /// The vDSO (no file behind it).
    pub is_vdso: bool,
}

/// A slot's state, as read (free slots are skipped).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotState {
    /// Its thread or coroutine is running.
    Live,
    /// Its owner exited; the entries are its last snaps.
    Exited,
}

/// A coroutine's task statistics (times are CLOCK_MONOTONIC ns).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskStats {
    /// Polls so far.
    pub polls: u64,
    /// When the last poll started.
    pub last_poll_start_ns: u64,
    /// When the last poll ended.
    pub last_poll_end_ns: u64,
    /// The thread polling it now (0: idle).
    pub polling_tid: u32,
    /// When the task was created.
    pub created_ns: u64,
    /// Which API made it: [`crate::format::task_flags`] (0: librip's
    /// coroutine API, or a writer older than the flags).
    pub flags: u32,
}

/// One thread's or coroutine's slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slot {
    /// Index in its region.
    pub index: u32,
    /// Thread or coroutine.
    pub kind: SlotKind,
    /// Live or exited.
    pub state: SlotState,
    /// Thread id, or coroutine id.
    pub id: u64,
    /// Times the slot was taken.
    pub generation: u32,
    /// Its name.
    pub name: String,
    /// When it was taken (CLOCK_MONOTONIC ns).
    pub registered_ns: u64,
    /// Snaps taken (the sequence word).
    pub snaps: u64,
    /// The last `depth` snaps at most, oldest first.
    pub entries: Vec<Entry>,
    /// Coroutines only.
    pub task: Option<TaskStats>,
}

/// A private snapshot of a ring file.
#[derive(Debug)]
pub struct RingFile {
    /// The file's owner (0 for [`RingFile::from_bytes`]).
    owner: u32,
    header: Header,
    modules: Vec<Module>,
    snapshot: parse::Snapshot,
    allocations: Option<alloc::AllocTable>,
}

impl RingFile {
    /// Reads the header and the used slots of the ring at `path` (a
    /// regular file; a symlink is followed, a FIFO or device refused).
    pub fn open(path: &Path) -> Result<RingFile, ReadError> {
        Self::open_with(path, Follow::Yes)
    }

    /// [`RingFile::open`], refusing a symlink in the last component when
    /// `follow` is [`Follow::No`] (a path someone else chose).
    pub fn open_with(path: &Path, follow: Follow) -> Result<RingFile, ReadError> {
        let (src, owner) = source(path, follow)?;
        let mut ring = parse::parse(&src).map_err(|e| e.at(path))?;
        ring.owner = owner;
        Ok(ring)
    }

    /// Reads the ring in an already opened file (e.g. one a process maps,
    /// from [`open_rings`]); `path` names it in errors.
    pub fn read(file: RegularFile, path: &Path) -> Result<RingFile, ReadError> {
        let owner = file.uid;
        let mut ring = parse::parse(&file_source(file)).map_err(|e| e.at(path))?;
        ring.owner = owner;
        Ok(ring)
    }

    /// Parses a ring from bytes (a copy of a file; for tests and fuzzing).
    pub fn from_bytes(bytes: &[u8]) -> Result<RingFile, ReadError> {
        parse::parse(&source::Bytes(bytes))
    }

    /// The uid owning the file it was read from: who wrote it, as far as
    /// the file system can tell.
    pub fn owner(&self) -> u32 {
        self.owner
    }

    /// The header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The executable mappings at creation and those loaded since.
    pub fn modules(&self) -> &[Module] {
        &self.modules
    }

    /// The module holding `addr`, if any (the latest loaded, if ranges overlap).
    /// The table holds at most a few hundred entries: a scan is enough.
    pub fn module_of(&self, addr: u64) -> Option<&Module> {
        self.modules
            .iter()
            .rev()
            .find(|m| (m.start..m.end).contains(&addr))
    }

    /// The allocation table: the sampled allocations live at the time of
    /// reading. `None` when the ring has none (its writer did not sample,
    /// see [`crate::alloc`]) or it was still being set up.
    pub fn allocations(&self) -> Option<&alloc::AllocTable> {
        self.allocations.as_ref()
    }

    /// The live and exited slots, threads first, each with its entries
    /// oldest first.
    pub fn slots(&self) -> impl Iterator<Item = Slot> + '_ {
        self.snapshot.slots()
    }
}

impl OriginalRing {
    /// Reads a ring written by the original header-only librip: only the
    /// file's data extents, never its holes.
    pub fn open(path: &Path) -> Result<OriginalRing, ReadError> {
        original::parse(&source(path, Follow::Yes)?.0).map_err(|e| e.at(path))
    }

    /// Parses one from bytes (for tests and fuzzing).
    pub fn from_bytes(bytes: &[u8]) -> Result<OriginalRing, ReadError> {
        original::parse(&source::Bytes(bytes))
    }
}

fn open_error(path: &Path, e: OpenError) -> ReadError {
    match e {
        OpenError::Io(e) => ReadError::io(path, e),
        OpenError::NotRegular(what) => ReadError::NotRegular(path.to_path_buf(), what),
    }
}

/// The file at `path` as a pread source, and its owner.
fn source(path: &Path, follow: Follow) -> Result<(source::FileSource, u32), ReadError> {
    let f = RegularFile::open(path, follow).map_err(|e| open_error(path, e))?;
    let owner = f.uid;
    Ok((file_source(f), owner))
}

fn file_source(f: RegularFile) -> source::FileSource {
    source::FileSource {
        len: f.size,
        allocated: f.allocated,
        fd: f.into_fd(),
    }
}
