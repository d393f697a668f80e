//! `rip-probe --pid N`: attach a session, observe, snapshot (collect,
//! correlate, symbolize), filter, group once, render; again with
//! `--watch`.

use std::{io::Write, path::PathBuf, time::Duration};

use clap::Args;

use super::{
    Length, filter_idle,
    output::{Outputs, Sink},
    parse_duration, parse_length,
};
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
    /// The process to look at. Several (`--pid 1,2` or `--pid 1 --pid 2`)
    /// are observed over one window and reported as one report, their
    /// threads grouped across them, each process's report below.
    #[arg(long, short, value_name = "PID", value_delimiter = ',', num_args = 1)]
    pub(super) pid: Vec<u32>,
    /// Every process named NAME (its comm, as `ps -o comm` shows it), in
    /// one report as several --pid are; may be repeated.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["ring", "watch"])]
    pub(super) comm: Vec<String>,
    /// Every process of this cgroup (v2) and the cgroups below it (a
    /// pod, a service, a container), in one report as several --pid are:
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
    pub(super) watch: bool,
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
    pub(super) ring: Option<PathBuf>,
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
    pub(super) folded: bool,
    /// Also write the threads as a pprof profile to FILE, as Go's
    /// goroutine profile: one sample per thread by stack (`threads/count`,
    /// `blocked/nanoseconds`), labelled with its state, syscall and name.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["watch", "cgroup"])]
    pprof: Option<PathBuf>,
    /// Print the session's events as JSON lines instead of a report: the
    /// attach, each thread's state change as it happens, each snapshot
    /// (with its report), the detach (schema: docs/JSON.md, Event).
    #[arg(long, conflicts_with_all = ["json", "folded", "pprof", "cgroup"])]
    events: bool,
}

impl LiveArgs {
    /// The processes the arguments name.
    pub(super) fn named(&self) -> super::targets::Named {
        super::targets::Named {
            pids: self.pid.clone(),
            comms: self.comm.clone(),
            cgroup: self.cgroup.clone(),
        }
    }

    /// The option given that reports on one process only (`--pprof`,
    /// `--events`), if any: refused with several processes rather than
    /// ignored.
    pub(super) fn one_process_option(&self) -> Option<&'static str> {
        if self.pprof.is_some() {
            Some("--pprof")
        } else if self.events {
            Some("--events")
        } else {
            None
        }
    }

    /// How many rows the text's THREADS table lists (`None`: all).
    pub(super) fn table_rows(&self) -> Option<usize> {
        (!self.all).then_some(self.max_threads)
    }
}

pub(crate) fn run(a: &LiveArgs, out: &mut Sink) -> Result<()> {
    let pid = a.pid.first().copied().ok_or_else(|| {
        Error::Usage(
            "say which process: rip-probe --pid PID, --comm NAME, --cgroup PATH (or rip-probe \
             dump FILE)"
                .into(),
        )
    })?;
    if a.events {
        return events(a, pid, out);
    }
    let pprof = Outputs::check(None, a.pprof.as_deref(), None)?.pprof;
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
        if let Some(file) = &pprof {
            let view = report.process.alive.then(|| session.target().view_pid());
            // The goroutines' stacks are samples too (shared stacks once).
            let mut seen = std::collections::HashSet::new();
            let goroutine_frames = report
                .tasks
                .iter()
                .filter_map(|t| t.go.as_ref())
                .filter(|g| seen.insert(g.stack.as_ptr()))
                .flat_map(|g| g.stack.iter());
            let frames = report
                .threads
                .iter()
                .flat_map(|t| t.frames.iter().chain(t.location.as_ref().map(|l| &l.frame)))
                .chain(goroutine_frames);
            super::write_pprof(
                file,
                view,
                render::pprof_modules(frames),
                &report,
                render::threads_pprof,
            )?;
        }
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
            // The process ends next: its memory goes with it, and freeing
            // a report of 100,000 goroutines piece by piece costs 5 % of
            // the run.
            std::mem::forget(report);
            return Ok(());
        }
        if !a.json && !out.is_file() {
            out.emit(|w| writeln!(w))?;
        }
    }
}

/// `--events`: the session's events as JSON lines, written as they come
/// (to a file: the file holds every line so far).
fn events(a: &LiveArgs, pid: u32, out: &mut Sink) -> Result<()> {
    let mut opts = options(a, pid);
    opts.events = true;
    let mut lines = JsonLines::new(out);
    let mut session = Session::attach_with(&opts, &mut lines)?;
    lines.flush()?;
    loop {
        let observed = session.observe_for(a.duration.0, &mut lines)?;
        lines.flush()?;
        let note = observed.interrupted_note();
        let last = !a.watch || note.is_some();
        if last {
            session.stop_observing()?;
        }
        let mut report = report(a, &mut session)?;
        report.warnings.splice(0..0, note);
        session.tell_snapshot(&report, &mut lines);
        lines.flush()?;
        if last || !report.process.alive {
            break;
        }
    }
    session.detach(&mut lines)?;
    lines.flush()
}

/// An observer writing each event as a line of JSON to the sink: to
/// stdout at least every [`LINES_EVERY`] (and at each attach, snapshot,
/// exit and detach), to a file whole each time.
struct JsonLines<'s, 'a> {
    out: &'s mut Sink<'a>,
    buf: Vec<u8>,
    /// Bytes of `buf` already written (stdout only).
    written: usize,
    last: std::time::Instant,
    /// The first error writing (the observer cannot return it).
    error: Option<Error>,
}

/// How long state changes wait in the buffer at most.
const LINES_EVERY: Duration = Duration::from_millis(100);

impl<'s, 'a> JsonLines<'s, 'a> {
    fn new(out: &'s mut Sink<'a>) -> Self {
        JsonLines {
            out,
            buf: Vec::new(),
            written: 0,
            last: std::time::Instant::now(),
            error: None,
        }
    }

    /// Writes what is buffered; returns the first error met.
    fn flush(&mut self) -> Result<()> {
        if self.error.is_none() && self.written < self.buf.len() {
            let file = self.out.is_file();
            let from = if file { 0 } else { self.written };
            let r = self.out.emit(|w| w.write_all(&self.buf[from..]));
            if !file {
                self.buf.clear();
            } else {
                self.written = self.buf.len();
            }
            if let Err(e) = r {
                self.error = Some(e);
            }
        }
        self.last = std::time::Instant::now();
        match self.error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl crate::session::Observer for JsonLines<'_, '_> {
    fn on_event(&mut self, event: &crate::model::events::Event<'_>) {
        if self.error.is_some() {
            return;
        }
        if let Err(e) = render::json(event, &mut self.buf) {
            self.error = Some(Error::io("stdout", e));
            return;
        }
        let state = matches!(event, crate::model::events::Event::State(_));
        // An error is kept for the caller's flush.
        if (!state || self.last.elapsed() >= LINES_EVERY)
            && let Err(e) = self.flush()
        {
            self.error = Some(e);
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
