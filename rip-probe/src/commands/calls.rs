//! `rip-probe calls --pid N --uprobe GLOB --duration D`: every call of the
//! matching functions counted and timed in the kernel for the window, with
//! the calls slower than a threshold listed. Resolve the functions,
//! attach, watch the window (training the outlier thresholds, draining
//! outliers, watching the process), then analyze, symbolize the callers
//! and render.

use std::time::Duration;

use clap::Args;
use rip_ebpf::calls::{CallOutlier, CallStats, MAX_FUNCTIONS};

use super::{
    output::{Outputs, Sink, require_window},
    parse_duration,
};
use crate::{
    analyze::calls::{function_calls, trained_thresholds},
    collect::{
        kernel::{
            Error as KernelError,
            calls::CallsProbe,
            privileges,
            uprobe::{self, ProbeSite},
        },
        procfs,
        stacks::Stacks,
    },
    discover::{self, Target},
    error::{Error, Result},
    model::{
        SCHEMA_VERSION,
        calls::{CallsReport, FunctionCalls, OutlierRule, SlowCall},
    },
    render,
    symbolize::stacks::StackSymbolizer,
    util::timing,
    window::{Observed, Watch, Window},
};

/// Outliers listed at most; the others are counted.
const MAX_OUTLIERS_KEPT: usize = 1000;
/// How often the window's loop drains outliers and looks at the process.
const TICK: Duration = Duration::from_millis(100);

/// `rip-probe calls`.
#[derive(Debug, Args)]
pub(crate) struct CallsArgs {
    /// The process whose calls are counted.
    #[arg(long, short)]
    pid: u32,
    /// Functions to count and time: a glob over the executable's function
    /// names, or `LIB:GLOB` for a shared library whose file name contains
    /// LIB (e.g. `libc:malloc`). Repeat for more.
    #[arg(long, value_name = "PATTERN", required = true)]
    uprobe: Vec<String>,
    /// How long to count (e.g. 500ms, 10s); without it, until Ctrl-C
    /// (or the process exits).
    #[arg(long, short, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// List the calls slower than this (e.g. 10ms).
    #[arg(long, value_parser = parse_duration, conflicts_with = "outlier")]
    slower_than: Option<Duration>,
    /// List the calls slower than this share of the slowest call of the
    /// same function during the training window (e.g. 250%).
    #[arg(long, value_parser = parse_percent)]
    outlier: Option<u32>,
    /// The training window of --outlier, at the start of --duration
    /// (default: its first quarter; needed without --duration).
    #[arg(long, value_parser = parse_duration, requires = "outlier")]
    training: Option<Duration>,
    /// Print the report as JSON (schema: docs/JSON.md).
    #[arg(long)]
    json: bool,
    /// Also write the calls as a pprof profile to FILE: per function its
    /// calls and time, and each slow call listed with its caller's stack.
    #[arg(long, value_name = "FILE")]
    pprof: Option<std::path::PathBuf>,
}

/// Parses `250%` (or `250`) into 250.
fn parse_percent(s: &str) -> std::result::Result<u32, String> {
    let n = s.trim().trim_end_matches('%');
    match n.parse::<u32>() {
        Ok(p) if p > 0 => Ok(p),
        _ => Err(format!("`{s}` is not a percentage (e.g. 250%)")),
    }
}

