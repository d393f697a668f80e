//! `cargo xtask bench --goroutines-only`: every goroutine of a Go program
//! with 100,000 of them (each parked receiving on a channel), read by
//! `rip-probe --pid P --json` from outside, beside the program's own
//! `net/http/pprof` dump (`curl .../debug/pprof/goroutine?debug=2`), which
//! stops the world. For each: wall time, and the longest pause it caused
//! in the program (measured there by a goroutine ticking every
//! millisecond); for rip-probe also its peak RSS. Printed and written to
//! target/bench/goroutines.md; docs/BENCHMARKS.md is left as it is.

use std::{
    fmt::Write as _,
    fs::File,
    io::{BufRead, BufReader, Write},
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
        writeln!(self.stdin)?;
        let mut line = String::new();
        self.stdout.read_line(&mut line)?;
        line.trim()
            .strip_prefix("late ")
            .and_then(|l| l.strip_suffix(" us"))
            .and_then(|n| n.parse().ok())
            .with_context(|| format!("the Go program said {line:?}"))
    }
}

impl Drop for GoProgram {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One reader's runs: wall times (s), longest pause (µs), peak RSS (KiB).
struct Runs {
    walls: Vec<f64>,
    pause_us: u64,
    max_rss_kib: u64,
    what: String,
}

impl Runs {
    fn median(&mut self) -> f64 {
        self.walls.sort_by(f64::total_cmp);
        self.walls[self.walls.len() / 2]
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
    let mut probe_runs = Runs {
        walls: Vec::new(),
        pause_us: 0,
        max_rss_kib: 0,
        what: format!("`rip-probe --pid P --duration 0 --json` ({listed} goroutines with stacks)"),
    };
    let url = format!("http://{}/debug/pprof/goroutine?debug=2", p.pprof);
    let mut curl_runs = Runs {
        walls: Vec::new(),
        pause_us: 0,
        max_rss_kib: 0,
        what: "`curl …/debug/pprof/goroutine?debug=2` (the program's own dump)".into(),
    };
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
    let mut s = String::new();
    writeln!(s, "## Every goroutine of a Go program\n")?;
    writeln!(
        s,
        "`cargo xtask bench --goroutines-only` (release build): `tests/go/goroutines.go` \
         built by {version}, {GOROUTINES} goroutines parked receiving on a channel, and a \
         goroutine ticking every millisecond that records how late its ticks come (the \
         pause a reader causes). Median wall time of {RUNS} runs, longest pause over them; \
         rip-probe's peak RSS (`tests/bench/maxrss.c`). Kernel {}.\n",
        std::fs::read_to_string("/proc/sys/kernel/osrelease")?.trim()
    )?;
    writeln!(
        s,
        "| reader | wall (median) | longest pause in the program | peak RSS |\n| --- | ---: | ---: | ---: |"
    )?;
    for (r, rss) in [(&mut probe_runs, true), (&mut curl_runs, false)] {
        let wall = r.median();
        writeln!(
            s,
            "| {} | {:.2} s | {:.1} ms | {} |",
            r.what,
            wall,
            r.pause_us as f64 / 1000.0,
            if rss {
                format!("{:.0} MiB", r.max_rss_kib as f64 / 1024.0)
            } else {
                String::new()
            }
        )?;
    }
    Ok(s)
}
