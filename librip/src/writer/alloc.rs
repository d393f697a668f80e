//! The allocation table's writer side: whether a new ring gets one, its
//! region header, and pointing the C sampler (`csrc/alloc.c`) at it.
//!
//! A ring has a table only when asked: by `RIP_ALLOC_SAMPLE` in the
//! environment, or by [`crate::alloc::sample_allocations`] before the ring
//! is created. Linking librip alone never samples.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::{
    format::{Layout, alloc},
    shm::Shm,
};

/// The mean asked for by the Rust API (0: none; then the environment decides).
pub(crate) static REQUESTED_MEAN: AtomicU64 = AtomicU64::new(0);

/// Set when the interposer's constructor made the ring: the program's own
/// `rip_create_ring` then finds it there and uses it.
pub(crate) static CREATED_AT_LOAD: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// The environment variable that turns the sampler on, with its mean.
pub const SAMPLE_ENV: &str = "RIP_ALLOC_SAMPLE";
/// The environment variable that sizes the table (entries, a power of two).
pub const TABLE_ENV: &str = "RIP_ALLOC_TABLE";

/// The environment variable that makes every sample's stack be walked by
/// libgcc's unwinder too, and the number of stacks that differed be said
/// on stderr at exit (a check of the cached unwinder, for tests).
pub const CHECK_UNWIND_ENV: &str = "RIP_ALLOC_CHECK_UNWIND";

unsafe extern "C" {
    fn rip_alloc_configure(region: *mut u64, capacity: u64, mean: u64, reserved: u64);
    fn rip_alloc_check_unwind();
}

/// What a new ring's table looks like.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Config {
    pub(crate) mean: u64,
    pub(crate) capacity: u32,
    /// Entries whose pages are reserved in the file when it is made, from
    /// the table's first (see [`reserved_entries`]).
    pub(crate) reserved: u32,
}

/// Entries, from the table's first, whose pages the writer reserves in the
/// file with the region header where the kernel can reserve the rest later
/// (the whole table when it is smaller): csrc/alloc.c's first zone. The
/// writer's choice, not the layout's (docs/FORMAT.md): readers require only
/// the region header's pages, and the rest may be holes, read as free
/// entries (earlier writers reserved the first three zones, 448 entries).
const RESERVED_ENTRIES: u32 = 64;

/// How many of a `capacity`-entry table's entries to reserve when the file
/// is made: only the first zone's ([`RESERVED_ENTRIES`], csrc/alloc.c's
/// zone of 64 entries, which holds every sample of a program with less
/// than about 16 MiB live at the default mean; a program with more pays a
/// `madvise` call as sampling reaches each later zone, a few in its life)
/// where the kernel can reserve the rest of a shared mapping's pages later
/// without a fault
/// (`MADV_POPULATE_WRITE`, Linux 5.14, which says EINVAL before: then all
/// of them). The sampler reserves each further zone before it places a
/// sample there, and stays where it is (counting the samples it cannot
/// place, and saying the file system was full) if it cannot. Reserving the
/// default table's 4 MiB with the file took about 1.1 ms (`strace -T`) and
/// most of a short sampled process's start: `/bin/true` sampled used 5.7
/// ms of CPU, 2.3 ms with the first three zones reserved (150 paired
/// rounds; 1.5 ms preloaded). Every sampled process leaves its ring on
/// tmpfs, which is memory: with the first zone alone, a ring of a process
/// that samples little holds 84 KiB where the first three zones made it
/// 180 KiB, and a wrapper chain leaves one per process.
fn reserved_entries(capacity: u32) -> u32 {
    static LATER: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let later = *LATER.get_or_init(|| {
        // SAFETY: a private anonymous page, populated and unmapped here.
        unsafe {
            let page = libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            if page == libc::MAP_FAILED {
                return false;
            }
            let ok = libc::madvise(page, 4096, libc::MADV_POPULATE_WRITE) == 0;
            libc::munmap(page, 4096);
            ok
        }
    });
    if later {
        capacity.min(RESERVED_ENTRIES)
    } else {
        capacity
    }
}

