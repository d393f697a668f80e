//! `cargo xtask bench --alloc-only` (and a section of the full bench):
//! what tracing the heap costs an allocation-heavy program, and whether
//! each tool found its leak. `tests/bench/alloc_mix.c` (malloc/calloc/
//! realloc/free with a realistic size mix, and one call path, `leak_here`,
//! that never frees) runs untraced, with librip preloaded but not
//! sampling, preloaded sampling at the default mean and at every call,
//! traced by `rip-probe leaks --pid` (heap uprobes), under heaptrack, and
//! traced by BCC's memleak; each round runs the rows in a shuffled order,
//! and each run reports the workload's own CPU time (user + system) for
//! its operations, which other work on the machine does not add to. A
//! row's cost is the median over the rounds of its ratio to the same
//! round's untraced run; the first three rows, whose differences are the
//! budget's few percent, run in more rounds than the others. Each row's peak RSS
//! (workload, and the tool's own process) comes from
//! `tests/bench/maxrss.c`. A tool that cannot run here is a row saying
//! why. The first three rows are counted in instructions too (callgrind,
//! which other work on the machine does not change): the interposer's
//! cost, and the sampler's, per operation. Printed and written to
//! target/bench/alloc.md.

use std::{
    fmt::Write as _,
    io::{BufRead, BufReader, Read, Write as _},
    path::{Path, PathBuf},
    process::{Child, ChildStdout, Command, Stdio},
    thread::JoinHandle,
    time::Instant,
};

use anyhow::{Context, Result, bail};

use super::{
    out_dir,
    peers::Peers,
    stats::{median, median_interval, round_order},
};
use crate::util::{cargo, exec, root, step};

/// Operations per run; each row runs `OPS / div` (its [`Row`]), but the
/// budget's rows, whose rounds run [`BUDGET_OPS`].
const OPS: u64 = 20_000_000;
/// Operations per run of the budget's rows in their rounds. Shorter runs
/// vary less: with the workload on one CPU, untraced against untraced, 25
/// rounds each, the ratios' quartiles were 0.992 and 1.005 at 5 M
/// operations, 0.994 and 1.018 at 20 M (one run is then ~0.2 s against
/// ~0.9 s, so more of them fall between the machine's disturbances).
const BUDGET_OPS: u64 = 5_000_000;
/// Every this many operations, `leak_here` leaks one block (alloc_mix.c's
/// LEAK_EVERY).
const LEAK_EVERY: u64 = 10_000;
/// The function that leaks, looked for in each tool's report.
const LEAKER: &str = "leak_here";
/// The heading of each of memleak's reports.
const MEMLEAK_HEADER: &str = "stacks with outstanding allocations";
/// The window given to the attaching tools: ended by SIGTERM as soon as
/// the workload has done its operations, so it is only a bound.
const WINDOW: &str = "600s";

/// Operations of the two callgrind runs of a row: the difference in
/// instructions over the difference in operations leaves out what does
/// not repeat per operation (start-up, the ring's creation, exit).
const CG_OPS: (u64, u64) = (100_000, 1_100_000);

/// The rows (from the first) counted in instructions: untraced, preloaded
/// but not sampling, sampling at the default mean. They are also the
/// budget's rows, run in [`BUDGET_ROUNDS`] times the rounds of the others.
const CG_ROWS: usize = 3;

/// How many times the other rows' rounds the budget's rows run. The budget
/// is 3 %, and the CPU time of one run varies by more than the differences
/// it judges: on a quiet machine (load below 1), a sampling run's ratio to
/// its round's untraced run ranged over 1.014 to 1.105 in 41 rounds of 20 M
/// operations, the median's 95 % interval about ±0.8 %; 100 rounds of 5 M
/// operations gave an interval of ±0.3 %. In 140 rounds the interval was
/// ±0.15 to ±0.35 % while the cost measured +2.7 to +2.9 %, so that most
/// runs could not say which side of 3 % it is on: 280 rounds narrow it by
/// √2 (the bench took 1 min 43 s more). The ×3 and more of the other rows need
/// fewer rounds.
const BUDGET_ROUNDS: usize = 40;

/// The budget, ≤ 3 %: CPU time sampling at the default mean over untraced.
const BUDGET: f64 = 1.03;

/// Runs the rows and prints their section.
pub fn run_alloc_only() -> Result<()> {
    let s = section(7)?;
    let md = out_dir().join("alloc.md");
    std::fs::write(&md, &s).with_context(|| format!("writing {}", md.display()))?;
    println!("{s}");
    Ok(())
}

/// How a row runs the workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum How {
    /// Plainly, librip preloaded or not, with these variables.
    Plain(bool, &'static [(&'static str, &'static str)]),
    /// `rip-probe leaks --pid P` attached before the operations.
    Probe,
    /// Under `heaptrack` (its preload; the file analysed after).
    Heaptrack,
    /// BCC's `memleak-bpfcc -p P` attached before the operations.
    Memleak,
}

