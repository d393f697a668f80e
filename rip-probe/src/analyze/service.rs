//! Threads of several processes grouped across them (`--cgroup`,
//! `--comm`, several `--pid`): the same state, wait, lock, location and
//! user stack in two processes is one group, with each process's share.
//! Across processes code addresses differ (each maps its binaries where
//! it likes), so places and stacks are compared by what they name
//! (source line, function, module and offset), never by address.

use std::collections::HashMap;

use super::group::{Place, Wait};
use crate::model::{
    GroupState, Report, Thread, ThreadState,
    cgroup::{GroupShare, ServiceGroup},
};

/// What threads of several processes are grouped on.
type Key = (
    ThreadState,
    Option<Wait>,
    Option<String>,
    Option<Place>,
    Vec<Place>,
);

/// The lock a thread waits for, by name; an unnamed lock, or one named by
/// its place on a heap or stack, is its own process's (two processes'
/// are two locks).
fn lock_of(pid: u32, t: &Thread) -> Option<String> {
    let w = t.waits_for.as_ref()?;
    Some(match &w.symbol {
        // A place in memory, not a variable: the same words in two
        // processes are two locks.
        Some(name) if name.starts_with("heap ") || name.starts_with("stack ") => {
            format!("{name} in pid {pid}")
        }
        Some(name) => name.clone(),
        None => format!("{:#x} in pid {pid}", w.lock),
    })
}

/// The threads of `reports` grouped across the processes, most populated
/// first, then longest blocked; each group's processes most members first.
pub fn across(reports: &[Report]) -> Vec<ServiceGroup> {
    let mut map: HashMap<Key, ServiceGroup> = HashMap::new();
    // Shares by group key and pid, kept in report order.
    let mut shares: HashMap<(Key, u32), GroupShare> = HashMap::new();
    for r in reports {
        let pid = r.process.pid;
        for t in &r.threads {
            let key: Key = (
                t.state,
                Wait::of(t),
                lock_of(pid, t),
                t.location.as_ref().map(|l| Place::of(&l.frame)),
                t.frames.iter().map(Place::of).collect(),
            );
            let g = map.entry(key.clone()).or_insert_with(|| ServiceGroup {
                count: 0,
                state: GroupState::Thread(t.state),
                wait: super::group::wait_text(t),
                lock: key.2.clone(),
                min_ns: None,
                max_ns: None,
                lower_bound: false,
                location: t.location.as_ref().map(|l| l.frame.clone()),
                source: t.location.as_ref().map(|l| l.source),
                frames: t.frames.clone(),
                processes: Vec::new(),
            });
            g.count += 1;
            if let Some(b) = t.blocked {
                g.min_ns = Some(g.min_ns.map_or(b.ns, |m| m.min(b.ns)));
                g.max_ns = Some(g.max_ns.map_or(b.ns, |m| m.max(b.ns)));
                g.lower_bound |= !b.exact;
            }
            let s = shares.entry((key, pid)).or_insert_with(|| GroupShare {
                pid,
                count: 0,
                tids: Vec::new(),
            });
            s.count += 1;
            s.tids.push(t.tid);
        }
    }
    for ((key, _), mut s) in shares {
        s.tids.sort_unstable();
        if let Some(g) = map.get_mut(&key) {
            g.processes.push(s);
        }
    }
    let mut v: Vec<ServiceGroup> = map.into_values().collect();
    for g in &mut v {
        g.processes
            .sort_by(|a, b| b.count.cmp(&a.count).then(a.pid.cmp(&b.pid)));
    }
    v.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then(b.max_ns.cmp(&a.max_ns))
            .then_with(|| {
                let first = |g: &ServiceGroup| g.processes.first().map(|s| (s.pid, s.tids[0]));
                first(a).cmp(&first(b))
            })
    });
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Blocked, BlockedSource, Frame, Location, LocationSource};

    fn thread(tid: u64, addr: u64, function: &str, ns: u64) -> Thread {
        let mut t = Thread::new(tid, "w".into(), "comm", ThreadState::Sleeping);
        t.blocked = Some(Blocked {
            ns,
            exact: true,
            source: BlockedSource::Switch,
        });
        t.location = Some(Location {
            source: LocationSource::Ring,
            seq: None,
            ago_ns: None,
            frame: Frame {
                addr,
                function: Some(function.into()),
                file: Some("src/pool.c".into()),
                line: Some(88),
                ..Default::default()
            },
        });
        t.frames = vec![Frame {
            addr: addr + 0x10,
            function: Some("main".into()),
            ..Default::default()
        }]
        .into();
        t
    }

    fn report(pid: u32, threads: Vec<Thread>) -> Report {
        let mut r = crate::model::tests_support::report(threads);
        r.process.pid = pid;
        r
    }

    /// The same line and stack at other addresses in another process is
    /// one group, with each process's share; another place is another.
    #[test]
    fn one_group_across_processes_with_shares() {
        let a = report(
            10,
            vec![thread(1, 0x1000, "take", 5), thread(2, 0x1000, "take", 9)],
        );
        let b = report(
            20,
            vec![thread(3, 0x7000, "take", 7), thread(4, 0x8000, "put", 1)],
        );
        let g = across(&[a, b]);
        assert_eq!(g.len(), 2, "{g:#?}");
        assert_eq!(g[0].count, 3);
        assert_eq!((g[0].min_ns, g[0].max_ns), (Some(5), Some(9)));
        let shares: Vec<(u32, usize, Vec<u64>)> = g[0]
            .processes
            .iter()
            .map(|s| (s.pid, s.count, s.tids.clone()))
            .collect();
        assert_eq!(shares, vec![(10, 2, vec![1, 2]), (20, 1, vec![3])]);
        assert_eq!(g[1].count, 1);
        assert_eq!(g[1].processes[0].pid, 20);
    }
}
