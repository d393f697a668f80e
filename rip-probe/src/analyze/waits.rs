//! The wait-for graph: each thread blocked on a lock points at the lock's
//! owner; following the owners gives a chain that ends at a thread that
//! waits for no lock (the one to look at), or comes back to a thread
//! already on it: a deadlock.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use librip::reader::ProcessMaps;

use crate::{
    collect::{locks, memory::ProcessMemory, namespaces::TidMap},
    model::{LockKind, Owner, Report, Thread, WaitsFor},
    symbolize::data::DataNames,
};

/// What identifies a wait: the syscall, the futex address, the operation
/// and the expected value.
type WaitArgs = (i64, u64, u64, u64);

/// Fills each futex waiter's [`WaitsFor`] from process `pid`'s memory,
/// names the locks, says what each owner is doing, and lists the
/// deadlocks. Runs after symbolization, so owners' locations are named.
/// `maps` is the process's map, shared with the other stages of the
/// snapshot (`None`: locks are left unnamed).
pub fn fill(report: &mut Report, pid: u32, maps: Option<&ProcessMaps>) {
    let mem = ProcessMemory::new(pid);
    // A lock records its owner as the process's own pid namespace numbers
    // it (a container's): ours are needed to find the owner here.
    let ns = TidMap::of(pid);
    let host = |tid: u32| ns.as_ref().map_or(Some(tid), |m| m.host(u64::from(tid)));
    let status = |tid| match host(tid) {
        Some(tid) => locks::tid_status(pid, tid),
        None => locks::TidStatus::Gone,
    };
    let mut names = DataNames::new(pid, maps);
    let mut evidence = super::rust_locks::Evidence::new(pid);
    let mut edges = BTreeMap::new();
    // Threads waiting on one lock wait with the same arguments: the lock is
    // read and named once, whatever the number of waiters (a pool of
    // 10,000 workers behind one mutex is one read).
    let mut seen: HashMap<WaitArgs, Option<(locks::AwaitedLock, Option<String>)>> = HashMap::new();
    for t in &mut report.threads {
        let Some(s) = &t.syscall else { continue };
        let mut args = [0u64; 6];
        for (a, v) in args.iter_mut().zip(&s.args) {
            *a = v.raw;
        }
        let found = seen
            .entry((s.nr, args[0], args[1], args[2]))
            .or_insert_with(|| {
                let mut l = locks::awaited_lock(&mem, &status, s.nr, &args)?;
                // A futex no glibc layout fits: a Rust lock says so by the
                // waiter's stack, and records no owner.
                if l.kind == LockKind::Futex
                    && let Some(owner) = u32::try_from(t.tid)
                        .ok()
                        .and_then(|tid| evidence.no_owner_lock(tid))
                {
                    l.owner = owner;
                }
                let name = names.name(l.addr);
                Some((l, name))
            });
        let (Some((l, symbol)), Ok(tid)) = (found.as_ref(), u32::try_from(t.tid)) else {
            continue;
        };
        let owner = l.owner.tid().and_then(host);
        edges.insert(
            tid,
            WaitEdge {
                lock: l.addr,
                owner,
            },
        );
        t.waits_for = Some(WaitsFor {
            lock: l.addr,
            futex: l.futex,
            symbol: symbol.clone(),
            kind: l.kind,
            mutex: l.mutex.clone(),
            owner: l.owner.clone(),
            owner_tid: owner,
            owner_state: None,
        });
    }
    // What each owner does, described once per owner.
    let owners: std::collections::HashSet<u64> = report
        .threads
        .iter()
        .filter_map(|t| t.waits_for.as_ref()?.owner_tid.map(u64::from))
        .collect();
    let doing: HashMap<u64, String> = report
        .threads
        .iter()
        .filter(|t| owners.contains(&t.tid))
        .map(|t| (t.tid, doing(t)))
        .collect();
    for t in &mut report.threads {
        if let Some(w) = &mut t.waits_for
            && let Some(o) = w.owner_tid
        {
            w.owner_state = doing.get(&u64::from(o)).cloned();
        }
    }
    report.deadlocks = wait_graph(&edges).deadlocks;
}

/// The report's threads by id, for [`chain_sentence`].
pub fn by_tid(report: &Report) -> HashMap<u64, &Thread> {
    report.threads.iter().map(|t| (t.tid, t)).collect()
}

/// What a thread is doing, in a few words: `blocked in read(…) for ≥41s`,
/// `running`, `sleeping`.
pub fn doing(t: &Thread) -> String {
    let state = t.state.as_str();
    match (&t.syscall, &t.blocked) {
        (Some(s), Some(b)) => format!(
            "{state} in {} for {}{}",
            s.text,
            if b.exact { "" } else { "≥" },
            crate::util::timefmt::duration(b.ns)
        ),
        (Some(s), None) => format!("{state} in {}", s.text),
        _ => state.to_string(),
    }
}

/// One sentence for a lock's chain of waits, from the waiter's lock on:
/// `mutex g_a held by 12 (worker-2), which waits for mutex g_b held by 13
/// (worker-3), sleeping in read(…) for ≥4.1s`. A chain that comes back to
/// a thread already in it ends with `… held by 12 (worker-2): deadlock`.
/// `by_tid` is [`by_tid`] of the report: built once for all sentences.
pub fn chain_sentence(by_tid: &HashMap<u64, &Thread>, start: &Thread) -> Option<String> {
    let mut out = String::new();
    let mut seen = BTreeSet::from([start.tid]);
    let mut at = start;
    loop {
        let w = at.waits_for.as_ref()?;
        if at.tid != start.tid {
            out.push_str(", which waits for ");
        }
        out.push_str(&lock_words(w));
        let Some(owner) = w.owner_tid.and_then(|o| by_tid.get(&u64::from(o)).copied()) else {
            out.push_str(&format!(": {}", owner_words(&w.owner)));
            return Some(out);
        };
        out.push_str(&format!(" held by {} ({})", owner.tid, owner.name));
        if !seen.insert(owner.tid) {
            out.push_str(": deadlock");
            return Some(out);
        }
        if owner.waits_for.is_none() {
            out.push_str(&format!(", {}", doing(owner)));
            return Some(out);
        }
        at = owner;
    }
}

