//! `cargo xtask bench --python-only`: a Python service read from outside
//! by `rip-probe --pid P --duration 0 --json`, beside py-spy
//! (`dump --nonblocking`) and pystack (`remote --no-block`), the peers
//! that read a live CPython without stopping it. Two services on Debian's
//! python3: 100 threads (issue-sized: a service with a pool), and 1,000
//! threads with 100,000 asyncio tasks. The readers run in turn, one after
//! the other, [`RUNS`] times (interleaved, so a change in the machine's
//! load falls on all of them); each row has the median wall and CPU time
//! and the largest peak RSS (`tests/bench/maxrss.c`), the longest pause
//! the service saw while the reader ran (a thread of the service ticking
//! every millisecond measures it), and what the reader listed (threads,
//! tasks), checked against the service. Printed and written to
//! target/bench/python.md; docs/BENCHMARKS.md is left as it is.

use std::{
    fmt::Write as _,
    fs::File,
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, ChildStdin, ChildStdout, Command, Stdio},
    time::Duration,
};

use anyhow::{Context, Result, bail};

use super::{out_dir, proc, stats::median};
use crate::util::{exec, output, root, step};

/// py-spy, pinned.
const PY_SPY: &str = "py-spy==0.4.3";
/// pystack, pinned.
const PYSTACK: &str = "pystack==1.7.2";
/// Runs of each reader on each service.
const RUNS: usize = 5;
/// The services: (threads besides the main one and the lock holder,
/// asyncio tasks).
const SERVICES: [(usize, usize); 2] = [(100, 0), (1_000, 100_000)];

/// Runs the rows and prints their section.
pub fn run_python_only() -> Result<()> {
    let (probe, maxrss) = super::release_probe_and_maxrss()?;
    let out = out_dir();
    let peers = install_peers(&out)?;
    let mut s = String::new();
    write_header(&mut s)?;
    for (threads, tasks) in SERVICES {
        step(&format!(
            "bench: a Python service with {threads} threads and {tasks} asyncio tasks"
        ));
        let rows = measure_service(&probe, &maxrss, &peers, threads, tasks)?;
        write_rows(&mut s, threads, tasks, &rows)?;
    }
    let md = out.join("python.md");
    std::fs::write(&md, &s).with_context(|| format!("writing {}", md.display()))?;
    println!("{s}");
    Ok(())
}

/// Where py-spy and pystack were installed (`pip install --target`).
struct Peers {
    dir: PathBuf,
}

/// Installs the pinned peers under target/bench/python-peers (once).
fn install_peers(out: &Path) -> Result<Peers> {
    let dir = out.join("python-peers");
    let ready = dir.join("bin/py-spy").exists() && dir.join("pystack").is_dir();
    if !ready {
        step("bench: pip install py-spy and pystack");
        exec(
            Command::new("python3")
                .args(["-m", "pip", "install", "--quiet", "--upgrade", "--target"])
                .arg(&dir)
                // Debian's own python3 refuses pip without this (PEP 668);
                // --target keeps the system's packages untouched.
                .arg("--break-system-packages")
                .args([PY_SPY, PYSTACK]),
            "pip install py-spy pystack (is PyPI reachable?)",
        )?;
    }
    Ok(Peers { dir })
}

