//! The wait-for graph: each thread blocked on a lock points at the lock's
//! owner; following the owners gives a chain that ends at a thread that
//! waits for no lock (the one to look at), or comes back to a thread
//! already on it: a deadlock.

use std::collections::{BTreeMap, BTreeSet};

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
