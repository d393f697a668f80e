//! Scale: a process with thousands of blocked threads (the demo server's
//! pool), reported by `rip-probe --pid --json` and by gdb's
//! `thread apply all bt`: time to the full report, peak RSS, and whether
//! every thread is in it.

use std::{collections::BTreeSet, fs::File, path::Path, time::Duration};

use anyhow::{Context, Result, bail};

use super::{
    proc::{Proc, Usage, measure},
    workloads::{Workloads, rel},
};

/// rip-probe's observation window in the scale runs up to 10,000 threads.
pub const WINDOW: Duration = Duration::from_secs(1);

/// The largest run: 100,000 blocked threads, reported with no observation
/// window (`--duration 0`): the report's own cost, start to exit.
pub const HUGE: usize = 100_000;

/// What the 100,000-thread run must stay within: wall time (on a quiet
/// machine), CPU time and peak RSS.
pub const HUGE_WALL: Duration = Duration::from_millis(500);
/// See [`HUGE_WALL`].
pub const HUGE_CPU: Duration = Duration::from_millis(800);
/// See [`HUGE_WALL`], in KiB (300 MB).
pub const HUGE_RSS_KIB: u64 = 300 * 1000 * 1000 / 1024;

/// One tool's runs on one process.
#[derive(Clone, Debug, Default)]
pub struct ToolRuns {
    /// Each run's wall time, RSS and status.
    pub runs: Vec<Usage>,
    /// Threads of the process its last report lists.
    pub listed: usize,
    /// rip-probe's phase timings of its last run (`RIP_PROBE_TIMING=1`).
    pub phases: Vec<(String, f64)>,
    /// Why there are no runs (skipped, not available, failed).
    pub missing: Option<String>,
}

impl ToolRuns {
    /// The median wall time.
    pub fn median_wall(&self) -> Option<Duration> {
        let secs: Vec<f64> = self.runs.iter().map(|u| u.wall.as_secs_f64()).collect();
        super::stats::median(&secs).map(Duration::from_secs_f64)
    }

    /// The median CPU time (user + system), if measured.
    pub fn median_cpu(&self) -> Option<Duration> {
        let secs: Vec<f64> = self
            .runs
            .iter()
            .filter_map(|u| u.cpu.map(|c| c.as_secs_f64()))
            .collect();
        super::stats::median(&secs).map(Duration::from_secs_f64)
    }

    /// The largest peak RSS of the runs, in KiB.
    pub fn max_rss_kib(&self) -> Option<u64> {
        self.runs.iter().map(|u| u.max_rss_kib).max()
    }
}

/// Both tools on one process.
#[derive(Clone, Debug)]
pub struct ScaleResult {
    /// Pool workers asked for.
    pub workers: usize,
    /// Threads the process had.
    pub threads: usize,
    /// rip-probe's observation window (`--duration`).
    pub window: Duration,
    /// `rip-probe --pid P --duration WINDOW --json` (user stacks included).
    pub rip_probe: ToolRuns,
    /// The same with `--no-stacks`, run in turn with it.
    pub no_stacks: ToolRuns,
    /// `gdb -batch -p P -ex "thread apply all bt"`.
    pub gdb: ToolRuns,
    /// With a baseline build: the threads its report and this build's
    /// agree on (all of them), or what differs.
    pub baseline: Option<Result<usize, String>>,
}

/// The rip-probe command of a scale run observing for `window`.
pub fn rip_probe_args(exe: &str, pid: &str, window: Duration, stacks: bool) -> Vec<String> {
    let d = if window.is_zero() {
        "0".to_string()
    } else if window.subsec_nanos() == 0 {
        format!("{}s", window.as_secs())
    } else {
        format!("{}ms", window.as_millis())
    };
    let mut a: Vec<String> = [exe, "--pid", pid, "--duration", &d, "--json"]
        .map(String::from)
        .to_vec();
    if !stacks {
        a.push("--no-stacks".into());
    }
    a
}

