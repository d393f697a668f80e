//! User stacks at scale: 10,000 blocked threads of `tests/c/user_stacks.c`
//! (built `-O2 -fomit-frame-pointer` and stripped, calling through a
//! library of its own), every stack read by `rip-probe --pid --duration 0
//! --json`, by gdb's `thread apply all bt` and by elfutils' `eu-stack`:
//! wall time, peak RSS, stacks that reach the thread's start function, the
//! cost per stack, and how long each tool held the target up, measured by
//! a ticker thread in the target (its longest gap between 1 ms sleeps).

use std::{
    fmt::Write as _,
    fs::File,
    io::{BufRead, BufReader, Write},
    path::PathBuf,
    process::{Child, ChildStdin, ChildStdout, Command, Stdio},
    time::Duration,
};

use anyhow::{Context, Result, bail};

use super::{
    peers::Peers,
    proc::{Usage, measure, shell_words},
    scale::Headroom,
    stats::median,
    workloads::{Workloads, rel},
};
use crate::util::root;

/// Blocked threads in the run (plus the program's own few).
pub const THREADS: usize = 10_000;
/// What rip-probe must stay within at [`THREADS`]: wall time.
pub const WALL: Duration = Duration::from_millis(500);
/// See [`WALL`]: peak RSS in MB.
pub const RSS_MB: u64 = 200;
/// [`RSS_MB`] in KiB.
pub const RSS_KIB: u64 = RSS_MB * 1000 * 1000 / 1024;

/// One tool's runs.
#[derive(Clone, Debug, Default)]
pub struct Tool {
    /// How the table names it.
    pub name: &'static str,
    /// Its command line (`PID` for the pid), as the table shows it.
    pub command: String,
    /// The same, as run (relative paths from the workspace root).
    pub args: Vec<String>,
    /// Each run's wall time and peak RSS.
    pub runs: Vec<Usage>,
    /// The ticker's longest gap during each run.
    pub pauses: Vec<Duration>,
    /// Stacks in its last output that reach `stk_thread`, the threads'
    /// start function (through the library and the executable).
    pub stacks: usize,
    /// Threads the target had after its last run (fewer than before:
    /// the tool made some threads' blocking calls fail).
    pub threads_after: usize,
    /// Why it did not run.
    pub missing: Option<String>,
}

impl Tool {
    fn median_wall(&self) -> Option<f64> {
        median(
            &self
                .runs
                .iter()
                .map(|u| u.wall.as_secs_f64())
                .collect::<Vec<_>>(),
        )
    }

    fn median_pause(&self) -> Option<f64> {
        median(
            &self
                .pauses
                .iter()
                .map(Duration::as_secs_f64)
                .collect::<Vec<_>>(),
        )
    }

    fn max_rss_kib(&self) -> Option<u64> {
        self.runs.iter().map(|u| u.max_rss_kib).max()
    }
}

/// The run's results.
#[derive(Clone, Debug)]
pub struct StacksResult {
    /// Threads of the target.
    pub threads: usize,
    /// The ticker's longest gap while no tool ran.
    pub idle_gap: Duration,
    /// The tools, in the order they ran in each round.
    pub tools: Vec<Tool>,
    /// How the target was built.
    pub built_by: Vec<String>,
    /// rip-probe's phases in its last run (`RIP_PROBE_TIMING=1`).
    pub phases: Vec<(String, f64)>,
    /// The load average before and after the run: the machine's other
    /// work slows every tool alike.
    pub load: (String, String),
}

/// The target: `user_stacks THREADS`, its ticker driven over stdin.
/// Killed on drop.
struct Target {
    child: Child,
    stdin: ChildStdin,
    out: BufReader<ChildStdout>,
}