pub(crate) fn run(a: &CallsArgs, out: &mut Sink) -> Result<()> {
    require_window("calls", a.duration, "5s")?;
    let rule = outlier_rule(a)?;
    let pprof = Outputs::check(None, a.pprof.as_deref(), None)?.pprof;
    let target = Target::open(a.pid)?;
    target.require_user_space(discover::Lacks::Functions)?;
    privileges::check()?;
    let threads = procfs::tids(a.pid)?.len();
    let (sites, mut probe) = timing::phase("attach uprobes", || {
        attach_retrying(&target, &a.uprobe, threads)
    })?;
    let mut thresholds = vec![0; sites.len()];
    if let Some(OutlierRule::SlowerThan { threshold_ns }) = rule {
        // At least 1 ns: 0 means "no threshold" to the program.
        thresholds.fill(threshold_ns.max(1));
        probe.set_thresholds(&thresholds)?;
    }
    let clock = MonotonicToUnix::now();
    let mut sym = StackSymbolizer::new(target.view_pid());
    let w = watch(&mut probe, &mut sym, &target, a, &rule, &mut thresholds)?;
    let lost = w.observed.lost().cloned();
    let addrs = probe.addresses().to_vec();
    // Detached before the report is built: the target runs at full speed
    // again while rip-probe symbolizes.
    drop(probe);

    let names: Vec<String> = sites.iter().map(|s| display_name(&s.name)).collect();
    let mut functions: Vec<FunctionCalls> = sites
        .iter()
        .zip(&w.stats)
        .enumerate()
        .map(|(i, (site, stats))| {
            function_calls(
                names[i].clone(),
                // The path the process knows the binary by, not the one
                // rip-probe reached it through (/proc/PID/...).
                site.mapped.display().to_string(),
                site.file_offset,
                stats,
                thresholds[i],
            )
        })
        .collect();
    functions.sort_by(|a, b| {
        b.calls
            .cmp(&a.calls)
            .then_with(|| a.function.cmp(&b.function))
    });
    let outliers = slow_calls(&mut sym, &w.outliers, &names, &addrs, &clock);
    let mut warnings: Vec<String> = w.observed.interrupted_note().into_iter().collect();
    if let Some(l) = &lost {
        warnings.push(format!(
            "{} after {}: the counts are up to then",
            l.describe(a.pid),
            crate::util::timefmt::duration(w.observed.elapsed.as_nanos() as u64)
        ));
    }
    let untimed: u64 = w.stats.iter().map(|s| s.untimed).sum();
    if untimed > 0 {
        let (used, size) = w.table;
        warnings.push(format!(
            "{untimed} calls were counted but not timed (nested more than {} deep, or the \
             kernel's table of calls in flight was full: it holds {used} of {size} threads at \
             the end)",
            rip_ebpf::calls::MAX_DEPTH
        ));
    }
    let dropped: u64 = w.stats.iter().map(|s| s.outliers_dropped).sum();
    if dropped > 0 {
        warnings.push(format!(
            "{dropped} outliers were counted but not recorded (the kernel's buffer was full): \
             raise the threshold"
        ));
    }
    let report = CallsReport {
        schema: SCHEMA_VERSION,
        process: crate::session::process_info(&target, lost.as_ref()),
        window_ns: w.observed.elapsed.as_nanos() as u64,
        outlier_rule: rule,
        functions,
        outliers,
        outliers_omitted: w.omitted,
        warnings,
    };
    if let Some(file) = &pprof {
        let view = lost.is_none().then(|| target.view_pid());
        let mut modules: Vec<String> = report.functions.iter().map(|f| f.module.clone()).collect();
        modules.extend(render::pprof_modules(
            report.outliers.iter().flat_map(|o| o.stack.iter()),
        ));
        modules.sort();
        modules.dedup();
        super::write_pprof(file, view, modules, &report, render::calls_pprof)?;
    }
    out.emit(|w| {
        if a.json {
            render::json(&report, w)
        } else {
            render::calls_text(&report, w)
        }
    })
}

/// `--slower-than` or `--outlier` (with `--training`), checked.
fn outlier_rule(a: &CallsArgs) -> Result<Option<OutlierRule>> {
    if let Some(t) = a.slower_than {
        return Ok(Some(OutlierRule::SlowerThan {
            threshold_ns: t.as_nanos() as u64,
        }));
    }
    let Some(percent) = a.outlier else {
        return Ok(None);
    };
    let training = match (a.training, a.duration) {
        (Some(t), _) => t,
        (None, Some(d)) => d / 4,
        (None, None) => {
            return Err(Error::Usage(
                "--outlier without --duration: give the training window, e.g. --training 2s".into(),
            ));
        }
    };
    if training.is_zero() || a.duration.is_some_and(|d| training >= d) {
        return Err(Error::Usage(format!(
            "--training must be shorter than --duration ({}), and not 0",
            crate::util::timefmt::duration(a.duration.unwrap_or_default().as_nanos() as u64)
        )));
    }
    Ok(Some(OutlierRule::Trained {
        percent,
        training_ns: training.as_nanos() as u64,
    }))
}

