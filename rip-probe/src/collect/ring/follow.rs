//! Snaps as they are taken, for a window that draws them in time
//! (`rip-probe record`). A ring keeps where each thread snapped, not when:
//! the rings a live process wrote are polled every period on a thread of
//! their own, and each snap is dated by the two polls around it — taken
//! after the poll that had not yet counted it began, before the poll that
//! first did ended. A poll reads each slot's sequence word and the
//! entries of the slots that moved only (librip's [`Poller`]), so a slot
//! that did not snap costs one small read.

use std::{
    sync::mpsc::{self, RecvTimeoutError},
    thread::JoinHandle,
    time::Duration,
};

use librip::reader::{Poller, SlotKind, open_rings};

use super::{ModuleMap, RingView};
use crate::{collect::namespaces::TidMap, util::monotonic_ns};

/// Snaps kept at most (about 40 bytes each); beyond, they are counted.
const MAX_SNAPS: usize = 1_000_000;

/// The share of its time the polling thread may spend polling: after a
/// poll that took `d`, the next waits at least `d × (1 / share - 1)`, so
/// a ring of many slots is polled less often rather than at any cost.
const MAX_BUSY_SHARE: u32 = 10;

/// A snap of a thread, first counted by a poll.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeenSnap {
    /// The thread, by our id (a ring in another pid namespace records
    /// that namespace's, mapped here when the thread is still alive).
    pub tid: u32,
    /// Its sequence number in the thread's slot.
    pub seq: u64,
    /// The address it recorded.
    pub addr: u64,
    /// CLOCK_MONOTONIC ns at which the poll before began: the snap was
    /// taken after.
    pub after_ns: u64,
    /// CLOCK_MONOTONIC ns at which the poll that first counted it ended:
    /// it was taken before.
    pub seen_ns: u64,
}

/// What the polls saw over the window.
#[derive(Clone, Debug, Default)]
pub struct Followed {
    /// The threads' snaps, in the order seen.
    pub snaps: Vec<SeenSnap>,
    /// Snaps seen past [`MAX_SNAPS`], not kept.
    pub not_kept: u64,
    /// Snaps counted by a slot's sequence word whose entries were
    /// overwritten before a poll read them (the thread snapped more than
    /// its ring's depth between two polls).
    pub overwritten: u64,
    /// Snaps of coroutine slots (not threads: not drawn on a thread).
    pub coroutine_snaps: u64,
    /// Snaps of threads of another pid namespace that exited before their
    /// ids there could be turned into ours (not drawn).
    pub unmapped: u64,
    /// Polls made after the first look.
    pub polls: u64,
    /// The period asked for.
    pub period: Duration,
    /// The longest time from one poll's start to the next one's end: the
    /// widest interval a snap was dated to.
    pub widest_ns: u64,
    /// `pread` calls the polls made.
    pub reads: u64,
    /// The rings' executable mappings, to name the addresses.
    pub modules: Vec<ModuleMap>,
    /// Why polling stopped before the window's end, if it did.
    pub error: Option<String>,
}

/// Rings polled on a thread of their own until [`SnapFollower::stop`].
pub struct SnapFollower {
    stop: mpsc::Sender<()>,
    handle: JoinHandle<Followed>,
}

/// One polled ring.
struct Followed1 {
    poller: Poller,
    /// When the last poll of it began.
    last_start_ns: u64,
}

impl SnapFollower {
    /// Opens the rings process `pid` maps (seen through `view`, its
    /// /proc entry) that it wrote itself, takes the first look at each
    /// (what they hold now is before the window), and polls them every
    /// `period` from now. `None` when it has no ring of its own.
    pub fn start(pid: u32, view: u32, period: Duration) -> Option<SnapFollower> {
        let mut rings = Vec::new();
        let mut modules = Vec::new();
        for m in open_rings(view).ok()? {
            let start = monotonic_ns();
            let Ok((poller, ring)) = Poller::new(m.file, &m.path) else {
                continue;
            };
            let mut view = RingView::from_ring(&m.path, &ring);
            // A forked child may still map its parent's ring: not its snaps.
            if !view.written_by(pid) {
                continue;
            }
            view.join_process(pid);
            modules.extend(view.modules);
            rings.push(Followed1 {
                poller,
                last_start_ns: start,
            });
        }
        if rings.is_empty() {
            return None;
        }
        let (stop, stopped) = mpsc::channel();
        let handle = std::thread::Builder::new()
            .name("rip-snaps".into())
            .spawn(move || follow(pid, rings, modules, period, &stopped))
            .ok()?;
        Some(SnapFollower { stop, handle })
    }

    /// Polls once more (the snaps up to now) and stops; what was seen.
    pub fn stop(self) -> Followed {
        drop(self.stop);
        self.handle.join().unwrap_or_else(|_| Followed {
            error: Some("the thread polling the ring failed".into()),
            ..Followed::default()
        })
    }
}

/// The polling thread: polls `rings` every `period` until `stopped` says
/// so (a message or its sender dropped), then once more.
fn follow(
    pid: u32,
    mut rings: Vec<Followed1>,
    modules: Vec<ModuleMap>,
    period: Duration,
    stopped: &mpsc::Receiver<()>,
) -> Followed {
    let mut out = Followed {
        period,
        modules,
        ..Followed::default()
    };
    let mut wait = period;
    loop {
        let last = match stopped.recv_timeout(wait) {
            Err(RecvTimeoutError::Timeout) => false,
            Ok(()) | Err(RecvTimeoutError::Disconnected) => true,
        };
        let began = monotonic_ns();
        for r in &mut rings {
            if let Err(e) = poll(r, &mut out) {
                out.error
                    .get_or_insert(format!("polling its ring stopped: {e}"));
            }
        }
        out.polls += 1;
        let took = Duration::from_nanos(monotonic_ns().saturating_sub(began));
        wait = period.max(took * (MAX_BUSY_SHARE - 1));
        if last || out.error.is_some() {
            break;
        }
    }
    out.reads = rings.iter().map(|r| r.poller.reads()).sum();
    // Ids of the writer's pid namespace become ours at the end, when every
    // thread of the window is known (one read per thread, once).
    if let Some(map) = TidMap::of(pid) {
        let before = out.snaps.len();
        out.snaps.retain_mut(|s| match map.host(u64::from(s.tid)) {
            Some(host) => {
                s.tid = host;
                true
            }
            None => false,
        });
        out.unmapped = (before - out.snaps.len()) as u64;
    }
    out
}

/// Polls one ring, adding what it counted to `out`.
fn poll(r: &mut Followed1, out: &mut Followed) -> Result<(), librip::reader::ReadError> {
    let start = monotonic_ns();
    let fresh = r.poller.poll()?;
    let seen_ns = monotonic_ns();
    let after_ns = r.last_start_ns;
    r.last_start_ns = start;
    out.widest_ns = out.widest_ns.max(seen_ns - after_ns);
    for f in fresh {
        out.overwritten += f.overwritten;
        if f.kind == SlotKind::Coroutine {
            out.coroutine_snaps += f.snaps.len() as u64;
            continue;
        }
        let Ok(tid) = u32::try_from(f.id) else {
            continue;
        };
        for e in f.snaps {
            if out.snaps.len() >= MAX_SNAPS {
                out.not_kept += 1;
                continue;
            }
            out.snaps.push(SeenSnap {
                tid,
                seq: e.seq,
                addr: e.addr,
                after_ns,
                seen_ns,
            });
        }
    }
    Ok(())
}
