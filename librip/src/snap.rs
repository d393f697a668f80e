//! The hot path: the `snap!` macro, and what it reads.
//!
//! A snap reads the calling thread's cursor (a thread-local pointer to the
//! target slot's sequence word `seq`), stores `seq << 48 | address` at
//! `entries[seq & mask]` (the entries follow `seq`), then increments `seq`.
//! The cursor is defined in C (`csrc/rip.c`) and shared by Rust and C, so
//! snaps from both languages on one thread land in the same slot; Rust
//! reads and writes it in place. It starts
//! out pointing at the sink, so a thread without a slot needs no branch.
//! The mask lives in private memory: a corrupted file can never make a
//! snap store outside the target.

use std::sync::atomic::{AtomicU64, Ordering};

/// The ring's depth minus one, for the Rust snap (private memory, never read
/// from the file). 0 until a ring exists: snaps then all hit the sink's
/// first entry.
#[doc(hidden)]
pub static MASK: AtomicU64 = AtomicU64::new(0);

/// The same mask for C's inline snap (`librip.h` declares it).
#[unsafe(no_mangle)]
#[allow(non_upper_case_globals)]
pub static rip_mask: AtomicU64 = AtomicU64::new(0);

/// The sink's layout (`struct rip_sink` in `csrc/rip.c`).
#[repr(C)]
pub(crate) struct Sink {
    seq: u64,
    entries: [u64; crate::format::MAX_DEPTH as usize],
}

unsafe extern "C" {
    /// Catches the snaps of threads without a slot.
    static mut rip_sink: Sink;
}

/// Sets both masks; called once per ring, before any cursor points into it.
pub(crate) fn set_mask(depth: u32) {
    let m = u64::from(depth) - 1;
    // The sink holds MAX_DEPTH entries, so any mask a layout allows is safe
    // for a cursor still aimed at the sink.
    debug_assert!(m < u64::from(crate::format::MAX_DEPTH));
    MASK.store(m, Ordering::Relaxed);
    rip_mask.store(m, Ordering::Relaxed);
}

/// The sink's sequence word (where unregistered snaps go).
#[inline]
pub(crate) fn sink_seq() -> *mut u64 {
    // SAFETY: only the address of the static is taken.
    unsafe { &raw mut rip_sink.seq }
}

/// Snaps the sink has caught (racy increments may have lost some).
pub(crate) fn sink_count() -> u64 {
    // SAFETY: the sink is a static of suitable alignment; its counter is
    // only ever accessed as a whole word.
    unsafe { AtomicU64::from_ptr(sink_seq()) }.load(Ordering::Relaxed)
}

// The cursor is read and written in place, with the initial-exec TLS
// model that both the executables and the shared library can link (as the
// shared-object `snap!` does): a coroutine switch is then two moves, not a
// call into C. The C side declares `rip_cursor` initial-exec too.

/// The calling thread's cursor.
#[inline]
pub(crate) fn cursor() -> *mut u64 {
    let cur: *mut u64;
    // SAFETY: reads the calling thread's own thread-local.
    unsafe {
        std::arch::asm!(
            "mov {cur}, qword ptr [rip + rip_cursor@GOTTPOFF]",
            "mov {cur}, qword ptr fs:[{cur}]",
            cur = out(reg) cur,
            options(nostack, readonly, preserves_flags),
        )
    };
    cur
}

/// Points the calling thread's snaps at `seq`.
///
/// # Safety
/// `seq` is the sequence word of a slot of the current ring (whose depth
/// set the mask), or of memory laid out like one with as many entries, that
/// stays mapped while it is the cursor, or the sink.
#[inline]
pub(crate) unsafe fn set_cursor(seq: *mut u64) {
    // SAFETY: writes the calling thread's own thread-local; what it points
    // at is the caller's contract.
    unsafe {
        std::arch::asm!(
            "mov {off}, qword ptr [rip + rip_cursor@GOTTPOFF]",
            "mov qword ptr fs:[{off}], {seq}",
            off = out(reg) _,
            seq = in(reg) seq,
            options(nostack, preserves_flags),
        )
    }
}

