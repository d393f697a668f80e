//! The recorder: the process's one ring, its slots, and who snaps where.

pub(crate) mod alloc;
mod file;
mod fork;
mod header;
mod modules;
mod slots;
pub(crate) mod thread;

use std::{
    collections::HashMap,
    fs::File,
    path::{Path, PathBuf},
    ptr,
    sync::{
        Mutex, MutexGuard, PoisonError,
        atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering},
    },
};

use crate::{
    Error,
    format::{self, Layout, SlotKind, hdr},
    shm::Shm,
    snap,
};

pub(crate) use header::task_clock_ns;
pub(crate) use slots::{Pool, SlotInit, Taken};
pub(crate) use thread::gettid;

/// Coroutine slots of a ring when none are asked for (C: `RIP_DEFAULT_COROUTINE_SLOTS`).
pub const DEFAULT_COROUTINE_SLOTS: u32 = 65536;

/// How big a ring to make.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingOptions {
    /// Thread slots; 0 means the system's pid_max.
    pub thread_slots: u32,
    /// Coroutine slots.
    pub coroutine_slots: u32,
    /// Snaps kept per slot: a power of two up to 4096.
    pub depth: u32,
}

impl Default for RingOptions {
    /// pid_max thread slots, 65536 coroutine slots, depth 32.
    fn default() -> Self {
        RingOptions {
            thread_slots: 0,
            coroutine_slots: DEFAULT_COROUTINE_SLOTS,
            depth: format::DEFAULT_DEPTH,
        }
    }
}

/// The process's ring: a file on tmpfs, mapped shared, that every thread
/// and coroutine snaps into through its own slot.
///
/// There is one per process, created once and never unmapped (threads may
/// hold cursors into it until they exit). In a forked child it is gone:
/// see [`Ring::create`].
pub struct Ring {
    path: PathBuf,
    file: File,
    shm: Shm,
    layout: Layout,
    epoch: u64,
    on_tmpfs: bool,
    state: Mutex<State>,
}

/// Everything registration changes, under one lock (never taken by a snap).
pub(crate) struct State {
    pub(crate) threads: Pool,
    pub(crate) coroutines: Pool,
    /// Live coroutines by id.
    pub(crate) coroutine_ids: HashMap<u64, Taken>,
    pub(crate) next_coroutine_id: u64,
    pub(crate) modules: modules::ModuleTable,
}

/// The ring of this process (null before creation and in a forked child).
static RING: AtomicPtr<Ring> = AtomicPtr::new(ptr::null_mut());
/// Set while a ring is being created.
static CREATING: AtomicBool = AtomicBool::new(false);
/// Which ring cursors and handles belong to: bumped by each creation and
/// by fork, so anything saved earlier falls back to the sink.
static EPOCH: AtomicU64 = AtomicU64::new(0);
/// Set once the not-on-tmpfs warning was printed.
static WARNED: AtomicBool = AtomicBool::new(false);

