//! `rip-probe leaks --pid N --duration D`: the heap blocks, descriptors,
//! mappings and SysV shm a process acquired during the window and still
//! holds at its end, grouped by the stack that acquired them (unwound from
//! the binaries' CFI), as text or JSON.
//!
//! The heap's uprobes cost the process a trap per allocator call, so
//! before the window they only count calls for a moment, and what the
//! tracing will cost is said on stderr before any block is followed.

use std::time::{Duration, Instant};

use clap::Args;

use super::{
    output::{Outputs, Sink, require_window},
    parse_duration,
};
use crate::{
    analyze,
    collect::{
        kernel::leaks::HeapSite,
        kernel::{leaks::LeaksProbe, privileges},
        leaks::{
            Allocator, LeaksCollector, LeaksData, find_allocator, open_descriptors, traced_calls,
        },
        procfs,
        stacks::Stacks,
    },
    discover::Target,
    error::{Error, Result},
    model::{
        SCHEMA_VERSION,
        leaks::{HeapTracing, LeakLost, LeakTracing, LeaksReport},
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
/// How long the heap probes count calls before the window, for the cost
/// said before it.
const COUNT_BEFORE: Duration = Duration::from_millis(200);
/// What one traced allocator call costs the process, in µs: a uprobe and
/// a uretprobe hit (a free only the first). The low end was measured
/// with these probes: `tests/bench/alloc_mix.c` lost 7.1 to 7.5 µs of CPU
/// time per allocator call (200,000 operations, 2 CPUs at load 11); the
/// high end is twice the 22 µs an uprobe hit cost a prototype on machines
/// of this kind.
const HIT_US: (u64, u64) = (7, 45);

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
    #[arg(long, requires = "pid", conflicts_with_all = ["duration", "min_age", "no_heap"])]
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
    /// Also write a pprof profile to FILE, for `go tool pprof`, Pyroscope
    /// or Parca: what is still held (`inuse_objects`, `inuse_space`) and
    /// everything acquired in the window, released or not
    /// (`alloc_objects`, `alloc_space`), by acquiring stack. Every heap
    /// block's stack is then unwound, even of those freed at once.
    #[arg(long, value_name = "FILE", conflicts_with = "sampled")]
    pprof: Option<std::path::PathBuf>,
    /// Also write an SVG timeline to FILE: the bytes, descriptors and
    /// heap blocks outstanding over the window, and the allocator calls
    /// per second.
    #[arg(long, value_name = "FILE", conflicts_with = "sampled")]
    timeline: Option<std::path::PathBuf>,
    /// Write an SVG flame graph of the outstanding bytes to FILE (and the
    /// text report to stdout).
    #[arg(long, value_name = "FILE", conflicts_with = "json")]
    svg: Option<std::path::PathBuf>,
}

pub(crate) fn run(a: &LeaksArgs, out: &mut Sink) -> Result<()> {
    // Refused before anything is traced: no window is spent on a report
    // that cannot be written.
    for (flag, given) in [
        ("--pprof", a.pprof.is_some()),
        ("--timeline", a.timeline.is_some()),
    ] {
        if given && (a.ring.is_some() || a.sampled) {
            return Err(Error::Usage(format!(
                "{flag} writes a traced window's report: use it with rip-probe leaks --pid PID \
                 --duration D (not with a RING or --sampled)"
            )));
        }
    }
    let files = Outputs::check(a.svg.as_deref(), a.pprof.as_deref(), a.timeline.as_deref())?;
    let pid = match (&a.ring, a.pid) {
        (Some(ring), _) => return super::leaks_ring::run_file(ring, a.json, &files, out),
        (None, Some(pid)) if a.sampled => {
            return super::leaks_ring::run_pid(pid, a.json, &files, out);
        }
        (None, Some(pid)) => pid,
        (None, None) => {
            return Err(Error::Usage(
                "say what to look at: rip-probe leaks --pid PID (trace a window), --pid PID --sampled, or RING".into(),
            ));
        }
    };
    require_window("leaks", a.duration, "10s")?;
    let target = Target::open(pid)?;
    privileges::check()?;
    let threads = procfs::tids(pid)?.len();
    let stacks = Stacks::new(pid).map_err(|e| Error::Usage(e.to_string()))?;
    let calls = traced_calls(true, true, true);
    let mut warnings: Vec<String> = Vec::new();
    let allocator = if a.no_heap {
        warnings.push("heap not traced: --no-heap".into());
        None
    } else {
        match find_allocator(pid)? {
            Ok(alloc) => Some(alloc),
            Err(why) => {
                warnings.push(why);
                None
            }
        }
    };
    if let Some(al) = &allocator
        && al.static_exe
    {
        warnings.push(format!(
            "statically linked: the heap is traced through the executable's own malloc family \
             ({}); allocations that bypass it (its own pools, or mmap directly) show as mappings only",
            al.name
        ));
    }
    let heap_sites: &[HeapSite] = allocator.as_ref().map_or(&[], |al| &al.sites);
    let open_at_start = open_descriptors(pid);
    let mut sym = StackSymbolizer::new(pid);
    let (c, rate) = timing::phase("attach leaks", || -> Result<_> {
        let probe = LeaksProbe::attach(pid, threads, &calls, heap_sites)?;
        let mut c = LeaksCollector::new(probe, stacks, open_at_start);
        if files.pprof.is_some() {
            c.count_acquired();
        }
        let mut rate = 0.0;
        if let Some(al) = &allocator {
            rate = count_heap_calls(&mut c)?;
            say_heap_cost(al, rate);
            c.heap_on(c.heap_calls()?)?;
        }
        Ok((c, rate))
    })?;
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
    warnings.splice(0..0, observed.interrupted_note());
    if let Some(l) = &lost {
        warnings.push(format!(
            "{} after {}: what it held is as of then",
            l.describe(pid),
            duration(elapsed.as_nanos() as u64)
        ));
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
            heap: allocator.as_ref().map(|al| HeapTracing {
                allocator: al.binary.clone(),
                name: al.name.clone(),
                functions: al.sites.iter().map(|h| h.site.name.clone()).collect(),
                calls: 0,
                calls_per_s_before: rate,
                older_frees: 0,
            }),
        },
        open_at_start: None,
        totals: Vec::new(),
        released: Vec::new(),
        stacks: Vec::new(),
        allocated: None,
        series: Vec::new(),
        lost: LeakLost::default(),
        warnings,
        sampler: None,
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
    files.recheck()?;
    if let Some(file) = &files.pprof {
        let view = lost.is_none().then(|| target.view_pid());
        let frames = report.stacks.iter().flat_map(|s| s.frames.iter()).chain(
            report
                .allocated
                .iter()
                .flatten()
                .flat_map(|s| s.frames.iter()),
        );
        super::write_pprof(
            file,
            view,
            render::pprof_modules(frames),
            &report,
            render::leaks_pprof,
        )?;
    }
    super::emit_leaks(&report, a.json, &files, out)
}

/// Allocator calls per second of the process, its heap probes counting
/// only for [`COUNT_BEFORE`] (the syscalls' events drained meanwhile).
fn count_heap_calls(c: &mut LeaksCollector) -> Result<f64> {
    let before = c.heap_calls()?;
    let t = Instant::now();
    while t.elapsed() < COUNT_BEFORE {
        std::thread::sleep(TICK);
        c.serve();
    }
    let n = c.heap_calls()?.saturating_sub(before);
    Ok(n as f64 / t.elapsed().as_secs_f64())
}

/// Says on stderr, before the window, what tracing the heap costs the
/// process at the rate it allocates now.
fn say_heap_cost(al: &Allocator, rate: f64) {
    let share = |us: u64| rate * us as f64 / 1e4;
    eprintln!(
        "rip-probe: heap: uprobes on {} functions of {} ({}); the process made {:.0} allocator \
         calls/s just now, and each traced call costs it {}–{} µs: about {:.1}–{:.1}% of a CPU \
         while traced (--no-heap traces none)",
        al.sites.len(),
        al.binary,
        al.name,
        rate,
        HIT_US.0,
        HIT_US.1,
        share(HIT_US.0),
        share(HIT_US.1),
    );
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
