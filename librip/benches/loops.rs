//! Loops of `n` snaps, Rust and C, next to empty loops of the same shape:
//! measured by `benches/snap.rs` and counted under callgrind by the
//! instruction-count test (which includes this file).

use librip::snap;

/// What the C loops do with `i` (`KEEP` in snap_loops.c): keep it in a
/// register, so both languages' loops have the same shape.
macro_rules! keep {
    ($i:expr) => {
        // SAFETY: an empty asm that only reads a register.
        unsafe { core::arch::asm!("/* {0} */", in(reg) $i, options(nomem, nostack, preserves_flags)) }
    };
}

/// The baseline: the loop alone.
#[inline(never)]
#[unsafe(no_mangle)]
pub extern "C" fn rip_loop_rust_empty(n: u64) {
    for i in 0..n {
        keep!(i);
    }
}

/// `snap!()` in the loop.
#[inline(never)]
#[unsafe(no_mangle)]
pub extern "C" fn rip_loop_rust_snap(n: u64) {
    for i in 0..n {
        snap!();
        keep!(i);
    }
}

#[link(name = "rip_bench_loops", kind = "static")]
unsafe extern "C" {
    /// The C baseline.
    pub fn rip_loop_c_empty(n: u64);
    /// `RIP_SNAP()` (librip.h's inline snap) in the loop.
    pub fn rip_loop_c_inline(n: u64);
    /// The same with `RIP_LINKED_STATICALLY` (local-exec TLS).
    pub fn rip_loop_c_inline_static(n: u64);
    /// `rip_snap()`, the original name of the inline snap, in the loop.
    pub fn rip_loop_c_rip_snap(n: u64);
    /// The exported out-of-line `(rip_snap)()` in the loop.
    pub fn rip_loop_c_call(n: u64);
    /// The original header's inline snap in the loop.
    pub fn rip_loop_original(n: u64);
    /// Allocates the original-style ring; 0 on success.
    pub fn rip_loop_original_setup(procs: u32, tid: i32) -> i32;
}

/// Every loop, by name, baselines first.
pub const LOOPS: [(&str, unsafe extern "C" fn(u64)); 8] = [
    ("rust_empty", rip_loop_rust_empty),
    ("c_empty", rip_loop_c_empty),
    ("rust_snap", rip_loop_rust_snap),
    ("c_inline", rip_loop_c_inline),
    ("c_inline_static", rip_loop_c_inline_static),
    ("c_rip_snap", rip_loop_c_rip_snap),
    ("c_call", rip_loop_c_call),
    ("original", rip_loop_original),
];
