//! `cargo xtask bench --goroutines-only`: every goroutine of a Go program
//! with 100,000 of them (each parked receiving on a channel), read by
//! `rip-probe --pid P --json` from outside, beside the program's own
//! `net/http/pprof` dump (`curl .../debug/pprof/goroutine?debug=2`), which
//! stops the world, and delve (`dlv attach` with `goroutines -t`, Debian's
//! package), which stops the process with ptrace. For each: wall time, and
//! the longest pause it caused in the program (measured there by a
//! goroutine ticking every millisecond); for rip-probe and delve also
//! their CPU time and peak RSS. Printed and written to
//! target/bench/goroutines.md; docs/BENCHMARKS.md is left as it is.

use std::{
    fmt::Write as _,
    fs::File,
    io::{BufRead, BufReader},
    path::Path,
    process::{Child, ChildStdin, ChildStdout, Command, Stdio},
    time::Instant,
};

use anyhow::{Context, Result, bail};

use super::{out_dir, proc};
use crate::util::{exec, root, step};

/// Goroutines of the program.
pub const GOROUTINES: usize = 100_000;
/// Runs of each reader; the table shows the median wall time and the
/// longest pause.
const RUNS: usize = 5;
/// Longest a delve run may take: it stops the program while it lists
/// every goroutine, one by one through ptrace.
const DELVE_TIMEOUT_S: u32 = 300;

/// Runs the rows and prints their section.
pub fn run_goroutines_only() -> Result<()> {
    let (probe, maxrss) = super::release_probe_and_maxrss()?;
    let out = out_dir();
    let s = section(&probe, &maxrss)?;
    let md = out.join("goroutines.md");
    std::fs::write(&md, &s).with_context(|| format!("writing {}", md.display()))?;
    println!("{s}");
    Ok(())
}

/// The Go program, with its stdin (a line asks for the longest tick delay
/// since the last) and stdout.
struct GoProgram {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    pprof: String,
}

impl GoProgram {
    fn start(exe: &Path) -> Result<GoProgram> {
        let mut child = Command::new(exe)
            .arg(GOROUTINES.to_string())
            .args(["0"; 8])
            .env("TICK", "1")
            .env("PPROF", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {}", exe.display()))?;
        let stdin = child.stdin.take().expect("piped");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut pprof = String::new();
        loop {
            let mut line = String::new();
            if stdout.read_line(&mut line)? == 0 {
                bail!("{} exited before it was ready", exe.display());
            }
            match line.trim() {
                "ready" => break,
                l => {
                    if let Some(a) = l.strip_prefix("pprof ") {
                        pprof = a.to_string();
                    }
                }
            }
        }
        Ok(GoProgram {
            child,
            stdin,
            stdout,
            pprof,
        })
    }

    /// The longest delay of the program's ticker since the last call, µs.
    fn late_us(&mut self) -> Result<u64> {
        proc::late_us(&mut self.stdin, &mut self.stdout)
    }
}

impl Drop for GoProgram {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One reader's runs: wall and CPU times (s), longest pause (µs), peak
/// RSS (KiB).
struct Runs {
    walls: Vec<f64>,
    cpus: Vec<f64>,
    pause_us: u64,
    max_rss_kib: u64,
    what: String,
}

impl Runs {
    fn new(what: String) -> Self {
        Runs {
            walls: Vec::new(),
            cpus: Vec::new(),
            pause_us: 0,
            max_rss_kib: 0,
            what,
        }
    }

