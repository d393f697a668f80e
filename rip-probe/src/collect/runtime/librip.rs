//! librip's runtime: the coroutine slots of the process's ring — the
//! coroutines of librip's API (Rust or C) and the async tasks
//! `librip::tokio` wraps — polling (on which thread, for how long) or
//! idle (since when, for how long), where each last snapped. Their frames
//! are snap addresses: native code, named by the process's symbolizer.
//!
//! Durations need a "now" on the ring's clock (CLOCK_MONOTONIC). A live
//! process has one. A dead one does not: comparing its poll times with
//! today's clock would say every task idled for as long as the process has
//! been dead. Post-mortem, durations run up to the last moment the ring
//! recorded of any task (a poll's start or end, a creation) and are lower
//! bounds: the process lived at least that long.

use std::collections::HashMap;

use librip::format::task_flags;

use super::{Clock, Process, Runtime};
use crate::{
    collect::ring::{RingView, TaskStats},
    model::{Coroutine, CoroutineState, Frame, Location, LocationSource, Origin},
};

/// A process's librip ring, read for its coroutines.
pub(crate) struct Librip<'a> {
    ring: &'a RingView,
}

impl<'a> Runtime<'a> for Librip<'a> {
    /// The process has librip when it has a ring: its coroutine slots
    /// (none, until it makes a coroutine) are its coroutines.
    fn detect(process: Process<'a>) -> Option<Self> {
        process.ring.map(|ring| Librip { ring })
    }

    fn coroutines(&self, clock: Clock, history: bool) -> Vec<Coroutine> {
        ring_tasks(self.ring, clock, history)
    }

    fn native_addrs(c: &Coroutine) -> Vec<u64> {
        c.location
            .iter()
            .chain(&c.history)
            .map(|l| l.frame.addr)
            .collect()
    }

    fn name_frames(c: &mut Coroutine, native: &HashMap<u64, Frame>) {
        for l in c.location.iter_mut().chain(c.history.iter_mut()) {
            if let Some(f) = native.get(&l.frame.addr) {
                l.frame = f.clone();
            }
        }
    }
}

/// Ring entry `i` of a slot's `(seq, address)` entries, as an unsymbolized
/// location.
pub(crate) fn ring_location(entries: &[(u64, u64)], i: usize) -> Location {
    let (seq, addr) = entries[i];
    Location {
        source: LocationSource::Ring,
        seq: Some(seq),
        ago_ns: None,
        // Bare: the symbolize stage names it.
        frame: Frame {
            addr,
            ..Frame::default()
        },
    }
}

