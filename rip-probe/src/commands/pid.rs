//! `rip-probe --pid N`: attach a session, observe, snapshot (collect,
//! correlate, symbolize), filter, group once, render; again with
//! `--watch`.

use std::{io::Write, path::PathBuf, time::Duration};

use clap::Args;

use super::{Length, filter_idle, output::Sink, parse_duration, parse_length};
use crate::{
    analyze,
    error::{Error, Result},
    model::Report,
    render,
    session::{Session, SessionOptions},
    util::timing,
};

/// `rip-probe --pid N`.
#[derive(Debug, Args)]
pub(crate) struct LiveArgs {
    /// The process to look at.
    #[arg(long, short, conflicts_with = "cgroup")]
    pid: Option<u32>,
    /// Every process of this cgroup (v2) and the cgroups below it (a
    /// pod, a service, a container), in one report grouped by process:
    /// a path under /sys/fs/cgroup, or relative to the cgroup v2 root.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["ring", "watch"])]
    pub(super) cgroup: Option<PathBuf>,
    /// How long to watch context switches before reporting (default 1s;
    /// `forever`: until Ctrl-C or the process exits). Ctrl-C ends the
    /// window early and reports what was seen.
    #[arg(long, short, default_value = "1s", value_parser = parse_length)]
    pub(super) duration: Length,
    /// Only threads blocked at least this long (e.g. 500ms, 2s).
    #[arg(long, value_parser = parse_duration)]
    min_blocked: Option<Duration>,
    /// Only tasks idle at least this long (since their last poll ended, or
    /// their creation if never polled); polling tasks are not idle.
    #[arg(long, value_parser = parse_duration)]
    min_idle: Option<Duration>,
    /// Report again every --duration until interrupted or the process
    /// exits. With -o FILE, each report replaces the file whole (the file
    /// always holds the latest report, as `top -b -n 1` would write it).
    #[arg(long)]
    watch: bool,
    /// Print the report as JSON (schema: docs/JSON.md).
    #[arg(long)]
    pub(super) json: bool,
    /// Text: list at most this many threads in the THREADS table (the
    /// summary above it always counts every thread; JSON and folded output
    /// always hold them all).
    #[arg(long, value_name = "N", default_value_t = 100, conflicts_with = "all")]
    pub(super) max_threads: usize,
    /// Text: list every thread in the THREADS table.
    #[arg(long)]
    pub(super) all: bool,
    /// For programs without librip: attach uprobes to functions matching
    /// this glob (`LIB:GLOB` for a shared library) and report each
    /// thread's last function entered.
    #[arg(long, value_name = "PATTERN")]
    uprobe: Option<String>,
    /// Read this ring file instead of the process's own.
    #[arg(long, conflicts_with = "no_ring")]
    ring: Option<PathBuf>,
    /// Ignore the process's ring.
    #[arg(long)]
    no_ring: bool,
    /// Do not take user stacks: kernel state and locations only, the
    /// cheapest report.
    #[arg(long)]
    no_stacks: bool,
    /// Print the user stacks in Brendan Gregg's folded format, one line
    /// per distinct stack (`comm;outer;...;inner COUNT`, COUNT threads),
    /// for flame graph tools.
    #[arg(long, conflicts_with_all = ["json", "no_stacks"])]
    folded: bool,
}

impl LiveArgs {
    /// How many rows the text's THREADS table lists (`None`: all).
    pub(super) fn table_rows(&self) -> Option<usize> {
        (!self.all).then_some(self.max_threads)
    }
}

pub(crate) fn run(a: &LiveArgs, out: &mut Sink) -> Result<()> {
    let pid = a.pid.ok_or_else(|| {
        Error::Usage(
            "say which process: rip-probe --pid PID, --cgroup PATH (or rip-probe dump FILE)".into(),
        )
    })?;
    let mut session = Session::attach(&options(a, pid))?;
    loop {
        let observed = session.observe_for(a.duration.0, &mut ())?;
        // Ctrl-C ends --watch too, after the report of what it cut short.
        let note = observed.interrupted_note();
        let last = !a.watch || note.is_some();
        if last {
            session.stop_observing()?;
        }
        let mut report = report(a, &mut session)?;
        report.warnings.splice(0..0, note);
        let rows = a.table_rows();
        let text = |r: &Report, w: &mut dyn Write| {
            if a.folded {
                render::folded(r, w)
            } else {
                render::live_cut(r, rows, w)
            }
        };
        timing::phase("render", || {
            out.emit(|w| {
                // Each text report of --watch says when it was taken and
                // over what window; JSON reports are JSON lines, one per
                // report.
                if a.watch && !a.json {
                    stamp(w, observed.elapsed)?;
                }
                if a.json {
                    render::json(&report, w)
                } else {
                    text(&report, w)
                }
            })
        })?;
        // The report says whether the target was gone when it was taken;
        // one that exits after that gets one more report, which says so.
        if last || !report.process.alive {
            return Ok(());
        }
        if !a.json && !out.is_file() {
            out.emit(|w| writeln!(w))?;
        }
    }
}

/// The line heading one report of `--watch`: the time it was taken (UTC)
/// and the window it covers, this iteration's alone.
fn stamp(out: &mut dyn Write, window: Duration) -> std::io::Result<()> {
    let now = jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .unwrap_or_else(|_| jiff::Timestamp::now());
    writeln!(out, "=== {now} (window {:.3}s) ===", window.as_secs_f64())
}

/// The session options the arguments ask for, for process `pid`.
pub(super) fn options(a: &LiveArgs, pid: u32) -> SessionOptions {
    let mut opts = SessionOptions::new(pid);
    opts.uprobe = a.uprobe.clone();
    opts.ring = a.ring.clone();
    opts.no_ring = a.no_ring;
    opts.stacks = !a.no_stacks;
    // One snapshot and no window: nothing to record between them, and
    // the report costs the target nothing.
    opts.switches = a.watch || a.duration.0 != Some(Duration::ZERO);
    opts
}

/// A session's report now: filtered as the arguments ask, grouped.
pub(super) fn report(a: &LiveArgs, session: &mut Session) -> Result<Report> {
    let mut report = session.snapshot_ungrouped()?;
    filter(&mut report, a.min_blocked, a.min_idle);
    timing::phase("group", || analyze::groups(&mut report));
    Ok(report)
}

/// `--min-blocked` and `--min-idle`.
fn filter(r: &mut Report, min_blocked: Option<Duration>, min_idle: Option<Duration>) {
    if let Some(min) = min_blocked {
        let min = min.as_nanos() as u64;
        r.threads.retain(|t| t.blocked.is_some_and(|b| b.ns >= min));
    }
    filter_idle(r, min_idle);
}