/// Resolves the patterns and attaches, again while a library they name
/// is not mapped or was unmapped between the two (a library the process
/// loads and unloads in a loop), saying so once; at most
/// [`ATTACH_TRIES`] times.
fn attach_retrying(
    target: &Target,
    patterns: &[String],
    threads: usize,
) -> Result<(Vec<ProbeSite>, CallsProbe)> {
    let mut told = false;
    for attempt in 1.. {
        let attached = resolve_all(target.view_pid(), patterns).and_then(|sites| {
            let probe = CallsProbe::attach(target.pid(), &sites, threads)?;
            Ok((sites, probe))
        });
        match attached {
            Err(e) if attempt < ATTACH_TRIES => {
                match came_and_went(&e) {
                    None => return Err(e),
                    Some(Seen::Unmapped) if !told => {
                        told = true;
                        eprintln!(
                            "rip-probe: a library --uprobe names was unmapped while attaching: \
                             retrying"
                        );
                    }
                    Some(_) => {}
                }
                // The library is back within a loop iteration of the
                // target's: try again soon, not at once.
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            r => return r,
        }
    }
    unreachable!("the loop returns at its last attempt")
}

/// How many times [`attach_retrying`] tries.
const ATTACH_TRIES: u32 = 100;

/// How a library was missing.
enum Seen {
    /// Not in the process's maps.
    NotMapped,
    /// In its maps, then gone before it was read or attached to.
    Unmapped,
}

/// Whether `e` says a library was missing when it was looked up, read or
/// attached to, and how.
fn came_and_went(e: &Error) -> Option<Seen> {
    match e {
        Error::Kernel(KernelError::NoSuchLibrary { .. }) => Some(Seen::NotMapped),
        Error::Kernel(
            KernelError::Unreachable { .. } | KernelError::NotMappedExecutable { .. },
        ) => Some(Seen::Unmapped),
        Error::Kernel(KernelError::Symbols { why, .. }) if why.contains("/map_files/") => {
            Some(Seen::Unmapped)
        }
        Error::Discover(
            discover::Error::ProcUnreadable { path, .. } | discover::Error::ReadProc { path, .. },
        ) if path.to_string_lossy().contains("/map_files/") => Some(Seen::Unmapped),
        Error::Kernel(KernelError::Program { source, .. }) => {
            let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(source);
            while let Some(c) = cause {
                if c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::NotFound)
                {
                    return Some(Seen::Unmapped);
                }
                cause = c.source();
            }
            None
        }
        _ => None,
    }
}

/// The functions every pattern matches, each once, at most
/// [`MAX_FUNCTIONS`].
fn resolve_all(pid: u32, patterns: &[String]) -> Result<Vec<ProbeSite>> {
    let mut sites: Vec<ProbeSite> = Vec::new();
    for p in patterns {
        for s in uprobe::resolve_with(pid, p, Some(&crate::symbolize::go_table::go_functions))? {
            if !sites
                .iter()
                .any(|o| o.mapped == s.mapped && o.file_offset == s.file_offset)
            {
                sites.push(s);
            }
        }
    }
    refuse_go_functions(&sites)?;
    if sites.len() > MAX_FUNCTIONS as usize {
        let some: Vec<String> = sites
            .iter()
            .take(3)
            .map(|s| display_name(&s.name))
            .collect();
        return Err(Error::Usage(format!(
            "--uprobe {}: {} functions match, at most {MAX_FUNCTIONS} are timed at once: \
             narrow the pattern, or give one --uprobe per function (matches include {}, …)",
            patterns.join(" --uprobe "),
            sites.len(),
            some.join(", ")
        )));
    }
    Ok(sites)
}

