//! Names for what `rip-probe locks` counted and collect read beside the
//! counts: each lock's data symbol (or the memory it lives in) and each
//! waker's frames, every distinct address named once.

use std::collections::{BTreeSet, HashMap};

use super::{data::DataNames, stacks::StackSymbolizer};
use crate::{
    collect::{contention::ContentionEvidence, kernel::contention::Counted},
    discover::maps::ProcessMaps,
    model::Frame,
};

/// Lock names by lock address, and waker frames by (futex word, stack
/// id), for process `pid` (its binaries are read through /proc while it
/// runs; after it exited, nothing is named).
pub(crate) type ContentionNames = (
    HashMap<u64, Option<String>>,
    HashMap<(u64, i64), Vec<Frame>>,
);

/// Names the locks `counted` holds (at the addresses the evidence gives
/// them) and the wakers' stacks the evidence read.
pub(crate) fn contention(pid: u32, counted: &Counted, ev: &ContentionEvidence) -> ContentionNames {
    let maps = ProcessMaps::open(pid).ok();
    let mut data = DataNames::new(pid, maps.as_ref());
    let addrs: BTreeSet<u64> = counted
        .locks
        .iter()
        .map(|(uaddr, _)| ev.locks.get(uaddr).map_or(*uaddr, |l| l.0))
        .collect();
    let locks = addrs.into_iter().map(|a| (a, data.name(a))).collect();
    let keys: Vec<&(u64, i64)> = ev.wakers.keys().collect();
    let stacks: Vec<&[u64]> = keys.iter().map(|k| &ev.wakers[*k].addrs[..]).collect();
    let frames = StackSymbolizer::new(pid).frames_of_many(&stacks);
    let wakers = keys.into_iter().copied().zip(frames).collect();
    (locks, wakers)
}
