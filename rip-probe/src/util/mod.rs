//! Support used by every stage: phase timings, helper threads, and the
//! way durations and wall-clock times are written.

pub(crate) mod background;
pub(crate) mod demangle;
pub(crate) mod interrupt;
pub(crate) mod progress;
pub(crate) mod timefmt;
pub(crate) mod timing;

/// A hash map with a fast hash (foldhash's), for the maps a report fills
/// once per thread (100,000 lookups by stack, call or tid): std's SipHash
/// is made for keys an attacker chooses, which these are not in any way
/// that matters (a collision costs time, never a wrong answer).
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// CLOCK_MONOTONIC now, in ns: the clock of `bpf_ktime_get_ns`, which
/// every program's timestamps are on.
pub(crate) fn monotonic_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Error `e` followed by its sources, outermost first.
pub(crate) fn chain<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(e), |e| e.source())
}
