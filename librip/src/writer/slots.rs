//! Slot allocation: dense indices handed out in order, so tmpfs holds only
//! the pages of slots ever used and no id can index outside the file.
//!
//! Thread slots of exited threads are kept for post-mortem reading and
//! reused only when no fresh slot is left, oldest exit first. Coroutine
//! slots are reused as soon as their coroutine exits. Each reuse increments
//! the slot's generation.

use std::{collections::VecDeque, sync::atomic::Ordering};

use crate::format::{NAME_LEN, SlotKind, hdr, slot, state};

use super::{Ring, State, header::monotonic_ns};
use crate::Error;

/// The private bookkeeping of one kind of slot (never read from the file).
pub(crate) struct Pool {
    kind: SlotKind,
    capacity: u32,
    /// Slots ever taken; the next fresh index. Published as the high-water mark.
    fresh: u32,
    /// Slots whose owner exited, oldest first.
    released: VecDeque<u32>,
    /// Each slot ever taken, by index.
    records: Vec<Record>,
}

/// The writer's private record of a slot.
#[derive(Clone, Copy, Debug, Default)]
struct Record {
    generation: u32,
    live: bool,
    id: u64,
}

/// A slot handed out: which one, and which generation of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Taken {
    pub(crate) index: u32,
    pub(crate) generation: u32,
    fresh: bool,
}

impl Taken {
    /// A handle to slot `index` in `generation`, taken earlier.
    pub(crate) fn existing(index: u32, generation: u32) -> Taken {
        Taken {
            index,
            generation,
            fresh: false,
        }
    }
}

impl Pool {
    pub(crate) fn new(kind: SlotKind, capacity: u32) -> Pool {
        Pool {
            kind,
            capacity,
            fresh: 0,
            released: VecDeque::new(),
            records: Vec::new(),
        }
    }

    /// The next slot: threads prefer fresh slots, coroutines released ones.
    fn take(&mut self, id: u64) -> Option<Taken> {
        let reuse_first = self.kind == SlotKind::Coroutine;
        let index = match (reuse_first, self.fresh < self.capacity) {
            (true, _) | (false, false) => self.released.pop_front().or_else(|| self.next_fresh()),
            (false, true) => self.next_fresh(),
        }?;
        let fresh = index as usize == self.records.len();
        if fresh {
            self.records.push(Record::default());
        }
        let r = &mut self.records[index as usize];
        r.generation = r.generation.wrapping_add(1);
        r.live = true;
        r.id = id;
        Some(Taken {
            index,
            generation: r.generation,
            fresh,
        })
    }

    fn next_fresh(&mut self) -> Option<u32> {
        (self.fresh < self.capacity).then(|| {
            self.fresh += 1;
            self.fresh - 1
        })
    }

    /// Undoes the `take` of a fresh slot that could not be set up.
    fn untake(&mut self, t: Taken) {
        if t.fresh && t.index + 1 == self.fresh {
            self.fresh -= 1;
            self.records.pop();
        } else {
            self.records[t.index as usize].live = false;
            self.released.push_front(t.index);
        }
    }

    /// Whether slot `index` is live in generation `generation`.
    pub(crate) fn is_current(&self, index: u32, generation: u32) -> bool {
        self.live(index).is_some_and(|(g, _)| g == generation)
    }

    /// Slot `index`'s generation and owner id, if it is live.
    pub(crate) fn live(&self, index: u32) -> Option<(u32, u64)> {
        let r = self.records.get(index as usize)?;
        r.live.then_some((r.generation, r.id))
    }

    /// Hands a live slot back for reuse.
    fn release(&mut self, index: u32) {
        self.records[index as usize].live = false;
        self.released.push_back(index);
    }
}

/// What a new slot is set up with.
pub(crate) struct SlotInit<'a> {
    pub(crate) id: u64,
    pub(crate) name: &'a [u8],
    pub(crate) seq: u64,
    pub(crate) created_ns: Option<u64>,
    /// Coroutine slots: [`crate::format::task_flags`].
    pub(crate) task_flags: u32,
}

