//! Coroutines: slots of their own, and cursor switching for schedulers.
//!
//! A coroutine (a task, a green thread) gets a slot in the coroutine region.
//! While it runs on a thread, that thread's cursor points at the
//! coroutine's slot, so its snaps land there; when it yields, the previous
//! cursor comes back. [`Coroutine::enter`] does this with a guard, and
//! [`Coroutine::poll`] also keeps the task statistics (polls, last poll
//! start and end, the tid polling it now).
//!
//! Coroutine ids are the program's own, separate from thread ids; ids of
//! live coroutines are unique (the C `rip_init` looks them up).

use std::{
    marker::PhantomData,
    sync::atomic::{AtomicU32, AtomicU64, Ordering},
};

use crate::{
    Error, Ring,
    format::{COROUTINE_META_SIZE, SlotKind, slot},
    snap,
    writer::{SlotInit, Taken, current_epoch, gettid, task_clock_ns},
};

/// Where a thread's snaps go: saved by a scheduler and restored later,
/// possibly on another thread.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cursor {
    seq: *mut u64,
    epoch: u64,
}

// SAFETY: a Cursor is an address plus an epoch; it is dereferenced only by
// snaps after `restore` checked that it still belongs to the process's ring.
unsafe impl Send for Cursor {}
// SAFETY: as for Send: `&Cursor` allows no access through the pointer.
unsafe impl Sync for Cursor {}

impl Cursor {
    /// The calling thread's current snap target.
    #[inline]
    pub fn current() -> Cursor {
        Cursor {
            seq: snap::cursor(),
            epoch: current_epoch(),
        }
    }

    /// The sink (where the snaps of threads without a slot go).
    #[inline]
    pub fn sink() -> Cursor {
        Cursor {
            seq: snap::sink_seq(),
            epoch: 0,
        }
    }

    /// Whether this is the sink.
    pub fn is_sink(&self) -> bool {
        self.seq == snap::sink_seq()
    }

    /// Makes this the calling thread's snap target. A cursor saved before a
    /// fork, or for an earlier ring, is stale: the sink is used instead.
    #[inline]
    pub fn restore(self) {
        let seq = if self.epoch == current_epoch() && Ring::get().is_some() {
            self.seq
        } else {
            snap::sink_seq()
        };
        // SAFETY: either the sink, or a cursor taken from this ring (the
        // epoch changes with every ring and every fork), which stays mapped.
        unsafe { snap::set_cursor(seq) };
    }
}

/// A [`Coroutine`] as plain data, for the C ABI (`rip_coro_t`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawCoroutine {
    /// The coroutine's id.
    pub id: u64,
    /// Its slot index.
    pub index: u32,
    /// Its slot's generation.
    pub generation: u32,
    /// The ring it belongs to.
    pub epoch: u64,
}

/// A coroutine's slot. Dropping it marks the coroutine exited and frees
/// the slot for reuse (the next owner gets a new generation).
#[derive(Debug)]
pub struct Coroutine {
    ring: &'static Ring,
    taken: Taken,
    id: u64,
    seq: *mut u64,
}

// SAFETY: the handle refers to a slot by address; its stats are updated by
// word stores that are whole whatever thread makes them.
unsafe impl Send for Coroutine {}
// SAFETY: as for Send; concurrent `enter`s from two threads make both snap
// into the slot, which mixes their entries but stays memory-safe.
unsafe impl Sync for Coroutine {}

impl Coroutine {
    /// A coroutine with the next unused id, named `name` (32 bytes kept).
    pub fn new(name: &str) -> Result<Coroutine, Error> {
        Coroutine::with_id(0, name)
    }

    /// A coroutine with id `id` (0: the next unused id).
    pub fn with_id(id: u64, name: &str) -> Result<Coroutine, Error> {
        let ring = Ring::get().ok_or(Error::NoRing)?;
        Coroutine::begin(ring, id, name.as_bytes(), 0, None, 0)
    }

    /// Takes a slot for `id` (0: next unused) with its sequence starting at
    /// `seq`, its creation time `created_ns` (default: now) and the
    /// [`task_flags`](crate::format::task_flags) that say which API made it.
    pub(crate) fn begin(
        ring: &'static Ring,
        id: u64,
        name: &[u8],
        seq: u64,
        created_ns: Option<u64>,
        task_flags: u32,
    ) -> Result<Coroutine, Error> {
        let mut st = ring.lock()?;
        let id = match id {
            0 => {
                while st.coroutine_ids.contains_key(&st.next_coroutine_id) {
                    st.next_coroutine_id += 1;
                }
                st.next_coroutine_id
            }
            id if st.coroutine_ids.contains_key(&id) => return Err(Error::IdInUse(id)),
            id => id,
        };
        let init = SlotInit {
            id,
            name,
            seq,
            created_ns,
            task_flags,
        };
        let taken = ring.take_slot(&mut st, SlotKind::Coroutine, &init)?;
        st.coroutine_ids.insert(id, taken);
        Ok(Coroutine {
            ring,
            taken,
            id,
            seq: ring.seq_ptr(SlotKind::Coroutine, taken.index),
        })
    }

    /// The coroutine's id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Its slot's index in the coroutine region.
    pub fn index(&self) -> u32 {
        self.taken.index
    }

    /// Its slot's generation.
    pub fn generation(&self) -> u32 {
        self.taken.generation
    }

    /// This coroutine's cursor (the sink if its ring is gone, after fork).
    pub fn cursor(&self) -> Cursor {
        if self.ring.epoch() == current_epoch() {
            Cursor {
                seq: self.seq,
                epoch: self.ring.epoch(),
            }
        } else {
            Cursor::sink()
        }
    }

