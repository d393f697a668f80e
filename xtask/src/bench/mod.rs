//! `cargo xtask bench [--quick]`: how much recording that a function ran
//! costs with a librip snap, next to USDT markers, LTTng-UST tracepoints,
//! uprobes (rip-probe's and bpftrace's) and gdb breakpoints; what rip-probe
//! costs the process it watches; how it scales to thousands of blocked
//! threads next to gdb; and how long reading 100,000 live slots takes.
//! Writes `docs/BENCHMARKS.md`, the chart `docs/bench-per-call.svg`, and
//! the README's headline sentence.

mod alloc;
mod bulk;
mod callgrind;
mod calls;
mod chart;
mod goroutines;
mod peers;
mod proc;
mod python;
mod reading;
mod report;
mod rows;
mod scale;
mod serve;
mod stacks;
mod stats;
mod suites;
mod tracers;
mod workloads;

use std::{
    path::PathBuf,
    process::Command,
    time::{Instant, SystemTime, UNIX_EPOCH},
};

use anyhow::{Context, Result};

use crate::util::{output, root, step};

/// Where the bench's executables and scratch files go.
pub fn out_dir() -> PathBuf {
    root().join("target/bench")
}

/// Builds the release rip-probe and compiles the `maxrss` helper
/// (`tests/bench/maxrss.c`, into target/bench): what the suites that run
/// rip-probe by itself measure with. Their paths.
pub(crate) fn release_probe_and_maxrss() -> Result<(PathBuf, PathBuf)> {
    step("bench: cargo build --release -p rip-probe");
    crate::util::exec(
        crate::util::cargo().args(["build", "--release", "-p", "rip-probe"]),
        "cargo build --release -p rip-probe",
    )?;
    let out = out_dir();
    std::fs::create_dir_all(&out)?;
    let maxrss = cc("tests/bench/maxrss.c", &out.join("maxrss"))?;
    Ok((root().join("target/release/rip-probe"), maxrss))
}

/// Compiles the C file `src` (relative to the workspace) into `exe`,
/// optimized, with debug info.
pub(crate) fn cc(src: &str, exe: &std::path::Path) -> Result<PathBuf> {
    crate::util::exec(
        Command::new("cc")
            .args(["-O2", "-g", "-o"])
            .arg(exe)
            .arg(root().join(src)),
        &format!("cc {src}"),
    )?;
    Ok(exe.to_path_buf())
}

/// Refuses to measure what tracers cost while the kernel times every BPF
/// program run (`kernel.bpf_stats_enabled`, often left on after a
/// `bpftool prog show` measurement): each run then pays two clock reads
/// the overhead rows would count as the tracer's.
fn bpf_stats_off() -> Result<()> {
    let path = "/proc/sys/kernel/bpf_stats_enabled";
    match std::fs::read_to_string(path) {
        Ok(v) if v.trim() != "0" => anyhow::bail!(
            "{path} is {}: every BPF program run is being timed, which the overhead rows would \
             count; run `sysctl kernel.bpf_stats_enabled=0` and the bench again",
            v.trim()
        ),
        _ => Ok(()),
    }
}

/// The README's lines between these markers are the bench's headline.
const HEADLINE_BEGIN: &str = "<!-- bench-headline: written by cargo xtask bench -->";
const HEADLINE_END: &str = "<!-- /bench-headline -->";

/// Runs the rows of many at once alone (see [`bulk`]), or only its
/// `--cgroup` row.
pub fn run_bulk_only(cgroup_only: bool) -> Result<()> {
    bulk::run_bulk_only(cgroup_only)
}

/// Runs the goroutine rows alone (see [`goroutines`]).
pub fn run_goroutines_only() -> Result<()> {
    goroutines::run_goroutines_only()
}