/// Refuses Go functions: a call is timed with a return probe, which
/// replaces the return address on the stack, and Go's runtime walks its
/// stacks (to grow one, to collect garbage) and ends the program at a
/// return address that is in no function ("unexpected return pc").
/// Entry probes are safe: `--pid --uprobe` shows them.
fn refuse_go_functions(sites: &[ProbeSite]) -> Result<()> {
    let mut binaries: Vec<&std::path::Path> = sites.iter().map(|s| s.binary.as_path()).collect();
    binaries.sort();
    binaries.dedup();
    for b in binaries {
        let go: std::collections::HashSet<u64> = crate::symbolize::go_table::go_functions(b)
            .into_iter()
            .map(|(_, off)| off)
            .collect();
        if let Some(s) = sites
            .iter()
            .find(|s| s.binary == b && go.contains(&s.file_offset))
        {
            return Err(Error::Usage(format!(
                "--uprobe {}: a Go function; calls times a call with a return probe, \
                 which makes Go's runtime end the program when it walks that stack: \
                 use rip-probe --pid PID --uprobe PATTERN to see the Go functions \
                 threads enter",
                display_name(&s.name)
            )));
        }
    }
    Ok(())
}

/// A function's name as shown: demangled, without a Rust hash suffix.
fn display_name(stored: &str) -> String {
    format!("{:#}", rustc_demangle::demangle(stored))
}

/// An outlier as kept: its figures and the thread's stack at entry
/// without the function itself (the return address, then its callers),
/// unwound from the copy the program sent while the process ran.
struct Slow {
    start_ns: u64,
    duration_ns: u64,
    tid: u32,
    fn_id: u32,
    callers: Vec<u64>,
}

impl Slow {
    /// Unwinds `o`'s callers with `stacks` (when the process's unwinder
    /// could be made), else keeps the return address alone.
    fn of(o: &CallOutlier, stacks: Option<&mut Stacks>) -> Slow {
        let len = (o.stack_len as usize).min(o.stack.len());
        let callers = match stacks {
            Some(s) if len > 0 => {
                let regs = rip_ebpf::UserRegs {
                    ip: o.ret_addr,
                    sp: o.sp,
                    bp: o.bp,
                    ..rip_ebpf::UserRegs::default()
                };
                s.unwind_copy(&regs, &o.stack[..len])
            }
            _ => vec![o.ret_addr],
        };
        Slow {
            start_ns: o.start_ns,
            duration_ns: o.duration_ns,
            tid: o.tid,
            fn_id: o.fn_id,
            callers,
        }
    }
}

/// What the window saw.
struct Watched {
    /// Per function id, summed over CPUs, at the end.
    stats: Vec<CallStats>,
    /// The kernel's table of threads in probed calls at the end: (threads
    /// in it, its size).
    table: (usize, u32),
    /// Outliers kept (at most [`MAX_OUTLIERS_KEPT`]).
    outliers: Vec<Slow>,
    /// Outliers past that.
    omitted: u64,
    /// How long the window lasted and how it ended.
    observed: Observed,
}

/// The window of `calls`: the trained thresholds set when training ends,
/// the outliers drained, unwound and named as they come, while the
/// process runs (its binaries are read through /proc/PID).
struct Counting<'a> {
    probe: &'a mut CallsProbe,
    sym: &'a mut StackSymbolizer,
    target: &'a Target,
    thresholds: &'a mut [u64],
    /// The training window's end and the rule's percentage, until it ends.
    training: Option<(Duration, u32)>,
    stacks: Option<Stacks>,
    outliers: Vec<Slow>,
    omitted: u64,
    /// Outliers whose callers were named.
    named: usize,
}

impl Counting<'_> {
    fn keep(&mut self, batch: Vec<CallOutlier>) {
        for o in batch {
            if self.outliers.len() < MAX_OUTLIERS_KEPT {
                self.outliers.push(Slow::of(&o, self.stacks.as_mut()));
            } else {
                self.omitted += 1;
            }
        }
        let fresh: Vec<&[u64]> = self.outliers[self.named..]
            .iter()
            .map(|s| &s.callers[..])
            .collect();
        if !fresh.is_empty() {
            self.sym.frames_of_many(&fresh);
        }
        self.named = self.outliers.len();
    }
}

impl Watch for Counting<'_> {
    fn tick(&mut self, elapsed: Duration) -> Result<()> {
        if let Some((until, percent)) = self.training
            && elapsed >= until
        {
            let t = trained_thresholds(&self.probe.stats()?, percent);
            self.thresholds.copy_from_slice(&t);
            self.probe.set_thresholds(self.thresholds)?;
            self.training = None;
        }
        let batch = self.probe.take_outliers()?;
        self.keep(batch);
        Ok(())
    }

    fn gone(&mut self) -> Option<crate::discover::Lost> {
        self.target.lost()
    }

    fn wait(&mut self, max: Duration) -> Result<()> {
        self.target.wait_exit(max);
        Ok(())
    }

    fn due(&self) -> Option<Duration> {
        self.training.map(|(until, _)| until)
    }

    fn seen(&mut self) -> Result<String> {
        let calls: u64 = self.probe.stats()?.iter().map(|s| s.calls).sum();
        Ok(format!("{calls} calls so far"))
    }
}