/// One row: its name, how it runs, and the divisor of `OPS` it runs.
type Row = (&'static str, How, u64);

/// The rows, in the table's order.
const ROWS: [Row; 7] = [
    ("untraced", How::Plain(false, &[]), 1),
    ("librip preloaded, not sampling", How::Plain(true, &[]), 1),
    (
        "librip sampling, mean 512 KiB (`RIP_ALLOC_SAMPLE=512k`)",
        How::Plain(true, &[("RIP_ALLOC_SAMPLE", "512k")]),
        1,
    ),
    (
        "librip sampling every allocation (`RIP_ALLOC_SAMPLE=1`)",
        How::Plain(true, &[("RIP_ALLOC_SAMPLE", "1")]),
        10,
    ),
    (
        "`rip-probe leaks --pid P --duration 600s` (heap uprobes)",
        How::Probe,
        100,
    ),
    ("`heaptrack alloc_mix` (preload)", How::Heaptrack, 10),
    ("`memleak-bpfcc -p P 1` (BCC, uprobes)", How::Memleak, 100),
];

/// What one run measured.
#[derive(Debug, Default)]
struct Run {
    /// The workload's CPU time for its operations, ns.
    cpu_ns: u64,
    /// The workload's peak RSS, KiB (with heaptrack: its largest process).
    rss_kib: u64,
    /// The tool's own peak RSS, KiB, when it is a process of its own.
    tool_kib: Option<u64>,
    /// Whether the tool named the leaking function, and what it said.
    found: Option<String>,
}

/// A row's runs so far, or why it does not run here.
#[derive(Debug, Default)]
struct Tally {
    per_op: Vec<f64>,
    /// Each run's CPU time over that of its round's untraced run.
    ratios: Vec<f64>,
    rss_kib: u64,
    tool_kib: Option<u64>,
    found: Option<String>,
    not_run: Option<String>,
}

/// The programs the rows use.
struct Tools {
    exe: PathBuf,
    lib: PathBuf,
    maxrss: PathBuf,
    probe: PathBuf,
    rings: PathBuf,
    out: PathBuf,
    peers: Peers,
    /// The CPU the workload runs on (the tools it is measured beside run
    /// anywhere): a run that moves between CPUs varies more.
    cpu: usize,
}

/// Measures `rounds` rounds of every row (the budget's rows,
/// [`BUDGET_ROUNDS`] times as many); the section of docs/BENCHMARKS.md.
pub fn section(rounds: usize) -> Result<String> {
    step("bench: peers for the heap (heaptrack, bpfcc-tools)");
    let peers = Peers::ensure_only(&["heaptrack", "bpfcc-tools", "libbpf-tools", "valgrind"]);
    step("bench: cargo build --release -p librip --lib --features sampler");
    let target = root().join("target/bench-sampler");
    exec(
        cargo()
            .args([
                "build",
                "--release",
                "-p",
                "librip",
                "--lib",
                "--features",
                "sampler",
            ])
            .arg("--target-dir")
            .arg(&target),
        "cargo build -p librip --features sampler",
    )?;
    let (_, maxrss) = super::release_probe_and_maxrss()?;
    let out = out_dir();
    let exe = super::cc("tests/bench/alloc_mix.c", &out.join("alloc_mix"))?;
    let t = Tools {
        exe,
        lib: target.join("release/liblibrip.so"),
        maxrss,
        probe: root().join("target/release/rip-probe"),
        // On tmpfs, where librip makes its rings unless told otherwise (and
        // warns when a ring is not): on a disk file system the table's
        // pages would be written back, and faulted in again by the samples
        // that write them next.
        rings: PathBuf::from(format!("/dev/shm/rip-bench-alloc-{}", std::process::id())),
        out: out.clone(),
        peers,
        cpu: super::proc::last_cpu(),
    };
    let mut tally: Vec<Tally> = ROWS.iter().map(|_| Tally::default()).collect();
    let load_before = super::load_average();
    let all_rounds = rounds * BUDGET_ROUNDS;
    let mut rng = fastrand::Rng::with_seed(0xa110c);
    for round in 0..all_rounds {
        step(&format!(
            "bench: heap tracing, round {}/{all_rounds}",
            round + 1
        ));
        // Every row in each BUDGET_ROUNDS-th round, the last included
        // (which reads the every-call ring for the leak; the budget's rows
        // are read after the rounds).
        let every_row = (round + 1) % BUDGET_ROUNDS == 0;
        let last = round + 1 == all_rounds;
        let rows: Vec<usize> = (0..ROWS.len())
            .filter(|&i| (i < CG_ROWS || every_row) && tally[i].not_run.is_none())
            .collect();
        let mut this_round = vec![None; ROWS.len()];
        for k in round_order(rows.len(), &mut rng) {
            let i = rows[k];
            let (name, how, div) = ROWS[i];
            let row = &mut tally[i];
            let ops = if i < CG_ROWS { BUDGET_OPS } else { OPS / div };
            let run = match how {
                // The budget's rows are read after the rounds, at OPS.
                How::Plain(preload, env) => run_plain(&t, preload, env, ops, last && i >= CG_ROWS),
                How::Probe => run_attached(&t, how, ops),
                How::Heaptrack => run_heaptrack(&t, ops),
                How::Memleak => run_attached(&t, how, ops),
            };
            match run {
                Ok(r) => {
                    let per_op = r.cpu_ns as f64 / ops as f64;
                    row.per_op.push(per_op);
                    this_round[i] = Some(per_op);
                    row.rss_kib = row.rss_kib.max(r.rss_kib);
                    row.tool_kib = r.tool_kib.max(row.tool_kib);
                    if r.found.is_some() {
                        row.found = r.found;
                    }
                }
                Err(e) => match e.downcast::<NotRun>() {
                    Ok(NotRun(why)) => {
                        eprintln!("    {name}: not run: {why}");
                        row.not_run = Some(why);
                    }
                    Err(e) => return Err(e.context(format!("row {name}"))),
                },
            }
        }
        let base = this_round[0].context("the untraced run measured nothing")?;
        for (row, per_op) in tally.iter_mut().zip(this_round) {
            if let Some(x) = per_op {
                row.ratios.push(x / base);
            }
        }
    }
    // The budget's rows once more at OPS, as the other rows run: their peak
    // RSS (a longer run leaks more) and whether the sampler's ring names the
    // leak (at 5 M operations about one leaked block is sampled: it may be
    // none).
    for (i, row) in tally.iter_mut().enumerate().take(CG_ROWS) {
        step(&format!(
            "bench: heap tracing, {} at {OPS} operations",
            ROWS[i].0
        ));
        let How::Plain(preload, env) = ROWS[i].1 else {
            bail!("row {} is not a plain run", ROWS[i].0);
        };
        let r =
            run_plain(&t, preload, env, OPS, true).with_context(|| format!("row {}", ROWS[i].0))?;
        row.rss_kib = r.rss_kib;
        row.found = r.found;
    }
    step("bench: heap tracing, instructions (callgrind)");
    let instructions = instructions(&t);
    let _ = std::fs::remove_dir_all(&t.rings);
    let load = (load_before, super::load_average());
    let mut s = render(&tally, rounds, t.cpu, &load)?;
    render_instructions(&mut s, &instructions)?;
    Ok(s)
}

/// Instructions per operation of the first [`CG_ROWS`] rows, or why they
/// were not counted.
fn instructions(t: &Tools) -> Result<Vec<f64>, String> {
    t.peers.need(&["valgrind"])?;
    ROWS[..CG_ROWS]
        .iter()
        .map(|(name, how, _)| {
            let How::Plain(preload, env) = *how else {
                return Err(format!("{name}: not a plain run"));
            };
            let count = |ops| callgrind_run(t, preload, env, ops).map_err(|e| format!("{e:#}"));
            let (a, b) = (count(CG_OPS.0)?, count(CG_OPS.1)?);
            Ok((b as f64 - a as f64) / (CG_OPS.1 - CG_OPS.0) as f64)
        })
        .collect()
}

/// The command counting a plain run's instructions: callgrind follows
/// `env` into the workload, which makes its ring in the bench's own
/// directory (numbered after valgrind's launcher's, which the preload
/// reaches first in the same process).
fn callgrind_args(
    t: &Tools,
    preload: bool,
    env: &[(&str, &str)],
    ops: u64,
    out: &Path,
) -> Vec<String> {
    let mut a = vec![
        "valgrind".to_string(),
        "--tool=callgrind".into(),
        "--trace-children=yes".into(),
        format!("--callgrind-out-file={}/cg.%p", out.display()),
        "env".into(),
    ];
    if preload {
        a.push(format!("LD_PRELOAD={}", t.lib.display()));
    }
    a.push(format!(
        "RIP_ALLOC_RING={}",
        t.rings.join("cg.%p.ring").display()
    ));
    a.extend(env.iter().map(|(k, v)| format!("{k}={v}")));
    a.push(t.exe.display().to_string());
    a.push(ops.to_string());
    a
}

/// Instructions of one run, every process it became included.
fn callgrind_run(t: &Tools, preload: bool, env: &[(&str, &str)], ops: u64) -> Result<u64> {
    let out = t.out.join("alloc-callgrind");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out)?;
    std::fs::create_dir_all(&t.rings)?;
    let a = callgrind_args(t, preload, env, ops, &out);
    let res = Command::new(&a[0])
        .args(&a[1..])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .context("running valgrind")?;
    if !res.status.success() {
        bail!(
            "`{}` failed: {}",
            super::proc::shell_words(&a),
            String::from_utf8_lossy(&res.stderr)
                .lines()
                .last()
                .unwrap_or("")
        );
    }
    let mut total = 0;
    for e in std::fs::read_dir(&out)? {
        let path = e?.path();
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        total += super::callgrind::parse_totals(&text)
            .with_context(|| format!("no totals in {}", path.display()))?;
    }
    let _ = std::fs::remove_dir_all(&out);
    let _ = std::fs::remove_dir_all(&t.rings);
    Ok(total)
}

