//! Coroutines grouped by origin, state and await location (typed, like
//! threads: see [`super::group`]), and the `--min-idle` filter. One
//! grouping for the coroutines of every runtime: a group never mixes
//! runtimes, and says which it is.

use std::collections::HashMap;

use super::group::{Place, sorted};
use crate::model::{
    ChannelPeers, Coroutine, CoroutineState, Frame, GoLabel, GoStatus, GoWaitKind, GoWaitsOn,
    Group, GroupState, LocationSource, Origin, WaitedOn,
};

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
    let mut groups = group_goroutines(tasks);
    groups.extend(group_asyncio(tasks));
    for t in tasks
        .iter()
        .filter(|t| t.go.is_none() && t.python.is_none())
    {
        let place = t.location.as_ref().map(|l| Place::of(&l.frame));
        let g = map
            .entry((t.origin, t.state, place))
            .or_insert_with(|| Group {
                origin: Some(t.origin),
                count: 0,
                ids: Vec::new(),
                state: GroupState::Coroutine(t.state),
                wait: None,
                min_ns: None,
                lower_bound: false,
                location: t.location.as_ref().map(|l| l.frame.clone()),
                source: t.location.as_ref().map(|l| l.source),
                frames: Default::default(),
                stack_samples: None,
                max_ns: None,
                created_by: None,
                waits_on: Vec::new(),
                labels: Default::default(),
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
    let mut v: Vec<(CoroutineState, Option<String>, Group)> = map
        .into_iter()
        .map(|((_, s, _), g)| (s, g.location.as_ref().map(Frame::describe), g))
        .collect();
    v.sort_by(|(sa, la, a), (sb, lb, b)| {
        (a.origin, sa, la, &a.ids).cmp(&(b.origin, sb, lb, &b.ids))
    });
    groups.extend(sorted(v.into_iter().map(|(_, _, g)| g).collect()));
    groups
}

/// Where a goroutine's stack says it waits: its first frame outside the
/// runtime's own packages (the runtime parks every goroutine itself).
fn waits_in(stack: &[Frame]) -> Option<&Frame> {
    // The runtime's functions, and those it lends other packages
    // (`sync.runtime_Semacquire`, `internal/poll.runtime_pollWait`).
    let runtime = |f: &Frame| {
        f.best()
            .0
            .is_some_and(|n| n.starts_with("runtime.") || n.contains(".runtime_"))
    };
    stack.iter().find(|f| !runtime(f)).or(stack.first())
}

/// Goroutines grouped like Go's own traceback groups them: status, wait
/// reason, the whole stack and the `go` statement that made them; each
/// group with its shortest and longest wait, and the objects its members
/// wait on (channels, semaphores) with how many wait on each. Most
/// populated first.
fn group_goroutines(tasks: &[Coroutine]) -> Vec<Group> {
    // Stacks and creators by number: goroutines share a few by the
    // thousand, so each is made a place once.
    type Key<'a> = (
        GoStatus,
        Option<&'a str>,
        usize,
        Option<usize>,
        &'a [GoLabel],
    );
    let mut places: HashMap<Vec<Place>, usize> = HashMap::new();
    let mut by_stack: HashMap<usize, usize> = HashMap::new();
    let mut creators: HashMap<Place, usize> = HashMap::new();
    let mut by_creator: HashMap<u64, usize> = HashMap::new();
    let mut map: HashMap<Key, (Group, HashMap<&GoWaitsOn, usize>)> = HashMap::new();
    for t in tasks {
        let Some(g) = &t.go else { continue };
        let stack = *by_stack
            .entry(g.stack.as_ptr() as usize)
            .or_insert_with(|| {
                let n = places.len();
                *places
                    .entry(g.stack.iter().map(Place::of).collect())
                    .or_insert(n)
            });
        // Frames of one address are named alike.
        let creator = g.created_by.as_ref().map(|f| {
            *by_creator.entry(f.addr).or_insert_with(|| {
                let n = creators.len();
                *creators.entry(Place::of(f)).or_insert(n)
            })
        });
        let key = (
            g.status,
            g.wait_reason.as_deref(),
            stack,
            creator,
            &g.labels[..],
        );
        let (group, objects) = map.entry(key).or_insert_with(|| {
            let at = waits_in(&g.stack);
            (
                Group {
                    origin: Some(Origin::Go),
                    count: 0,
                    ids: Vec::new(),
                    state: GroupState::Goroutine(g.status),
                    wait: g.wait_reason.clone(),
                    min_ns: None,
                    lower_bound: false,
                    location: at.cloned(),
                    source: at.map(|_| LocationSource::UserPc),
                    frames: g.stack.clone(),
                    stack_samples: None,
                    max_ns: None,
                    created_by: g.created_by.as_deref().map(Frame::describe),
                    waits_on: Vec::new(),
                    labels: g.labels.clone(),
                },
                HashMap::new(),
            )
        });
        group.count += 1;
        group.ids.push(t.id);
        if let Some(ns) = t.idle_ns.or(t.polling_ns) {
            group.min_ns = Some(group.min_ns.map_or(ns, |m| m.min(ns)));
            group.max_ns = Some(group.max_ns.map_or(ns, |m| m.max(ns)));
            group.lower_bound |= t.lower_bound;
        }
        if let Some(w) = &g.waits_on {
            *objects.entry(w).or_default() += 1;
        }
    }
    let peers = ChannelWaiters::of(tasks);
    let v = map
        .into_values()
        .map(|(mut g, objects)| {
            let side = g.wait.as_deref().and_then(side);
            let mut w: Vec<WaitedOn> = objects
                .into_iter()
                .map(|(what, count)| WaitedOn {
                    object: what.clone(),
                    count,
                    channel_peers: side
                        .filter(|_| what.kind == GoWaitKind::Channel && what.addrs.len() == 1)
                        .map(|s| peers.of_side(what.addrs[0], s)),
                })
                .collect();
            w.sort_by(|a, b| b.count.cmp(&a.count).then(a.object.cmp(&b.object)));
            g.waits_on = w;
            g
        })
        .collect();
    sorted(v)
}

/// A channel operation's side, from its wait reason in the runtime's
/// words (`chan receive`, `chan send`; Go 1.27's `(durable)` variants
/// too); `None` for a select, a nil channel or any other wait.
fn side(reason: &str) -> Option<Side> {
    match reason {
        "chan receive" | "chan receive (durable)" => Some(Side::Receive),
        "chan send" | "chan send (durable)" => Some(Side::Send),
        _ => None,
    }
}

/// Which end of a channel a goroutine is parked on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Receive,
    Send,
}