/// `mutex g_table_lock`, `rwlock heap 0x…`.
fn lock_words(w: &WaitsFor) -> String {
    let name = w.symbol.clone().unwrap_or_else(|| format!("{:#x}", w.lock));
    format!("{} {name}", w.kind.as_str())
}

/// Why no owner is named.
fn owner_words(o: &Owner) -> String {
    match o {
        Owner::Thread { tid } => format!("held by {tid}"),
        Owner::OtherProcess { tid, pid } => format!("held by thread {tid} of process {pid}"),
        Owner::Exited { tid, robust: true } => {
            format!("its owner {tid} exited (robust mutex: the next locker gets EOWNERDEAD)")
        }
        Owner::Exited { tid, robust: false } => {
            format!("its owner {tid} exited without unlocking it")
        }
        Owner::Readers { count } => {
            format!("held by {count} reader(s), which an rwlock does not record")
        }
        Owner::NotRecorded { reason } => reason.clone(),
        Owner::Unknown { reason } => format!("owner unknown: {reason}"),
    }
}

/// One thread's wait: the lock it awaits and the lock's owner, if known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitEdge {
    /// The lock's address.
    pub lock: u64,
    /// The owning thread, when the lock records one that is alive.
    pub owner: Option<u32>,
}

/// The graph's reading.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WaitGraph {
    /// For each waiting thread, the threads its chain passes through after
    /// it, in order: the owner of its lock, that owner's lock's owner, …
    /// up to a thread that waits for no lock, or up to the first thread of
    /// a cycle (which then appears twice in `[tid] + chain`).
    pub chains: BTreeMap<u32, Vec<u32>>,
    /// Each cycle once, smallest tid first, in wait order: a deadlock.
    pub deadlocks: Vec<Vec<u32>>,
}

/// Follows every waiting thread to the end of its chain. Linear in the
/// total length of the chains; each cycle is reported once.
pub fn wait_graph(waits: &BTreeMap<u32, WaitEdge>) -> WaitGraph {
    let mut out = WaitGraph::default();
    let mut cycles: BTreeSet<Vec<u32>> = BTreeSet::new();
    for &start in waits.keys() {
        let mut chain = Vec::new();
        let mut seen = BTreeSet::from([start]);
        let mut at = start;
        while let Some(next) = waits.get(&at).and_then(|e| e.owner) {
            chain.push(next);
            if !seen.insert(next) {
                // `next` closes a cycle: the part of the path from its
                // first visit on.
                let path: Vec<u32> = std::iter::once(start)
                    .chain(chain.iter().copied())
                    .collect();
                let first = path.iter().position(|&t| t == next).unwrap_or(0);
                cycles.insert(canonical(&path[first..path.len() - 1]));
                break;
            }
            at = next;
        }
        out.chains.insert(start, chain);
    }
    out.deadlocks = cycles.into_iter().collect();
    out
}

/// A cycle rotated to start at its smallest tid.
fn canonical(cycle: &[u32]) -> Vec<u32> {
    let min = cycle
        .iter()
        .enumerate()
        .min_by_key(|&(_, t)| *t)
        .map_or(0, |(i, _)| i);
    cycle[min..].iter().chain(&cycle[..min]).copied().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edges(e: &[(u32, u32)]) -> BTreeMap<u32, WaitEdge> {
        e.iter()
            .map(|&(t, o)| {
                (
                    t,
                    WaitEdge {
                        lock: u64::from(o) * 0x100,
                        owner: Some(o),
                    },
                )
            })
            .collect()
    }

    #[test]
    fn a_chain_ends_at_a_thread_that_waits_for_no_lock() {
        let g = wait_graph(&edges(&[(1, 2), (2, 3)]));
        assert_eq!(g.chains[&1], [2, 3]);
        assert_eq!(g.chains[&2], [3]);
        assert!(g.deadlocks.is_empty());
    }

    #[test]
    fn abba_and_three_thread_deadlocks_are_named_once() {
        let g = wait_graph(&edges(&[
            (10, 11),
            (11, 10),
            (5, 7),
            (7, 6),
            (6, 5),
            (20, 10),
        ]));
        assert_eq!(g.deadlocks, [vec![5, 7, 6], vec![10, 11]]);
        assert_eq!(g.chains[&10], [11, 10]);
        // A thread outside a cycle waiting into it.
        assert_eq!(g.chains[&20], [10, 11, 10]);
    }

    #[test]
    fn unknown_owners_end_the_chain() {
        let mut w = edges(&[(1, 2)]);
        w.insert(
            2,
            WaitEdge {
                lock: 0x42,
                owner: None,
            },
        );
        let g = wait_graph(&w);
        assert_eq!(g.chains[&1], [2]);
        assert_eq!(g.chains[&2], Vec::<u32>::new());
    }

    #[test]
    fn a_thread_waiting_on_a_lock_it_holds_is_a_deadlock_of_one() {
        let g = wait_graph(&edges(&[(3, 3)]));
        assert_eq!(g.deadlocks, [vec![3]]);
    }
}