/// The instruction table after the section's text.
fn render_instructions(s: &mut String, counted: &Result<Vec<f64>, String>) -> Result<()> {
    writeln!(
        s,
        "
Instructions per operation, which other work on the machine does not change:"
    )?;
    let per_op = match counted {
        Ok(v) => v,
        Err(e) => {
            writeln!(s, "not counted: {e}.")?;
            return Ok(());
        }
    };
    writeln!(
        s,
        "`valgrind --tool=callgrind --trace-children=yes env [LD_PRELOAD=…] [RIP_ALLOC_SAMPLE=…] \
         target/bench/alloc_mix OPS` at {} and {} operations, the difference in instructions \
         (every process of the run) over the difference in operations.\n",
        super::stats::thousands(CG_OPS.0),
        super::stats::thousands(CG_OPS.1),
    )?;
    writeln!(
        s,
        "| run | instructions per operation | vs untraced |\n| --- | ---: | ---: |"
    )?;
    let base = per_op[0];
    for (i, ((name, _, _), n)) in ROWS.iter().zip(per_op).enumerate() {
        if i == 0 {
            writeln!(s, "| {name} | {n:.1} | |")?;
        } else {
            writeln!(
                s,
                "| {name} | {n:.1} | {:+.1} ({:+.2} %) |",
                n - base,
                100.0 * (n - base) / base
            )?;
        }
    }
    Ok(())
}

