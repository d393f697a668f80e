//! A row of a timing table: a workload run under one way of recording, and
//! the interleaved measurement of a set of rows (a warm-up run per row to
//! choose its number of calls, then rounds in shuffled order).

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use anyhow::Result;

use super::{
    proc::{Waiting, shell_words},
    stats,
    tracers::{self, Bpftrace, LttngSession, RipProbe},
    workloads::Exe,
};

/// What records the run, beside the workload.
#[derive(Clone, Debug, PartialEq)]
pub enum Tracer {
    /// Nothing attached.
    None,
    /// bpftrace with these probes (`{pid}`, `{exe}` filled in), counting
    /// hits in `@hits`.
    Bpftrace(&'static str),
    /// `rip-probe --pid`, plus `--uprobe` on this function when set.
    RipProbe(Option<&'static str>),
    /// `rip-probe --pid --duration 0 --json` run again and again beside
    /// the workload, on another CPU: snapshots alone, no program attached.
    RipProbeSnapshots,
    /// `rip-probe locks --pid`: futex contention counted in BPF maps.
    RipProbeLocks,
    /// `rip-probe offcpu --pid`: off-CPU time summed by stack at each
    /// switch; with `--kernel-stacks` when true.
    RipProbeOffcpu(bool),
    /// `rip-probe --pid` (false) or `rip-probe offcpu` (true) with
    /// `RIP_PROBE_TP_BTF=0`: the raw tracepoint program, the fallback for
    /// kernels that refuse the BTF-typed one (and what ran before it).
    RipProbeRawTp(bool),
    /// BCC's `offcputime -p PID` (the libbpf-tools build).
    Offcputime,
    /// `rip-probe calls --uprobe` on this function (see `calls.rs`).
    RipProbeCalls(&'static str),
    /// rip-probe's uprobe on this function through its library
    /// (`rip-bench-uprobe`).
    RipProbeLibrary(&'static str),
    /// One of the programs under any sched_switch program's cost
    /// (`rip-bench-uprobe --switch-floor NAME`: rip-ebpf's
    /// `floor_programs.rs`).
    SwitchFloor(&'static str),
    /// A snapshot-mode LTTng session with the loop's events enabled.
    Lttng,
    /// gdb runs the workload with a counting breakpoint on `f`.
    Gdb,
}

/// How many calls a run makes: `start` for the warm-up run, then enough
/// for the target run time, within `min..=max`.
#[derive(Clone, Copy, Debug)]
pub struct Calls {
    /// Calls of the warm-up run.
    pub start: u64,
    /// Fewest calls of a measured run.
    pub min: u64,
    /// Most calls of a measured run.
    pub max: u64,
}

/// One row: a workload and what records it.
#[derive(Clone, Debug)]
pub struct Row {
    /// Short key (also the chart's order).
    pub id: &'static str,
    /// What the table calls it.
    pub label: &'static str,
    /// The workload, or why it is not available.
    pub exe: Result<Exe, String>,
    /// The workload's first argument (a mode), if any.
    pub mode: Option<&'static str>,
    /// What records it.
    pub tracer: Tracer,
    /// Calls per run.
    pub calls: Calls,
    /// Take the calls of this row (after both warm up) so that the two
    /// compare the same work.
    pub same_calls_as: Option<&'static str>,
    /// Whether callgrind can count its instructions (nothing outside the
    /// process involved).
    pub callgrind: bool,
}

/// What the rows share while they run.
pub struct Ctx {
    /// The release rip-probe.
    pub rip_probe: PathBuf,
    /// `rip-bench-uprobe`.
    pub uprobe_lib: PathBuf,
    /// The gdb script counting breakpoint hits.
    pub gdb_script: PathBuf,
    /// Why LTTng sessions cannot run, if they cannot.
    pub lttng: Result<(), String>,
    /// Aimed-at duration of one run, in ns.
    pub target_ns: f64,
    /// Measured rounds.
    pub rounds: usize,
}

/// A row's results.
#[derive(Clone, Debug)]
pub struct Measured {
    /// The row.
    pub row: Row,
    /// Calls per measured run.
    pub calls: u64,
    /// ns per call of each measured run.
    pub per_call: Vec<f64>,
    /// Involuntary context switches of each measured run.
    pub switches: Vec<f64>,
    /// What the tracer counted in the last run (bpftrace, gdb).
    pub counted: Option<u64>,
    /// "not available: ..." or "failed: ..." when the row has no result.
    pub failure: Option<String>,
    /// Instructions per call from callgrind, or why there is no count.
    pub instructions: Option<Result<f64, String>>,
    /// The commands of one measured run, as the report shows them.
    pub commands: Vec<String>,
    /// What went wrong with the tracer after a run's measurement (the
    /// measurement stands).
    pub troubles: Vec<String>,
}

impl Measured {
    /// The median ns per call.
    pub fn median(&self) -> Option<f64> {
        if self.failure.is_some() {
            return None;
        }
        stats::median(&self.per_call)
    }

    /// The commands of one run, as the report shows them (`PID` and
    /// `SESSION` stand for what changes from run to run).
    fn commands_for(&self, ctx: &Ctx) -> Vec<String> {
        let Ok(exe) = &self.row.exe else {
            return Vec::new();
        };
        let n = self.calls.to_string();
        let mut run = vec![exe.shown()];
        run.extend(self.row.mode.map(String::from));
        run.extend([n.clone(), "--wait".into()]);
        let run = shell_words(&run);
        match &self.row.tracer {
            Tracer::None => vec![run],
            Tracer::Bpftrace(p) => vec![
                run,
                shell_words(&tracers::bpftrace_args(
                    p,
                    "PID",
                    &exe.path.to_string_lossy(),
                )),
            ],
            Tracer::RipProbe(u) => vec![
                run,
                format!(
                    "RIP_PROBE_TIMING=1 {}",
                    shell_words(&tracers::rip_probe_args(
                        &super::workloads::rel(&ctx.rip_probe),
                        "PID",
                        *u
                    ))
                ),
            ],
            Tracer::RipProbeSnapshots => vec![
                run,
                format!(
                    "while :; do taskset -c LAST_CPU {} >/dev/null; done",
                    shell_words(&tracers::rip_probe_snapshot_args(
                        &super::workloads::rel(&ctx.rip_probe),
                        "PID",
                    ))
                ),
            ],
            Tracer::RipProbeLocks => vec![
                run,
                format!(
                    "RIP_PROBE_TIMING=1 {}",
                    shell_words(&tracers::rip_probe_locks_args(
                        &super::workloads::rel(&ctx.rip_probe),
                        "PID"
                    ))
                ),
            ],
            Tracer::RipProbeOffcpu(kernel) => vec![
                run,
                format!(
                    "RIP_PROBE_TIMING=1 {}",
                    shell_words(&tracers::rip_probe_offcpu_args(
                        &super::workloads::rel(&ctx.rip_probe),
                        "PID",
                        *kernel
                    ))
                ),
            ],
            Tracer::RipProbeRawTp(offcpu) => {
                let rel = super::workloads::rel(&ctx.rip_probe);
                let args = if *offcpu {
                    tracers::rip_probe_offcpu_args(&rel, "PID", false)
                } else {
                    tracers::rip_probe_args(&rel, "PID", None)
                };
                vec![
                    run,
                    format!(
                        "RIP_PROBE_TP_BTF=0 RIP_PROBE_TIMING=1 {}",
                        shell_words(&args)
                    ),
                ]
            }
            Tracer::Offcputime => vec![run, shell_words(&tracers::offcputime_args("PID"))],
            Tracer::RipProbeCalls(f) => vec![
                run,
                format!(
                    "RIP_PROBE_TIMING=1 {}",
                    shell_words(&tracers::rip_probe_calls_args(
                        &super::workloads::rel(&ctx.rip_probe),
                        "PID",
                        f
                    ))
                ),
            ],
            Tracer::RipProbeLibrary(f) => vec![
                run,
                shell_words(&[
                    super::workloads::rel(&ctx.uprobe_lib),
                    "PID".into(),
                    f.to_string(),
                ]),
            ],
            Tracer::SwitchFloor(name) => vec![
                run,
                shell_words(&[
                    super::workloads::rel(&ctx.uprobe_lib),
                    "--switch-floor".into(),
                    name.to_string(),
                ]),
            ],
            Tracer::Lttng => {
                let mut v: Vec<String> = tracers::lttng_setup("SESSION")
                    .iter()
                    .map(|c| shell_words(c))
                    .collect();
                v.extend([run, "lttng destroy SESSION".into()]);
                v
            }
            Tracer::Gdb => vec![shell_words(&tracers::gdb_args(
                &super::workloads::rel(&ctx.gdb_script),
                &exe.shown(),
                self.calls,
            ))],
        }
    }
}

/// One run's results: the workload's own measurement, what the tracer
/// counted (if it counts), and what went wrong with the tracer after the
/// measurement, if anything.
type Run = (super::proc::Sample, Option<u64>, Option<String>);

/// One run of `row` with `n` calls.
fn run_once(row: &Row, exe: &Path, ctx: &Ctx, n: u64) -> Result<Run> {
    let timeout = Duration::from_secs(300);
    if row.tracer == Tracer::Gdb {
        let (s, hits) = tracers::gdb_run(&ctx.gdb_script, exe, n, timeout)?;
        return Ok((s, Some(hits), None));
    }
    let _session = match row.tracer {
        Tracer::Lttng => Some(LttngSession::start(&format!(
            "rip-bench-{}",
            std::process::id()
        ))?),
        _ => None,
    };
    let mut cmd = Command::new(exe);
    cmd.args(row.mode).arg(n.to_string()).arg("--wait");
    let w = Waiting::start(cmd)?;
    match row.tracer {
        Tracer::Bpftrace(p) => {
            let bt = Bpftrace::attach(p, w.pid(), exe)?;
            let s = w.go(timeout)?;
            Ok((s, Some(bt.finish()?), None))
        }
        Tracer::RipProbe(u) => {
            let rp = RipProbe::attach(&ctx.rip_probe, w.pid(), u, &[])?;
            let s = w.go(timeout)?;
            Ok((s, None, rp.finish().err()))
        }
        Tracer::RipProbeSnapshots => {
            let snaps = tracers::RipProbeSnapshots::start(&ctx.rip_probe, w.pid())?;
            let s = w.go(timeout)?;
            match snaps.finish() {
                Ok(n) => Ok((s, Some(n), None)),
                Err(e) => Ok((s, None, Some(e))),
            }
        }
        Tracer::RipProbeLocks => {
            let rp = RipProbe::attach_locks(&ctx.rip_probe, w.pid())?;
            let s = w.go(timeout)?;
            Ok((s, None, rp.finish().err()))
        }
        Tracer::RipProbeOffcpu(kernel) => {
            let rp = RipProbe::attach_offcpu(&ctx.rip_probe, w.pid(), kernel, &[])?;
            let s = w.go(timeout)?;
            Ok((s, None, rp.finish().err()))
        }
        Tracer::RipProbeRawTp(offcpu) => {
            let raw = [("RIP_PROBE_TP_BTF", "0")];
            let rp = if offcpu {
                RipProbe::attach_offcpu(&ctx.rip_probe, w.pid(), false, &raw)?
            } else {
                RipProbe::attach(&ctx.rip_probe, w.pid(), None, &raw)?
            };
            let s = w.go(timeout)?;
            Ok((s, None, rp.finish().err()))
        }
        Tracer::Offcputime => {
            let oc = tracers::Offcputime::attach(w.pid())?;
            let s = w.go(timeout)?;
            Ok((s, None, oc.finish().err()))
        }
        Tracer::RipProbeCalls(f) => {
            let rp = tracers::RipProbeCalls::attach(&ctx.rip_probe, w.pid(), f)?;
            let s = w.go(timeout)?;
            Ok((s, Some(rp.finish()?), None))
        }
        Tracer::SwitchFloor(name) => {
            let rp = RipProbe::attach_switch_floor(&ctx.uprobe_lib, name)?;
            let s = w.go(timeout)?;
            rp.kill();
            Ok((s, None, None))
        }
        Tracer::RipProbeLibrary(f) => {
            let rp = RipProbe::attach_library(&ctx.uprobe_lib, w.pid(), f)?;
            let s = w.go(timeout)?;
            rp.kill();
            Ok((s, None, None))
        }
        _ => Ok((w.go(timeout)?, None, None)),
    }
}

/// Measures `rows`: a warm-up run each (which sets the calls), then
/// `ctx.rounds` rounds, each running every row once in a shuffled order.
/// A row that cannot run says why instead of stopping the others.
pub fn measure(rows: Vec<Row>, ctx: &Ctx, rng: &mut fastrand::Rng) -> Vec<Measured> {
    let mut ms: Vec<Measured> = rows
        .into_iter()
        .map(|row| {
            let lttng = match row.tracer {
                Tracer::Lttng => ctx.lttng.clone(),
                _ => Ok(()),
            };
            let failure = match (&row.exe, &lttng) {
                (Err(e), _) | (_, Err(e)) => Some(format!("not available: {e}")),
                _ => None,
            };
            Measured {
                calls: row.calls.start,
                row,
                per_call: Vec::new(),
                switches: Vec::new(),
                counted: None,
                failure,
                instructions: None,
                commands: Vec::new(),
                troubles: Vec::new(),
            }
        })
        .collect();

    let one = |m: &mut Measured, n: u64| -> Option<super::proc::Sample> {
        let exe = m.row.exe.as_ref().ok()?.path.clone();
        match run_once(&m.row, &exe, ctx, n) {
            Ok((s, counted, trouble)) => {
                m.counted = counted;
                if let Some(t) = trouble {
                    eprintln!("    {}: {t}", m.row.id);
                    m.troubles.push(t);
                }
                eprintln!(
                    "    {:<22} {:>12} calls {:>12.1} ns/call {:>8} involuntary switches{}",
                    m.row.id,
                    s.calls,
                    s.per_call_ns(),
                    s.nivcsw,
                    counted.map_or(String::new(), |c| format!(" (counted {c})"))
                );
                Some(s)
            }
            Err(e) => {
                eprintln!("    {}: failed: {e:#}", m.row.id);
                m.failure = Some(format!("failed: {e:#}"));
                None
            }
        }
    };

    eprintln!("    warm-up (sets the calls of each row)");
    for m in ms.iter_mut().filter(|m| m.failure.is_none()) {
        if let Some(s) = one(m, m.row.calls.start) {
            let c = m.row.calls;
            m.calls = stats::calls_for(s.per_call_ns(), ctx.target_ns, c.min, c.max);
        }
    }
    for i in 0..ms.len() {
        if let Some(other) = ms[i].row.same_calls_as
            && let Some(n) = ms.iter().find(|m| m.row.id == other).map(|m| m.calls)
        {
            ms[i].calls = n;
        }
    }
    for round in 0..ctx.rounds {
        eprintln!("    round {}/{}", round + 1, ctx.rounds);
        let live: Vec<usize> = (0..ms.len()).filter(|&i| ms[i].failure.is_none()).collect();
        for k in stats::round_order(live.len(), rng) {
            let m = &mut ms[live[k]];
            let n = m.calls;
            if let Some(s) = one(m, n) {
                m.per_call.push(s.per_call_ns());
                m.switches.push(s.nivcsw as f64);
            }
        }
    }
    for m in &mut ms {
        m.commands = m.commands_for(ctx);
    }
    ms
}