/// Kernel limits a process of `threads` threads needs (each thread is a
/// pid and two mappings, its stack and guard page), raised for the run
/// and put back after.
pub struct Headroom(Vec<(&'static str, String)>);

impl Headroom {
    /// Raises `kernel.pid_max`, `kernel.threads-max` and `vm.max_map_count`
    /// where they are below what `threads` threads need (needs root).
    pub fn raise(threads: usize) -> Result<Headroom> {
        let need = (threads as u64 + 1000) * 2;
        let mut saved = Vec::new();
        for (path, want) in [
            ("/proc/sys/kernel/pid_max", need.min(4 << 20)),
            ("/proc/sys/kernel/threads-max", need),
            ("/proc/sys/vm/max_map_count", need * 2),
        ] {
            let old = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
            if old.trim().parse::<u64>().is_ok_and(|v| v < want) {
                std::fs::write(path, want.to_string())
                    .with_context(|| format!("raising {path} to {want} (needs root)"))?;
                saved.push((path, old));
            }
        }
        Ok(Headroom(saved))
    }
}

impl Drop for Headroom {
    fn drop(&mut self) {
        for (path, old) in self.0.drain(..).rev() {
            let _ = std::fs::write(path, old.trim());
        }
    }
}

/// The gdb command of a scale run.
pub fn gdb_args(pid: &str) -> Vec<String> {
    [
        "gdb",
        "-batch",
        "-nx",
        "-iex",
        "set debuginfod enabled off",
        "-p",
        pid,
        "-ex",
        "thread apply all bt",
    ]
    .map(String::from)
    .to_vec()
}

/// The demo server's command for `workers` blocked pool threads.
pub fn server_args(exe: &str, workers: &str, ring: &str) -> Vec<String> {
    [exe, "--workers", workers, "--spinners", "0", "--ring", ring]
        .map(String::from)
        .to_vec()
}

/// Runs both tools against a demo server with `workers` blocked threads:
/// rip-probe `reps` times, gdb once unless `gdb` carries why not.
pub fn run(
    w: &Workloads,
    workers: usize,
    window: Duration,
    reps: usize,
    gdb: Result<(), String>,
    baseline: Option<&Path>,
) -> Result<ScaleResult> {
    let _headroom = Headroom::raise(workers)?;
    let dir = super::out_dir();
    let ring = format!("/dev/shm/rip-bench-scale.{}.ring", std::process::id());
    let args = server_args(
        &w.demo_server.path.to_string_lossy(),
        &workers.to_string(),
        &ring,
    );
    let mut server = Proc::start(&args, &[])?;
    let res = (|| {
        server
            .stdout
            .as_mut()
            .expect("piped")
            .wait_for(Duration::from_secs(300), |l| l == "ready")
            .context("the demo server did not get ready")?;
        // Let every worker reach its futex wait.
        std::thread::sleep(Duration::from_secs(1));
        let pid = server.pid();
        let tids = task_ids(pid)?;
        eprintln!("    {workers} workers: pid {pid}, {} threads", tids.len());

        // With and without user stacks, in turn.
        let mut rip = ToolRuns::default();
        let mut no_stacks = ToolRuns::default();
        let exe = w.rip_probe.path.to_string_lossy();
        for _ in 0..reps {
            for (stacks, runs) in [(true, &mut rip), (false, &mut no_stacks)] {
                let name = if stacks { "" } else { "-no-stacks" };
                let json = dir.join(format!("scale-{workers}{name}.json"));
                let timing = dir.join(format!("scale-{workers}{name}.timing"));
                let a = rip_probe_args(&exe, &pid.to_string(), window, stacks);
                let u = measure(
                    &w.maxrss.path,
                    &a,
                    &[("RIP_PROBE_TIMING", "1")],
                    create(&json)?,
                    create(&timing)?,
                )?;
                if !u.success {
                    bail!("rip-probe failed: see {}", rel(&timing));
                }
                let listed = listed_in_json(&json, &tids)?;
                runs.listed = listed;
                runs.phases = parse_phases(&std::fs::read_to_string(&timing).unwrap_or_default());
                eprintln!(
                    "    rip-probe{}: {:.2}s, {} MiB, {listed}/{} threads",
                    if stacks { "" } else { " --no-stacks" },
                    u.wall.as_secs_f64(),
                    u.max_rss_kib / 1024,
                    tids.len()
                );
                runs.runs.push(u);
            }
        }

        let baseline = baseline
            .map(|b| same_as_baseline(&w.rip_probe.path, b, pid, workers))
            .transpose()?;

        let mut g = ToolRuns::default();
        match gdb {
            Err(why) => g.missing = Some(why),
            Ok(()) => {
                let out = dir.join(format!("scale-{workers}.gdb.txt"));
                let a = gdb_args(&pid.to_string());
                let err = dir.join(format!("scale-{workers}.gdb.err"));
                let u = measure(&w.maxrss.path, &a, &[], create(&out)?, create(&err)?)?;
                let text = std::fs::read_to_string(&out).unwrap_or_default();
                g.listed = gdb_threads(&text).intersection(&tids).count();
                eprintln!(
                    "    gdb: {:.2}s, {} MiB, {}/{} threads",
                    u.wall.as_secs_f64(),
                    u.max_rss_kib / 1024,
                    g.listed,
                    tids.len()
                );
                if !u.success {
                    g.missing = Some(format!("gdb failed: see {}", rel(&out)));
                }
                g.runs.push(u);
            }
        }
        Ok(ScaleResult {
            workers,
            threads: tids.len(),
            window,
            rip_probe: rip,
            no_stacks,
            gdb: g,
            baseline,
        })
    })();
    server.signal(libc::SIGKILL);
    server.wait_or_kill(Duration::from_secs(10));
    let _ = std::fs::remove_file(&ring);
    res
}

/// This build's and the `baseline` build's `--duration 0 --json` reports
/// of process `pid`, one after the other: `Ok` with the threads compared
/// when they agree on every thread (see [`compare_reports`]), `Err` with
/// what differs.
fn same_as_baseline(
    exe: &Path,
    baseline: &Path,
    pid: u32,
    workers: usize,
) -> Result<Result<usize, String>> {
    let dir = super::out_dir();
    let mut reports = Vec::new();
    for (name, bin) in [("this", exe), ("baseline", baseline)] {
        let json = dir.join(format!("scale-{workers}.{name}.json"));
        let err = dir.join(format!("scale-{workers}.{name}.err"));
        let a = rip_probe_args(
            &bin.to_string_lossy(),
            &pid.to_string(),
            Duration::ZERO,
            true,
        );
        let status = std::process::Command::new(&a[0])
            .args(&a[1..])
            .stdin(std::process::Stdio::null())
            .stdout(create(&json)?)
            .stderr(create(&err)?)
            .status()
            .with_context(|| format!("running {}", bin.display()))?;
        if !status.success() {
            bail!("{} failed: see {}", bin.display(), rel(&err));
        }
        let text = std::fs::read_to_string(&json)
            .with_context(|| format!("reading {}", json.display()))?;
        reports.push(
            serde_json::from_str::<serde_json::Value>(&text)
                .with_context(|| format!("parsing {}", json.display()))?,
        );
    }
    let got = compare_reports(&reports[0], &reports[1]);
    match &got {
        Ok(n) => eprintln!("    the baseline's report agrees on all {n} threads"),
        Err(e) => eprintln!("    the baseline's report DIFFERS: {e}"),
    }
    Ok(got)
}

/// What two reports must agree on for each thread: its name, state,
/// system call, kernel stack and user stack (each frame's address and
/// function) and lock wait (the lock, its kind, its owner); and the
/// deadlocks. Times are left out: they move between two reports.
fn thread_facts(report: &serde_json::Value) -> std::collections::BTreeMap<u64, String> {
    let stacks = report["stacks"].as_array();
    let stack = |id: &serde_json::Value| -> Vec<(Option<u64>, Option<String>)> {
        id.as_u64()
            .and_then(|i| stacks?.get(usize::try_from(i).ok()?)?.as_array())
            .map(|frames| {
                frames
                    .iter()
                    .map(|f| (f["addr"].as_u64(), f["function"].as_str().map(String::from)))
                    .collect()
            })
            .unwrap_or_default()
    };
    report["threads"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| {
            let w = &t["waits_for"];
            let facts = serde_json::json!({
                "name": t["name"],
                "state": t["state"],
                "syscall": t["syscall"]["text"],
                "kernel_stack": stack(&t["kernel_stack"]),
                "frames": stack(&t["frames"]),
                "waits_for": [w["lock"], w["kind"], w["owner_tid"], w["owner"]["status"]],
            });
            Some((t["tid"].as_u64()?, facts.to_string()))
        })
        .collect()
}

/// Whether reports `a` and `b` (rip-probe `--json`) describe the same
/// threads the same way (see [`thread_facts`]): `Ok` with how many
/// threads, `Err` saying what differs (the first few threads).
pub fn compare_reports(a: &serde_json::Value, b: &serde_json::Value) -> Result<usize, String> {
    let (fa, fb) = (thread_facts(a), thread_facts(b));
    let mut diffs = Vec::new();
    if a["deadlocks"] != b["deadlocks"] {
        diffs.push(format!(
            "deadlocks {} and {}",
            a["deadlocks"], b["deadlocks"]
        ));
    }
    let only = |x: &std::collections::BTreeMap<u64, String>,
                y: &std::collections::BTreeMap<u64, String>| {
        x.keys().filter(|k| !y.contains_key(k)).count()
    };
    let (only_a, only_b) = (only(&fa, &fb), only(&fb, &fa));
    if only_a + only_b > 0 {
        diffs.push(format!(
            "{only_a} threads only in the first report, {only_b} only in the second"
        ));
    }
    let differing: Vec<String> = fa
        .iter()
        .filter_map(|(tid, x)| {
            let y = fb.get(tid)?;
            (x != y).then(|| format!("tid {tid}: {x} / {y}"))
        })
        .collect();
    if !differing.is_empty() {
        diffs.push(format!(
            "{} threads differ, e.g. {}",
            differing.len(),
            differing[..differing.len().min(3)].join("; ")
        ));
    }
    if diffs.is_empty() {
        Ok(fa.len())
    } else {
        Err(diffs.join("; "))
    }
}

fn create(p: &Path) -> Result<File> {
    File::create(p).with_context(|| format!("creating {}", p.display()))
}

/// The thread ids of process `pid`.
fn task_ids(pid: u32) -> Result<BTreeSet<u32>> {
    let dir = format!("/proc/{pid}/task");
    Ok(std::fs::read_dir(&dir)
        .with_context(|| format!("reading {dir}"))?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect())
}

/// How many of `tids` rip-probe's JSON report lists.
fn listed_in_json(path: &Path, tids: &BTreeSet<u32>) -> Result<usize> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    Ok(json_threads(&v).intersection(tids).count())
}

/// The tids of a rip-probe JSON report's `threads`.
pub fn json_threads(v: &serde_json::Value) -> BTreeSet<u32> {
    v["threads"]
        .as_array()
        .map(|ts| {
            ts.iter()
                .filter_map(|t| u32::try_from(t["tid"].as_u64()?).ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The thread ids (LWPs) in gdb's `thread apply all bt` output, from its
/// `Thread N (Thread 0x... (LWP tid) "name"):` headers.
pub fn gdb_threads(text: &str) -> BTreeSet<u32> {
    text.lines()
        .filter(|l| l.starts_with("Thread "))
        .filter_map(|l| {
            let rest = &l[l.find("(LWP ")? + 5..];
            rest[..rest.find(')')?].parse().ok()
        })
        .collect()
}

/// rip-probe's `rip-probe timing: PHASE: 12.3ms` lines.
pub fn parse_phases(stderr: &str) -> Vec<(String, f64)> {
    stderr
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("rip-probe timing: ")?;
            let (phase, ms) = rest.rsplit_once(": ")?;
            Some((phase.to_string(), ms.strip_suffix("ms")?.parse().ok()?))
        })
        .collect()
}

/// Idle tasks of the tokio row of the whole bench.
pub const TOKIO_TASKS: usize = 50_000;

/// rip-probe on the tokio workload's idle tasks (`many RING N`), with
/// `--duration 0`: the report of N tasks at one await, `reps` times.
#[derive(Clone, Debug)]
pub struct TokioResult {
    /// Tasks asked for.
    pub tasks: usize,
    /// Tasks the last report lists.
    pub listed: usize,
    /// The runs, and the phases of the last.
    pub rip_probe: ToolRuns,
}

/// Runs rip-probe `reps` times on a tokio workload of `tasks` idle tasks.
pub fn run_tokio(w: &Workloads, tasks: usize, reps: usize) -> Result<TokioResult> {
    let dir = super::out_dir();
    let ring = format!("/dev/shm/rip-bench-tokio.{}.ring", std::process::id());
    let args: Vec<String> = [
        &*w.tokio_workload.path.to_string_lossy(),
        "many",
        &ring,
        &tasks.to_string(),
    ]
    .map(String::from)
    .to_vec();
    let mut workload = Proc::start(&args, &[])?;
    let res = (|| {
        workload
            .stdout
            .as_mut()
            .expect("piped")
            .wait_for(Duration::from_secs(300), |l| l == "ready")
            .context("the tokio workload did not get ready")?;
        let pid = workload.pid().to_string();
        let mut runs = ToolRuns::default();
        let mut listed = 0;
        for _ in 0..reps {
            let json = dir.join(format!("tokio-{tasks}.json"));
            let timing = dir.join(format!("tokio-{tasks}.timing"));
            let exe = w.rip_probe.path.to_string_lossy();
            let a = rip_probe_args(&exe, &pid, Duration::ZERO, true);
            let u = measure(
                &w.maxrss.path,
                &a,
                &[("RIP_PROBE_TIMING", "1")],
                create(&json)?,
                create(&timing)?,
            )?;
            if !u.success {
                bail!("rip-probe failed: see {}", rel(&timing));
            }
            let text = std::fs::read_to_string(&json)
                .with_context(|| format!("reading {}", json.display()))?;
            let v: serde_json::Value = serde_json::from_str(&text)
                .with_context(|| format!("parsing {}", json.display()))?;
            listed = v["tasks"]
                .as_array()
                .map_or(0, |t| t.iter().filter(|t| t["origin"] == "tokio").count());
            runs.phases = parse_phases(&std::fs::read_to_string(&timing).unwrap_or_default());
            eprintln!(
                "    rip-probe: {:.2}s, {} MiB, {listed}/{tasks} tasks",
                u.wall.as_secs_f64(),
                u.max_rss_kib / 1024
            );
            runs.runs.push(u);
        }
        Ok(TokioResult {
            tasks,
            listed,
            rip_probe: runs,
        })
    })();
    workload.signal(libc::SIGKILL);
    workload.wait_or_kill(Duration::from_secs(10));
    let _ = std::fs::remove_file(&ring);
    res
}

/// The tokio rows: time, CPU, peak RSS, tasks listed, and the phases.
pub fn tokio_section(r: &Result<TokioResult, String>, s: &mut String) {
    use std::fmt::Write;
    let _ = writeln!(
        s,
        "## Scale: idle tokio tasks\n\n\
         `rip-tokio-workload many RING N`: N tasks spawned with \
         `librip::tokio::spawn_traced`, idle at one await on two worker \
         threads; `rip-probe --pid P --duration 0 --json`.\n\n\
         | tasks | runs | time to full report (median) | CPU, user + system (median) | peak RSS | tasks listed |\n\
         | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    let r = match r {
        Ok(r) => r,
        Err(e) => {
            let _ = writeln!(s, "| | failed: {e} | | | | |\n");
            return;
        }
    };
    let tasks = super::stats::thousands(r.tasks as u64);
    let ms = |d: Duration| format!("{:.2} s", d.as_secs_f64());
    let _ = writeln!(
        s,
        "| {tasks} | {} | {} | {} | {} MiB | {} of {tasks} |",
        r.rip_probe.runs.len(),
        r.rip_probe.median_wall().map_or("—".into(), ms),
        r.rip_probe.median_cpu().map_or("—".into(), ms),
        r.rip_probe.max_rss_kib().map_or(0, |k| k / 1024),
        super::stats::thousands(r.listed as u64),
    );
    if !r.rip_probe.phases.is_empty() {
        let _ = writeln!(
            s,
            "\nrip-probe's phases in its last run at {tasks} tasks \
             (`RIP_PROBE_TIMING=1`):\n\n| phase | ms |\n| --- | ---: |"
        );
        for (p, ms) in &r.rip_probe.phases {
            let _ = writeln!(s, "| {p} | {ms:.1} |");
        }
    }
    s.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gdb_thread_headers() {
        let out = "\
Thread 3 (Thread 0x7f00 (LWP 4712) \"pool-0\"):
#0  0x00007f in syscall () from /lib/libc.so.6
Thread 2 (Thread 0x7f01 (LWP 4711) \"main\"):
#0  futex_wait
Thread 1 (LWP 4710):
";
        assert_eq!(gdb_threads(out), BTreeSet::from([4710, 4711, 4712]));
    }

    #[test]
    fn json_tids() {
        let v: serde_json::Value =
            serde_json::from_str(r#"{"threads":[{"tid":5},{"tid":7},{"name":"x"}]}"#).unwrap();
        assert_eq!(json_threads(&v), BTreeSet::from([5, 7]));
        assert!(json_threads(&serde_json::json!({})).is_empty());
    }

    /// Two reports of the same threads agree whatever their times and
    /// stack table order; a thread in another state, call, stack or wait,
    /// a thread missing, or another deadlock is a difference.
    #[test]
    fn reports_are_compared_thread_by_thread() {
        let report = |state: &str, frame: &str, owner: u64, order: bool, deadlocks| {
            let (s0, s1) = (
                serde_json::json!([{"addr": 1, "function": "futex_wait"}]),
                serde_json::json!([{"addr": 7, "function": frame}]),
            );
            let (stacks, k, u) = if order {
                (serde_json::json!([s0, s1]), 0, 1)
            } else {
                (serde_json::json!([s1, s0]), 1, 0)
            };
            serde_json::json!({
                "stacks": stacks,
                "deadlocks": deadlocks,
                "threads": [
                    {"tid": 5, "name": "a", "state": state, "blocked": {"ns": owner * 3},
                     "syscall": {"text": "futex(0x10, FUTEX_WAIT_PRIVATE, 2, NULL)"},
                     "kernel_stack": k, "frames": u,
                     "waits_for": {"lock": 16, "kind": "mutex", "owner_tid": owner,
                                   "owner": {"status": "thread"}}},
                    {"tid": 6, "name": "b", "state": "running", "syscall": null,
                     "kernel_stack": k, "frames": u, "waits_for": null},
                ]
            })
        };
        let base = report("sleeping", "Pool::take", 6, true, serde_json::json!([]));
        let same = report("sleeping", "Pool::take", 6, false, serde_json::json!([]));
        assert_eq!(compare_reports(&base, &same), Ok(2));
        for other in [
            report(
                "uninterruptible",
                "Pool::take",
                6,
                true,
                serde_json::json!([]),
            ),
            report("sleeping", "Pool::give", 6, true, serde_json::json!([])),
            report("sleeping", "Pool::take", 7, true, serde_json::json!([])),
            report(
                "sleeping",
                "Pool::take",
                6,
                true,
                serde_json::json!([[5, 6]]),
            ),
        ] {
            assert!(compare_reports(&base, &other).is_err(), "{other}");
        }
        let mut fewer = base.clone();
        fewer["threads"].as_array_mut().unwrap().pop();
        let e = compare_reports(&base, &fewer).unwrap_err();
        assert!(e.contains("1 threads only in the first"), "{e}");
    }

    #[test]
    fn phases() {
        let err = "rip-probe timing: load and attach: 120.5ms\nnoise\nrip-probe timing: task iterator: 30.0ms\n";
        assert_eq!(
            parse_phases(err),
            vec![
                ("load and attach".to_string(), 120.5),
                ("task iterator".to_string(), 30.0)
            ]
        );
    }
}
