//! `rip-probe locks --pid N --duration D`: futex contention over a window.
//! discover (the target, by pidfd) → collect (the futex programs count in
//! the kernel; their maps are read once; each lock's layout, the waiters'
//! names and the wakers' stacks read from the target) → symbolize (lock
//! and frame names) → analyze (per lock: totals, histogram, waiters,
//! wakers) → render.

use std::{
    io::Write,
    time::{Duration, Instant},
};

use clap::Args;

use super::parse_duration;
use crate::{
    analyze,
    collect::{self, kernel::contention::LockProbe},
    discover::{Lost, Target},
    error::{Error, Result},
    render,
    session::monotonic_ns,
    symbolize,
    util::timing,
};

/// `rip-probe locks`.
#[derive(Debug, Args)]
pub(crate) struct LocksArgs {
    /// The process whose lock contention to count.
    #[arg(long, short)]
    pid: Option<u32>,
    /// How long to count (e.g. 500ms, 5s).
    #[arg(long, short, default_value = "5s", value_parser = parse_duration)]
    duration: Duration,
    /// Print the report as JSON (schema: docs/JSON.md).
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(a: &LocksArgs, out: &mut dyn Write) -> Result<()> {
    let pid = a
        .pid
        .ok_or_else(|| Error::Usage("say which process: rip-probe locks --pid PID".into()))?;
    if a.duration.is_zero() {
        return Err(Error::Usage(
            "--duration 0: locks counts contention over a window, so a window is needed: e.g. --duration 5s"
                .into(),
        ));
    }
    let target = Target::open(pid)?;
    let mut probe = timing::phase("load and attach", || LockProbe::attach(pid))?;
    let start = monotonic_ns();
    let deadline = Instant::now() + a.duration;
    let mut lost = None;
    while let Some(left) = deadline
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
    {
        if target.wait_exit(left) {
            lost = Some(target.lost().unwrap_or(Lost::Exited));
            break;
        }
    }
    let window_ns = monotonic_ns().saturating_sub(start);
    timing::phase("detach", || probe.stop())?;
    let counted = timing::phase("read maps", || probe.read())?;
    drop(probe);
    let lost = lost.or_else(|| target.lost());
    let process = crate::session::process_info(&target, lost.as_ref());
    let ev = timing::phase("read locks", || {
        collect::contention::evidence(pid, &counted)
    });
    let (locks, wakers) = timing::phase("symbolize", || {
        symbolize::locks::contention(pid, &counted, &ev)
    });
    let names = analyze::contention::Names { locks, wakers };
    let report = timing::phase("analyze", || {
        analyze::contention::report(&counted, &ev, &names, process, window_ns)
    });
    let written = if a.json {
        render::json(&report, &mut *out)
    } else {
        render::locks(&report, &mut *out)
    };
    written
        .and_then(|()| out.flush())
        .map_err(|e| Error::io("stdout", e))
}