/// Runs the overhead rows alone (what rip-probe's commands and the peers
/// cost a getppid loop, a one-CPU ping-pong and a mutex hand-off) and
/// prints their section (also written to target/bench/overhead.md).
pub fn run_overhead_only() -> Result<()> {
    crate::setup::run_setup()?;
    step("bench: peers (Debian packages)");
    let peers = peers::Peers::ensure();
    step("bench: build the workloads");
    let w = workloads::build(&peers)?;
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(1, |d| d.as_secs());
    let mut rng = fastrand::Rng::with_seed(seed);
    let ctx = rows::Ctx {
        rip_probe: w.rip_probe.path.clone(),
        uprobe_lib: w.uprobe_lib.path.clone(),
        gdb_script: tracers::write_gdb_script(&out_dir())?,
        lttng: Err("not run (--overhead-only)".into()),
        target_ns: 0.5e9,
        rounds: 9,
    };
    step("bench: what rip-probe costs the traced process");
    let load = load_average();
    bpf_stats_off()?;
    let overhead = rows::measure(suites::overhead(&w, &peers), &ctx, &mut rng);
    let r = report::Report {
        command: "cargo xtask bench --overhead-only".into(),
        date: String::new(),
        elapsed: std::time::Duration::ZERO,
        machine: Vec::new(),
        versions: Vec::new(),
        peers: peers
            .all()
            .into_iter()
            .map(|(p, v)| (p.to_string(), v.map(str::to_string).map_err(str::to_string)))
            .collect(),
        builds: Vec::new(),
        rounds: ctx.rounds,
        target_ms: ctx.target_ns / 1e6,
        seed,
        per_call: Vec::new(),
        callgrind: (0, 0, String::new()),
        overhead,
        scale: Vec::new(),
        tokio: Err("not run".into()),
        stacks: Err("not run".into()),
        reading: Err("not run".into()),
        bulk: Err("not run".into()),
        goroutines: Err("not run".into()),
        alloc: Err("not run".into()),
        notes: Vec::new(),
    };
    let mut s = r.overhead_section();
    s.push_str(&format!(
        "\n`cargo xtask bench --overhead-only`, kernel {}, load average before: {load}, after: {}.\n",
        std::fs::read_to_string("/proc/sys/kernel/osrelease")?.trim(),
        load_average()
    ));
    let md = out_dir().join("overhead.md");
    std::fs::write(&md, &s).with_context(|| format!("writing {}", md.display()))?;
    println!("{s}");
    Ok(())
}

/// Runs the Python rows alone (see [`python`]).
pub fn run_python_only() -> Result<()> {
    python::run_python_only()
}

/// Runs `rip-probe serve` over `targets` processes for `minutes` and
/// prints its own cost (see [`serve`]; also written to
/// target/bench/serve.md).
pub fn run_serve_only(targets: usize, minutes: u64) -> Result<()> {
    serve::run_serve_only(targets, minutes)
}

/// Runs the allocation sampler's rows alone and prints their section
/// (also written to target/bench/alloc.md).
pub fn run_alloc_only() -> Result<()> {
    alloc::run_alloc_only()
}

/// Runs the scale rows alone, at the pool sizes `sizes` (and, unless 0,
/// on the tokio workload with `tokio_tasks` idle tasks), without gdb,
/// and prints their section (also written to target/bench/scale.md).
///
/// With `baseline` (a rip-probe built from another commit), each process
/// is also reported by it, and the bench fails unless both reports agree
/// on every thread (`scale::compare_reports`): the check that a faster
/// report says the same, at 100,000 threads, when CI cannot afford it.
pub fn run_scale_only(
    sizes: &[usize],
    tokio_tasks: usize,
    baseline: Option<&std::path::Path>,
) -> Result<()> {
    crate::setup::run_setup()?;
    step("bench: peers (Debian packages)");
    let peers = peers::Peers::ensure();
    step("bench: build the workloads");
    let w = workloads::build(&peers)?;
    step("bench: scale (blocked threads)");
    let results: Vec<_> = sizes
        .iter()
        .map(|&workers| {
            let window = if workers >= scale::HUGE {
                std::time::Duration::ZERO
            } else {
                scale::WINDOW
            };
            let gdb = Err("not run (--scale-only)".to_string());
            scale::run(&w, workers, window, 3, gdb, baseline).map_err(|e| format!("{e:#}"))
        })
        .collect();
    let mut s = String::new();
    report::scale_section(&results, &mut s);
    if tokio_tasks > 0 {
        step("bench: scale (idle tokio tasks)");
        let r = scale::run_tokio(&w, tokio_tasks, 3).map_err(|e| format!("{e:#}"));
        scale::tokio_section(&r, &mut s);
    }
    let md = out_dir().join("scale.md");
    std::fs::write(&md, &s).with_context(|| format!("writing {}", md.display()))?;
    println!("{s}");
    let differ = results
        .iter()
        .flatten()
        .filter(|r| matches!(r.baseline, Some(Err(_))))
        .count();
    if differ > 0 {
        anyhow::bail!("the baseline build's reports differ at {differ} sizes (see above)");
    }
    Ok(())
}

