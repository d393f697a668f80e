//! Phase timings on stderr when `RIP_PROBE_TIMING=1`: where a report's time
//! goes (attach, task iterator, symbolization, rendering), for the
//! performance figures in the docs and for anyone chasing a slow report.

use std::{sync::OnceLock, time::Instant};

pub(crate) fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("RIP_PROBE_TIMING").is_ok_and(|v| v == "1"))
}

/// Prints how long `f` took under `phase`, when enabled.
pub(crate) fn phase<T>(phase: &str, f: impl FnOnce() -> T) -> T {
    if !enabled() {
        return f();
    }
    let t = Instant::now();
    let v = f();
    eprintln!(
        "rip-probe timing: {phase}: {:.1}ms",
        t.elapsed().as_secs_f64() * 1e3
    );
    v
}

/// Says on stderr, when enabled, that `event` happened (`what` says
/// more): a mark, not a duration, for those who wait on it (a test that
/// acts once the window has started).
pub(crate) fn mark(event: &str, what: &str) {
    if enabled() {
        eprintln!("rip-probe timing: {event}: {what}");
    }
}