/// The service, killed on drop; its stdin (a line asks for the longest
/// tick delay since the last) and stdout.
struct Service {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Service {
    fn start(threads: usize, tasks: usize) -> Result<Service> {
        let mut child = Command::new("python3")
            .arg(root().join("tests/bench/python_service.py"))
            .args([threads.to_string(), tasks.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("starting python3 tests/bench/python_service.py")?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut service = Service {
            child,
            stdin,
            stdout,
        };
        let mut line = String::new();
        service.stdout.read_line(&mut line)?;
        if line.trim() != "ready" {
            bail!("the Python service said {line:?} instead of ready");
        }
        Ok(service)
    }

    /// The longest delay of the service's ticker since the last call, µs.
    fn late_us(&mut self) -> Result<u64> {
        proc::late_us(&mut self.stdin, &mut self.stdout)
    }
}

/// A reader: its name in the table, its command line and environment.
type Reader<'a> = (String, Vec<String>, Vec<(&'a str, &'a str)>);

/// One reader's runs on one service.
struct Row {
    what: String,
    walls: Vec<f64>,
    cpus: Vec<f64>,
    max_rss_kib: u64,
    /// The longest pause the service's ticker saw while it ran, µs.
    pause_us: u64,
    /// What its last output listed.
    listed: String,
}

/// The threads a service has: its own, the holder's, the ticker's and
/// the main one.
fn threads_of(threads: usize) -> usize {
    threads + 3
}

/// Runs every reader on one service in turn, [`RUNS`] times.
fn measure_service(
    probe: &Path,
    maxrss: &Path,
    peers: &Peers,
    threads: usize,
    tasks: usize,
) -> Result<Vec<Row>> {
    let mut service = Service::start(threads, tasks)?;
    let pid = service.child.id().to_string();
    let out = out_dir();
    let py_path = peers.dir.to_string_lossy().into_owned();
    let readers: Vec<Reader> = vec![
        (
            "`rip-probe --pid P --duration 0 --json`".into(),
            vec![
                probe.to_string_lossy().into_owned(),
                "--pid".into(),
                pid.clone(),
                "--duration".into(),
                "0".into(),
                "--json".into(),
            ],
            vec![],
        ),
        (
            "`py-spy dump --nonblocking --json --pid P`".into(),
            vec![
                peers.dir.join("bin/py-spy").to_string_lossy().into_owned(),
                "dump".into(),
                "--nonblocking".into(),
                "--json".into(),
                "--pid".into(),
                pid.clone(),
            ],
            vec![],
        ),
        (
            "`pystack remote --no-block P`".into(),
            vec![
                "python3".into(),
                "-m".into(),
                "pystack".into(),
                "remote".into(),
                "--no-block".into(),
                pid.clone(),
            ],
            vec![("PYTHONPATH", py_path.as_str())],
        ),
    ];
    let mut rows: Vec<Row> = readers
        .iter()
        .map(|(what, _, _)| Row {
            what: what.clone(),
            walls: Vec::new(),
            cpus: Vec::new(),
            max_rss_kib: 0,
            pause_us: 0,
            listed: String::new(),
        })
        .collect();
    // One unmeasured pass: the binaries and the service's pages are in
    // memory, every thread has reached its wait.
    for run in 0..=RUNS {
        for (i, (_, args, env)) in readers.iter().enumerate() {
            let stdout = out.join(format!("python-reader-{i}.out"));
            service.late_us()?;
            let u = proc::measure(
                maxrss,
                args,
                env,
                File::create(&stdout)?,
                File::create(out.join(format!("python-reader-{i}.err")))?,
            )?;
            let pause = service.late_us()?;
            if !u.success {
                bail!(
                    "{} failed on the service: see target/bench/python-reader-{i}.err",
                    rows[i].what
                );
            }
            if run == 0 {
                rows[i].listed = listed(i, &stdout, threads, tasks)?;
                continue;
            }
            let row = &mut rows[i];
            row.walls.push(u.wall.as_secs_f64());
            row.cpus.extend(u.cpu.map(|c| c.as_secs_f64()));
            row.max_rss_kib = row.max_rss_kib.max(u.max_rss_kib);
            row.pause_us = row.pause_us.max(pause);
        }
    }
    drop(service);
    Ok(rows)
}

/// What reader `i` listed in its output `path`, checked against the
/// service: every thread (and, for rip-probe, every task), or the run
/// fails.
fn listed(i: usize, path: &Path, threads: usize, tasks: usize) -> Result<String> {
    let text = std::fs::read_to_string(path)?;
    let want = threads_of(threads);
    match i {
        0 => {
            let r: serde_json::Value =
                serde_json::from_str(&text).context("rip-probe --json: not JSON")?;
            let n = r["threads"].as_array().map_or(0, Vec::len);
            let t = r["tasks"]
                .as_array()
                .map_or(0, |t| t.iter().filter(|t| t["origin"] == "asyncio").count());
            let named = r["threads"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|t| t["frames"].is_u64())
                .count();
            if n != want || t < tasks {
                bail!("rip-probe listed {n} threads and {t} tasks of {want} and {tasks}");
            }
            Ok(format!(
                "{n} threads ({named} with a stack), {t} asyncio tasks"
            ))
        }
        1 => {
            let r: serde_json::Value =
                serde_json::from_str(&text).context("py-spy --json: not JSON")?;
            let n = r.as_array().map_or(0, Vec::len);
            if n != want {
                bail!("py-spy listed {n} threads of {want}");
            }
            Ok(format!("{n} threads, no tasks"))
        }
        _ => {
            let n = text
                .lines()
                .filter(|l| l.starts_with("Traceback for thread"))
                .count();
            if n != want {
                bail!("pystack listed {n} threads of {want}");
            }
            Ok(format!("{n} threads, no tasks"))
        }
    }
}

fn write_header(s: &mut String) -> Result<()> {
    // `python3` on PATH: which one it is (Debian's, or pyenv's).
    let python = output(Command::new("python3").args([
        "-c",
        "import sys; print('Python', sys.version.split()[0], '(' + sys.executable + ')')",
    ]))
    .unwrap_or_default()
    .trim()
    .to_string();
    writeln!(s, "## A live Python service, read from outside\n")?;
    writeln!(
        s,
        "`cargo xtask bench --python-only` (release build): `tests/bench/python_service.py` \
         under `python3`, {python}: half its threads wait for a `threading.Lock` that one more \
         thread holds across `time.sleep`, the others sleep; its asyncio tasks await one \
         `asyncio.Event`. Each reader in turn, {RUNS} rounds after one unmeasured round; \
         median wall and CPU time (user + system), largest peak RSS (`tests/bench/maxrss.c`), \
         the longest pause the service saw while the reader ran (a thread of the service \
         ticking every millisecond measures how late its ticks come; under load that is the \
         scheduler's and the GIL's, not the reader's), and what the reader listed (checked against the service: a reader that misses a \
         thread fails the bench). None of the three stops the service: py-spy with \
         `--nonblocking`, pystack with `--no-block`; rip-probe never does. rip-probe also \
         gives each thread its native and kernel stack, its state and system call, the \
         lock's owner and the tasks; py-spy and pystack give Python frames only in this \
         mode. {PY_SPY}, {PYSTACK}; kernel {}; load average at the start: {}.\n",
        std::fs::read_to_string("/proc/sys/kernel/osrelease")?.trim(),
        std::fs::read_to_string("/proc/loadavg")?
            .split_whitespace()
            .next()
            .unwrap_or("?"),
    )?;
    Ok(())
}

fn write_rows(s: &mut String, threads: usize, tasks: usize, rows: &[Row]) -> Result<()> {
    writeln!(
        s,
        "### {} threads, {tasks} asyncio tasks\n",
        threads_of(threads)
    )?;
    writeln!(
        s,
        "| reader | wall (median) | CPU (median) | peak RSS | longest pause in the service | × rip-probe's wall | listed |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | --- |"
    )?;
    let rip_wall = median(&rows[0].walls).unwrap_or(f64::NAN);
    for r in rows {
        let wall = median(&r.walls).unwrap_or(f64::NAN);
        let cpu = median(&r.cpus).map_or("?".to_string(), fmt_s);
        writeln!(
            s,
            "| {} | {} | {cpu} | {:.1} MiB | {:.1} ms | {:.2} | {} |",
            r.what,
            fmt_s(wall),
            r.max_rss_kib as f64 / 1024.0,
            r.pause_us as f64 / 1000.0,
            wall / rip_wall,
            r.listed,
        )?;
    }
    writeln!(s)?;
    Ok(())
}

/// Seconds, as milliseconds below one.
fn fmt_s(secs: f64) -> String {
    let d = Duration::from_secs_f64(secs.max(0.0));
    if d < Duration::from_secs(1) {
        format!("{:.0} ms", secs * 1000.0)
    } else {
        format!("{secs:.2} s")
    }
}