/// Which API made a coroutine slot, as its flags say.
fn origin(stats: &TaskStats) -> Origin {
    if stats.flags & task_flags::TOKIO != 0 {
        Origin::Tokio
    } else {
        Origin::Librip
    }
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
fn ring_tasks(r: &RingView, clock: Clock, history: bool) -> Vec<Coroutine> {
    let (now, lower_bound) = match clock {
        Clock::Now(ns) => (ns, false),
        Clock::PostMortem => (horizon(r), true),
    };
    let unix = |mono: u64| (mono != 0).then(|| r.unix_ns(mono));
    let mut v: Vec<Coroutine> = r
        .slots
        .iter()
        .filter(|s| s.coroutine)
        .map(|s| {
            let st = s.task.unwrap_or_default();
            let state = if s.exited {
                CoroutineState::Exited
            } else if st.polling_tid != 0 {
                CoroutineState::Polling
            } else {
                CoroutineState::Idle
            };
            // Idle since the last poll ended, or since creation if never
            // polled; polling since the current poll started.
            let since = match state {
                CoroutineState::Idle if st.polls == 0 => Some(st.created_ns),
                CoroutineState::Idle => Some(st.last_poll_end_ns),
                CoroutineState::Polling => Some(st.last_poll_start_ns),
                CoroutineState::Exited => None,
            }
            .filter(|&t| t != 0);
            let for_ns = since.map(|t| now.saturating_sub(t));
            let n = s.entries.len();
            Coroutine {
                origin: origin(&st),
                id: s.id,
                generation: s.generation,
                name: s.name.clone(),
                state,
                polling_tid: (st.polling_tid != 0).then_some(st.polling_tid),
                polls: st.polls,
                idle_ns: for_ns.filter(|_| state == CoroutineState::Idle),
                polling_ns: for_ns.filter(|_| state == CoroutineState::Polling),
                lower_bound: lower_bound && for_ns.is_some(),
                since_unix_ns: since.and_then(unix),
                created_unix_ns: unix(st.created_ns),
                location: (n > 0).then(|| ring_location(&s.entries, n - 1)),
                history: if history && n > 1 {
                    (0..n - 1).map(|i| ring_location(&s.entries, i)).collect()
                } else {
                    Vec::new()
                },
                go: None,
                python: None,
            }
        })
        .collect();
    v.sort_by_key(|t| (t.id, t.generation));
    v
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::collect::ring::RingSlot;

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
            flags: 0,
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
        let t = ring_tasks(&sample(), Clock::Now(20 * s), false);
        let got: Vec<_> = t
            .iter()
            .map(|t| (t.id, t.state, t.idle_ns, t.polling_ns, t.lower_bound))
            .collect();
        assert_eq!(
            got,
            [
                (1, CoroutineState::Idle, Some(15 * s), None, false),
                (2, CoroutineState::Idle, Some(17 * s), None, false),
                (3, CoroutineState::Polling, None, Some(12 * s), false),
                (4, CoroutineState::Exited, None, None, false),
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
        let t = ring_tasks(&r, Clock::PostMortem, false);
        assert_eq!((t[0].idle_ns, t[0].lower_bound), (Some(4 * s), true));
        assert_eq!((t[2].polling_ns, t[2].lower_bound), (Some(s), true));
        assert!(!t[3].lower_bound, "no duration, nothing bounded");
    }
}

#[cfg(test)]
mod seam {
    use super::{tests::sample, *};
    use crate::collect::{
        ring::RingSlot,
        runtime::{self, Process},
    };

    /// A process without a ring has no librip coroutines; one with a ring
    /// has its coroutine slots, each of the origin its flags say (tokio
    /// for a task `librip::tokio` made, else librip), and none of its
    /// thread slots.
    #[test]
    fn the_ring_is_detected_and_only_its_coroutine_slots_are_read() {
        let s = 1_000_000_000;
        let none = Process {
            ring: None,
            go: None,
            python: None,
        };
        assert!(Librip::detect(none).is_none());
        assert!(runtime::coroutines(none, Clock::Now(s), false).is_empty());
        let mut r = sample();
        r.slots[1].task.as_mut().unwrap().flags = task_flags::TOKIO;
        r.slots.push(RingSlot {
            coroutine: false,
            exited: false,
            id: 77,
            ns_id: None,
            generation: 1,
            name: "worker".into(),
            snaps: 1,
            entries: vec![(0, 0x7000)],
            task: None,
        });
        let found = Process {
            ring: Some(&r),
            go: None,
            python: None,
        };
        let c = runtime::coroutines(found, Clock::Now(20 * s), false);
        let ids: Vec<(Origin, u64)> = c.iter().map(|c| (c.origin, c.id)).collect();
        let librip = Origin::Librip;
        let tokio = Origin::Tokio;
        assert_eq!(ids, [(librip, 1), (tokio, 2), (librip, 3), (librip, 4)]);
    }

    /// The symbolize stage names what the runtime lists as native
    /// addresses (the last snap and the older ones); an address it could
    /// not name stays a bare address.
    #[test]
    fn snap_addresses_are_named_as_native_code() {
        let mut r = sample();
        r.slots[0].entries = vec![(1, 0x5000), (2, 0x6000)];
        let found = Process {
            ring: Some(&r),
            go: None,
            python: None,
        };
        let mut c = runtime::coroutines(found, Clock::PostMortem, true);
        let addrs = runtime::native_addrs(&c[..1]);
        assert_eq!(addrs, [0x6000, 0x5000], "last snap first, then the history");
        let named = Frame {
            addr: 0x6000,
            function: Some("Conn::read_frame".into()),
            ..Frame::default()
        };
        let native = HashMap::from([(0x6000, named)]);
        runtime::name_frames(&mut c, &native);
        let last = &c[0].location.as_ref().unwrap().frame;
        assert_eq!(last.function.as_deref(), Some("Conn::read_frame"));
        assert_eq!(
            (
                c[0].history[0].frame.addr,
                c[0].history[0].frame.function.clone()
            ),
            (0x5000, None)
        );
    }
}