/// Runs the user stacks comparison alone and prints its section (also
/// written to target/bench/stacks.md).
pub fn run_stacks_only() -> Result<()> {
    crate::setup::run_setup()?;
    step("bench: peers (Debian packages)");
    let peers = peers::Peers::ensure();
    step("bench: build the workloads");
    let w = workloads::build(&peers)?;
    step("bench: user stacks of 10,000 blocked threads");
    let r = stacks::run(&w, &peers, false).map_err(|e| format!("{e:#}"));
    let mut s = String::new();
    stacks::render(&r, &mut s);
    let md = out_dir().join("stacks.md");
    std::fs::write(&md, &s).with_context(|| format!("writing {}", md.display()))?;
    println!("{s}");
    Ok(())
}

/// Runs the whole bench and writes its results.
pub fn run_bench(quick: bool) -> Result<()> {
    let started = Instant::now();
    let load_before = load_average();
    crate::setup::run_setup()?;

    step("bench: peers (Debian packages)");
    let peers = peers::Peers::ensure();
    for (p, v) in peers.all() {
        match v {
            Ok(v) => eprintln!("    {p} {v}"),
            Err(e) => eprintln!("    {p}: not available: {e}"),
        }
    }

    step("bench: build the workloads");
    let w = workloads::build(&peers)?;
    let gdb_script = tracers::write_gdb_script(&out_dir())?;

    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(1, |d| d.as_secs());
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut notes = Vec::new();
    let daemon = peers
        .need(&["lttng-tools"])
        .and_then(|_| tracers::LttngDaemon::ensure().map_err(|e| format!("{e:#}")));
    match &daemon {
        Ok(d) if d.started_here() => notes.push(
            "The bench started `lttng-sessiond --no-kernel` for the LTTng rows (it ran \
             during the dormant row too: registered, no event enabled) and stopped it after."
                .to_string(),
        ),
        Ok(_) => notes.push("An lttng-sessiond was already running; the bench used it.".into()),
        Err(_) => {}
    }
    let ctx = rows::Ctx {
        rip_probe: w.rip_probe.path.clone(),
        uprobe_lib: w.uprobe_lib.path.clone(),
        gdb_script,
        lttng: daemon.as_ref().map(|_| ()).map_err(Clone::clone),
        target_ns: if quick { 0.25e9 } else { 0.5e9 },
        rounds: if quick { 5 } else { 9 },
    };

    step("bench: cost per call of recording that f ran");
    let mut per_call_rows = suites::per_call(&w, &peers);
    per_call_rows.extend(calls::rows(&w, &peers));
    let mut per_call = rows::measure(per_call_rows, &ctx, &mut rng);
    drop(daemon);

    step("bench: instructions per call (callgrind)");
    let (n1, n2) = if quick {
        (200_000, 400_000)
    } else {
        (1_000_000, 2_000_000)
    };
    let valgrind = peers.need(&["valgrind"]);
    for m in per_call.iter_mut().filter(|m| m.row.callgrind) {
        let Ok(exe) = &m.row.exe else { continue };
        let counted = match &valgrind {
            Err(e) => Err(e.clone()),
            Ok(()) => {
                callgrind::per_call(&exe.path, n1, n2, &out_dir()).map_err(|e| format!("{e:#}"))
            }
        };
        match &counted {
            Ok(i) => eprintln!("    {:<22} {i:.2} instructions per call", m.row.id),
            Err(e) => eprintln!("    {}: {e}", m.row.id),
        }
        m.instructions = Some(counted);
    }
    let callgrind_example = proc::shell_words(&callgrind::args(
        "target/bench/loop-librip",
        n2,
        "callgrind.out",
    ));

    step("bench: what rip-probe costs the traced process");
    bpf_stats_off()?;
    let overhead = rows::measure(suites::overhead(&w, &peers), &ctx, &mut rng);

    step("bench: scale (blocked threads)");
    let mut scale_results = Vec::new();
    for (workers, window) in [
        (1_000, scale::WINDOW),
        (10_000, scale::WINDOW),
        (scale::HUGE, std::time::Duration::ZERO),
    ] {
        let gdb = match peers.need(&["gdb"]) {
            Ok(()) if quick && workers >= 10_000 => Err("skipped by --quick".to_string()),
            // gdb at 10,000 threads is the comparison: at 100,000 it runs
            // for many minutes.
            Ok(()) if workers > 10_000 => Err("not run (see 10,000)".to_string()),
            other => other.map_err(|e| format!("not available: {e}")),
        };
        let r = scale::run(&w, workers, window, if quick { 1 } else { 3 }, gdb, None);
        if let Err(e) = &r {
            eprintln!("    {workers} workers: failed: {e:#}");
        }
        scale_results.push(r.map_err(|e| format!("{e:#}")));
    }

    step("bench: scale (idle tokio tasks)");
    let tokio = scale::run_tokio(&w, scale::TOKIO_TASKS, if quick { 1 } else { 3 })
        .map_err(|e| format!("{e:#}"));
    if let Err(e) = &tokio {
        eprintln!("    failed: {e}");
    }

    step("bench: user stacks of 10,000 blocked threads");
    let stacks = stacks::run(&w, &peers, quick).map_err(|e| format!("{e:#}"));
    if let Err(e) = &stacks {
        eprintln!("    failed: {e}");
    }

    let goroutines =
        goroutines::section(&w.rip_probe.path, &w.maxrss.path).map_err(|e| format!("{e:#}"));
    if let Err(e) = &goroutines {
        eprintln!("    goroutines: failed: {e}");
    }

    let bulk = bulk::section(&w.rip_probe.path, &w.maxrss.path).map_err(|e| format!("{e:#}"));
    if let Err(e) = &bulk {
        eprintln!("    failed: {e}");
    }

    let alloc = alloc::section(if quick { 3 } else { 7 }).map_err(|e| format!("{e:#}"));
    if let Err(e) = &alloc {
        eprintln!("    failed: {e}");
    }

    step("bench: reading 100,000 live slots (rip-probe dump --json)");
    let reading = reading::run(&w, if quick { 3 } else { 7 }).map_err(|e| format!("{e:#}"));
    if let Err(e) = &reading {
        eprintln!("    failed: {e}");
    }

    step("bench: write docs/BENCHMARKS.md, docs/bench-per-call.svg, README.md");
    let builds = {
        let mut b = vec![w.rip_probe.built_by.clone()];
        for e in [&w.loop_plain, &w.loop_librip, &w.overhead, &w.maxrss] {
            b.push(e.built_by.clone());
        }
        for e in [&w.loop_usdt, &w.loop_lttng] {
            match e {
                Ok(e) => b.push(e.built_by.clone()),
                Err(why) => b.push(format!("# not built: {why}")),
            }
        }
        b
    };
    let report = report::Report {
        command: if quick {
            "cargo xtask bench --quick".into()
        } else {
            "cargo xtask bench".into()
        },
        date: output(Command::new("date").args(["-u", "+%Y-%m-%d %H:%M UTC"]))
            .map_or_else(|| "unknown date".into(), |d| d.trim().to_string()),
        elapsed: started.elapsed(),
        machine: {
            let mut m = machine();
            m.push((
                "load average (1, 5, 15 min) at the start".into(),
                load_before,
            ));
            m.push(("load average at the end".into(), load_average()));
            m
        },
        versions: versions(),
        peers: peers
            .all()
            .into_iter()
            .map(|(p, v)| (p.to_string(), v.map(String::from).map_err(String::from)))
            .collect(),
        builds,
        rounds: ctx.rounds,
        target_ms: ctx.target_ns / 1e6,
        seed,
        per_call,
        callgrind: (n1, n2, callgrind_example),
        overhead,
        scale: scale_results,
        tokio,
        stacks,
        reading,
        bulk,
        goroutines,
        alloc,
        notes,
    };
    let docs = root().join("docs");
    let md = docs.join("BENCHMARKS.md");
    std::fs::write(&md, report.render()).with_context(|| format!("writing {}", md.display()))?;
    let bars: Vec<(&str, &str, f64)> = report
        .per_call
        .iter()
        .filter_map(|m| Some((m.row.id, m.row.label, m.median()?)))
        .collect();
    chart::draw(&docs.join("bench-per-call.svg"), &bars)?;
    update_readme(&report.headline())?;
    eprintln!("{}", report.headline());
    eprintln!(
        "xtask bench: done in {:.0}s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Replaces the README's headline block.
fn update_readme(headline: &str) -> Result<()> {
    let path = root().join("README.md");
    let text = std::fs::read_to_string(&path).context("reading README.md")?;
    match replace_block(&text, headline) {
        Some(new) => std::fs::write(&path, new).context("writing README.md"),
        None => {
            eprintln!("    README.md has no `{HEADLINE_BEGIN}` block: headline not written");
            Ok(())
        }
    }
}

/// `text` with the lines between the headline markers replaced by `body`.
fn replace_block(text: &str, body: &str) -> Option<String> {
    let begin = text.find(HEADLINE_BEGIN)? + HEADLINE_BEGIN.len();
    let end = begin + text[begin..].find(HEADLINE_END)?;
    Some(format!("{}\n{body}\n{}", &text[..begin], &text[end..]))
}

/// CPU, cores, memory and kernel.
fn machine() -> Vec<(String, String)> {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")?
                .split_once(':')
                .map(|x| x.1.trim())
        })
        .unwrap_or("unknown")
        .to_string();
    let cores = cpuinfo
        .lines()
        .filter(|l| l.starts_with("processor"))
        .count();
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            let kb: f64 = m
                .lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))?
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .ok()?;
            Some(format!("{:.1} GiB", kb / 1024.0 / 1024.0))
        })
        .unwrap_or_else(|| "unknown".into());
    let uname = |flag: &str| {
        output(Command::new("uname").arg(flag))
            .map_or_else(|| "unknown".into(), |s| s.trim().to_string())
    };
    vec![
        ("CPU".into(), cpu),
        ("logical CPUs".into(), cores.to_string()),
        ("memory".into(), mem),
        ("kernel".into(), format!("{} {}", uname("-s"), uname("-r"))),
    ]
}

