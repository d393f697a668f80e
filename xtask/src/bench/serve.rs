//! `cargo xtask bench --serve-only`: what `rip-probe serve` costs itself
//! over a long run. `tests/c/service.c` with N children (each 3 threads
//! blocked on a mutex its main thread holds) named `svcbench`; serve over
//! them by `--comm` at `--interval 5s` for M minutes; every 30 s its CPU
//! time (utime + stime of /proc/PID/stat), VmRSS and the load average;
//! at the end its own /metrics (passes, deferred, each target's last
//! snapshot time, errors). Printed and written to target/bench/serve.md.

use std::{
    fmt::Write as _,
    io::{BufRead, BufReader, Read, Write},
    net::TcpStream,
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

use super::{cc, load_average, out_dir};
use crate::util::step;

/// How serve is asked to look at each target.
const INTERVAL: &str = "5s";
/// How often serve's CPU time and memory are read.
const SAMPLE: Duration = Duration::from_secs(30);
/// Threads blocked in each target.
const THREADS: usize = 3;
/// The targets' name.
const COMM: &str = "svcbench";

/// One reading of serve's own figures.
struct Reading {
    at: Duration,
    cpu_s: f64,
    rss_kib: u64,
    load: String,
}

/// Runs serve over `targets` processes for `minutes` and prints the
/// section.
pub fn run_serve_only(targets: usize, minutes: u64) -> Result<()> {
    let (probe, _) = super::release_probe_and_maxrss()?;
    let svc = cc("tests/c/service.c", &out_dir().join("svcbench"))?;
    let s = section(&probe, &svc, targets, Duration::from_secs(60 * minutes))?;
    let md = out_dir().join("serve.md");
    std::fs::write(&md, &s).with_context(|| format!("writing {}", md.display()))?;
    println!("{s}");
    Ok(())
}

/// A child killed and reaped when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn section(probe: &Path, svc: &Path, targets: usize, length: Duration) -> Result<String> {
    step(&format!("bench: {targets} {COMM} processes"));
    // The service runs until its standard input closes: held here.
    let mut service = Killed(
        Command::new(svc)
            .args([COMM, &targets.to_string(), &THREADS.to_string()])
            .arg("x".repeat(64))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("starting tests/c/service.c")?,
    );
    let mut out = BufReader::new(service.0.stdout.take().context("no stdout")?);
    let mut children = 0;
    loop {
        let mut l = String::new();
        if out.read_line(&mut l)? == 0 {
            bail!("the service exited before it was ready");
        }
        match l.trim() {
            "ready" => break,
            l if l.starts_with("child ") => children += 1,
            _ => {}
        }
    }
    if children != targets {
        bail!("the service started {children} children of {targets}");
    }
    step(&format!(
        "bench: rip-probe serve --comm {COMM} --interval {INTERVAL} for {}",
        human(length)
    ));
    let load_before = load_average();
    let mut serve = Killed(
        Command::new(probe)
            .args(["serve", "--comm", COMM, "--interval", INTERVAL])
            .args(["--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("starting rip-probe serve")?,
    );
    let pid = serve.0.id();
    let mut first = String::new();
    BufReader::new(serve.0.stdout.take().context("no stdout")?).read_line(&mut first)?;
    let addr = first
        .trim()
        .strip_prefix("rip-probe serve: metrics at http://")
        .and_then(|r| r.strip_suffix("/metrics"))
        .with_context(|| format!("serve said {first:?}"))?
        .to_string();
    let started = Instant::now();
    let mut readings = Vec::new();
    while started.elapsed() < length {
        let next = SAMPLE * (readings.len() as u32 + 1);
        std::thread::sleep(next.saturating_sub(started.elapsed()));
        if let Some(st) = serve.0.try_wait()? {
            bail!("serve ended by itself ({st})");
        }
        let r = Reading {
            at: started.elapsed(),
            cpu_s: cpu_seconds(pid)?,
            rss_kib: rss_kib(pid)?,
            load: load_average(),
        };
        eprintln!(
            "    {:>5.0} s: CPU {:.2} s, VmRSS {:.1} MiB, load {}",
            r.at.as_secs_f64(),
            r.cpu_s,
            r.rss_kib as f64 / 1024.0,
            r.load
        );
        readings.push(r);
    }
    let metrics = http_get(&addr, "/metrics")?;
    // SIGTERM: serve ends after the snapshot under way.
    // SAFETY: kill(2) of our own unreaped child.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
    let status = serve.0.wait()?;
    drop(service.0.stdin.take());
    render(
        targets,
        length,
        &readings,
        &metrics,
        &load_before,
        status.success(),
    )
}

/// The section from the readings and serve's last metrics.
fn render(
    targets: usize,
    length: Duration,
    readings: &[Reading],
    metrics: &str,
    load_before: &str,
    exited_cleanly: bool,
) -> Result<String> {
    let value = |name: &str| -> f64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or(f64::NAN)
    };
    let per_target = |name: &str| -> Vec<f64> {
        metrics
            .lines()
            .filter(|l| l.starts_with(&format!("{name}{{")))
            .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
            .collect()
    };
    let passes = value("rip_serve_passes_total");
    let deferred = value("rip_serve_deferred_total");
    let snapshots = passes * targets as f64 - deferred;
    let mut walls = per_target("rip_snapshot_duration_seconds");
    walls.sort_by(f64::total_cmp);
    let errors: f64 = per_target("rip_snapshot_errors_total").iter().sum();
    let last = readings.last().context("no reading")?;
    let first = readings.first().context("no reading")?;
    let mut s = String::new();
    writeln!(s, "## serve's own cost\n")?;
    writeln!(
        s,
        "`cargo xtask bench --serve-only --serve-targets {targets} --serve-minutes {}` \
         (release build): `rip-probe serve --comm {COMM} --interval {INTERVAL}` over \
         `tests/c/service.c`'s {targets} children named `{COMM}`, {THREADS} threads each blocked \
         on a mutex their main thread holds, for {}. Kernel {}. Every {} s: serve's CPU time \
         (utime + stime of `/proc/PID/stat`), its `VmRSS`, the load average; at the end its \
         own `/metrics`. The load average was {load_before} before the run; a figure taken \
         beside other work is an upper bound.\n",
        length.as_secs() / 60,
        human(length),
        std::fs::read_to_string("/proc/sys/kernel/osrelease")?.trim(),
        SAMPLE.as_secs(),
    )?;
    writeln!(
        s,
        "| at | CPU (total) | CPU in the last {} s | VmRSS | load average |\n| ---: | ---: | ---: | ---: | --- |",
        SAMPLE.as_secs()
    )?;
    let mut before = 0.0;
    for r in readings {
        writeln!(
            s,
            "| {:.0} s | {:.2} s | {:.2} s | {:.1} MiB | {} |",
            r.at.as_secs_f64(),
            r.cpu_s,
            r.cpu_s - before,
            r.rss_kib as f64 / 1024.0,
            r.load
        )?;
        before = r.cpu_s;
    }
    let rss: Vec<f64> = readings.iter().map(|r| r.rss_kib as f64 / 1024.0).collect();
    let (lo, hi) = rss
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
    let second_half = &readings[readings.len() / 2..];
    let cpu_rate = |rs: &[Reading]| {
        let (a, b) = (rs.first().unwrap(), rs.last().unwrap());
        (b.cpu_s - a.cpu_s) / (b.at - a.at).as_secs_f64().max(1e-9)
    };
    writeln!(
        s,
        "\n{passes:.0} passes, {deferred:.0} snapshots deferred to a later pass, about \
         {snapshots:.0} snapshots ({passes:.0} × {targets} − deferred): **{:.1} ms of CPU per \
         snapshot** ({:.2} s in all), {:.1} % of one CPU over the run ({:.1} % over its second \
         half). VmRSS {lo:.1}–{hi:.1} MiB ({:.1} MiB at {:.0} s, {:.1} MiB at the end). Each \
         target's last snapshot took {} (wall, min–median–max); {errors:.0} snapshots failed; \
         the last pass took {:.2} s. serve {} on SIGTERM.\n",
        1000.0 * last.cpu_s / snapshots.max(1.0),
        last.cpu_s,
        100.0 * last.cpu_s / last.at.as_secs_f64(),
        100.0
            * if second_half.len() > 1 {
                cpu_rate(second_half)
            } else {
                cpu_rate(readings)
            },
        first.rss_kib as f64 / 1024.0,
        first.at.as_secs_f64(),
        last.rss_kib as f64 / 1024.0,
        spread(&walls),
        value("rip_serve_pass_duration_seconds"),
        if exited_cleanly {
            "exited 0"
        } else {
            "did not exit 0"
        },
    )?;
    Ok(s)
}

/// `min–median–max` of sorted seconds, as ms.
fn spread(sorted: &[f64]) -> String {
    match sorted {
        [] => "unknown".into(),
        s => format!(
            "{:.0}–{:.0}–{:.0} ms",
            1e3 * s[0],
            1e3 * s[s.len() / 2],
            1e3 * s[s.len() - 1]
        ),
    }
}

fn human(d: Duration) -> String {
    match d.as_secs() {
        s if s % 60 == 0 => format!("{} min", s / 60),
        s => format!("{s} s"),
    }
}

/// utime + stime of process `pid`, in seconds.
fn cpu_seconds(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which may hold spaces), from field 3.
    let rest = stat.rsplit_once(')').context("no comm in stat")?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f[11].parse::<f64>()? + f[12].parse::<f64>()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Ok(ticks / hz)
}

/// VmRSS of process `pid`, KiB.
fn rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| {
            l.strip_prefix("VmRSS:")?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse()
                .ok()
        })
        .context("no VmRSS")
}

/// The body of `GET path` on `addr` (HTTP/1.0, read to the end).
fn http_get(addr: &str, path: &str) -> Result<String> {
    let mut c = TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
    c.set_read_timeout(Some(Duration::from_secs(60)))?;
    write!(c, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut r = String::new();
    c.read_to_string(&mut r)?;
    let (head, body) = r.split_once("\r\n\r\n").context("no HTTP header")?;
    if !head.starts_with("HTTP/1.") || !head.contains(" 200 ") {
        bail!("GET {path}: {}", head.lines().next().unwrap_or(""));
    }
    Ok(body.to_string())
}