/// Parses a byte count: digits with an optional k, m or g suffix (powers
/// of 1024), e.g. `512k`, `1` (every allocation), `4096`.
pub(crate) fn parse_bytes(s: &str) -> Option<u64> {
    let s = s.trim();
    let (digits, mult) = match s.char_indices().last()? {
        (i, 'k' | 'K') => (&s[..i], 1 << 10),
        (i, 'm' | 'M') => (&s[..i], 1 << 20),
        (i, 'g' | 'G') => (&s[..i], 1 << 30),
        _ => (s, 1),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .filter(|&n| n > 0)
}

/// The table a new ring gets, if any; a bad variable is said once on
/// stderr and leaves the sampler off.
pub(crate) fn config() -> Option<Config> {
    let mean = match REQUESTED_MEAN.load(Ordering::Relaxed) {
        0 => {
            let v = std::env::var(SAMPLE_ENV).ok()?;
            if v.is_empty() || v == "0" || v == "off" {
                return None;
            }
            let Some(m) = parse_bytes(&v) else {
                eprintln!(
                    "librip: {SAMPLE_ENV}={v:?} is not a byte count: use e.g. 512k (the mean distance between samples) or 1 (every allocation); allocations are not sampled"
                );
                return None;
            };
            m
        }
        m => m,
    };
    let capacity = match std::env::var(TABLE_ENV) {
        Err(_) => alloc::DEFAULT_CAPACITY,
        Ok(v) => match v.trim().parse::<u32>() {
            Ok(n) if n.is_power_of_two() && n <= alloc::MAX_CAPACITY => n,
            _ => {
                eprintln!(
                    "librip: {TABLE_ENV}={v:?} is not a power of two up to {}: the table keeps its default {} entries",
                    alloc::MAX_CAPACITY,
                    alloc::DEFAULT_CAPACITY
                );
                alloc::DEFAULT_CAPACITY
            }
        },
    };
    Some(Config {
        mean,
        capacity,
        reserved: reserved_entries(capacity),
    })
}

/// Writes the table's region header (magic last) and starts the sampler on
/// it. Its header's and first `cfg.reserved` entries' pages were reserved
/// with the file's (a store into them never faults for lack of tmpfs
/// space); the sampler reserves the rest before it stores there.
pub(crate) fn start(shm: &Shm, layout: &Layout, cfg: Config) {
    let region = layout.alloc_region;
    use alloc::hdr;
    let at = |off: usize| region + off as u64;
    shm.store_u32(at(hdr::VERSION), alloc::VERSION, Ordering::Relaxed);
    shm.store_u32(at(hdr::ENTRY_SIZE), alloc::ENTRY_SIZE, Ordering::Relaxed);
    shm.store_u32(at(hdr::CAPACITY), layout.alloc_capacity, Ordering::Relaxed);
    shm.store_u32(at(hdr::FRAMES), alloc::FRAMES, Ordering::Relaxed);
    shm.store_u64(at(hdr::MEAN), cfg.mean, Ordering::Relaxed);
    shm.store_u32(at(hdr::PROBE), alloc::PROBE, Ordering::Relaxed);
    shm.store_u64(
        at(hdr::MAGIC),
        u64::from_le_bytes(alloc::MAGIC),
        Ordering::Release,
    );
    let base = shm.base().wrapping_add(region as usize).cast::<u64>();
    if std::env::var_os(CHECK_UNWIND_ENV).is_some_and(|v| !v.is_empty()) {
        // SAFETY: sets a flag and registers an exit handler.
        unsafe { rip_alloc_check_unwind() };
    }
    // SAFETY: the region lies inside the ring's mapping, which stays mapped
    // for the life of the process (anonymous memory after fork).
    unsafe {
        rip_alloc_configure(
            base,
            u64::from(layout.alloc_capacity),
            cfg.mean,
            u64::from(cfg.reserved),
        )
    };
}

/// Stops sampling (in a forked child, whose table is no longer the file).
pub(crate) fn stop() {
    // SAFETY: null turns the sampler off.
    unsafe { rip_alloc_configure(std::ptr::null_mut(), 0, 0, 0) };
}

#[cfg(test)]
mod tests {
    use super::parse_bytes;

    #[test]
    fn byte_counts_take_binary_suffixes() {
        assert_eq!(parse_bytes("512k"), Some(512 * 1024));
        assert_eq!(parse_bytes("1"), Some(1));
        assert_eq!(parse_bytes("2M"), Some(2 << 20));
        assert_eq!(parse_bytes(" 4096 "), Some(4096));
        for bad in ["", "k", "0", "-1", "1.5k", "lots", "99999999999999999999g"] {
            assert_eq!(parse_bytes(bad), None, "{bad}");
        }
    }
}