/// `/proc/loadavg`'s three load averages.
pub(crate) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg").map_or_else(
        |_| "unknown".into(),
        |l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
    )
}

/// The first line of each tool's version output.
fn versions() -> Vec<(String, String)> {
    let first = |prog: &str, args: &[&str]| {
        output(Command::new(prog).args(args))
            .and_then(|s| {
                s.lines()
                    .find(|l| !l.trim().is_empty())
                    .map(|l| l.trim().to_string())
            })
            .unwrap_or_else(|| "not available".into())
    };
    let mut rip = first("git", &["rev-parse", "--short=12", "HEAD"]);
    if output(Command::new("git").args(["status", "--porcelain", "--untracked-files=no"]))
        .is_some_and(|s| !s.trim().is_empty())
    {
        rip.push_str(" with uncommitted changes");
    }
    vec![
        ("rip".into(), rip),
        ("rustc".into(), first("rustc", &["--version"])),
        ("cc".into(), first("cc", &["--version"])),
        ("bpftrace".into(), first("bpftrace", &["--version"])),
        ("lttng".into(), first("lttng", &["--version"])),
        ("gdb".into(), first("gdb", &["--version"])),
        ("valgrind".into(), first("valgrind", &["--version"])),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readme_block() {
        let text = format!("a\n{HEADLINE_BEGIN}\nold\nlines\n{HEADLINE_END}\nb\n");
        assert_eq!(
            replace_block(&text, "new").unwrap(),
            format!("a\n{HEADLINE_BEGIN}\nnew\n{HEADLINE_END}\nb\n")
        );
        assert_eq!(replace_block("no markers", "x"), None);
    }
}