/// Every channel goroutines wait on, with how many wait on each side and
/// in a select.
#[derive(Default)]
struct ChannelWaiters(HashMap<u64, [usize; 3]>);

impl ChannelWaiters {
    fn of(tasks: &[Coroutine]) -> Self {
        let mut m = ChannelWaiters::default();
        for g in tasks.iter().filter_map(|t| t.go.as_ref()) {
            let Some(w) = g
                .waits_on
                .as_ref()
                .filter(|w| w.kind == GoWaitKind::Channel)
            else {
                continue;
            };
            let reason = g.wait_reason.as_deref().unwrap_or("");
            let slot = match side(reason) {
                Some(Side::Receive) => 0,
                Some(Side::Send) => 1,
                None if reason.starts_with("select") => 2,
                None => continue,
            };
            for &c in &w.addrs {
                m.0.entry(c).or_default()[slot] += 1;
            }
        }
        m
    }

    /// Who waits on channel `c` across from goroutines on side `s`.
    fn of_side(&self, c: u64, s: Side) -> ChannelPeers {
        let n = self.0.get(&c).copied().unwrap_or_default();
        ChannelPeers {
            other_side: match s {
                Side::Receive => n[1],
                Side::Send => n[0],
            },
            in_select: n[2],
        }
    }
}

/// asyncio tasks grouped by state and whole await chain (the frames of
/// the coroutines each awaits through); each group with the futures its
/// members await and how many await each, so tasks awaiting one future
/// (another task, say) are seen together. Most populated first.
fn group_asyncio(tasks: &[Coroutine]) -> Vec<Group> {
    // Chains by number: tasks awaiting at one place share one (collect
    // made it once), so each is made a list of places once.
    type Key = (CoroutineState, bool, usize);
    let mut places: HashMap<Vec<Place>, usize> = HashMap::new();
    let mut by_chain: HashMap<(usize, usize), usize> = HashMap::new();
    let mut map: HashMap<Key, (Group, Vec<&GoWaitsOn>)> = HashMap::new();
    for t in tasks {
        let Some(p) = &t.python else { continue };
        let chain = *by_chain
            .entry((p.frames.as_ptr() as usize, p.frames.len()))
            .or_insert_with(|| {
                let n = places.len();
                *places
                    .entry(p.frames.iter().map(Place::of).collect())
                    .or_insert(n)
            });
        let key = (t.state, p.changing, chain);
        let (group, objects) = map.entry(key).or_insert_with(|| {
            (
                Group {
                    origin: Some(Origin::Asyncio),
                    count: 0,
                    ids: Vec::new(),
                    state: GroupState::Coroutine(t.state),
                    wait: None,
                    min_ns: None,
                    lower_bound: false,
                    location: p.frames.first().cloned(),
                    source: p.frames.first().map(|_| LocationSource::Python),
                    frames: p.frames.clone(),
                    stack_samples: None,
                    max_ns: None,
                    created_by: None,
                    waits_on: Vec::new(),
                    labels: Default::default(),
                },
                Vec::new(),
            )
        });
        group.count += 1;
        group.ids.push(t.id);
        objects.extend(p.awaits.as_ref());
    }
    let v = map
        .into_values()
        .map(|(mut g, objects)| {
            g.waits_on = count_objects(objects);
            g
        })
        .collect();
    sorted(v)
}

/// The objects awaited, each with how many await it: most awaited
/// first, then in the objects' order. Sorted rather than counted in a
/// map: tasks by the hundred thousand may each await a future of their
/// own, and their first address tells most of them apart cheaply.
fn count_objects(mut objects: Vec<&GoWaitsOn>) -> Vec<WaitedOn> {
    objects.sort_unstable_by(|a, b| {
        (a.kind, a.addrs.first())
            .cmp(&(b.kind, b.addrs.first()))
            .then_with(|| a.cmp(b))
    });
    let mut w: Vec<WaitedOn> = Vec::new();
    for o in objects {
        match w.last_mut() {
            Some(last) if last.object == *o => last.count += 1,
            _ => w.push(WaitedOn {
                object: o.clone(),
                count: 1,
                channel_peers: None,
            }),
        }
    }
    // Stable: equal counts keep the objects' order.
    w.sort_by_key(|o| std::cmp::Reverse(o.count));
    w
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
                python: None,
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
        assert_eq!(g[1].state.as_str(), "polling");
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
            .filter(|g| g.state == GroupState::Coroutine(CoroutineState::Idle))
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