    /// Points the calling thread's snaps at this coroutine until the guard
    /// drops, which restores the previous target.
    #[inline]
    pub fn enter(&self) -> Entered<'_> {
        let prev = Cursor::current();
        // The previous cursor's epoch is the current one: a handle of an
        // older ring (before a fork) snaps into the sink.
        let target = if self.ring.epoch() == prev.epoch {
            self.seq
        } else {
            snap::sink_seq()
        };
        // SAFETY: this coroutine's sequence word in the current ring (which
        // stays mapped), or the sink.
        unsafe { snap::set_cursor(target) };
        Entered {
            prev,
            _co: PhantomData,
        }
    }

    /// [`enter`](Self::enter), and counts a poll: the stats say the calling
    /// thread polls it from now until the guard drops.
    #[inline]
    pub fn poll(&self) -> Polling<'_> {
        self.poll_begin();
        Polling {
            co: self,
            _entered: self.enter(),
        }
    }

    /// The word at `field` of the slot's metadata (a task statistic).
    fn word(&self, field: usize) -> &AtomicU64 {
        // SAFETY: `seq` is the slot's sequence word, the last word of its
        // metadata, so the metadata starts `COROUTINE_META_SIZE - 8` bytes
        // before it; `field` is an 8-aligned offset inside it. The ring's
        // mapping is never unmapped (after fork, private memory takes its
        // place at the same addresses), and the word is only ever accessed
        // atomically.
        unsafe { AtomicU64::from_ptr(self.meta().add(field).cast()) }
    }

    /// The 4-byte word at `field` of the slot's metadata.
    fn half(&self, field: usize) -> &AtomicU32 {
        // SAFETY: as for `word`, with a 4-aligned field.
        unsafe { AtomicU32::from_ptr(self.meta().add(field).cast()) }
    }

    fn meta(&self) -> *mut u8 {
        self.seq
            .cast::<u8>()
            .wrapping_sub(COROUTINE_META_SIZE as usize - 8)
    }

    /// Task statistics: a poll starts on the calling thread.
    ///
    /// Times are stamped with the coarse monotonic clock (see
    /// docs/FORMAT.md): two of them per poll cost about 12 ns, where
    /// CLOCK_MONOTONIC would cost 55.
    #[inline]
    pub fn poll_begin(&self) {
        // One poller at a time: a load and a store need no atomic increment.
        let polls = self.word(slot::POLLS);
        polls.store(polls.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        self.word(slot::LAST_POLL_START_NS)
            .store(task_clock_ns(), Ordering::Relaxed);
        self.half(slot::POLLING_TID)
            .store(gettid(), Ordering::Release);
    }

    /// Task statistics: the poll ended (the task is idle).
    #[inline]
    pub fn poll_end(&self) {
        self.word(slot::LAST_POLL_END_NS)
            .store(task_clock_ns(), Ordering::Relaxed);
        self.half(slot::POLLING_TID).store(0, Ordering::Release);
    }

    /// Marks the coroutine exited now (same as dropping it).
    pub fn exit(self) {}

    /// Gives up ownership: the slot stays live until a [`Coroutine`] made
    /// again by [`from_raw`](Self::from_raw) drops.
    pub fn into_raw(self) -> RawCoroutine {
        let raw = RawCoroutine {
            id: self.id,
            index: self.taken.index,
            generation: self.taken.generation,
            epoch: self.ring.epoch(),
        };
        std::mem::forget(self);
        raw
    }

    /// The handle `raw` came from, if it belongs to the process's ring and
    /// its index is in range. A handle to a slot that was since freed or
    /// reused still snaps there (its owner must not use it after exit), but
    /// dropping it does not free the slot's new owner.
    pub fn from_raw(raw: RawCoroutine) -> Option<Coroutine> {
        let ring =
            Ring::get().filter(|r| r.epoch() == raw.epoch && raw.epoch == current_epoch())?;
        (raw.index < ring.layout().coroutine_slots).then(|| Coroutine {
            ring,
            taken: Taken::existing(raw.index, raw.generation),
            id: raw.id,
            seq: ring.seq_ptr(SlotKind::Coroutine, raw.index),
        })
    }
}

impl Drop for Coroutine {
    fn drop(&mut self) {
        if snap::cursor() == self.seq {
            Cursor::sink().restore();
        }
        if let Ok(mut st) = self.ring.lock() {
            let st = &mut *st;
            if self
                .ring
                .release_slot(&mut st.coroutines, self.taken.index, self.taken.generation)
            {
                st.coroutine_ids.remove(&self.id);
            }
        }
    }
}

/// While alive, the thread snaps into a coroutine; dropping it restores
/// the previous target.
#[must_use = "the coroutine is left as soon as the guard drops"]
pub struct Entered<'a> {
    prev: Cursor,
    // Tied to the coroutine and to this thread (the cursor is per thread).
    _co: PhantomData<(&'a Coroutine, *const ())>,
}

impl Drop for Entered<'_> {
    #[inline]
    fn drop(&mut self) {
        self.prev.restore();
    }
}

/// A poll in progress: [`Entered`] plus the task statistics.
#[must_use = "the poll ends as soon as the guard drops"]
pub struct Polling<'a> {
    co: &'a Coroutine,
    _entered: Entered<'a>,
}

impl Drop for Polling<'_> {
    #[inline]
    fn drop(&mut self) {
        self.co.poll_end();
    }
}
