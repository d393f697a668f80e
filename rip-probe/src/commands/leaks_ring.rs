//! The ring path of `rip-probe leaks`: what librip's allocation sampler
//! (`librip::alloc`) left in a ring file, live (`--pid`, read from the
//! file at no cost to the process) or after the process died. The ring is
//! read once (collect), its addresses named through the live process or
//! the ring's module table (symbolize), the live samples grouped by stack
//! and scaled to estimated bytes (analyze), then rendered.

use std::path::Path;

use super::output::Sink;
use crate::{
    analyze,
    collect::{namespaces::Writer, procfs, ring::RingView},
    error::{Error, Result},
    model::{ProcessInfo, sampled::SampledHeap},
    render,
    symbolize::{self, Symbolizer, UserSpace},
};

/// `rip-probe leaks RING`: the sampler's table of a ring file.
pub(crate) fn run_file(path: &Path, out: &mut Sink) -> Result<()> {
    report(RingView::open(path)?, true, out)
}

/// `rip-probe leaks --pid N --sampled`: the sampler's table of the
/// process's ring, read live.
pub(crate) fn run_pid(pid: u32, out: &mut Sink) -> Result<()> {
    report(super::dump::ring_of(pid)?, false, out)
}

/// Reads the ring's allocation table, names and groups its live samples,
/// renders them.
fn report(mut ring: RingView, from_file: bool, out: &mut Sink) -> Result<()> {
    let writer = ring.writer();
    if let (Writer::Alive(pid), true) = (&writer, from_file) {
        ring.join_process(*pid);
    }
    let alive_pid = match writer {
        Writer::Alive(pid) => Some(pid),
        _ => None,
    };
    let Some(table) = ring.allocations.take() else {
        return Err(Error::Usage(format!(
            "{} has no allocation table: run the program with RIP_ALLOC_SAMPLE=512k (and, if it is not linked with librip, LD_PRELOAD=librip.so)",
            ring.path.display()
        )));
    };
    let process = ProcessInfo {
        pid: alive_pid.unwrap_or(ring.pid),
        exe: ring.exe.clone(),
        comm: None,
        alive: alive_pid.is_some(),
        lost: None,
        ns_pid: None,
        title: None,
    };
    let mut stacks = analyze::sampled::stacks(&table, |t| ring.unix_ns(t));
    let trusted = alive_pid.is_some_and(|pid| procfs::may_ptrace(ring.owner, pid));
    let space = match alive_pid {
        Some(pid) if trusted => UserSpace::LiveWithModules(pid, &ring.modules),
        _ => UserSpace::Modules(&ring.modules),
    };
    let mut sym = Symbolizer::new();
    // Every recorded address is a return address: name the call (addr - 1).
    let calls: Vec<Vec<u64>> = stacks
        .iter()
        .map(|s| s.addrs.iter().map(|a| a.saturating_sub(1)).collect())
        .collect();
    let named = symbolize::stacks::frames_of(&calls, &space, &mut sym);
    for (s, frames) in stacks.iter_mut().zip(named) {
        s.frames = frames
            .iter()
            .zip(&s.addrs)
            .map(|(f, &a)| {
                let mut f = f.clone();
                f.addr = a;
                f
            })
            .collect();
    }
    let mut warnings = sym.take_warnings();
    if table.dropped > 0 {
        warnings.push(format!(
            "{} sampled allocations found the table full and are not counted: the totals are lower bounds (a larger table: RIP_ALLOC_TABLE)",
            table.dropped
        ));
    }
    if table.torn > 0 {
        warnings.push(format!(
            "{} entries were half-written when the writer stopped and are left out",
            table.torn
        ));
    }
    let heap = SampledHeap {
        process,
        ring: ring.path.display().to_string(),
        mean_bytes: table.mean,
        sampled: table.sampled,
        freed: table.freed,
        dropped: table.dropped,
        torn: table.torn,
        live_samples: table.live.len() as u64,
        sampled_bytes: table.live.iter().map(|a| a.requested).sum(),
        estimated_bytes: table
            .live
            .iter()
            .map(|a| a.estimated_bytes)
            .sum::<f64>()
            .round() as u64,
        stacks,
        warnings,
    };
    out.emit(|w| render::sampled_text(&heap, w))
}