impl Ring {
    /// Creates the process's ring at `path` (`%p` expands to the pid).
    ///
    /// The file is created 0600 and never replaces anything: an existing
    /// path, a planted symlink or a foreign file is refused with
    /// [`Error::Exists`] or [`Error::Unsafe`]. Not being on tmpfs only
    /// warns (once, on stderr). The thread slots' count 0 means pid_max.
    ///
    /// In a forked child the parent's ring is replaced by private anonymous
    /// memory and the child may create its own.
    pub fn create(path: impl AsRef<Path>, opts: RingOptions) -> Result<&'static Ring, Error> {
        Ring::create_at(file::expand(path.as_ref()), opts, false)
    }

    /// Creates the ring at `/dev/shm/rip-<uid>/<comm>.<pid>.ring`, making
    /// or checking the per-user directory (ours, mode 0700, not a symlink).
    pub fn create_default(opts: RingOptions) -> Result<&'static Ring, Error> {
        Ring::create_at(file::default_path(), opts, true)
    }

    /// The ring at `path` (`%p` expanded), or at the default path, or when
    /// that path exists (an earlier program this process exec'd from left
    /// its ring there: a shell script's, a launcher's), the same path with
    /// `.1`, `.2`, … before `.ring` (or after it when it does not end so).
    /// The file found there is never touched.
    #[cfg(feature = "sampler")]
    pub(crate) fn create_numbered(
        path: Option<&Path>,
        opts: RingOptions,
    ) -> Result<&'static Ring, Error> {
        let (first, private_dir) = match path {
            Some(p) => (file::expand(p), false),
            None => (file::default_path(), true),
        };
        let mut res = Ring::create_at(first.clone(), opts, private_dir);
        for n in 1..64 {
            if !matches!(res, Err(Error::Exists(_))) {
                break;
            }
            res = Ring::create_at(file::numbered(&first, n), opts, private_dir);
        }
        res
    }

    /// The default path of this process's ring.
    pub fn default_path() -> PathBuf {
        file::default_path()
    }

    /// The process's ring, if it has one.
    #[inline]
    pub fn get() -> Option<&'static Ring> {
        // SAFETY: RING is null or a leaked, never-freed Ring.
        unsafe { RING.load(Ordering::Acquire).as_ref() }
    }

    fn create_at(
        path: PathBuf,
        opts: RingOptions,
        private_dir: bool,
    ) -> Result<&'static Ring, Error> {
        if let Some(r) = Ring::get() {
            return Err(Error::AlreadyCreated(r.path.clone()));
        }
        if CREATING.swap(true, Ordering::AcqRel) {
            return Err(Error::AlreadyCreated(path));
        }
        let res = Ring::build(path, opts, private_dir);
        CREATING.store(false, Ordering::Release);
        let ring = Box::leak(Box::new(res?));
        fork::install();
        RING.store(ring, Ordering::Release);
        Ok(ring)
    }

    fn build(path: PathBuf, opts: RingOptions, private_dir: bool) -> Result<Ring, Error> {
        let threads = match opts.thread_slots {
            0 => pid_max(),
            n => n,
        };
        let mut layout =
            Layout::new(threads, opts.coroutine_slots, opts.depth).map_err(Error::BadOptions)?;
        let sampler = alloc::config();
        if let Some(cfg) = sampler {
            layout = layout
                .with_alloc_table(cfg.capacity)
                .map_err(Error::BadOptions)?;
        }
        let mut table = modules::ModuleTable::default();
        let image = header::build(&layout, &mut table);
        // The allocation table's header and first zone are reserved with
        // the file's header (a reader holds a file to the bytes it stores,
        // and the header announces them); the sampler reserves the rest
        // before it stores there, where the kernel allows (alloc.rs).
        let tail = match (layout.alloc_region, sampler) {
            (0, _) | (_, None) => file::Tail::NONE,
            (r, Some(cfg)) => file::Tail {
                len: layout.file_size - r,
                reserved: u64::from(format::alloc::HEADER_SIZE)
                    + u64::from(cfg.reserved) * u64::from(format::alloc::ENTRY_SIZE),
            },
        };
        let created = file::create(&path, &image, layout.file_size, tail, private_dir)?;
        if !created.on_tmpfs && !WARNED.swap(true, Ordering::Relaxed) {
            eprintln!(
                "librip: warning: {} is not on tmpfs: snaps will dirty page cache that is written back to disk; use /dev/shm",
                path.display()
            );
        }
        let map = memmap2::MmapOptions::new()
            .len(layout.file_size as usize)
            .map_raw(&created.file)
            .map_err(|e| Error::io("map", &path, e))?;
        // SAFETY: the mapping is page-aligned, `file_size` bytes long, and
        // leaked below: it stays mapped for the life of the process (after
        // fork, anonymous memory takes its place at the same addresses).
        let shm = unsafe { Shm::new(map.as_mut_ptr(), map.len()) };
        std::mem::forget(map);
        if let Some(cfg) = sampler {
            alloc::start(&shm, &layout, cfg);
        }
        snap::set_mask(layout.depth);
        let epoch = EPOCH.fetch_add(1, Ordering::AcqRel) + 1;
        Ok(Ring {
            path,
            file: created.file,
            shm,
            layout,
            epoch,
            on_tmpfs: created.on_tmpfs,
            state: Mutex::new(State {
                threads: Pool::new(SlotKind::Thread, layout.thread_slots),
                coroutines: Pool::new(SlotKind::Coroutine, layout.coroutine_slots),
                coroutine_ids: HashMap::new(),
                next_coroutine_id: 1,
                modules: table,
            }),
        })
    }

    /// Where the ring file is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The ring's sizes and offsets.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Whether the file is on tmpfs (if not, creation warned).
    pub fn on_tmpfs(&self) -> bool {
        self.on_tmpfs
    }

    /// Snaps taken so far by threads without a slot. A lower bound: the
    /// sink's counter is shared by all such threads without atomic
    /// increments, so concurrent snaps may lose counts.
    pub fn dropped_snaps(&self) -> u64 {
        snap::sink_count()
    }

    /// Writes the dropped-snap count into the header (done anyway at every
    /// registration, exit and at process exit).
    pub fn publish_dropped(&self) {
        if self.is_current() {
            self.shm.store_u64(
                hdr::DROPPED_SNAPS as u64,
                snap::sink_count(),
                Ordering::Relaxed,
            );
        }
    }

    /// Whether this is still the process's ring (not a parent's, after fork).
    pub(crate) fn is_current(&self) -> bool {
        ptr::eq(RING.load(Ordering::Acquire), self)
    }

    #[inline]
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The registration lock (publishing the dropped-snap count on the
    /// way). `Err(NoRing)` in a forked child (the parent's lock may be held
    /// by a thread that is not there).
    pub(crate) fn lock(&self) -> Result<MutexGuard<'_, State>, Error> {
        if !self.is_current() {
            return Err(Error::NoRing);
        }
        let st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        self.publish_dropped();
        Ok(st)
    }

    /// Appends the modules loaded since the table was last captured (a
    /// thread or coroutine about to snap may run code from them).
    pub(crate) fn refresh_modules(&self, table: &mut modules::ModuleTable) {
        if !table.stale() {
            return;
        }
        let (mods, adds) = modules::loaded_modules();
        let mut shm = self.shm;
        let count = table.append(&mut shm, mods, adds);
        self.shm
            .store_u32(hdr::MODULE_COUNT as u64, count, Ordering::Release);
        if table.truncated() {
            let flags = self.shm.load_u32(hdr::FLAGS as u64, Ordering::Relaxed);
            self.shm.store_u32(
                hdr::FLAGS as u64,
                flags | format::flags::MODULES_TRUNCATED,
                Ordering::Relaxed,
            );
        }
    }

    /// The address of slot `index`'s sequence word: a cursor target.
    pub(crate) fn seq_ptr(&self, kind: SlotKind, index: u32) -> *mut u64 {
        let off = self.layout.seq_offset(kind, index);
        assert!(off + 8 <= self.shm.len() as u64);
        self.shm.base().wrapping_add(off as usize).cast()
    }

    /// Which slot a cursor points at, if it points at one of this ring's.
    pub(crate) fn slot_of(&self, seq: *mut u64) -> Option<(SlotKind, u32)> {
        let off = (seq as u64).checked_sub(self.shm.base() as u64)?;
        [SlotKind::Coroutine, SlotKind::Thread]
            .into_iter()
            .find_map(|kind| {
                let region = self.layout.slot_offset(kind, 0);
                let size = u64::from(self.layout.slot_size(kind));
                let rel = off.checked_sub(region)?;
                let index = u32::try_from(rel / size).ok()?;
                (index < self.layout.slots(kind) && self.seq_ptr(kind, index) == seq)
                    .then_some((kind, index))
            })
    }
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("path", &self.path)
            .field("layout", &self.layout)
            .field("epoch", &self.epoch)
            .finish_non_exhaustive()
    }
}

/// The current epoch (see [`EPOCH`]).
#[inline]
pub(crate) fn current_epoch() -> u64 {
    EPOCH.load(Ordering::Acquire)
}

/// /proc/sys/kernel/pid_max, the original's slot count for `max_procs = 0`.
fn pid_max() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1 << 22)
}