impl Target {
    fn start(exe: &PathBuf, workers: usize) -> Result<Target> {
        let mut child = Command::new(exe)
            .arg(workers.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {}", exe.display()))?;
        let stdin = child.stdin.take().expect("piped");
        let out = BufReader::new(child.stdout.take().expect("piped"));
        let mut t = Target { child, stdin, out };
        loop {
            let l = t.line()?;
            if l == "ready" {
                return Ok(t);
            }
        }
    }

    fn line(&mut self) -> Result<String> {
        let mut l = String::new();
        if self.out.read_line(&mut l)? == 0 {
            bail!("user_stacks exited");
        }
        Ok(l.trim().to_string())
    }

    fn command(&mut self, cmd: &str) -> Result<String> {
        writeln!(self.stdin, "{cmd}")?;
        self.stdin.flush()?;
        self.line()
    }

    /// Clears the ticker's longest gap.
    fn reset(&mut self) -> Result<()> {
        let l = self.command("reset")?;
        if l != "ok" {
            bail!("user_stacks answered {l:?} to reset");
        }
        Ok(())
    }

    /// The ticker's longest gap since the last reset (the first figure
    /// of its `gap <gap ns> <held ns>` reply).
    fn gap(&mut self) -> Result<Duration> {
        let l = self.command("gap")?;
        let ns = l
            .strip_prefix("gap ")
            .and_then(|n| n.split(' ').next()?.parse().ok())
            .with_context(|| format!("user_stacks answered {l:?} to gap"))?;
        Ok(Duration::from_nanos(ns))
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Builds `tests/c/user_stacks.c` and its library as the tests do:
/// `-O2 -fomit-frame-pointer`, then stripped (`.dynsym` and `.eh_frame`
/// stay, as distributions ship binaries).
fn build() -> Result<(PathBuf, Vec<String>)> {
    let dir = "target/bench/stacks";
    std::fs::create_dir_all(root().join(dir)).with_context(|| format!("creating {dir}"))?;
    let lib = format!("{dir}/libstkchain.so");
    let exe = format!("{dir}/user_stacks");
    let flags = ["-O2", "-fomit-frame-pointer", "-Wall"];
    let mut cmds: Vec<Vec<String>> = Vec::new();
    let words = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let mut c = vec!["cc"];
    c.extend(flags);
    c.extend(["-fPIC", "-shared", "-o", &lib, "tests/c/user_stacks_lib.c"]);
    cmds.push(words(&c));
    let mut c = vec!["cc"];
    c.extend(flags);
    c.extend([
        "-pthread",
        "-rdynamic",
        "-o",
        &exe,
        "tests/c/user_stacks.c",
        "-Ltarget/bench/stacks",
        "-lstkchain",
        "-Wl,-rpath,$ORIGIN",
    ]);
    cmds.push(words(&c));
    cmds.push(words(&["strip", "--strip-all", &exe, &lib]));
    for c in &cmds {
        let st = Command::new(&c[0])
            .args(&c[1..])
            .current_dir(root())
            .status()
            .with_context(|| format!("running {}", c[0]))?;
        if !st.success() {
            bail!("`{}` failed", shell_words(c));
        }
    }
    Ok((
        root().join(exe),
        cmds.iter().map(|c| shell_words(c)).collect(),
    ))
}

/// The 1, 5 and 15 minute load averages.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// Threads of process `pid` now.
fn task_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, Iterator::count)
}

/// How many stacks of `text` reach `stk_thread`: threads of a rip-probe
/// JSON report whose frames (the stack of its table they name) name it,
/// or a debugger's backtrace lines.
fn full_stacks(text: &str) -> usize {
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(text) {
        let threads = v["threads"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        let reaches = |stack: &serde_json::Value| {
            stack
                .as_array()
                .is_some_and(|f| f.iter().any(|f| f["function"] == "stk_thread"))
        };
        return threads
            .iter()
            .filter(|t| {
                t["frames"]
                    .as_u64()
                    .is_some_and(|id| reaches(&v["stacks"][id as usize]))
            })
            .count();
    }
    text.lines()
        .filter(|l| {
            l.trim_start().starts_with('#') && l.split_whitespace().any(|w| w == "stk_thread")
        })
        .count()
}

/// Runs every tool against one target: rip-probe three times (once with
/// `quick`), with and without stacks; gdb and eu-stack once each (not with
/// `quick`), in rounds.
pub fn run(w: &Workloads, peers: &Peers, quick: bool) -> Result<StacksResult> {
    let reps = if quick { 1 } else { 3 };
    // gdb and eu-stack hold 10,000 threads for many seconds.
    let peer = |pkg: &str| match peers.need(&[pkg]) {
        Ok(()) if quick => Some("skipped by --quick".to_string()),
        r => r.err(),
    };
    let _headroom = Headroom::raise(THREADS)?;
    let load_before = loadavg();
    let (exe, built_by) = build()?;
    let mut target = Target::start(&exe, THREADS)?;
    let threads = task_count(target.child.id());
    eprintln!("    user_stacks {THREADS}: {threads} threads");
    target.reset()?;
    std::thread::sleep(Duration::from_millis(500));
    let idle_gap = target.gap()?;

    let rip = w.rip_probe.path.to_string_lossy().into_owned();
    let rip_rel = rel(&w.rip_probe.path);
    let rip_args = |extra: &[&str]| {
        let mut a = vec![rip.clone()];
        a.extend(["--pid", "PID", "--duration", "0", "--json"].map(String::from));
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let tool = |name, args: Vec<String>, missing| Tool {
        name,
        command: shell_words(&args).replace(&rip, &rip_rel),
        args,
        missing,
        ..Tool::default()
    };
    let mut tools = vec![
        tool("rip-probe --pid --duration 0 --json", rip_args(&[]), None),
        tool(
            "rip-probe --pid --duration 0 --json --no-stacks",
            rip_args(&["--no-stacks"]),
            None,
        ),
        tool(
            "gdb thread apply all bt",
            super::scale::gdb_args("PID"),
            peer("gdb"),
        ),
        tool(
            "eu-stack",
            ["eu-stack", "-p", "PID"].map(String::from).to_vec(),
            peer("elfutils"),
        ),
    ];
    let mut phases = Vec::new();
    let dir = super::out_dir();
    // rip-probe with and without stacks, in turn, on one target; then
    // eu-stack and gdb once each, each on a fresh target: a ptrace stop
    // makes blocking calls that are never restarted (epoll_wait) fail with
    // EINTR, and those threads move on.
    let mut schedule: Vec<usize> = (0..reps).flat_map(|_| [0, 1]).collect();
    schedule.extend([3, 2]);
    for i in schedule {
        let tool = &mut tools[i];
        if tool.missing.is_some() {
            continue;
        }
        if i >= 2 {
            drop(target);
            target = Target::start(&exe, THREADS)?;
        }
        let pid = target.child.id().to_string();
        let args: Vec<String> = tool
            .args
            .iter()
            .map(|a| if a == "PID" { pid.clone() } else { a.clone() })
            .collect();
        let out = dir.join(format!("stacks-{i}.out"));
        let err = dir.join(format!("stacks-{i}.err"));
        target.reset()?;
        let u = measure(
            &w.maxrss.path,
            &args,
            &[("RIP_PROBE_TIMING", "1")],
            File::create(&out)?,
            File::create(&err)?,
        )?;
        let pause = target.gap()?;
        tool.threads_after = task_count(target.child.id());
        let text = std::fs::read_to_string(&out).unwrap_or_default();
        tool.stacks = full_stacks(&text);
        if i == 0 {
            phases = super::scale::parse_phases(&std::fs::read_to_string(&err).unwrap_or_default());
        }
        eprintln!(
            "    {}: {:.2}s, {} MiB, {} full stacks, target paused {:.1} ms, {} threads after",
            tool.name,
            u.wall.as_secs_f64(),
            u.max_rss_kib / 1024,
            tool.stacks,
            pause.as_secs_f64() * 1e3,
            tool.threads_after
        );
        if !u.success && i < 2 {
            bail!("{} failed: see {}", tool.name, rel(&err));
        }
        tool.runs.push(u);
        tool.pauses.push(pause);
    }
    Ok(StacksResult {
        threads,
        idle_gap,
        tools,
        built_by,
        phases,
        load: (load_before, loadavg()),
    })
}

fn ms(secs: f64) -> String {
    if secs >= 10.0 {
        format!("{:.1} s", secs)
    } else if secs >= 1.0 {
        format!("{:.2} s", secs)
    } else {
        format!("{:.0} ms", secs * 1e3)
    }
}

/// The section of docs/BENCHMARKS.md.
pub fn render(r: &Result<StacksResult, String>, s: &mut String) {
    let _ = writeln!(
        s,
        "## User stacks of 10,000 blocked threads\n\n\
         `tests/c/user_stacks.c` built `-O2 -fomit-frame-pointer` and stripped, \
         its {THREADS} extra threads blocked in read, futex, epoll_wait and \
         nanosleep under a chain of five functions across the executable and a \
         library of its own. Each tool prints every thread's stack; \"full \
         stacks\" counts those that reach the threads' start function \
         (`stk_thread`). The target's pause is the longest gap of a ticker \
         thread in it between 1 ms sleeps while the tool runs (median over \
         the runs). Peak RSS: `ru_maxrss` through `tests/bench/maxrss.c`. Cost \
         per stack: wall time / full stacks. rip-probe runs with and without \
         stacks in turn on one target; eu-stack and gdb once each, each on a \
         fresh target, since a ptrace stop makes the blocking calls that are \
         never restarted (epoll_wait) fail with EINTR: \"threads left after\" \
         counts the target's threads after the tool (its epoll threads return \
         and exit).\n"
    );
    let r = match r {
        Ok(r) => r,
        Err(e) => {
            let _ = writeln!(s, "Not measured: {e}\n");
            return;
        }
    };
    let _ = writeln!(
        s,
        "The target had {} threads; its ticker's longest gap with no tool \
         running: {:.1} ms. Load average (1, 5, 15 min) before the run: {}; \
         after: {}.\n",
        super::stats::thousands(r.threads as u64),
        r.idle_gap.as_secs_f64() * 1e3,
        r.load.0,
        r.load.1
    );
    let _ = writeln!(
        s,
        "| tool | runs | wall (median) | peak RSS | full stacks | cost per stack | target paused (median) | threads left after |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for t in &r.tools {
        if let Some(why) = &t.missing {
            let _ = writeln!(s, "| {} | 0 | — | — | — | — | — | not run: {why} |", t.name);
            continue;
        }
        let (Some(wall), Some(pause), Some(rss)) =
            (t.median_wall(), t.median_pause(), t.max_rss_kib())
        else {
            continue;
        };
        let per = if t.stacks > 0 {
            format!("{:.1} µs", wall * 1e6 / t.stacks as f64)
        } else {
            "—".into()
        };
        let _ = writeln!(
            s,
            "| {} | {} | **{}** | {} MiB | {} | {per} | {} | {} |",
            t.name,
            t.runs.len(),
            ms(wall),
            rss / 1024,
            super::stats::thousands(t.stacks as u64),
            ms(pause),
            super::stats::thousands(t.threads_after as u64)
        );
    }
    if let [with, without, ..] = &r.tools[..]
        && let (Some(a), Some(b)) = (with.median_wall(), without.median_wall())
        && with.stacks > 0
    {
        let _ = writeln!(
            s,
            "\nStacks add {} to the report (median with, minus median without): \
             {:.1} µs per stack.",
            ms(a - b),
            (a - b) * 1e6 / with.stacks as f64
        );
    }
    if let Some(rip) = r.tools.first() {
        let wall = rip.median_wall().unwrap_or(f64::NAN);
        let rss = rip.max_rss_kib().unwrap_or(0);
        let met = wall <= WALL.as_secs_f64() && rss <= RSS_KIB;
        let _ = writeln!(
            s,
            "\nRequirement: every stack of {} blocked threads in at most {} ms and \
             {} MB peak RSS, without pausing the target. Measured: {}, {} MiB, {} \
             full stacks — {}.\n",
            super::stats::thousands(THREADS as u64),
            WALL.as_millis(),
            RSS_MB,
            ms(wall),
            rss / 1024,
            super::stats::thousands(rip.stacks as u64),
            if met { "met" } else { "**NOT met**" }
        );
    }
    if !r.phases.is_empty() {
        let _ = writeln!(
            s,
            "rip-probe's phases in its last run (`RIP_PROBE_TIMING=1`):\n\n\
             | phase | ms |\n| --- | ---: |"
        );
        for (p, v) in &r.phases {
            let _ = writeln!(s, "| {} | {v:.1} |", p.replace("  ", "&nbsp;&nbsp;"));
        }
        s.push('\n');
    }
    let _ = writeln!(s, "Commands (`PID`: the target's pid):\n\n```");
    for b in &r.built_by {
        let _ = writeln!(s, "{b}");
    }
    let _ = writeln!(s, "target/bench/stacks/user_stacks {THREADS}");
    for t in &r.tools {
        let _ = writeln!(s, "{}", t.command);
    }
    let _ = writeln!(s, "```\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_stacks_in_json_and_backtraces() {
        let json = r#"{"stacks":[[{"function":"read"},{"function":"stk_thread"}],[{"function":"stk_thread"}],[]],"threads":[{"frames":0},{"frames":1},{"frames":2},{"frames":1}],"groups":[{"frames":1}]}"#;
        assert_eq!(full_stacks(json), 3);
        let gdb = "Thread 2 (Thread 0x7f (LWP 5) \"user_stacks\"):\n\
                   #0  0x00007f in read () from /lib/libc.so.6\n\
                   #5  0x000055 in stk_thread ()\n\
                   #6  0x00007f in start_thread () from /lib/libc.so.6\n";
        assert_eq!(full_stacks(gdb), 1);
        let eu = "TID 5:\n#0  0x00007f5c1e8f2a5d read\n#5  0x000055d0c1a2b3c4 stk_thread\n";
        assert_eq!(full_stacks(eu), 1);
        assert_eq!(full_stacks("#1 stk_thread_other"), 0);
    }

    #[test]
    fn renders_the_section() {
        let usage = |s: f64| Usage {
            wall: Duration::from_secs_f64(s),
            max_rss_kib: 100 * 1024,
            cpu: None,
            success: true,
        };
        let r = StacksResult {
            threads: 10_006,
            idle_gap: Duration::from_micros(1300),
            tools: vec![
                Tool {
                    name: "rip-probe --pid --duration 0 --json",
                    command: "rip-probe --pid PID".into(),
                    args: Vec::new(),
                    runs: vec![usage(0.4), usage(0.3), usage(0.5)],
                    pauses: vec![Duration::from_millis(2); 3],
                    stacks: 10_005,
                    threads_after: 10_006,
                    missing: None,
                },
                Tool {
                    name: "eu-stack",
                    missing: Some("elfutils: not installed".into()),
                    ..Tool::default()
                },
            ],
            built_by: vec!["cc ...".into()],
            phases: vec![("unwind stacks".into(), 120.0)],
            load: ("1.00 1.00 1.00".into(), "2.00 2.00 2.00".into()),
        };
        let mut s = String::new();
        render(&Ok(r), &mut s);
        assert!(
            s.contains("| rip-probe --pid --duration 0 --json | 3 | **400 ms** | 100 MiB | 10,005 | 40.0 µs | 2 ms | 10,006 |"),
            "{s}"
        );
        assert!(s.contains("| eu-stack | 0 |"), "{s}");
        assert!(s.contains("— met."), "{s}");
        assert!(s.contains("| unwind stacks | 120.0 |"), "{s}");
    }
}