    fn median(v: &mut [f64]) -> Option<f64> {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied()
    }
}

/// Measures both readers on the program built with Debian's Go; the
/// section of docs/BENCHMARKS.md.
pub fn section(probe: &Path, maxrss: &Path) -> Result<String> {
    let out = out_dir();
    let exe = out.join("goroutines-go");
    step("bench: build tests/go/goroutines.go with /usr/bin/go");
    exec(
        Command::new("/usr/bin/go")
            .arg("build")
            .arg("-o")
            .arg(&exe)
            .arg(root().join("tests/go/goroutines.go"))
            .env("GO111MODULE", "off")
            .env("GOCACHE", out.join("go-cache")),
        "go build tests/go/goroutines.go",
    )?;
    let version = crate::util::output(Command::new("/usr/bin/go").arg("version"))
        .unwrap_or_default()
        .trim()
        .to_string();
    step(&format!(
        "bench: {GOROUTINES} goroutines, rip-probe and pprof"
    ));
    let mut p = GoProgram::start(&exe)?;
    let pid = p.child.id().to_string();
    let json = out.join("goroutines.json");
    let probe_args: Vec<String> = [
        probe.to_string_lossy().as_ref(),
        "--pid",
        &pid,
        "--duration",
        "0",
        "--json",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // Once unmeasured: every goroutine has parked, the binary is in the
    // page cache.
    let warm = proc::measure(
        maxrss,
        &probe_args,
        &[],
        File::create(&json)?,
        File::create(out.join("goroutines.stderr"))?,
    )?;
    if !warm.success {
        bail!("rip-probe failed on the Go program: see target/bench/goroutines.stderr");
    }
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json)?)
        .context("rip-probe --json: not JSON")?;
    let listed = report["tasks"]
        .as_array()
        .map_or(0, |t| t.iter().filter(|t| t["origin"] == "go").count());
    if listed < GOROUTINES {
        bail!("rip-probe listed {listed} goroutines of at least {GOROUTINES}");
    }
    let mut probe_runs = Runs::new(format!(
        "`rip-probe --pid P --duration 0 --json` ({listed} goroutines with stacks)"
    ));
    let url = format!("http://{}/debug/pprof/goroutine?debug=2", p.pprof);
    let mut curl_runs =
        Runs::new("`curl …/debug/pprof/goroutine?debug=2` (the program's own dump)".into());
    let load = std::fs::read_to_string("/proc/loadavg")?;
    for _ in 0..RUNS {
        p.late_us()?;
        let u = proc::measure(
            maxrss,
            &probe_args,
            &[],
            File::create(&json)?,
            File::create(out.join("goroutines.stderr"))?,
        )?;
        probe_runs.pause_us = probe_runs.pause_us.max(p.late_us()?);
        probe_runs.walls.push(u.wall.as_secs_f64());
        probe_runs.cpus.extend(u.cpu.map(|c| c.as_secs_f64()));
        probe_runs.max_rss_kib = probe_runs.max_rss_kib.max(u.max_rss_kib);

        p.late_us()?;
        let t = Instant::now();
        let ok = Command::new("curl")
            .args(["-sf", "-o"])
            .arg(out.join("goroutines-pprof.txt"))
            .arg(&url)
            .status()
            .context("curl runs")?
            .success();
        curl_runs.walls.push(t.elapsed().as_secs_f64());
        curl_runs.pause_us = curl_runs.pause_us.max(p.late_us()?);
        if !ok {
            bail!("curl {url} failed");
        }
    }
    let delve = delve(&mut p, maxrss)?;
    let load_after = std::fs::read_to_string("/proc/loadavg")?;
    let mut s = String::new();
    writeln!(s, "## Every goroutine of a Go program\n")?;
    writeln!(
        s,
        "`cargo xtask bench --goroutines-only` (release build): `tests/go/goroutines.go` \
         built by {version}, {GOROUTINES} goroutines parked receiving on a channel, and a \
         goroutine ticking every millisecond that records how late its ticks come (the \
         pause a reader causes). Median wall and CPU time (user + system) of {RUNS} runs, \
         longest pause over them; peak RSS (`tests/bench/maxrss.c`). delve runs once (it \
         stops the program for the whole listing). Kernel {}; load average (1, 5, 15 min) \
         before: {}; after: {}.\n",
        std::fs::read_to_string("/proc/sys/kernel/osrelease")?.trim(),
        load_fields(&load),
        load_fields(&load_after),
    )?;
    writeln!(
        s,
        "| reader | wall (median) | CPU (median) | longest pause in the program | peak RSS |\n\
         | --- | ---: | ---: | ---: | ---: |"
    )?;
    let mut rows = vec![probe_runs, curl_runs];
    let delve_note = match delve {
        Ok(r) => {
            rows.push(r);
            None
        }
        Err(why) => Some(why),
    };
    for r in &mut rows {
        let wall = Runs::median(&mut r.walls).unwrap_or(f64::NAN);
        let cpu = Runs::median(&mut r.cpus)
            .map_or("(in the program)".to_string(), |c| format!("{c:.2} s"));
        let rss = if r.max_rss_kib > 0 {
            format!("{:.0} MiB", r.max_rss_kib as f64 / 1024.0)
        } else {
            String::new()
        };
        writeln!(
            s,
            "| {} | {wall:.2} s | {cpu} | {:.1} ms | {rss} |",
            r.what,
            r.pause_us as f64 / 1000.0,
        )?;
    }
    if let Some(why) = delve_note {
        writeln!(s, "\ndelve: {why}")?;
    }
    Ok(s)
}

/// The three load averages of a `/proc/loadavg` line.
fn load_fields(line: &str) -> String {
    line.split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// One delve run on the program: `dlv attach P` with `goroutines -t`
/// (every goroutine with its stack), installed from Debian's packages
/// when missing; `Err` says in one line why there is no row.
fn delve(p: &mut GoProgram, maxrss: &Path) -> Result<std::result::Result<Runs, String>> {
    if !crate::util::missing_packages(&[("dlv", "delve")]).is_empty()
        && let Err(e) = crate::util::apt_install(&["delve"])
    {
        return Ok(Err(format!("not measured: {e:#}")));
    }
    step("bench: delve lists every goroutine (stopping the program)");
    let out = out_dir();
    let init = out.join("goroutines-dlv.init");
    std::fs::write(&init, "goroutines -t\n")?;
    let pid = p.child.id().to_string();
    let args: Vec<String> = [
        "timeout",
        &DELVE_TIMEOUT_S.to_string(),
        "dlv",
        "attach",
        &pid,
        "--allow-non-terminal-interactive=true",
        "--init",
        &init.to_string_lossy(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    p.late_us()?;
    let listing = out.join("goroutines-dlv.txt");
    let u = proc::measure(
        maxrss,
        &args,
        &[],
        File::create(&listing)?,
        File::create(out.join("goroutines-dlv.stderr"))?,
    )?;
    let pause = p.late_us()?;
    // delve ends at its prompt, which reads end of input: the status says
    // nothing; what it listed does.
    let text = std::fs::read_to_string(&listing)?;
    let listed = text
        .lines()
        .filter(|l| l.starts_with("  Goroutine "))
        .count();
    let version = crate::util::output(Command::new("dlv").arg("version"))
        .and_then(|v| {
            v.lines()
                .find_map(|l| l.strip_prefix("Version: ").map(str::to_string))
        })
        .unwrap_or_default();
    if listed < GOROUTINES {
        return Ok(Err(format!(
            "`dlv attach P` (delve {version}) with `goroutines -t` listed {listed} goroutines \
             in {:.0} s (limit {DELVE_TIMEOUT_S} s); the program was stopped {:.1} s",
            u.wall.as_secs_f64(),
            pause as f64 / 1e6
        )));
    }
    let mut r = Runs::new(format!(
        "`dlv attach P` + `goroutines -t` (delve {version}, ptrace; {listed} goroutines with stacks)"
    ));
    r.walls.push(u.wall.as_secs_f64());
    r.cpus.extend(u.cpu.map(|c| c.as_secs_f64()));
    r.pause_us = pause;
    r.max_rss_kib = u.max_rss_kib;
    Ok(Ok(r))
}
