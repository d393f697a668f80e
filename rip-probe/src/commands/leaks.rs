//! `rip-probe leaks --pid N --duration D`: the descriptors, mappings and
//! SysV shm a process acquired during the window and still holds at its
//! end, grouped by the stack that acquired them (unwound from the
//! binaries' CFI), as text or JSON.

use std::time::{Duration, Instant};

use clap::Args;

use super::{
    output::{OutputFile, Sink},
    parse_duration,
};
use crate::{
    analyze,
    collect::{
        kernel::{leaks::LeaksProbe, privileges},
        leaks::{LeaksCollector, LeaksData, open_descriptors, traced_calls},
        procfs,
        stacks::Stacks,
    },
    discover::Target,
    error::{Error, Result},
    model::{
        SCHEMA_VERSION,
        leaks::{LeakLost, LeakTracing, LeaksReport},
    },
    render,
    symbolize::stacks::StackSymbolizer,
    util::{timefmt::duration, timing},
    window::{Watch, Window},
};

/// How often the window's loop drains the events.
const TICK: Duration = Duration::from_millis(10);
/// How often the stacks unwound are named (while the process runs: its
/// binaries are read through /proc/PID).
const NAME_EVERY: Duration = Duration::from_millis(250);
/// Points of the series over the window.
const MARK_EVERY: Duration = Duration::from_millis(100);

/// `rip-probe leaks`.
#[derive(Debug, Args)]
pub(crate) struct LeaksArgs {
    /// A ring file written with librip's allocation sampler on
    /// (RIP_ALLOC_SAMPLE): what was live in it, even after its process
    /// died.
    #[arg(
        required_unless_present = "pid",
        conflicts_with = "pid",
        value_name = "RING"
    )]
    ring: Option<std::path::PathBuf>,
    /// The process observed.
    #[arg(long, short)]
    pid: Option<u32>,
    /// With --pid: read the live allocations librip's sampler keeps in
    /// the process's ring (no tracing, no cost to the process) instead of
    /// tracing a window.
    #[arg(long, requires = "pid", conflicts_with_all = ["duration", "min_age", "no_heap", "json"])]
    sampled: bool,
    /// How long to observe (e.g. 10s); without it, until Ctrl-C (or the
    /// process exits).
    #[arg(long, short, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Resources younger than this at the end are left out: still in use
    /// rather than leaked (e.g. 1s).
    #[arg(long, value_parser = parse_duration, default_value = "0s")]
    min_age: Duration,
    /// Trace no heap (the allocator's uprobes cost each call tens of
    /// microseconds); descriptors and mappings cost a syscall little.
    #[arg(long)]
    no_heap: bool,
    /// Print the report as JSON (schema: docs/JSON.md).
    #[arg(long)]
    json: bool,
    /// Also write what is still held as a pprof profile to FILE
    /// (`inuse_objects`, `inuse_space` by acquiring stack), for `go tool
    /// pprof`, Pyroscope or Parca.
    #[arg(long, value_name = "FILE", conflicts_with = "sampled")]
    pprof: Option<std::path::PathBuf>,
}

