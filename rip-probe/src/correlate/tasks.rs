//! Tasks: coroutine and async-task slots of a ring turned into the model's
//! [`Task`]s — polling (on which thread, for how long) or idle (since
//! when, for how long), where each last snapped. (Grouping and filtering
//! are analyses: see `crate::analyze::tasks`.)
//!
//! Durations need a "now" on the ring's clock (CLOCK_MONOTONIC). A live
//! process has one. A dead one does not: comparing its poll times with
//! today's clock would say every task idled for as long as the process has
//! been dead. Post-mortem, durations run up to the last moment the ring
//! recorded of any task (a poll's start or end, a creation) and are lower
//! bounds: the process lived at least that long.

use crate::{
    collect::ring::RingView,
    correlate::ring_location,
    model::{Task, TaskState},
};

/// What task durations are measured up to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TaskClock {
    /// The process is alive: up to this CLOCK_MONOTONIC time (ns).
    Now(u64),
    /// The process is gone: up to the last time its ring recorded.
    PostMortem,
}

/// The latest time a ring recorded of any task: its horizon post-mortem.
pub(crate) fn horizon(r: &RingView) -> u64 {
    r.slots
        .iter()
        .filter_map(|s| s.task)
        .map(|t| {
            t.last_poll_start_ns
                .max(t.last_poll_end_ns)
                .max(t.created_ns)
        })
        .max()
        .unwrap_or(r.created_monotonic_ns)
}

/// The tasks (coroutine slots) of a ring, by id. `history` keeps every
/// entry, oldest first, not only the last.
pub(crate) fn ring_tasks(r: &RingView, clock: TaskClock, history: bool) -> Vec<Task> {
    let (now, lower_bound) = match clock {
        TaskClock::Now(ns) => (ns, false),
        TaskClock::PostMortem => (horizon(r), true),
    };
    let unix = |mono: u64| (mono != 0).then(|| r.unix_ns(mono));
    let mut v: Vec<Task> = r
        .slots
        .iter()
        .filter(|s| s.coroutine)
        .map(|s| {
            let st = s.task.unwrap_or_default();
            let state = if s.exited {
                TaskState::Exited
            } else if st.polling_tid != 0 {
                TaskState::Polling
            } else {
                TaskState::Idle
            };
            // Idle since the last poll ended, or since creation if never
            // polled; polling since the current poll started.
            let since = match state {
                TaskState::Idle if st.polls == 0 => Some(st.created_ns),
                TaskState::Idle => Some(st.last_poll_end_ns),
                TaskState::Polling => Some(st.last_poll_start_ns),
                TaskState::Exited => None,
            }
            .filter(|&t| t != 0);
            let for_ns = since.map(|t| now.saturating_sub(t));
            let n = s.entries.len();
            Task {
                id: s.id,
                generation: s.generation,
                name: s.name.clone(),
                state,
                polling_tid: (st.polling_tid != 0).then_some(st.polling_tid),
                polls: st.polls,
                idle_ns: for_ns.filter(|_| state == TaskState::Idle),
                polling_ns: for_ns.filter(|_| state == TaskState::Polling),
                lower_bound: lower_bound && for_ns.is_some(),
                since_unix_ns: since.and_then(unix),
                created_unix_ns: unix(st.created_ns),
                location: (n > 0).then(|| ring_location(&s.entries, n - 1)),
                history: if history && n > 1 {
                    (0..n - 1).map(|i| ring_location(&s.entries, i)).collect()
                } else {
                    Vec::new()
                },
            }
        })
        .collect();
    v.sort_by_key(|t| (t.id, t.generation));
    v
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::collect::ring::{RingSlot, TaskStats};

    const CREATED_UNIX: u64 = 1_800_000_000_000_000_000;
    const CREATED_MONO: u64 = 1_000_000_000;

    fn slot(id: u64, stats: TaskStats, exited: bool) -> RingSlot {
        RingSlot {
            coroutine: true,
            exited,
            id,
            ns_id: None,
            generation: 1,
            name: format!("task-{id}"),
            snaps: 1,
            entries: vec![(0, 0x1000 + id)],
            task: Some(stats),
        }
    }

    fn stats(polls: u64, start: u64, end: u64, tid: u32, created: u64) -> TaskStats {
        TaskStats {
            polls,
            last_poll_start_ns: start,
            last_poll_end_ns: end,
            polling_tid: tid,
            created_ns: created,
        }
    }

    fn ring(slots: Vec<RingSlot>) -> RingView {
        RingView {
            created_unix_ns: CREATED_UNIX,
            created_monotonic_ns: CREATED_MONO,
            ..RingView::with_slots(slots)
        }
    }

    /// idle (polled), idle (never polled), polling, exited.
    pub(crate) fn sample() -> RingView {
        let s = 1_000_000_000;
        ring(vec![
            slot(1, stats(3, 4 * s, 5 * s, 0, 2 * s), false),
            slot(2, stats(0, 0, 0, 0, 3 * s), false),
            slot(3, stats(7, 8 * s, 6 * s, 42, 2 * s), false),
            slot(4, stats(1, 2 * s, 9 * s, 0, 2 * s), true),
        ])
    }

    #[test]
    fn live_durations_run_to_now() {
        let s = 1_000_000_000;
        let t = ring_tasks(&sample(), TaskClock::Now(20 * s), false);
        let got: Vec<_> = t
            .iter()
            .map(|t| (t.id, t.state, t.idle_ns, t.polling_ns, t.lower_bound))
            .collect();
        assert_eq!(
            got,
            [
                (1, TaskState::Idle, Some(15 * s), None, false),
                (2, TaskState::Idle, Some(17 * s), None, false),
                (3, TaskState::Polling, None, Some(12 * s), false),
                (4, TaskState::Exited, None, None, false),
            ]
        );
        assert_eq!(t[2].polling_tid, Some(42));
        // Wall clock: the ring's creation pair shifted by the difference.
        assert_eq!(t[0].since_unix_ns, Some(CREATED_UNIX + 4 * s));
        assert_eq!(t[1].since_unix_ns, t[1].created_unix_ns);
        assert_eq!(t[3].since_unix_ns, None);
    }

    #[test]
    fn post_mortem_durations_are_lower_bounds_up_to_the_last_record() {
        let s = 1_000_000_000;
        let r = sample();
        assert_eq!(horizon(&r), 9 * s, "task 4's last poll end");
        let t = ring_tasks(&r, TaskClock::PostMortem, false);
        assert_eq!((t[0].idle_ns, t[0].lower_bound), (Some(4 * s), true));
        assert_eq!((t[2].polling_ns, t[2].lower_bound), (Some(s), true));
        assert!(!t[3].lower_bound, "no duration, nothing bounded");
    }
}
