//! Reading 100,000 live slots: `rip-probe dump --json` of the ring of
//! `rip-dump-workload many` (10,000 threads and 90,000 tasks, each having
//! snapped), its wall and CPU time and its `read ring` phase (the reader
//! alone). The tests (tests/tests/dump.rs, reader_speed.rs) bound the CPU
//! time, which a busy machine does not lengthen; the wall time is a figure
//! of this machine, so it is measured here.

use std::{fmt::Write as _, fs::File, time::Duration};

use anyhow::{Context, Result};

use super::{
    out_dir,
    proc::{self, Proc},
    workloads::Workloads,
};

/// Live threads and tasks in the ring.
const THREADS: usize = 10_000;
const TASKS: usize = 90_000;

/// One run of `rip-probe dump --json`.
#[derive(Clone, Debug)]
pub struct DumpRun {
    /// From spawn to exit.
    pub wall: Duration,
    /// User plus system, all its threads.
    pub cpu: Option<Duration>,
    /// Its `read ring` phase (RIP_PROBE_TIMING), in ms.
    pub read_ring_ms: Option<f64>,
}

/// The runs, in order.
#[derive(Clone, Debug)]
pub struct ReadingResult {
    /// Runs of dump on the same ring.
    pub runs: Vec<DumpRun>,
}

/// The `read ring` phase's milliseconds in RIP_PROBE_TIMING output.
fn read_ring_ms(stderr: &str) -> Option<f64> {
    stderr.lines().find_map(|l| {
        l.strip_prefix("rip-probe timing: read ring: ")?
            .strip_suffix("ms")?
            .parse()
            .ok()
    })
}

/// Starts the workload, then dumps its ring `rounds` times.
pub fn run(w: &Workloads, rounds: usize) -> Result<ReadingResult> {
    let dir = out_dir();
    let ring = dir.join("reading.ring");
    let _ = std::fs::remove_file(&ring);
    let mut workload = Proc::start(
        &[
            w.dump_workload.path.display().to_string(),
            "many".into(),
            ring.display().to_string(),
            THREADS.to_string(),
            TASKS.to_string(),
        ],
        &[],
    )?;
    workload
        .stdout
        .as_mut()
        .context("workload stdout")?
        .wait_for(Duration::from_secs(120), |l| l == "ready")
        .context("rip-dump-workload many")?;
    let err_path = dir.join("reading.stderr");
    let mut runs = Vec::new();
    for _ in 0..rounds {
        let usage = proc::measure(
            &w.maxrss.path,
            &[
                w.rip_probe.path.display().to_string(),
                "dump".into(),
                ring.display().to_string(),
                "--json".into(),
            ],
            &[("RIP_PROBE_TIMING", "1")],
            File::create("/dev/null")?,
            File::create(&err_path)?,
        )?;
        let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
        anyhow::ensure!(usage.success, "rip-probe dump failed: {stderr}");
        runs.push(DumpRun {
            wall: usage.wall,
            cpu: usage.cpu,
            read_ring_ms: read_ring_ms(&stderr),
        });
    }
    drop(workload);
    let _ = std::fs::remove_file(&ring);
    Ok(ReadingResult { runs })
}

/// The median of `xs` formatted by `f`, with the range, or "not measured".
fn cell(xs: &[f64], f: impl Fn(f64) -> String) -> String {
    match (super::stats::median(xs), super::stats::range(xs)) {
        (Some(m), Some((lo, hi))) => format!("**{}** ({}–{})", f(m), f(lo), f(hi)),
        _ => "not measured".into(),
    }
}

/// The section of docs/BENCHMARKS.md.
pub fn render(r: &Result<ReadingResult, String>, s: &mut String) {
    let _ = writeln!(
        s,
        "## Reading 100,000 live slots\n\n\
         `rip-probe dump RING --json` of the ring of `rip-dump-workload many RING \
         {THREADS} {TASKS}` (every slot live, having snapped), symbolized: \
         median (min–max) over the runs. The reader's part is dump's `read ring` \
         phase (`RIP_PROBE_TIMING=1`). The tests bound the CPU time (a second, \
         for an optimized build), which load does not lengthen.\n"
    );
    match r {
        Err(e) => {
            let _ = writeln!(s, "Not measured: {e}\n");
        }
        Ok(r) => {
            let ms = |v: f64| format!("{v:.0} ms");
            let wall: Vec<f64> = r.runs.iter().map(|x| x.wall.as_secs_f64() * 1e3).collect();
            let cpu: Vec<f64> = r
                .runs
                .iter()
                .filter_map(|x| Some(x.cpu?.as_secs_f64() * 1e3))
                .collect();
            let read: Vec<f64> = r.runs.iter().filter_map(|x| x.read_ring_ms).collect();
            let _ = writeln!(
                s,
                "| runs | wall time | CPU time | of which reading the ring (wall) |\n\
                 | --- | --- | --- | --- |\n\
                 | {} | {} | {} | {} |\n",
                r.runs.len(),
                cell(&wall, ms),
                cell(&cpu, ms),
                cell(&read, |v| format!("{v:.1} ms")),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_the_runs() {
        let run = |wall, cpu, read| DumpRun {
            wall: Duration::from_millis(wall),
            cpu: Some(Duration::from_millis(cpu)),
            read_ring_ms: Some(read),
        };
        let r = Ok(ReadingResult {
            runs: vec![
                run(300, 250, 40.0),
                run(200, 180, 30.0),
                run(250, 200, 35.0),
            ],
        });
        let mut s = String::new();
        render(&r, &mut s);
        assert!(
            s.contains("| 3 | **250 ms** (200 ms–300 ms) | **200 ms** (180 ms–250 ms) | **35.0 ms** (30.0 ms–40.0 ms) |"),
            "{s}"
        );
        let mut s = String::new();
        render(&Err("no ring".into()), &mut s);
        assert!(s.contains("Not measured: no ring"), "{s}");
    }

    #[test]
    fn finds_the_read_ring_phase() {
        let err = "rip-probe timing: read ring: 41.5ms\nrip-probe timing: render: 3.0ms\n";
        assert_eq!(read_ring_ms(err), Some(41.5));
        assert_eq!(read_ring_ms("nothing"), None);
    }
}