impl Ring {
    /// Takes a slot of `kind` and publishes it live. A fresh slot's pages
    /// are reserved first, so a full tmpfs is an error here and never a
    /// SIGBUS at snap time.
    pub(crate) fn take_slot(
        &self,
        st: &mut State,
        kind: SlotKind,
        init: &SlotInit<'_>,
    ) -> Result<Taken, Error> {
        self.refresh_modules(&mut st.modules);
        let pool = match kind {
            SlotKind::Thread => &mut st.threads,
            SlotKind::Coroutine => &mut st.coroutines,
        };
        let t = pool.take(init.id).ok_or(Error::SlotsFull {
            kind,
            capacity: pool.capacity,
        })?;
        let off = self.layout.slot_offset(kind, t.index);
        let size = u64::from(self.layout.slot_size(kind));
        if t.fresh {
            if let Err(e) = super::file::reserve(&self.file, off, size) {
                pool.untake(t);
                return Err(Error::io("reserve a slot in", &self.path, e));
            }
            let hw = match kind {
                SlotKind::Thread => hdr::THREAD_HIGH_WATER,
                SlotKind::Coroutine => hdr::COROUTINE_HIGH_WATER,
            };
            self.shm.store_u32(hw as u64, pool.fresh, Ordering::Release);
        }
        let shm = &self.shm;
        // A reader seeing FREE ignores the slot while it is rewritten.
        shm.store_u32(off + slot::STATE as u64, state::FREE, Ordering::Relaxed);
        std::sync::atomic::fence(Ordering::Release);
        shm.store_u32(
            off + slot::GENERATION as u64,
            t.generation,
            Ordering::Relaxed,
        );
        shm.store_u64(off + slot::ID as u64, init.id, Ordering::Relaxed);
        self.store_name(off, init.name);
        let now = monotonic_ns();
        shm.store_u64(off + slot::REGISTERED_NS as u64, now, Ordering::Relaxed);
        let meta = u64::from(kind.meta_size());
        if kind == SlotKind::Coroutine {
            shm.zero(off + slot::POLLS as u64, meta - 8 - slot::POLLS as u64);
            let created = init.created_ns.unwrap_or(now);
            shm.store_u64(off + slot::CREATED_NS as u64, created, Ordering::Relaxed);
            shm.store_u32(
                off + slot::TASK_FLAGS as u64,
                init.task_flags,
                Ordering::Relaxed,
            );
        }
        if !t.fresh {
            shm.zero(off + meta, size - meta);
        }
        shm.store_u64(off + meta - 8, init.seq, Ordering::Relaxed);
        shm.store_u32(off + slot::STATE as u64, state::LIVE, Ordering::Release);
        Ok(t)
    }

    /// Writes a slot's name (truncated to 32 bytes at a character boundary
    /// when it is UTF-8, NUL-padded).
    pub(crate) fn store_name(&self, slot_off: u64, name: &[u8]) {
        let mut n = name.len().min(NAME_LEN);
        if let Err(e) = std::str::from_utf8(&name[..n])
            && std::str::from_utf8(name).is_ok()
        {
            n = e.valid_up_to();
        }
        let mut buf = [0u8; NAME_LEN];
        buf[..n].copy_from_slice(&name[..n]);
        self.shm.store_bytes(slot_off + slot::NAME as u64, &buf);
    }

    /// Marks slot `index` exited if it is still in `generation`, and hands
    /// it back to `pool`. Returns whether it did.
    pub(crate) fn release_slot(&self, pool: &mut Pool, index: u32, generation: u32) -> bool {
        if !pool.is_current(index, generation) {
            return false;
        }
        let off = self.layout.slot_offset(pool.kind, index);
        self.shm
            .store_u32(off + slot::STATE as u64, state::EXITED, Ordering::Release);
        pool.release(index);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_take_fresh_slots_before_reusing_the_oldest_exited() {
        let mut p = Pool::new(SlotKind::Thread, 3);
        let a = p.take(7).unwrap();
        let b = p.take(7).unwrap();
        p.release(b.index);
        p.release(a.index);
        let c = p.take(7).unwrap();
        assert_eq!((c.index, c.generation), (2, 1), "fresh first");
        let d = p.take(7).unwrap();
        assert_eq!((d.index, d.generation), (1, 2), "then the oldest exit");
        let e = p.take(7).unwrap();
        assert_eq!((e.index, e.generation), (0, 2));
        assert!(p.take(7).is_none(), "full");
    }

    #[test]
    fn coroutines_reuse_released_slots_first() {
        let mut p = Pool::new(SlotKind::Coroutine, 10);
        let a = p.take(7).unwrap();
        p.take(7).unwrap();
        p.release(a.index);
        let c = p.take(7).unwrap();
        assert_eq!((c.index, c.generation), (0, 2));
        assert!(p.is_current(0, 2) && !p.is_current(0, 1));
        assert_eq!(p.live(0), Some((2, 7)));
        p.release(0);
        assert_eq!(p.live(0), None);
    }

    #[test]
    fn an_untaken_fresh_slot_is_handed_out_again() {
        let mut p = Pool::new(SlotKind::Thread, 2);
        let a = p.take(7).unwrap();
        p.untake(a);
        assert_eq!(p.take(7).unwrap(), a);
    }
}
