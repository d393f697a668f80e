//! `rip-probe locks --pid N --duration D`: futex contention over a window.
//! discover (the target, by pidfd) → collect (the futex programs count in
//! the kernel; their maps are read once; each lock's layout, the waiters'
//! names and the wakers' stacks read from the target) → symbolize (lock
//! and frame names) → analyze (per lock: totals, histogram, waiters,
//! wakers) → render.

use std::time::Duration;

use clap::Args;

use super::{Length, output::Sink, parse_length};
use crate::{
    analyze,
    collect::{self, kernel::contention::LockProbe},
    discover::{Lost, Target},
    error::{Error, Result},
    render,
    session::monotonic_ns,
    symbolize,
    util::timing,
    window::{Watch, Window},
};

/// `rip-probe locks`.
#[derive(Debug, Args)]
pub(crate) struct LocksArgs {
    /// The process whose lock contention to count.
    #[arg(long, short)]
    pid: Option<u32>,
    /// How long to count (e.g. 500ms, 5s; default 5s; `forever`: until
    /// Ctrl-C or the process exits). Ctrl-C ends it early with the counts
    /// so far.
    #[arg(long, short, default_value = "5s", value_parser = parse_length)]
    duration: Length,
    /// Print the report as JSON (schema: docs/JSON.md).
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(a: &LocksArgs, out: &mut Sink) -> Result<()> {
    let pid = a
        .pid
        .ok_or_else(|| Error::Usage("say which process: rip-probe locks --pid PID".into()))?;
    if a.duration.0.is_some_and(|d| d.is_zero()) {
        return Err(Error::Usage(
            "--duration 0: locks counts contention over a window, so a window is needed: e.g. --duration 5s"
                .into(),
        ));
    }
    let target = Target::open(pid)?;
    let mut probe = timing::phase("load and attach", || LockProbe::attach(pid))?;
    let start = monotonic_ns();
    let mut observed = Window::new(a.duration.0, TICK).run(&mut Counting(&target))?;
    let window_ns = monotonic_ns().saturating_sub(start);
    // The report's window, to the detach: the note says the same length.
    observed.elapsed = Duration::from_nanos(window_ns);
    timing::phase("detach", || probe.stop())?;
    let counted = timing::phase("read maps", || probe.read())?;
    drop(probe);
    let lost = observed.lost().cloned().or_else(|| target.lost());
    let process = crate::session::process_info(&target, lost.as_ref());
    let ev = timing::phase("read locks", || {
        collect::contention::evidence(pid, &counted)
    });
    let (locks, wakers) = timing::phase("symbolize", || {
        symbolize::locks::contention(pid, &counted, &ev)
    });
    let names = analyze::contention::Names { locks, wakers };
    let mut report = timing::phase("analyze", || {
        analyze::contention::report(&counted, &ev, &names, process, window_ns)
    });
    report.warnings.splice(0..0, observed.interrupted_note());
    out.emit(|w| {
        if a.json {
            render::json(&report, w)
        } else {
            render::locks(&report, w)
        }
    })
}

/// How often the window looks for Ctrl-C (the programs count in the
/// kernel: nothing to drain).
const TICK: Duration = Duration::from_millis(100);

/// The window of `locks`: the target's exit ends it early.
struct Counting<'a>(&'a Target);

impl Watch for Counting<'_> {
    fn gone(&mut self) -> Option<Lost> {
        self.0.lost()
    }

    fn wait(&mut self, max: Duration) -> Result<()> {
        self.0.wait_exit(max);
        Ok(())
    }
}
