//! `rip-probe offcpu --pid N --duration D`: where the threads' time off the
//! CPU went, by user stack (unwound from the binaries' CFI, so programs
//! without frame pointers too), optionally kernel stack, and for
//! instrumented programs by last snap. Summed in the kernel at
//! sched_switch; rendered as text, folded stacks, an SVG flame graph or
//! JSON.

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use clap::Args;

use super::{
    output::{Outputs, Sink, require_window},
    parse_duration,
};
use crate::{
    analyze::{self, offcpu::fill},
    collect::{
        kernel::{
            offcpu::{OffCpuOptions, OffCpuProbe},
            privileges,
        },
        offcpu::{OffCpuCollector, OffCpuData, snap_slots},
        procfs,
        runtime::python::Python,
        stacks::Stacks,
    },
    discover::{Target, read_proc},
    error::{Error, Result},
    model::{
        SCHEMA_VERSION,
        offcpu::{OffCpuReport, Periods},
    },
    render,
    symbolize::{self, stacks::StackSymbolizer},
    util::{timefmt::duration, timing},
    window::{Observed, Watch, Window},
};

/// How often the window's loop answers the program and looks at the
/// process.
/// Often enough that a place's second stack is rarely summed under its
/// first one's name before the program has learned to tell them apart.
const TICK: Duration = Duration::from_millis(10);
/// How often the stacks unwound are named.
const NAME_EVERY: Duration = Duration::from_millis(250);
/// How often the ring's slots are read again for threads registered since.
const SNAP_REFRESH: Duration = Duration::from_secs(1);

/// `rip-probe offcpu`.
#[derive(Debug, Args)]
pub(crate) struct OffCpuArgs {
    /// The process whose threads are observed.
    #[arg(long, short)]
    pid: u32,
    /// How long to observe (e.g. 5s); without it, until Ctrl-C (or the
    /// process exits).
    #[arg(long, short, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Off-CPU periods shorter than this are counted, not attributed
    /// (e.g. 1ms).
    #[arg(long, value_parser = parse_duration, default_value = "1us")]
    min_block: Duration,
    /// Take the kernel stack of each switch too.
    #[arg(long)]
    kernel_stacks: bool,
    /// Print folded stacks (microseconds off CPU), the input of
    /// flamegraph.pl, inferno and speedscope.
    #[arg(long, conflicts_with_all = ["json", "svg"])]
    folded: bool,
    /// Write an SVG flame graph to FILE (and the text report to stdout).
    #[arg(long, value_name = "FILE", conflicts_with = "json")]
    svg: Option<PathBuf>,
    /// Print the report as JSON (schema: docs/JSON.md).
    #[arg(long)]
    json: bool,
    /// Also write the off-CPU time as a pprof profile to FILE (gzipped
    /// profile.proto: `offcpu/nanoseconds` and `periods/count` by stack),
    /// for `go tool pprof`, Pyroscope or Parca.
    #[arg(long, value_name = "FILE")]
    pprof: Option<PathBuf>,
}