/// Runs the window: sets the trained thresholds when training ends,
/// drains outliers, shows progress, and stops early when the process
/// exits or on Ctrl-C.
fn watch(
    probe: &mut CallsProbe,
    sym: &mut StackSymbolizer,
    target: &Target,
    a: &CallsArgs,
    rule: &Option<OutlierRule>,
    thresholds: &mut [u64],
) -> Result<Watched> {
    let training = match rule {
        Some(OutlierRule::Trained {
            percent,
            training_ns,
        }) => Some((Duration::from_nanos(*training_ns), *percent)),
        _ => None,
    };
    let mut c = Counting {
        probe,
        sym,
        target,
        thresholds,
        training,
        stacks: Stacks::new(a.pid).ok(),
        outliers: Vec::new(),
        omitted: 0,
        named: 0,
    };
    let observed = Window::new(a.duration, TICK).run(&mut c)?;
    let stats = c.probe.stats()?;
    let table = c.probe.table_use()?;
    let batch = c.probe.take_outliers()?;
    c.keep(batch);
    Ok(Watched {
        stats,
        table,
        outliers: c.outliers,
        omitted: c.omitted,
        observed,
    })
}

/// The outliers with their stacks at entry symbolized and their times on
/// the wall clock, in the order they started.
fn slow_calls(
    sym: &mut StackSymbolizer,
    raw: &[Slow],
    names: &[String],
    addrs: &[u64],
    clock: &MonotonicToUnix,
) -> Vec<SlowCall> {
    // Each stack at entry: the function (where the thread was), then the
    // return addresses, looked up as such (their call's line).
    let stacks: Vec<Vec<u64>> = raw
        .iter()
        .map(|o| {
            let f = addrs.get(o.fn_id as usize).copied().unwrap_or(0);
            std::iter::once(f)
                .chain(o.callers.iter().copied())
                .collect()
        })
        .collect();
    let refs: Vec<&[u64]> = stacks.iter().map(|s| &s[..]).collect();
    let frames = sym.frames_of_many(&refs);
    let mut out: Vec<SlowCall> = raw
        .iter()
        .zip(frames)
        .map(|(o, f)| SlowCall {
            function: names.get(o.fn_id as usize).cloned().unwrap_or_default(),
            tid: o.tid,
            start_unix_ns: clock.unix_ns(o.start_ns),
            duration_ns: o.duration_ns,
            caller: f.get(1).cloned().unwrap_or_default(),
            stack: f,
        })
        .collect();
    out.sort_by_key(|s| s.start_unix_ns);
    out
}

/// Converts CLOCK_MONOTONIC times (the programs' `bpf_ktime_get_ns`) to
/// the wall clock, from one reading of both.
struct MonotonicToUnix {
    offset: i128,
}

impl MonotonicToUnix {
    fn now() -> Self {
        let mono = i128::from(crate::util::monotonic_ns());
        let unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i128);
        MonotonicToUnix {
            offset: unix - mono,
        }
    }

    fn unix_ns(&self, mono_ns: u64) -> u64 {
        u64::try_from(i128::from(mono_ns) + self.offset).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages() {
        assert_eq!(parse_percent("250%"), Ok(250));
        assert_eq!(parse_percent("90"), Ok(90));
        assert!(parse_percent("0%").is_err());
        assert!(parse_percent("lots").is_err());
    }

    #[test]
    fn monotonic_times_on_the_wall_clock() {
        let c = MonotonicToUnix { offset: 1_000 };
        assert_eq!(c.unix_ns(5), 1_005);
        let c = MonotonicToUnix::now();
        let year_2020 = 1_577_836_800_000_000_000;
        assert!(c.unix_ns(0) > 0 && c.unix_ns(0) < u64::MAX / 2 + year_2020);
    }
}
