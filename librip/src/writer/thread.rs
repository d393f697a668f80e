//! Thread registration: a thread takes a slot, names it, and points its
//! cursor at it; when it exits (or says so) the slot is marked exited.
//!
//! A thread that snaps without registering snaps into the sink: its snaps
//! are dropped and counted there (see [`Ring::dropped_snaps`]). A thread
//! that cannot get a slot (all taken, tmpfs full) gets an error and stays
//! on the sink.

use std::cell::Cell;

use crate::{Error, format::SlotKind, snap};

use super::{Ring, SlotInit, current_epoch};

/// A thread's slot, in the ring of `epoch`.
#[derive(Clone, Copy, Debug)]
struct Registered {
    epoch: u64,
    index: u32,
    generation: u32,
}

/// Marks the thread's slot exited when the thread ends.
struct Registration(Cell<Option<Registered>>);

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(r) = self.0.take()
            && let Some(ring) = Ring::get().filter(|ring| ring.epoch == r.epoch)
        {
            ring.release_thread(r);
        }
    }
}

thread_local! {
    static THREAD: Registration = const { Registration(Cell::new(None)) };
    static TID: Cell<u32> = const { Cell::new(0) };
}

/// The calling thread's id (cached: gettid is a system call).
#[inline]
pub(crate) fn gettid() -> u32 {
    TID.with(|t| match t.get() {
        0 => {
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() } as u32;
            t.set(tid);
            tid
        }
        tid => tid,
    })
}

/// Forgets the cached tid (a forked child has a new one).
pub(crate) fn forget_tid() {
    let _ = TID.try_with(|t| t.set(0));
}

impl Ring {
    /// Registers the calling thread under `name` (at most 32 bytes are
    /// kept) and makes its slot the thread's snap target. Registering again
    /// renames the slot and makes it the target again. Returns the slot index.
    ///
    /// Fails when every thread slot is taken or tmpfs is full; the thread's
    /// snaps then go to the sink, counted as dropped.
    pub fn register_thread(&self, name: &str) -> Result<u32, Error> {
        self.register_thread_bytes(name.as_bytes())
    }

    pub(crate) fn register_thread_bytes(&self, name: &[u8]) -> Result<u32, Error> {
        let mut st = self.lock()?;
        let index = match self.own_thread_slot() {
            Some(r) => {
                self.store_name(self.layout.slot_offset(SlotKind::Thread, r.index), name);
                r.index
            }
            None => {
                let init = SlotInit {
                    id: u64::from(gettid()),
                    name,
                    seq: 0,
                    created_ns: None,
                    task_flags: 0,
                };
                let t = self.take_slot(&mut st, SlotKind::Thread, &init)?;
                let reg = Registered {
                    epoch: self.epoch,
                    index: t.index,
                    generation: t.generation,
                };
                THREAD.with(|r| r.0.set(Some(reg)));
                t.index
            }
        };
        drop(st);
        // SAFETY: a slot of the current ring, whose depth set the mask.
        unsafe { snap::set_cursor(self.seq_ptr(SlotKind::Thread, index)) };
        Ok(index)
    }

    /// Marks the calling thread's slot exited (kept for post-mortem
    /// reading; reused only when no fresh slot is left) and sends its snaps
    /// to the sink. Does nothing for a thread without a slot.
    pub fn exit_thread(&self) {
        if let Some(r) = self.own_thread_slot() {
            let _ = THREAD.try_with(|t| t.0.set(None));
            self.release_thread(r);
        }
    }

    /// The calling thread's slot index in this ring.
    pub(crate) fn thread_slot(&self) -> Option<u32> {
        self.own_thread_slot().map(|r| r.index)
    }

    fn own_thread_slot(&self) -> Option<Registered> {
        THREAD
            .try_with(|r| r.0.get())
            .ok()
            .flatten()
            .filter(|r| r.epoch == self.epoch && r.epoch == current_epoch())
    }

    fn release_thread(&self, r: Registered) {
        let seq = self.seq_ptr(SlotKind::Thread, r.index);
        if snap::cursor() == seq {
            // SAFETY: the sink is always a valid target.
            unsafe { snap::set_cursor(snap::sink_seq()) };
        }
        if let Ok(mut st) = self.lock() {
            self.release_slot(&mut st.threads, r.index, r.generation);
        }
    }
}

/// Registers the calling thread with the process's ring (see
/// [`Ring::register_thread`]).
pub fn register_thread(name: &str) -> Result<u32, Error> {
    Ring::get().ok_or(Error::NoRing)?.register_thread(name)
}

/// Marks the calling thread's slot exited (see [`Ring::exit_thread`]).
pub fn exit_thread() {
    if let Some(ring) = Ring::get() {
        ring.exit_thread();
    }
}