pub(crate) fn run(a: &OffCpuArgs, out: &mut Sink) -> Result<()> {
    require_window("offcpu", a.duration, "5s")?;
    let files = Outputs::check(a.svg.as_deref(), a.pprof.as_deref(), None)?;
    let target = Target::open(a.pid)?;
    privileges::check()?;
    let threads = procfs::tids(a.pid)?.len();
    let stacks = Stacks::new(a.pid).map_err(|e| Error::Usage(e.to_string()))?;
    let snaps = snap_slots(a.pid);
    let opts = OffCpuOptions {
        min_block_ns: a.min_block.as_nanos() as u64,
        kernel_stacks: a.kernel_stacks,
        snaps: !snaps.is_empty(),
    };
    let probe = timing::phase("attach offcpu", || {
        OffCpuProbe::attach(a.pid, threads, opts, None)
    })?;
    let mut collector = OffCpuCollector::new(probe, stacks);
    // A CPython program's stacks are shown with their Python frames,
    // read while each period runs.
    let python = crate::discover::maps::ProcessMaps::open(target.view_pid())
        .ok()
        .and_then(|m| Python::detect(target.view_pid(), &m));
    let python_not_read = match python {
        Some(Ok(python)) => {
            collector.watch_python(python, a.pid, opts.min_block_ns);
            None
        }
        Some(Err(why)) => Some(format!("{why}: its stacks are shown native")),
        None => None,
    };
    if !snaps.is_empty() {
        collector.set_snap_slots(&snaps)?;
    }
    timing::phase("threads asleep at the start", || {
        collector.seed_sleepers(a.pid, opts.snaps)
    })?;
    let mut sym = StackSymbolizer::new(a.pid);
    let (data, elapsed, mut observed) = watch(collector, &mut sym, &target, a, opts.snaps)?;
    // The report's window is the program's (from the threads' seeding):
    // the note says the same length.
    observed.elapsed = elapsed;
    let lost = observed.lost().cloned();

    let mut warnings: Vec<String> = observed.interrupted_note().into_iter().collect();
    warnings.extend(python_not_read);
    if let Some(l) = &lost {
        warnings.push(format!(
            "{} after {}: the times are up to then",
            l.describe(a.pid),
            duration(elapsed.as_nanos() as u64)
        ));
    }
    let mut report = OffCpuReport {
        schema: SCHEMA_VERSION,
        process: crate::session::process_info(&target, lost.as_ref()),
        window_ns: elapsed.as_nanos() as u64,
        min_block_ns: opts.min_block_ns,
        kernel_stacks: a.kernel_stacks,
        total_ns: 0,
        preempted_ns: 0,
        short: Periods::default(),
        stacks: Vec::new(),
        threads: Vec::new(),
        snaps: Vec::new(),
        warnings,
    };
    let threads = data.thread_names(a.pid);
    let named = timing::phase("symbolize", || symbolize::stacks::offcpu(&mut sym, &data));
    let names = analyze::offcpu::Names {
        user: named.user,
        kernel: named.kernel,
        snaps: named.snaps,
        threads,
    };
    timing::phase("analyze", || fill(&mut report, &data, &names));
    files.recheck()?;
    if let Some(file) = &files.pprof {
        let view = lost.is_none().then(|| target.view_pid());
        let frames = report.stacks.iter().flat_map(|s| s.frames.iter());
        super::write_pprof(
            file,
            view,
            render::pprof_modules(frames),
            &report,
            render::offcpu_pprof,
        )?;
    }
    if let Some(svg) = &files.svg {
        svg.write(|w| render::offcpu_svg(&report, w))?;
        return out.emit(|w| {
            render::offcpu_text(&report, &mut *w)?;
            writeln!(w, "\nflame graph: {}", svg.path().display())
        });
    }
    out.emit(|w| {
        if a.folded {
            render::offcpu_folded(&report, w)
        } else if a.json {
            render::json(&report, w)
        } else {
            render::offcpu_text(&report, w)
        }
    })
}

/// The window of `offcpu`: the program's stack copies answered, the
/// stacks unwound named while the process runs, the snap slots refreshed.
struct Summing<'a> {
    c: OffCpuCollector,
    sym: &'a mut StackSymbolizer,
    target: &'a Target,
    pid: u32,
    snaps: bool,
    snaps_read: Instant,
    threads: Option<u64>,
    named: Instant,
}

impl Watch for Summing<'_> {
    fn tick(&mut self, _elapsed: Duration) -> Result<()> {
        self.c.serve()?;
        self.c.read_python()?;
        if self.named.elapsed() >= NAME_EVERY {
            // Named while the process runs: its binaries are read through
            // /proc/PID, gone once it exits.
            let fresh = self.c.take_new_stacks();
            let refs: Vec<&[u64]> = fresh.iter().map(|s| &s[..]).collect();
            self.sym.frames_of_many(&refs);
            self.named = Instant::now();
        }
        if self.snaps && self.snaps_read.elapsed() >= SNAP_REFRESH {
            // Threads registered since the last look: the ring is read
            // again only when the process's thread count moved (a 100,000
            // thread ring is tens of megabytes; a thread that replaced one
            // which exited in the same second waits for the next move).
            let now = thread_count(self.pid);
            if now != self.threads {
                self.c.set_snap_slots(&snap_slots(self.pid))?;
                self.threads = now;
            }
            self.snaps_read = Instant::now();
        }
        Ok(())
    }

    fn gone(&mut self) -> Option<crate::discover::Lost> {
        self.target.lost()
    }

    fn wait(&mut self, max: Duration) -> Result<()> {
        self.target.wait_exit(max);
        Ok(())
    }

    fn seen(&mut self) -> Result<String> {
        Ok(format!("{} off-CPU periods so far", self.c.summed()))
    }
}

/// Runs the window: answers the program's stack copies, refreshes the
/// snap slots, shows progress, stops early when the process exits or on
/// Ctrl-C.
fn watch(
    c: OffCpuCollector,
    sym: &mut StackSymbolizer,
    target: &Target,
    a: &OffCpuArgs,
    snaps: bool,
) -> Result<(OffCpuData, Duration, Observed)> {
    let mut s = Summing {
        c,
        sym,
        target,
        pid: a.pid,
        snaps,
        snaps_read: Instant::now(),
        threads: thread_count(a.pid),
        named: Instant::now(),
    };
    let observed = Window::new(a.duration, TICK).run(&mut s)?;
    let data = timing::phase("read totals", || {
        s.c.finish(a.pid, a.min_block.as_nanos() as u64)
    })?;
    let elapsed = Duration::from_nanos(data.window_ns);
    Ok((data, elapsed, observed))
}

/// The number of threads of process `pid` (`Threads:` of its status
/// file: one small read, whatever the count).
fn thread_count(pid: u32) -> Option<u64> {
    let status = read_proc(pid, 0, "status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:")?.trim().parse().ok())
}