/// Records where the calling thread is: the address of this very point of
/// the caller's code, into the ring slot the thread (or the coroutine it
/// runs) snaps into.
///
/// Ten instructions, no call, branch, lock, fence, syscall or allocation;
/// a thread without a slot snaps into the sink. The address symbolizes to
/// the line of the `snap!()` invocation.
///
/// Each invocation also records its site (address, file, line, column,
/// module path and optional label) in the binary's site table
/// ([`librip::sites`](crate::sites)): no instruction, only data beside the
/// code, so readers name the site exactly even without debug information
/// or in a stripped binary. `snap!("waiting for the order book")` adds a
/// label, shown beside the location.
///
/// The cursor is read with the local-exec TLS model (one instruction),
/// which only links into executables. Code linked into a shared object
/// (a cdylib, a plugin) needs librip's `shared-object` feature: the
/// initial-exec model then costs one more instruction, which the sequence
/// wins back by incrementing the sequence word in memory.
///
/// ```
/// librip::snap!();
/// librip::snap!("waiting for the order book");
/// ```
#[cfg(not(feature = "shared-object"))]
#[macro_export]
#[collapse_debuginfo(yes)]
macro_rules! snap {
    () => {
        $crate::snap!("")
    };
    ($label:literal) => {
        // SAFETY: the cursor is always a sequence word followed by at least
        // mask + 1 entries: a slot of the ring, the sink, or (after fork) a
        // private anonymous copy of the ring's range (see librip::snap).
        unsafe {
            $crate::__rip_site_strings!($label);
            ::core::arch::asm!(
                "mov {cur}, qword ptr fs:[rip_cursor@TPOFF]",
                "mov {mask}, qword ptr [rip + {mask_sym}]",
                "mov {seq}, qword ptr [{cur}]",
                "lea {next}, [{seq} + 1]",
                "and {mask}, {seq}",
                "shl {seq}, 48",
                "lea {addr}, [rip]",
                // The address `lea` took: the site table's key.
                "7:",
                "or {addr}, {seq}",
                "mov qword ptr [{cur} + 8*{mask} + 8], {addr}",
                "mov qword ptr [{cur}], {next}",
                $crate::__rip_site_record!(),
                mask_sym = sym $crate::__private::MASK,
                site_file = sym __RIP_SITE_FILE,
                site_module = sym __RIP_SITE_MODULE,
                site_label = sym __RIP_SITE_LABEL,
                site_line = const ::core::line!(),
                site_column = const ::core::column!(),
                cur = out(reg) _,
                seq = out(reg) _,
                next = out(reg) _,
                addr = out(reg) _,
                mask = out(reg) _,
                options(nostack),
            )
        }
    };
}

/// Records where the calling thread is (see the default `snap!`); built
/// for code linked into a shared object (initial-exec TLS).
#[cfg(feature = "shared-object")]
#[macro_export]
#[collapse_debuginfo(yes)]
macro_rules! snap {
    () => {
        $crate::snap!("")
    };
    ($label:literal) => {
        // SAFETY: as for the default snap!.
        unsafe {
            $crate::__rip_site_strings!($label);
            ::core::arch::asm!(
                "mov {cur}, qword ptr [rip + rip_cursor@GOTTPOFF]",
                "mov {cur}, qword ptr fs:[{cur}]",
                "mov {mask}, qword ptr [rip + {mask_sym}]",
                "mov {seq}, qword ptr [{cur}]",
                "and {mask}, {seq}",
                "shl {seq}, 48",
                "lea {addr}, [rip]",
                // The address `lea` took: the site table's key.
                "7:",
                "or {addr}, {seq}",
                "mov qword ptr [{cur} + 8*{mask} + 8], {addr}",
                "inc qword ptr [{cur}]",
                $crate::__rip_site_record!(),
                mask_sym = sym $crate::__private::MASK,
                site_file = sym __RIP_SITE_FILE,
                site_module = sym __RIP_SITE_MODULE,
                site_label = sym __RIP_SITE_LABEL,
                site_line = const ::core::line!(),
                site_column = const ::core::column!(),
                cur = out(reg) _,
                seq = out(reg) _,
                addr = out(reg) _,
                mask = out(reg) _,
                options(nostack),
            )
        }
    };
}

/// The strings of a snap's site record, as statics its asm names: one set
/// per invocation (an item, so generic and inlined copies of the code
/// share it).
#[doc(hidden)]
#[macro_export]
macro_rules! __rip_site_strings {
    ($label:literal) => {
        static __RIP_SITE_FILE: [u8; ::core::concat!(::core::file!(), "\0").len()] =
            $crate::__private::cstr(::core::concat!(::core::file!(), "\0"));
        static __RIP_SITE_MODULE: [u8; ::core::concat!(::core::module_path!(), "\0").len()] =
            $crate::__private::cstr(::core::concat!(::core::module_path!(), "\0"));
        static __RIP_SITE_LABEL: [u8; ::core::concat!($label, "\0").len()] =
            $crate::__private::cstr(::core::concat!($label, "\0"));
    };
}

/// A snap's site record (`docs/FORMAT.md`, "The site table"), pushed into
/// the `rip_sites` section beside the code: data only, so the snap's
/// instructions are unchanged. Relative fields need no dynamic relocation
/// (PIE, shared objects); the `R` flag (SHF_GNU_RETAIN) keeps the section
/// through `--gc-sections`, which rustc always passes, although nothing
/// references it.
#[doc(hidden)]
#[macro_export]
macro_rules! __rip_site_record {
    () => {
        ::core::concat!(
            ".pushsection rip_sites,\"aR\",@progbits\n",
            ".balign 4\n",
            ".long 0x53504952\n",
            ".long 7b - .\n",
            ".long {site_file} - .\n",
            ".long {site_module} - .\n",
            ".long {site_label} - .\n",
            ".long {site_line}\n",
            ".long {site_column}\n",
            ".popsection",
        )
    };
}