/// Why a row cannot run on this machine (a row of the table, not a
/// failure of the bench).
#[derive(Debug)]
struct NotRun(String);

impl std::fmt::Display for NotRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NotRun {}

/// The section's text.
fn render(tally: &[Tally], rounds: usize, cpu: usize, load: &(String, String)) -> Result<String> {
    let mut s = String::new();
    writeln!(s, "## Heap tracing and the allocation sampler\n")?;
    writeln!(
        s,
        "`cargo xtask bench --alloc-only`: `tests/bench/alloc_mix.c` (each operation \
         a malloc, calloc or realloc replacing one of 8,192 live blocks and the free of the \
         block it replaces; 60 % of 16-64 B, 30 % up to 512 B, 9 % up to 4 KiB, 1 % up to \
         64 KiB; and every {} operations one 1 KiB block from `leak_here` that is never \
         freed), CPU time per operation (user + system, as the program measures it over its \
         operations only), the median of the rounds; \"vs untraced\" is the median of each \
         round's ratio to that round's untraced run. The first three rows run {} M \
         operations in each of {} rounds, the others the operations shown in every {} of \
         them ({rounds} rounds); each round runs its rows in a shuffled order; the workload \
         runs on one CPU (CPU {}; a tool attached to it runs anywhere). Peak RSS \
         (`tests/bench/maxrss.c`) of the workload and of the tool's own process, the largest \
         of the rounds; whether the tool's report names `leak_here` among what is \
         outstanding (from the last round). The first three rows' peak RSS and leak come \
         from one more run each of {} M operations after the rounds. Kernel {}, {} CPUs; \
         load average (1, 5, 15 min) {} at the start, {} at the end: other work shares the \
         machine, so the figures are upper bounds.\n",
        super::stats::thousands(LEAK_EVERY),
        BUDGET_OPS / 1_000_000,
        rounds * BUDGET_ROUNDS,
        ordinal(BUDGET_ROUNDS),
        cpu,
        OPS / 1_000_000,
        std::fs::read_to_string("/proc/sys/kernel/osrelease")?.trim(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load.0,
        load.1,
    )?;
    writeln!(
        s,
        "| run | operations | CPU per operation | vs untraced | workload peak RSS | tool peak RSS | found the leak |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | --- |"
    )?;
    for (i, ((name, _, div), t)) in ROWS.iter().zip(tally).enumerate() {
        let ops = super::stats::thousands(if i < CG_ROWS { BUDGET_OPS } else { OPS / div });
        if let Some(why) = &t.not_run {
            writeln!(s, "| {name} | {ops} | not run: {why} | | | | |")?;
            continue;
        }
        let med = median(&t.per_op).context("no run")?;
        let ratio = median(&t.ratios).context("no paired run")?;
        writeln!(
            s,
            "| {name} | {ops} | {med:.1} ns | {ratio:.3}× | {} | {} | {} |",
            mib(t.rss_kib),
            t.tool_kib.map_or("(in the workload)".into(), mib),
            t.found.as_deref().unwrap_or("(nothing looks)"),
        )?;
    }
    writeln!(
        s,
        "\nThe commands (the workload on one CPU, as `taskset -c N` puts it): \
         `target/bench/alloc_mix OPS`; the same with \
         `LD_PRELOAD=target/bench-sampler/release/liblibrip.so` and \
         `RIP_ALLOC_RING=/dev/shm/…/mix.%p.ring` (tmpfs, as librip's default path) plus the \
         variable shown (built by `cargo build --release -p librip --lib --features sampler \
         --target-dir target/bench-sampler`), the sampler's ring read after the workload \
         exited by `rip-probe leaks RING`; `target/bench/alloc_mix OPS wait` (it waits on \
         stdin for the tool to attach before its operations, and keeps its leaked blocks \
         after them until stdin closes) with `rip-probe leaks --pid P --duration {WINDOW}` \
         (ended by SIGTERM once the operations are done) or `memleak-bpfcc -p P 1`; \
         `heaptrack -o FILE target/bench/alloc_mix OPS` then \
         `heaptrack_print --print-leaks 1 -f FILE.zst`."
    )?;
    budget(&mut s, tally)?;
    Ok(s)
}

/// "3rd", "4th"…: of a small count.
fn ordinal(n: usize) -> String {
    let suffix = match n {
        1 => "st",
        2 => "nd",
        3 => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// The budget's verdict in CPU time, from the budget rows' paired ratios:
/// met or not when the median's 95 % interval lies on one side of 3 %,
/// otherwise not settled by this run.
fn budget(s: &mut String, tally: &[Tally]) -> Result<()> {
    let pct = |r: f64| format!("{:+.1} %", 100.0 * (r - 1.0));
    let spread = |t: &Tally| -> Result<(f64, f64, f64)> {
        let med = median(&t.ratios).context("no paired run")?;
        let (lo, hi) = median_interval(&t.ratios).context("fewer than six rounds")?;
        Ok((med, lo, hi))
    };
    let (sampled, lo, hi) = spread(&tally[CG_ROWS - 1])?;
    let (preloaded, plo, phi) = spread(&tally[1])?;
    let verdict = if hi <= BUDGET {
        "**met**".to_string()
    } else if lo > BUDGET {
        "**not met**".to_string()
    } else {
        "**not settled** by this run, whose interval holds 3 %".to_string()
    };
    writeln!(
        s,
        "\nAgainst the budget (≤ 3 % on an allocation-heavy benchmark at the default rate), \
         in CPU time: sampling at 512 KiB costs **{}** (the median of the {} rounds' ratios; \
         95 % interval of the median {} to {}): {verdict}; preloaded and not sampling, {} \
         ({} to {}).",
        pct(sampled),
        tally[CG_ROWS - 1].ratios.len(),
        pct(lo),
        pct(hi),
        pct(preloaded),
        pct(plo),
        pct(phi),
    )?;
    Ok(())
}

/// KiB as MiB, one decimal.
fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

/// Runs `maxrss OUT` + `cmd`: the command.
fn under_maxrss(t: &Tools, out: &Path, prog: &Path) -> Command {
    let mut c = Command::new(&t.maxrss);
    c.arg(out).arg(prog);
    c
}

/// The `maxrss_kib` of a file `maxrss` wrote.
fn read_maxrss(out: &Path) -> Result<u64> {
    let text =
        std::fs::read_to_string(out).with_context(|| format!("reading {}", out.display()))?;
    field(&text, "maxrss_kib").with_context(|| format!("no maxrss_kib in {text:?}"))
}

/// The number after `key` in `text`.
fn field(text: &str, key: &str) -> Option<u64> {
    text.split_whitespace()
        .skip_while(|w| *w != key)
        .nth(1)
        .and_then(|v| v.parse().ok())
}

/// A plain run (untraced, or librip preloaded); in the last round, a
/// sampling run's ring is read by `rip-probe leaks RING`.
fn run_plain(t: &Tools, preload: bool, env: &[(&str, &str)], ops: u64, last: bool) -> Result<Run> {
    let _ = std::fs::remove_dir_all(&t.rings);
    std::fs::create_dir_all(&t.rings)?;
    let rss = t.out.join("alloc-maxrss.txt");
    let mut cmd = under_maxrss(t, &rss, &t.exe);
    cmd.arg(ops.to_string());
    super::proc::pin_to_cpu(&mut cmd, t.cpu);
    if preload {
        cmd.env("LD_PRELOAD", &t.lib);
    }
    cmd.env("RIP_ALLOC_RING", t.rings.join("mix.%p.ring"))
        .envs(env.iter().copied());
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("running {}", t.exe.display()))?;
    // maxrss is preloaded too (and writes a ring of its own): the
    // workload's ring is the other one.
    let maxrss_ring = format!("mix.{}.ring", child.id());
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "{} failed: {}",
            t.exe.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let cpu_ns = field(&text, "cpu_ns").with_context(|| format!("no cpu_ns in {text:?}"))?;
    let mut found_ = None;
    if last && !env.is_empty() {
        let ring = std::fs::read_dir(&t.rings)?
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .find(|p| {
                p.extension().is_some_and(|e| e == "ring")
                    && p.file_name().is_some_and(|n| *n != *maxrss_ring)
            })
            .context("the sampler wrote no ring for alloc_mix")?;
        let report = Command::new(&t.probe)
            .arg("leaks")
            .arg(&ring)
            .output()
            .context("running rip-probe leaks RING")?;
        if !report.status.success() {
            bail!(
                "rip-probe leaks {}: {}",
                ring.display(),
                String::from_utf8_lossy(&report.stderr)
            );
        }
        let found = found_in_rip(&String::from_utf8_lossy(&report.stdout));
        found_ = Some(with_truth(found, &text));
    }
    Ok(Run {
        cpu_ns,
        rss_kib: read_maxrss(&rss)?,
        tool_kib: None,
        found: found_,
    })
}

/// `found` with how many blocks the workload leaked (its `leaked N`).
fn with_truth(found: String, workload: &str) -> String {
    match field(workload, "leaked") {
        Some(n) => format!("{found} ({n} leaked)"),
        None => found,
    }
}

/// Whether rip-probe's text report names [`LEAKER`]: "yes" with the
/// heading of the group whose stack holds it, else "no".
fn found_in_rip(report: &str) -> String {
    let mut heading = "";
    for line in report.lines() {
        if !line.starts_with(char::is_whitespace) {
            heading = line;
        }
        if line.contains(LEAKER) {
            let h = heading.split(" … ").next().unwrap_or(heading).trim();
            return format!("yes: `{h}`");
        }
    }
    "no".into()
}

/// Under heaptrack, then its file read by heaptrack_print.
fn run_heaptrack(t: &Tools, ops: u64) -> Result<Run> {
    if let Err(why) = t.peers.need(&["heaptrack"]) {
        return Err(NotRun(why).into());
    }
    let file = t.out.join("alloc-heaptrack");
    let zst = t.out.join("alloc-heaptrack.zst");
    let _ = std::fs::remove_file(&zst);
    let rss = t.out.join("alloc-maxrss.txt");
    let out = under_maxrss(t, &rss, Path::new("heaptrack"))
        .arg("-o")
        .arg(&file)
        .arg(&t.exe)
        .arg(ops.to_string())
        .output()
        .context("running heaptrack")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let cpu_ns = field(&text, "cpu_ns").with_context(|| {
        format!(
            "heaptrack: no cpu_ns in {text:?} ({})",
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    let print = Command::new("heaptrack_print")
        .args([
            "--print-leaks",
            "1",
            "--print-peaks",
            "0",
            "--print-allocators",
            "0",
            "--print-temporary",
            "0",
            "-f",
        ])
        .arg(&zst)
        .output()
        .context("running heaptrack_print")?;
    let found = with_truth(
        found_in_heaptrack(&String::from_utf8_lossy(&print.stdout)),
        &text,
    );
    let _ = std::fs::remove_file(&zst);
    Ok(Run {
        cpu_ns,
        rss_kib: read_maxrss(&rss)?,
        tool_kib: None,
        found: Some(found),
    })
}

/// Whether heaptrack_print's MEMORY LEAKS section has a group allocated
/// in [`LEAKER`] ("20.48K leaked over 20 calls from" then the function).
fn found_in_heaptrack(report: &str) -> String {
    let Some(leaks) = report.split("MEMORY LEAKS").nth(1) else {
        return "no (no MEMORY LEAKS section)".into();
    };
    let lines: Vec<&str> = leaks.lines().collect();
    for w in lines.windows(2) {
        if w[0].contains(" leaked over ") && w[0].ends_with(" from") && w[1].trim() == LEAKER {
            return format!("yes: `{}`", w[0].trim_end_matches(" from").trim());
        }
    }
    "no".into()
}

/// The workload started with `wait`, under maxrss: killed on drop.
struct Waiting {
    child: Child,
    stdout: BufReader<ChildStdout>,
    pid: u32,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A tool attached to the workload, under maxrss: killed on drop.
struct Attached {
    child: Child,
    /// Its stdout and stderr, read to the end by threads.
    stdout: Option<JoinHandle<String>>,
    stderr: Option<JoinHandle<String>>,
}

impl Drop for Attached {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A thread that reads `r` to the end.
fn drain(mut r: impl Read + Send + 'static) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = r.read_to_string(&mut s);
        s
    })
}

/// The one child of `pid` (maxrss's: the tool), from /proc.
fn child_of(pid: u32) -> Result<i32> {
    let p = format!("/proc/{pid}/task/{pid}/children");
    let s = std::fs::read_to_string(&p).with_context(|| format!("reading {p}"))?;
    s.split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("{p} names no child"))
}

/// A run with a tool attached before the operations: the workload waits,
/// the tool attaches and says so, the operations run, the tool is asked
/// for its report while the leaked blocks are still held.
fn run_attached(t: &Tools, how: How, ops: u64) -> Result<Run> {
    if how == How::Memleak
        && let Err(why) = t.peers.need(&["bpfcc-tools"])
    {
        return Err(NotRun(why).into());
    }
    let wrss = t.out.join("alloc-maxrss.txt");
    let trss = t.out.join("alloc-tool-maxrss.txt");
    let mut w = {
        let mut cmd = under_maxrss(t, &wrss, &t.exe);
        super::proc::pin_to_cpu(&mut cmd, t.cpu);
        let mut child = cmd
            .args([ops.to_string().as_str(), "wait"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("starting alloc_mix")?;
        let mut stdout = BufReader::new(child.stdout.take().context("no stdout")?);
        let mut line = String::new();
        stdout.read_line(&mut line)?;
        let pid = line
            .strip_prefix("ready ")
            .and_then(|p| p.trim().parse().ok())
            .with_context(|| format!("alloc_mix said {line:?}, not ready PID"))?;
        Waiting { child, stdout, pid }
    };
    let pid = w.pid.to_string();
    let mut tool = match how {
        How::Probe => under_maxrss(t, &trss, &t.probe)
            .args(["leaks", "--pid", &pid, "--duration", WINDOW])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting rip-probe leaks")?,
        _ => under_maxrss(t, &trss, Path::new("memleak-bpfcc"))
            .args(["-p", &pid, "1"])
            // Its report is Python's print: line by line into the pipe.
            .env("PYTHONUNBUFFERED", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting memleak-bpfcc")?,
    };
    // The line that says the tool is attached: rip-probe's cost of the
    // heap's probes (the window begins with them); memleak's first report
    // (its "Attaching to pid" comes before it attaches).
    // memleak's stdout stays with this thread: its reports are read as
    // they come.
    let mut memleak_out = None;
    let said = match how {
        How::Probe => {
            let mut err = BufReader::new(tool.stderr.take().context("no stderr")?);
            let said = wait_for(&mut err, "heap: uprobes on")?;
            let out = tool.stdout.take().context("no stdout")?;
            let tool = Attached {
                child: tool,
                stdout: Some(drain(out)),
                stderr: Some(drain(err.into_inner())),
            };
            (said, tool)
        }
        _ => {
            let mut out = BufReader::new(tool.stdout.take().context("no stdout")?);
            let said = wait_for(&mut out, MEMLEAK_HEADER)?;
            let err = tool.stderr.take().context("no stderr")?;
            memleak_out = Some(out);
            let tool = Attached {
                child: tool,
                stdout: None,
                stderr: Some(drain(err)),
            };
            (said, tool)
        }
    };
    let (said, mut tool) = said;
    if let Err(seen) = said {
        let _ = tool.child.wait();
        let err = tool.stderr.take().map(|h| h.join().unwrap_or_default());
        let why = last_reason(err.as_deref().unwrap_or(""), &seen);
        if how == How::Memleak {
            let libbpf = if Path::new("/usr/sbin/memleak").exists() {
                ""
            } else {
                "; Debian's libbpf-tools has no memleak"
            };
            return Err(NotRun(format!("memleak-bpfcc: {why}{libbpf}")).into());
        }
        bail!("rip-probe leaks did not attach: {why}");
    }
    // The operations, while traced.
    w.child
        .stdin
        .as_mut()
        .context("no stdin")?
        .write_all(b"go\n")?;
    let mut line = String::new();
    w.stdout.read_line(&mut line)?;
    let done = Instant::now();
    let cpu_ns = field(&line, "cpu_ns").with_context(|| format!("alloc_mix said {line:?}"))?;
    let found = match memleak_out {
        None => {
            // SIGTERM ends the window: rip-probe reports what it gathered
            // (SIGINT would too, but a shell leaves it ignored in the
            // commands it runs in the background).
            let probe = child_of(tool.child.id())?;
            // SAFETY: a plain kill(2) of the pid just read.
            unsafe { libc::kill(probe, libc::SIGTERM) };
            tool.child.wait()?;
            let report = tool
                .stdout
                .take()
                .map(|h| h.join().unwrap_or_default())
                .unwrap_or_default();
            if !report.contains("outstanding") {
                let err = tool.stderr.take().map(|h| h.join().unwrap_or_default());
                bail!(
                    "rip-probe leaks reported nothing: {}",
                    err.unwrap_or_default()
                );
            }
            found_in_rip(&report)
        }
        Some(out) => {
            // memleak prints what is outstanding every second (and
            // nothing on SIGINT), each line read here as it comes: the
            // second report begun after the operations holds every
            // leaked block (it leaves out those younger than 500 ms).
            let lines = lines_as_they_come(out);
            let header = MEMLEAK_HEADER;
            let mut headers = 0;
            let mut report = String::new();
            loop {
                let Ok((at, line)) = lines.recv() else {
                    bail!("memleak-bpfcc stopped before its report");
                };
                if at < done {
                    continue;
                }
                if line.contains(header) {
                    headers += 1;
                    if headers == 3 {
                        break;
                    }
                } else if headers == 2 {
                    report.push_str(&line);
                }
            }
            found_in_memleak(&report)
        }
    };
    drop(w.child.stdin.take());
    w.child.wait()?;
    Ok(Run {
        cpu_ns,
        rss_kib: read_maxrss(&wrss)?,
        tool_kib: Some(read_maxrss(&trss)?),
        found: Some(with_truth(found, &line)),
    })
}

/// A thread that sends each line of `r` with the time it was read.
fn lines_as_they_come(
    mut r: BufReader<ChildStdout>,
) -> std::sync::mpsc::Receiver<(Instant, String)> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        loop {
            let mut line = String::new();
            match r.read_line(&mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if tx.send((Instant::now(), line)).is_err() {
                        break;
                    }
                }
            }
        }
    });
    rx
}

/// Whether one of memleak's stacks holds [`LEAKER`]: "yes" with its
/// "N bytes in M allocations" line, else "no".
fn found_in_memleak(report: &str) -> String {
    let mut heading = "";
    for line in report.lines() {
        if line.contains("allocations from stack") {
            heading = line.trim().trim_end_matches(" from stack");
        } else if line.contains(LEAKER) {
            return format!("yes: `{heading}`");
        }
    }
    "no".into()
}

/// Reads lines until one holds `marker`: `Ok(the marker's line)`, or
/// `Err(what was read)` at the end of the stream.
fn wait_for(r: &mut impl BufRead, marker: &str) -> Result<Result<String, String>> {
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line)? == 0 {
            return Ok(Err(seen));
        }
        if line.contains(marker) {
            return Ok(Ok(line));
        }
        seen.push_str(&line);
    }
}

/// The line of a tool's output that says why it stopped: the last that
/// is not a Python traceback's frame, else `other`'s last.
fn last_reason(stderr: &str, other: &str) -> String {
    fn pick(s: &str) -> Vec<&str> {
        s.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with("File ") && !l.starts_with('^'))
            .collect()
    }
    let e = pick(stderr);
    // BCC says why on the line that names the headers it lacks.
    let first = e
        .iter()
        .find(|l| l.contains("kernel headers"))
        .or(e.first())
        .copied()
        .unwrap_or("");
    let last = e.last().copied().or(pick(other).last().copied());
    match last {
        // BCC says why it cannot compile first, and that it could not
        // on the last line.
        Some(l) if first != l && !first.starts_with("Traceback") => format!("{first} → {l}"),
        Some(l) => l.to_string(),
        None => "exited without a word".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_leaker_in_rip_probe() {
        let r = "pid 1 (a) /a: 20 heap blocks (20.0 KiB) outstanding after a 3.1s window\n\
                 heap: 20, 20.0 KiB, oldest 3.0s, from malloc\n    #0 … leak_here at a.c:37 (a)\n";
        assert_eq!(
            found_in_rip(r),
            "yes: `heap: 20, 20.0 KiB, oldest 3.0s, from malloc`"
        );
        let one = "heap: 2, 2.0 KiB, oldest 1s, from malloc … leak_here at a.c:37 (a)\n";
        assert_eq!(
            found_in_rip(one),
            "yes: `heap: 2, 2.0 KiB, oldest 1s, from malloc`"
        );
        assert_eq!(found_in_rip("heap: 1, 4 KiB, from malloc … main\n"), "no");
    }

    #[test]
    fn finds_the_leaker_in_heaptrack() {
        let r = "MOST CALLS\n3 calls from\nleak_here\nMEMORY LEAKS\n\
                 4.10K leaked over 1 calls from\n__GI__IO_file_doallocate\n\
                 20.48K leaked over 20 calls from\nleak_here\n  at a.c:37\n";
        assert_eq!(found_in_heaptrack(r), "yes: `20.48K leaked over 20 calls`");
        assert_eq!(
            found_in_heaptrack("MEMORY LEAKS\n1K leaked over 1 calls from\nmain\n"),
            "no"
        );
        assert!(found_in_heaptrack("nothing").starts_with("no"));
    }

    #[test]
    fn finds_the_leaker_in_memleak() {
        let r = "\t4096 bytes in 1 allocations from stack\n\t\t0x1 _IO_file_doallocate+0x5 [libc.so.6]\n\
                 \t20480 bytes in 20 allocations from stack\n\t\t0x2 leak_here+0x9 [alloc_mix]\n";
        assert_eq!(found_in_memleak(r), "yes: `20480 bytes in 20 allocations`");
        assert_eq!(
            found_in_memleak("\t1 bytes in 1 allocations from stack\n\t\tmain\n"),
            "no"
        );
    }

    #[test]
    fn the_budget_is_judged_by_the_interval_of_the_median() {
        let said = |preloaded: &[f64], sampled: &[f64]| {
            let mut t: Vec<Tally> = (0..CG_ROWS).map(|_| Tally::default()).collect();
            t[0].ratios = vec![1.0; sampled.len()];
            t[1].ratios = preloaded.to_vec();
            t[2].ratios = sampled.to_vec();
            let mut s = String::new();
            budget(&mut s, &t).map(|()| s)
        };
        // Ratios 1.000 to 1.020; with seven, the interval is all of them.
        let low: Vec<f64> = (0..7).map(|i| 1.0 + f64::from(i) / 300.0).collect();
        assert_eq!(
            said(&low, &low).unwrap(),
            "\nAgainst the budget (≤ 3 % on an allocation-heavy benchmark at the default rate), \
             in CPU time: sampling at 512 KiB costs **+1.0 %** (the median of the 7 rounds' \
             ratios; 95 % interval of the median +0.0 % to +2.0 %): **met**; preloaded and not \
             sampling, +1.0 % (+0.0 % to +2.0 %).\n"
        );
        let high: Vec<f64> = low.iter().map(|r| r + 0.04).collect();
        assert!(said(&low, &high).unwrap().contains("**not met**"));
        let across: Vec<f64> = low.iter().map(|r| r + 0.02).collect();
        assert!(
            said(&low, &across)
                .unwrap()
                .contains("**not settled** by this run, whose interval holds 3 %")
        );
        assert!(
            said(&low[..5], &low[..5]).is_err(),
            "five rounds have no interval"
        );
    }

    #[test]
    fn bcc_reason() {
        let e = "modprobe: FATAL: Module kheaders not found\nUnable to find kernel headers. Try rebuilding kernel with CONFIG_IKHEADERS=m (module) or installing the kernel development package for your running kernel version.\nTraceback (most recent call last):\n  File \"/usr/sbin/memleak-bpfcc\", line 445, in <module>\n    bpf = BPF(text=bpf_source)\n          ^^^^^\nException: Failed to compile BPF module <text>\n";
        assert_eq!(
            last_reason(e, ""),
            "Unable to find kernel headers. Try rebuilding kernel with CONFIG_IKHEADERS=m (module) or installing the kernel development package for your running kernel version. → Exception: Failed to compile BPF module <text>"
        );
        assert_eq!(
            last_reason("chdir(/x): No such file\nException: Failed\n", ""),
            "chdir(/x): No such file → Exception: Failed"
        );
        assert_eq!(last_reason("", ""), "exited without a word");
    }
}
