//! A process's health in numbers, from one report: what `rip-probe serve`
//! exports per process (threads by state, the longest-blocked thread,
//! threads blocked past thresholds, lock waiters, deadlocks) and whether
//! the report is an incident (a thread stuck past `--stuck`, a deadlock).

use crate::model::{LockKind, Report, serve::Health};

/// The health of `r`: thresholds (ns) for `blocked_over`, and the stuck
/// threshold (ns).
pub fn health(r: &Report, thresholds: &[u64], stuck_ns: u64) -> Health {
    let mut h = Health {
        blocked_over: thresholds.iter().map(|&t| (t, 0)).collect(),
        deadlocks: r.deadlocks.len() as u64,
        ..Health::default()
    };
    for t in &r.threads {
        *h.by_state.entry(t.state.as_str()).or_default() += 1;
        if let Some(w) = &t.waits_for
            && !matches!(
                w.kind,
                LockKind::Condvar | LockKind::Semaphore | LockKind::Parked
            )
        {
            h.lock_waiters += 1;
        }
        let Some(b) = t.blocked.filter(|_| t.state.is_blocked()) else {
            continue;
        };
        h.longest_blocked_ns = Some(h.longest_blocked_ns.map_or(b.ns, |m| m.max(b.ns)));
        for (limit, n) in &mut h.blocked_over {
            if b.ns >= *limit {
                *n += 1;
            }
        }
        if b.ns >= stuck_ns {
            h.stuck.push(t.tid);
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Blocked, BlockedSource, Owner, Thread, ThreadState, WaitsFor};

    fn thread(tid: u64, state: ThreadState, blocked_s: Option<u64>) -> Thread {
        let mut t = Thread::new(tid, "w".into(), "comm", state);
        t.blocked = blocked_s.map(|s| Blocked {
            ns: s * 1_000_000_000,
            exact: false,
            source: BlockedSource::Switch,
        });
        t
    }

    #[test]
    fn counts_states_thresholds_waiters_and_stuck() {
        let mut r = crate::model::tests_support::report(vec![
            thread(1, ThreadState::Running, None),
            thread(2, ThreadState::Sleeping, Some(5)),
            thread(3, ThreadState::Sleeping, Some(40)),
            thread(4, ThreadState::Uninterruptible, Some(400)),
        ]);
        let waits = |kind| WaitsFor {
            lock: 0x1000,
            futex: 0x1000,
            symbol: None,
            kind,
            mutex: None,
            runtime: None,
            owner: Owner::Thread { tid: 9 },
            owner_tid: None,
        };
        r.threads[1].waits_for = Some(waits(LockKind::Mutex));
        r.threads[2].waits_for = Some(waits(LockKind::Condvar));
        r.deadlocks = vec![vec![2, 3]];
        let s = 1_000_000_000;
        let h = health(&r, &[10 * s, 60 * s], 30 * s);
        assert_eq!(h.by_state.get("running"), Some(&1));
        assert_eq!(h.by_state.get("sleeping"), Some(&2));
        assert_eq!(h.longest_blocked_ns, Some(400 * s));
        assert_eq!(h.blocked_over, vec![(10 * s, 2), (60 * s, 1)]);
        assert_eq!(h.lock_waiters, 1, "a condition variable is no lock");
        assert_eq!(h.stuck, vec![3, 4]);
        assert_eq!(h.deadlocks, 1);
        assert!(h.is_incident());
        let calm = health(&crate::model::tests_support::report(vec![]), &[], s);
        assert!(!calm.is_incident() && calm.longest_blocked_ns.is_none());
    }
}
