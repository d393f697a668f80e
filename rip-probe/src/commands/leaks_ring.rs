//! The ring path of `rip-probe leaks`: what librip's allocation sampler
//! (`librip::alloc`) left in a ring file, live (`--pid`, read from the
//! file at no cost to the process) or after the process died. The ring is
//! read once (collect), its addresses named through the live process or
//! the ring's module table (symbolize), the live samples grouped by stack
//! and scaled to estimated bytes (analyze) into the same `LeaksReport` a
//! traced window makes, then rendered as text or JSON.

use std::{collections::HashMap, path::Path, sync::Arc};

use super::output::{Outputs, Sink};
use crate::{
    analyze,
    collect::{namespaces::Writer, procfs, ring::RingView},
    error::{Error, Result},
    model::{
        Frame, ProcessInfo, SCHEMA_VERSION,
        leaks::{HeapSampler, LeakLost, LeakTracing, LeaksReport},
    },
    symbolize::{self, Symbolizer, UserSpace},
    util::monotonic_ns,
};

/// `rip-probe leaks RING`: the sampler's table of a ring file.
pub(crate) fn run_file(path: &Path, json: bool, files: &Outputs, out: &mut Sink) -> Result<()> {
    report(RingView::open(path)?, true, json, files, out)
}

/// `rip-probe leaks --pid N --sampled`: the sampler's table of the
/// process's ring, read live.
pub(crate) fn run_pid(pid: u32, json: bool, files: &Outputs, out: &mut Sink) -> Result<()> {
    report(super::dump::ring_of(pid)?, false, json, files, out)
}

/// Reads the ring's allocation table, names its live samples' stacks,
/// groups them into a [`LeaksReport`] and renders it.
fn report(
    mut ring: RingView,
    from_file: bool,
    json: bool,
    files: &Outputs,
    out: &mut Sink,
) -> Result<()> {
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
    let trusted = alive_pid.is_some_and(|pid| procfs::may_ptrace(ring.owner, pid));
    let space = match alive_pid {
        Some(pid) if trusted => UserSpace::LiveWithModules(pid, &ring.modules),
        _ => UserSpace::Modules(&ring.modules),
    };
    let mut sym = Symbolizer::new();
    // Each distinct stack named once; every recorded address is a return
    // address: the call is named (addr - 1), the frame keeps the address.
    let mut distinct: Vec<&[u64]> = table.live.iter().map(|a| &a.frames[..]).collect();
    distinct.sort_unstable();
    distinct.dedup();
    let calls: Vec<Vec<u64>> = distinct
        .iter()
        .map(|s| s.iter().map(|a| a.saturating_sub(1)).collect())
        .collect();
    let named = symbolize::stacks::frames_of(&calls, &space, &mut sym);
    let names: HashMap<Arc<[u64]>, Arc<[Frame]>> = distinct
        .iter()
        .zip(named)
        .map(|(&addrs, frames)| {
            let frames: Arc<[Frame]> = frames
                .iter()
                .zip(addrs)
                .map(|(f, &a)| {
                    let mut f = f.clone();
                    f.addr = a;
                    f
                })
                .collect();
            (Arc::from(addrs), frames)
        })
        .collect();
    let mut warnings = sym.take_warnings();
    if !process.alive {
        warnings.insert(
            0,
            "the process is gone: what was live at its end (ages are as of now)".into(),
        );
    }
    if table.dropped > 0 && table.file_full {
        warnings.push(format!(
            "{} sampled allocations found no room in the ring's file system (it is full) and are not counted: the totals are lower bounds (free space there, or put the ring elsewhere: RIP_ALLOC_RING)",
            table.dropped
        ));
    } else if table.dropped > 0 {
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
    let mut report = LeaksReport {
        schema: SCHEMA_VERSION,
        process,
        window_ns: 0,
        min_age_ns: 0,
        traced: LeakTracing::default(),
        open_at_start: None,
        totals: Vec::new(),
        released: Vec::new(),
        stacks: Vec::new(),
        allocated: None,
        series: Vec::new(),
        lost: LeakLost::default(),
        warnings,
        sampler: Some(HeapSampler {
            ring: ring.path.display().to_string(),
            mean_bytes: table.mean,
            estimated: table.mean > 1,
            sampled: table.sampled,
            freed: table.freed,
            dropped: table.dropped,
            torn: table.torn,
            live_samples: table.live.len() as u64,
            sampled_bytes: table.live.iter().map(|a| a.requested).sum(),
        }),
    };
    let now = ring.unix_ns(monotonic_ns());
    analyze::leaks::fill_sampled(&mut report, &table, &names, |t| {
        now.saturating_sub(ring.unix_ns(t))
    });
    super::emit_leaks(&report, json, files, out)
}
