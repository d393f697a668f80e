//! Fork and exit.
//!
//! A forked child must never write into its parent's slots: the parent's
//! ring mapping is inherited, and so are cursors (the forking thread's, and
//! any a scheduler saved). The child handler points the forking thread's
//! cursor at the sink and replaces the whole inherited mapping with private
//! anonymous memory at the same addresses, so even a stale cursor writes
//! only into the child's own memory. The child has no ring afterwards and
//! may create its own.
//!
//! At process exit the dropped-snap count is published one last time.

use std::{ptr, sync::Once, sync::atomic::Ordering};

use super::{CREATING, EPOCH, RING, thread::forget_tid};
use crate::snap;

/// Installs the handlers (once per process).
pub(super) fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: registering handlers that are valid for the life of the
        // process; the child handler only does async-signal-safe work.
        unsafe {
            libc::pthread_atfork(None, None, Some(after_fork_in_child));
            libc::atexit(at_exit);
        }
    });
}

extern "C" fn after_fork_in_child() {
    // First: the table below is about to become private memory.
    super::alloc::stop();
    // SAFETY: the sink is always a valid target.
    unsafe { snap::set_cursor(snap::sink_seq()) };
    forget_tid();
    EPOCH.fetch_add(1, Ordering::AcqRel);
    CREATING.store(false, Ordering::Release);
    let ring = RING.swap(ptr::null_mut(), Ordering::AcqRel);
    // SAFETY: RING is null or a leaked Ring that is never freed.
    if let Some(ring) = unsafe { ring.as_ref() } {
        // SAFETY: the range is exactly the ring's mapping, which nothing in
        // this process may use as a file mapping any more; MAP_FIXED over it
        // keeps stale pointers into it valid (zeroed, private memory).
        let r = unsafe {
            libc::mmap(
                ring.shm.base().cast(),
                ring.shm.len(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_FIXED | libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if r == libc::MAP_FAILED {
            // Out of memory in the child: the mapping is still the parent's
            // file. Better no child than one that scribbles on the parent's
            // evidence.
            // SAFETY: async-signal-safe.
            unsafe { libc::_exit(127) };
        }
    }
}

extern "C" fn at_exit() {
    if let Some(ring) = super::Ring::get() {
        ring.publish_dropped();
    }
}
