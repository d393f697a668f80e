//! Coroutines grouped by origin, state and await location (typed, like
//! threads: see [`super::group`]), and the `--min-idle` filter. One
//! grouping for the coroutines of every runtime: a group never mixes
//! runtimes, and says which it is.

use std::collections::HashMap;

use super::group::{Place, sorted};
use crate::model::{Coroutine, CoroutineState, Group, Origin};

/// Keeps the tasks idle at least `min_ns` (since their last poll ended, or
/// their creation if never polled; post-mortem, a lower bound must reach
/// it). Polling and exited tasks are not idle.
pub(crate) fn retain_idle(tasks: &mut Vec<Coroutine>, min_ns: u64) {
    tasks.retain(|t| t.idle_ns.is_some_and(|ns| ns >= min_ns));
}

/// Groups tasks by origin, state and last snap location, most populated first,
/// then longest idle (or polling). Runs after symbolization, so snaps at
/// different addresses of one line group together.
pub fn group_tasks(tasks: &[Coroutine]) -> Vec<Group> {
    type Key = (Origin, CoroutineState, Option<Place>);
    let mut map: HashMap<Key, Group> = HashMap::new();
    for t in tasks {
        let place = t.location.as_ref().map(|l| Place::of(&l.frame));
        let g = map
            .entry((t.origin, t.state, place))
            .or_insert_with(|| Group {
                origin: Some(t.origin),
                count: 0,
                ids: Vec::new(),
                state: t.state.as_str().to_string(),
                wait: None,
                min_ns: None,
                lower_bound: false,
                location: t.location.as_ref().map(|l| l.frame.describe()),
                source: t.location.as_ref().map(|l| l.source),
                frames: Default::default(),
                stack_samples: None,
                max_ns: None,
                created_by: None,
                waits_on: Vec::new(),
            });
        g.count += 1;
        g.ids.push(t.id);
        if let Some(ns) = t.idle_ns.or(t.polling_ns) {
            g.min_ns = Some(g.min_ns.map_or(ns, |m| m.min(ns)));
            g.lower_bound |= t.lower_bound;
        }
    }
    // Ties are broken by origin, state (polling, idle, exited), then
    // location words, then members: the order the text-keyed grouping had.
    let mut v: Vec<(CoroutineState, Group)> =
        map.into_iter().map(|((_, s, _), g)| (s, g)).collect();
    v.sort_by(|(sa, a), (sb, b)| {
        (a.origin, sa, &a.location, &a.ids).cmp(&(b.origin, sb, &b.location, &b.ids))
    });
    sorted(v.into_iter().map(|(_, g)| g).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::{
        ring::RingView,
        runtime::{Clock, Process, coroutines, librip::tests::sample},
    };

    fn ring_tasks(ring: &RingView, clock: Clock, history: bool) -> Vec<Coroutine> {
        coroutines(
            Process {
                ring: Some(ring),
                go: None,
            },
            clock,
            history,
        )
    }

    #[test]
    fn min_idle_keeps_idle_tasks_only() {
        let s = 1_000_000_000;
        let mut t = ring_tasks(&sample(), Clock::Now(20 * s), false);
        retain_idle(&mut t, 16 * s);
        assert_eq!(t.iter().map(|t| t.id).collect::<Vec<_>>(), [2]);
    }

    #[test]
    fn groups_by_state_and_location() {
        let s = 1_000_000_000;
        let mut r = sample();
        r.slots[1].entries = r.slots[0].entries.clone();
        let t = ring_tasks(&r, Clock::PostMortem, false);
        let g = group_tasks(&t);
        assert_eq!(g.len(), 3);
        assert_eq!((g[0].count, g[0].ids.clone()), (2, vec![1, 2]));
        assert!(g.iter().all(|g| g.origin == Some(Origin::Librip)));
        assert_eq!((g[0].state.as_str(), g[0].min_ns), ("idle", Some(4 * s)));
        assert!(g[0].lower_bound);
        assert_eq!(g[1].state, "polling");
    }

    /// Coroutines of two runtimes idle at one place are two groups, each
    /// saying its runtime.
    #[test]
    fn groups_never_mix_runtimes() {
        let mut r = sample();
        r.slots[1].entries = r.slots[0].entries.clone();
        r.slots[1].task.as_mut().unwrap().flags = librip::format::task_flags::TOKIO;
        let t = ring_tasks(&r, Clock::PostMortem, false);
        let g = group_tasks(&t);
        let mut idle: Vec<_> = g
            .iter()
            .filter(|g| g.state == "idle")
            .map(|g| (g.origin, g.ids.clone()))
            .collect();
        idle.sort();
        assert_eq!(
            idle,
            [
                (Some(Origin::Librip), vec![1]),
                (Some(Origin::Tokio), vec![2])
            ]
        );
    }
}
