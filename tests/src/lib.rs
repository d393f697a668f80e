//! Shared helpers for rip's end-to-end tests, and the workload programs
//! they run (under `src/bin/`).

/// Set to `1` to skip the tests that load BPF programs (for unprivileged
/// local runs). CI never sets it: there, a test that cannot load BPF fails
/// with the reason.
pub const SKIP_BPF_ENV: &str = "RIP_SKIP_BPF_TESTS";

/// Returns `false` (after saying so on stderr) when BPF tests are
/// explicitly skipped; `true` otherwise. A test that gets `true` must load
/// its programs and fail if it cannot.
pub fn bpf_tests_enabled(test: &str) -> bool {
    if std::env::var(SKIP_BPF_ENV).is_ok_and(|v| v == "1") {
        eprintln!("SKIPPED {test}: {SKIP_BPF_ENV}=1 is set, BPF programs were not loaded");
        return false;
    }
    true
}

/// The calling thread's id.
pub fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u32 }
}

/// CLOCK_MONOTONIC now, in ns (the clock `bpf_ktime_get_ns` uses).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
