//! The `calls` rows of the per-call table: what counting and timing every
//! call of `f` costs, with `rip-probe calls` (an entry and a return uprobe,
//! counts and a latency histogram in per-CPU maps) and with bpftrace's
//! one-liners for the same (`count()`, and `hist()` of entry-to-return
//! times). They run in the same interleaved rounds as the other rows.

use std::{path::Path, time::Duration};

use anyhow::{Context, Result};

use super::{
    peers::Peers,
    proc::{Proc, wait_idle},
    rows::{Calls, Row, Tracer},
    tracers::RIP_PROBE_QUIET,
    workloads::Workloads,
};

/// bpftrace's latency histogram of `f`, counting calls in `@hits` as the
/// other bpftrace rows do.
const BPFTRACE_HIST: &str = "uprobe:{exe}:f { @start[tid] = nsecs; @hits = count(); } \
     uretprobe:{exe}:f /@start[tid]/ { @ns = hist(nsecs - @start[tid]); delete(@start[tid]); }";

/// The rows. bpftrace's `count()` alone is the per-call table's
/// `uprobe-bpftrace` row.
pub fn rows(w: &Workloads, peers: &Peers) -> Vec<Row> {
    let rip_probe = Row {
        id: "calls-rip-probe",
        label: "uprobe + uretprobe, `rip-probe calls` (count, latency histogram)",
        exe: Ok(w.loop_plain.clone()),
        mode: None,
        tracer: Tracer::RipProbeCalls("f"),
        // Two traps per call (entry and return): a few tens of µs each.
        calls: Calls {
            start: 10_000,
            min: 5_000,
            max: 100_000,
        },
        same_calls_as: None,
        callgrind: false,
    };
    let bpftrace = Row {
        id: "calls-bpftrace-hist",
        label: "uprobe + uretprobe, bpftrace `count()` and `hist()` of latency",
        exe: peers.need(&["bpftrace"]).map(|()| w.loop_plain.clone()),
        tracer: Tracer::Bpftrace(BPFTRACE_HIST),
        ..rip_probe.clone()
    };
    vec![rip_probe, bpftrace]
}

/// The `rip-probe calls` command line counting `function` in `pid` (until
/// the process exits).
pub fn rip_probe_calls_args(exe: &str, pid: &str, function: &str) -> Vec<String> {
    [
        exe,
        "calls",
        "--pid",
        pid,
        "--uprobe",
        function,
        "--duration",
        "600s",
        "--json",
    ]
    .map(String::from)
    .to_vec()
}

/// `rip-probe calls` attached to a process.
pub struct RipProbeCalls(Proc);

impl RipProbeCalls {
    /// Starts `rip-probe calls` with its phase timings on and waits until
    /// its probes are attached and it has settled.
    pub fn attach(exe: &Path, pid: u32, function: &str) -> Result<RipProbeCalls> {
        let args = rip_probe_calls_args(&exe.to_string_lossy(), &pid.to_string(), function);
        let mut p = Proc::start(&args, &[("RIP_PROBE_TIMING", "1")])?;
        p.stderr
            .as_mut()
            .expect("piped")
            .wait_for(Duration::from_secs(60), |l| {
                l.starts_with("rip-probe timing: attach uprobes:")
            })
            .context("rip-probe calls did not attach")?;
        wait_idle(p.pid(), RIP_PROBE_QUIET, Duration::from_secs(5));
        Ok(RipProbeCalls(p))
    }

    /// Waits for the report rip-probe writes when the workload exits; the
    /// calls it counted.
    pub fn finish(mut self) -> Result<u64> {
        let ok = self.0.wait_or_kill(Duration::from_secs(20));
        let out = self
            .0
            .stdout
            .as_mut()
            .expect("piped")
            .drain(Duration::from_secs(1))
            .join("\n");
        anyhow::ensure!(ok, "rip-probe calls did not exit cleanly: {out}");
        let v: serde_json::Value =
            serde_json::from_str(&out).context("rip-probe calls printed no JSON report")?;
        v["functions"][0]["calls"]
            .as_u64()
            .context("the report counts no calls")
    }
}
