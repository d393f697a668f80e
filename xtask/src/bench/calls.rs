//! The `calls` rows of the per-call table: what counting and timing every
//! call of `f` costs, with `rip-probe calls` (an entry and a return uprobe,
//! counts and a latency histogram in per-CPU maps) and with bpftrace's
//! one-liners for the same (`count()`, and `hist()` of entry-to-return
//! times). They run in the same interleaved rounds as the other rows.

use super::{
    peers::Peers,
    rows::{Calls, Row, Tracer},
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
