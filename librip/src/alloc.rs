//! The allocation sampler: which allocations are live, where they were
//! made, kept in the ring file so that they survive the process.
//!
//! Allocations are sampled by bytes: on average one sample per
//! [`DEFAULT_MEAN`](crate::format::alloc::DEFAULT_MEAN) (512 KiB) allocated,
//! at exponentially distributed distances, so an allocation of `s` bytes is
//! sampled with probability `1 - exp(-s / mean)` and the reader scales it
//! back up by that ([`crate::reader::alloc::estimated_bytes`]). A mean of 1
//! samples every allocation. Each sampled allocation gets an entry in the
//! ring file's allocation table (address, sizes, thread, time and up to 24
//! return addresses) until it is freed.
//!
//! Nothing is sampled unless asked: by `RIP_ALLOC_SAMPLE=<mean>` in the
//! environment (e.g. `512k`, or `1`), or by [`sample_allocations`], before
//! the ring is created. Then:
//!
//! - C programs linked with librip's C libraries, and programs run with
//!   `LD_PRELOAD=librip.so`, have their malloc family interposed (the
//!   `sampler` feature, which the C libraries are built with); with
//!   `LD_PRELOAD` and `RIP_ALLOC_SAMPLE` the ring is created at load, at
//!   the default path;
//! - Rust programs use [`Sampled`] as their global allocator.
//!
//! ```no_run
//! use librip::{Ring, RingOptions, alloc::Sampled};
//!
//! #[global_allocator]
//! static ALLOC: Sampled<std::alloc::System> = Sampled::new(std::alloc::System);
//!
//! librip::alloc::sample_allocations(512 * 1024);
//! Ring::create_default(RingOptions::default())?;
//! # Ok::<_, librip::Error>(())
//! ```

use std::{
    alloc::{GlobalAlloc, Layout},
    sync::atomic::Ordering,
};

use crate::writer::alloc::REQUESTED_MEAN;

#[doc(hidden)]
pub mod cfi;
pub use crate::writer::alloc::{CHECK_UNWIND_ENV, SAMPLE_ENV, TABLE_ENV};

/// The environment variable naming the ring a preloaded librip creates
/// (`%p` is the pid); without it, the default path. Either gets `.1`,
/// `.2`, … before `.ring` when a program this process exec'd from (a
/// shell script, a launcher) already left a ring there.
pub const RING_ENV: &str = "RIP_ALLOC_RING";

unsafe extern "C" {
    fn rip_alloc_should_sample(size: usize) -> i32;
    fn rip_alloc_record(ptr: *mut u8, requested: usize, size: usize, caller: usize, skip: u32);
    fn rip_alloc_forget(ptr: *mut u8);
    fn rip_alloc_bench_mean(mean: u64);
}

/// Changes the sampling mean of later draws and restarts the calling
/// thread's countdown; for the bench, which compares means in one process
/// (the ring's table keeps the mean it was made with). Not part of the API.
#[doc(hidden)]
pub fn bench_mean(mean: u64) {
    // SAFETY: plain stores into the sampler's private state.
    unsafe { rip_alloc_bench_mean(mean) }
}

/// Asks for an allocation table with this mean distance between samples
/// in bytes (1: every allocation) in the ring created next, whatever the
/// environment says. 0 leaves the choice to `RIP_ALLOC_SAMPLE`.
pub fn sample_allocations(mean_bytes: u64) {
    REQUESTED_MEAN.store(mean_bytes, Ordering::Relaxed);
}

/// A global allocator that samples what `A` allocates into the ring's
/// allocation table (when the ring has one; otherwise it only forwards).
#[derive(Debug, Default)]
pub struct Sampled<A>(A);

impl<A> Sampled<A> {
    /// Wraps `inner`.
    pub const fn new(inner: A) -> Self {
        Sampled(inner)
    }
}

/// Frames of the sampler's own Rust path left out of a recorded stack:
/// none, as inlining decides how many there are; the allocator's frames
/// (`__rust_alloc`, `RawVec`) start the stack.
const SKIP: u32 = 0;

#[inline]
fn note(p: *mut u8, requested: usize) -> *mut u8 {
    // SAFETY: the C sampler's countdown reads and writes only its own state.
    if !p.is_null() && unsafe { rip_alloc_should_sample(requested) } != 0 {
        // SAFETY: it records the address, never dereferences it.
        unsafe { rip_alloc_record(p, requested, requested, 0, SKIP) };
    }
    p
}

// SAFETY: every call is forwarded to `A` unchanged; the sampler only keeps
// the addresses it returned.
unsafe impl<A: GlobalAlloc> GlobalAlloc for Sampled<A> {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, forwarded.
        note(unsafe { self.0.alloc(layout) }, layout.size())
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as above.
        note(unsafe { self.0.alloc_zeroed(layout) }, layout.size())
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forgotten before it is freed: once freed, another thread
        // may be given the address and sample it.
        unsafe {
            rip_alloc_forget(ptr);
            self.0.dealloc(ptr, layout)
        }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as for dealloc; a failed realloc loses the old block's
        // sample (never makes a false one).
        unsafe {
            rip_alloc_forget(ptr);
            note(self.0.realloc(ptr, layout, new_size), new_size)
        }
    }
}

/// Called by the interposer's constructor (the `sampler` feature): with
/// `RIP_ALLOC_SAMPLE` set, creates the ring (at the default path) so that
/// a program run with `LD_PRELOAD` is sampled from its start.
#[cfg(feature = "sampler")]
#[unsafe(no_mangle)]
pub extern "C" fn rip_alloc_start_from_env() {
    if crate::writer::alloc::config().is_none() || crate::Ring::get().is_some() {
        return;
    }
    let opts = crate::RingOptions::default();
    let path = std::env::var_os(RING_ENV).map(std::path::PathBuf::from);
    let made = crate::Ring::create_numbered(path.as_deref(), opts);
    match made {
        Ok(_) => crate::writer::alloc::CREATED_AT_LOAD.store(true, Ordering::Relaxed),
        Err(e) => eprintln!(
            "librip: {SAMPLE_ENV} is set but no ring could be made, allocations are not sampled: {e}"
        ),
    }
}