pub(crate) fn run(a: &LeaksArgs, out: &mut Sink) -> Result<()> {
    let pid = match (&a.ring, a.pid) {
        (Some(ring), _) => return super::leaks_ring::run_file(ring, out),
        (None, Some(pid)) if a.sampled => return super::leaks_ring::run_pid(pid, out),
        (None, Some(pid)) => pid,
        (None, None) => {
            return Err(Error::Usage(
                "say what to look at: rip-probe leaks --pid PID (trace a window), --pid PID --sampled, or RING".into(),
            ));
        }
    };
    if a.duration.is_some_and(|d| d.is_zero()) {
        return Err(Error::Usage(
            "leaks needs a window: give --duration a length, e.g. --duration 10s".into(),
        ));
    }
    let pprof = a
        .pprof
        .as_deref()
        .map(|p| OutputFile::check("--pprof", p))
        .transpose()?;
    let target = Target::open(pid)?;
    privileges::check()?;
    let threads = procfs::tids(pid)?.len();
    let stacks = Stacks::new(pid).map_err(|e| Error::Usage(e.to_string()))?;
    let calls = traced_calls(true, true, true);
    let open_at_start = open_descriptors(pid);
    let probe = timing::phase("attach leaks", || LeaksProbe::attach(pid, threads, &calls))?;
    let mut sym = StackSymbolizer::new(pid);
    let c = LeaksCollector::new(probe, stacks, open_at_start);
    let mut s = Tracing {
        c,
        sym: &mut sym,
        target: &target,
        named: Instant::now(),
        marked: Instant::now(),
    };
    let mut observed = Window::new(a.duration, TICK).run(&mut s)?;
    let data: LeaksData = timing::phase("read the rest", || s.c.finish(pid))?;
    let elapsed = Duration::from_nanos(data.end_ns.saturating_sub(data.start_ns));
    observed.elapsed = elapsed;
    let lost = observed.lost().cloned();
    let mut warnings: Vec<String> = observed.interrupted_note().into_iter().collect();
    if let Some(l) = &lost {
        warnings.push(format!(
            "{} after {}: what it held is as of then",
            l.describe(pid),
            duration(elapsed.as_nanos() as u64)
        ));
    }
    if !a.no_heap {
        warnings.push(
            "heap not traced: this build of rip-probe leaks traces descriptors, mappings and SysV shm; \
             pass --no-heap to say so"
                .into(),
        );
    }
    let mut report = LeaksReport {
        schema: SCHEMA_VERSION,
        process: crate::session::process_info(&target, lost.as_ref()),
        window_ns: elapsed.as_nanos() as u64,
        min_age_ns: a.min_age.as_nanos() as u64,
        traced: LeakTracing {
            descriptors: true,
            mappings: true,
            shm: true,
            heap: None,
        },
        open_at_start: None,
        totals: Vec::new(),
        released: Vec::new(),
        stacks: Vec::new(),
        series: Vec::new(),
        lost: LeakLost::default(),
        warnings,
    };
    let names = timing::phase("symbolize", || {
        let refs: Vec<&[u64]> = data.stacks.iter().map(|s| &s[..]).collect();
        let frames = sym.frames_of_many(&refs);
        data.stacks
            .iter()
            .cloned()
            .zip(frames.into_iter().map(Into::into))
            .collect()
    });
    timing::phase("analyze", || {
        analyze::leaks::fill(&mut report, &data, &names)
    });
    if let Some(file) = &pprof {
        let view = lost.is_none().then(|| target.view_pid());
        let frames = report.stacks.iter().flat_map(|s| s.frames.iter());
        super::write_pprof(
            file,
            view,
            render::pprof_modules(frames),
            &report,
            render::leaks_pprof,
        )?;
    }
    out.emit(|w| {
        if a.json {
            render::json(&report, w)
        } else {
            render::leaks_text(&report, w)
        }
    })
}

/// The window of `leaks`: the events drained, the stacks named while the
/// process runs, the totals noted for the series.
struct Tracing<'a> {
    c: LeaksCollector,
    sym: &'a mut StackSymbolizer,
    target: &'a Target,
    named: Instant,
    marked: Instant,
}

impl Watch for Tracing<'_> {
    fn tick(&mut self, _elapsed: Duration) -> Result<()> {
        self.c.serve();
        if self.marked.elapsed() >= MARK_EVERY {
            self.c.mark();
            self.marked = Instant::now();
        }
        if self.named.elapsed() >= NAME_EVERY {
            let fresh = self.c.take_new_stacks();
            let refs: Vec<&[u64]> = fresh.iter().map(|s| &s[..]).collect();
            self.sym.frames_of_many(&refs);
            self.named = Instant::now();
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
        Ok(format!("{} resources held so far", self.c.held()))
    }
}
