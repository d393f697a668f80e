//! Correlation: joins what the kernel says about each thread (state,
//! syscall, since when, kernel stack) with where the program last said it
//! was (its ring slot, or the last function a uprobe saw it enter), per
//! thread id, into the report model. This is the one place a [`Thread`]
//! is built: live ([`live`]), after the target exited ([`after_exit`]) and
//! from a ring alone ([`dump`]). Addresses are left for the symbolize
//! stage; grouping is an analysis (`crate::analyze`), after symbolization.

pub(crate) mod decode;
pub(crate) mod tasks;

use std::{collections::HashMap, sync::Arc};

use rip_ebpf::{FnHit, TaskRecord, ThreadRecord, task_state};

use crate::{
    collect::{
        Lookup,
        ring::{RingSlot, RingView},
    },
    model::{
        Blocked, Frame, Location, LocationSource, Mode, ProcessInfo, Report, RingInfo,
        SCHEMA_VERSION, Task, TaskState, Thread, ThreadState,
    },
    util::timefmt,
};
use tasks::{TaskClock, ring_tasks};

/// Kernel `__state` bits (include/linux/sched.h).
mod kstate {
    pub const INTERRUPTIBLE: u32 = 0x1;
    pub const UNINTERRUPTIBLE: u32 = 0x2;
    pub const STOPPED: u32 = 0x4;
    pub const TRACED: u32 = 0x8;
    pub const PARKED: u32 = 0x40;
    pub const DEAD: u32 = 0x80;
    pub const NOLOAD: u32 = 0x400;
}

/// Maps a task's `__state` and `on_cpu` to a [`ThreadState`].
pub(crate) fn thread_state(state: u32, on_cpu: u32) -> ThreadState {
    use kstate::*;
    if state == 0 {
        return if on_cpu != 0 {
            ThreadState::Running
        } else {
            ThreadState::Runnable
        };
    }
    if state & TRACED != 0 {
        ThreadState::Traced
    } else if state & STOPPED != 0 {
        ThreadState::Stopped
    } else if state & DEAD != 0 {
        ThreadState::Exited
    } else if state & PARKED != 0 {
        ThreadState::Parked
    } else if state & UNINTERRUPTIBLE != 0 {
        if state & NOLOAD != 0 {
            ThreadState::Idle
        } else {
            ThreadState::Uninterruptible
        }
    } else if state & INTERRUPTIBLE != 0 {
        ThreadState::Sleeping
    } else {
        ThreadState::Unknown
    }
}

/// Clocks needed to turn kernel timestamps into durations.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Clock {
    /// CLOCK_MONOTONIC ns when the sched_switch program was attached.
    pub(crate) attached_ns: u64,
    /// CLOCK_MONOTONIC ns when the task snapshot was taken.
    pub(crate) now_ns: u64,
    /// Largest difference between two CPUs in the time their run-queue
    /// task clocks left out (interrupts, soft interrupts, steal), ns:
    /// comparing task-clock stamps taken on different CPUs may overstate a
    /// duration by up to this much; lower bounds subtract it.
    pub(crate) task_clock_skew_ns: u64,
}

/// Everything collected about a live process.
pub(crate) struct LiveInputs<'a> {
    /// Process facts.
    pub(crate) process: ProcessInfo,
    /// The task iterator's snapshot of every thread.
    pub(crate) tasks: &'a [TaskRecord],
    /// sched_switch's per-thread records (threads seen switching).
    pub(crate) switches: &'a HashMap<u32, ThreadRecord>,
    /// Clocks.
    pub(crate) clock: Clock,
    /// The process's ring, if it has one.
    pub(crate) ring: Option<&'a RingView>,
    /// Last function entered per thread (`--uprobe`).
    pub(crate) uprobe_hits: &'a HashMap<u32, FnHit>,
    /// fd and memory access for syscall decoding.
    pub(crate) lookup: &'a dyn Lookup,
}

/// How long a thread has been off CPU: exact when sched_switch saw it
/// leave during the window, else a lower bound.
pub(crate) fn blocked_for(
    task: &TaskRecord,
    sw: Option<&ThreadRecord>,
    clock: &Clock,
) -> Option<Blocked> {
    if !thread_state(task.state, task.on_cpu).is_blocked() {
        return None;
    }
    if let Some(sw) = sw
        && sw.off_cpu_ns != 0
        && sw.on_cpu == 0
    {
        return Some(Blocked {
            ns: clock.now_ns.saturating_sub(sw.off_cpu_ns),
            exact: true,
        });
    }
    // Blocked since before we attached: at least the whole window...
    let window = clock.now_ns.saturating_sub(clock.attached_ns);
    // ...and at least the distance between "now" and the thread's last
    // exec_start on the run-queue task clock. Two readings of "now":
    // - its own CPU's clock, the one exec_start was stamped with: it stops
    //   while that CPU idles, which only lowers the bound;
    // - the iterator's CPU's clock (its own exec_start, at most a tick
    //   behind), less how far two CPUs' task clocks can drift apart.
    if task.exec_start == 0 {
        return Some(Blocked {
            ns: window,
            exact: false,
        });
    }
    let same_cpu = task.rq_clock_task.saturating_sub(task.exec_start);
    let other_cpu = task
        .cur_exec_start
        .saturating_sub(task.exec_start)
        .saturating_sub(clock.task_clock_skew_ns);
    Some(Blocked {
        ns: window.max(same_cpu).max(other_cpu),
        exact: false,
    })
}

fn comm(c: &[u8; 16]) -> String {
    let end = c.iter().position(|&b| b == 0).unwrap_or(c.len());
    String::from_utf8_lossy(&c[..end]).into_owned()
}

/// Addresses-only frame, to be filled in by the symbolize stage.
fn raw(addr: u64) -> Frame {
    Frame {
        addr,
        ..Frame::default()
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
        frame: raw(addr),
    }
}

/// Builds the live report (before symbolization).
pub(crate) fn live(inp: &LiveInputs<'_>) -> Report {
    // Live thread slots by tid; if a tid has several (an exited slot and a
    // reused tid), the live one wins.
    // Keyed by the full 64-bit id: a slot claiming id 2^32 + 5 is not tid 5.
    let mut ring_by_tid: HashMap<u64, &RingSlot> = HashMap::new();
    if let Some(ring) = inp.ring {
        for s in ring.slots.iter().filter(|s| !s.coroutine) {
            let tid = s.id;
            match ring_by_tid.get(&tid) {
                Some(old) if !old.exited => {}
                _ => {
                    ring_by_tid.insert(tid, s);
                }
            }
        }
    }

    // One copy of each distinct kernel stack, shared by its threads.
    let mut kstacks: HashMap<&[u64], Arc<[Frame]>> = HashMap::new();
    let mut threads: Vec<Thread> = inp
        .tasks
        .iter()
        .map(|t| {
            let state = thread_state(t.state, t.on_cpu);
            let sw = inp.switches.get(&t.tid);
            let slot = ring_by_tid.get(&u64::from(t.tid)).filter(|s| !s.exited);
            let blocked = state.is_blocked();
            let syscall = if blocked {
                decode::decode(t.regs.syscall_nr, &t.regs.args, inp.lookup)
            } else {
                None
            };
            let kernel_stack = if blocked {
                let addrs = &t.kstack[..(t.kstack_len as usize).min(t.kstack.len())];
                kstacks
                    .entry(addrs)
                    .or_insert_with(|| addrs.iter().map(|&a| raw(a)).collect())
                    .clone()
            } else {
                Default::default()
            };
            let location = if let Some(s) = slot.filter(|s| !s.entries.is_empty()) {
                Some(ring_location(&s.entries, s.entries.len() - 1))
            } else if let Some(hit) = inp.uprobe_hits.get(&t.tid) {
                Some(Location {
                    source: LocationSource::Uprobe,
                    seq: Some(hit.count),
                    ago_ns: Some(inp.clock.now_ns.saturating_sub(hit.ts_ns)),
                    frame: raw(hit.addr),
                })
            } else if blocked && t.regs.ip != 0 {
                Some(Location {
                    source: LocationSource::UserPc,
                    seq: None,
                    ago_ns: None,
                    frame: raw(t.regs.ip),
                })
            } else {
                None
            };
            let (name, name_source) = match slot {
                Some(s) if !s.name.is_empty() => (s.name.clone(), "ring"),
                _ => (comm(&t.comm), "comm"),
            };
            Thread {
                tid: u64::from(t.tid),
                ns_tid: slot.and_then(|s| s.ns_id),
                name,
                name_source,
                state,
                syscall,
                blocked: blocked_for(t, sw, &inp.clock),
                kernel_stack,
                location,
                history: Vec::new(),
                snaps: slot.map(|s| s.snaps),
                polling_task: None,
                waits_for: None,
                frames: Default::default(),
                stack_samples: None,
                exited: false,
            }
        })
        .collect();
    threads.sort_by_key(|t| t.tid);

    let tasks = inp
        .ring
        .map(|r| ring_tasks(r, TaskClock::Now(inp.clock.now_ns), false))
        .unwrap_or_default();
    point_threads_at_their_tasks(&mut threads, &tasks);
    let mut warnings = Vec::new();
    if let Some(r) = inp.ring
        && r.dropped > 0
    {
        warnings.push(dropped_warning(r));
    }
    Report {
        schema: SCHEMA_VERSION,
        mode: Mode::Pid,
        process: inp.process.clone(),
        rings: inp.ring.map(ring_info).into_iter().collect(),
        window_ns: inp.clock.now_ns.saturating_sub(inp.clock.attached_ns),
        threads,
        tasks,
        groups: Vec::new(),
        task_groups: Vec::new(),
        warnings,
        deadlocks: Vec::new(),
    }
}

/// A thread inside a task's poll is where that task's last snap says (its
/// own slot's last snap predates the poll).
fn point_threads_at_their_tasks(threads: &mut [Thread], tasks: &[Task]) {
    for task in tasks.iter().filter(|t| t.state == TaskState::Polling) {
        let Some(tid) = task.polling_tid else {
            continue;
        };
        // Threads are sorted by tid: a binary search, not a scan per task.
        if let Ok(i) = threads.binary_search_by_key(&u64::from(tid), |t| t.tid) {
            let t = &mut threads[i];
            t.polling_task = Some(task.id);
            if task.location.is_some() {
                t.location = task.location.clone();
            }
        }
    }
}

fn dropped_warning(r: &RingView) -> String {
    format!(
        "{} snaps from threads without a ring slot were dropped (at least; register threads \
         with rip_init / librip::thread::register)",
        r.dropped
    )
}

/// Says what post-mortem task times mean.
pub(crate) fn post_mortem_warning(r: &RingView) -> String {
    let at = r.unix_ns(tasks::horizon(r));
    format!(
        "the process is gone: task times run up to the last task event its ring recorded \
         (a poll or a creation, at {}), so they are lower bounds",
        timefmt::utc(at)
    )
}

fn ring_info(r: &RingView) -> RingInfo {
    RingInfo {
        path: r.path.display().to_string(),
        version: r.version,
        pid: r.pid,
        namespace: r.ns_note.clone(),
        created_unix_ns: r.created_unix_ns,
        depth: r.depth,
        dropped_snaps: r.dropped,
    }
}

/// What sched_switch recorded of a target that exited during the window.
pub(crate) struct AfterExit<'a> {
    /// Process facts.
    pub(crate) process: ProcessInfo,
    /// sched_switch's per-thread records.
    pub(crate) switches: &'a HashMap<u32, ThreadRecord>,
    /// Kernel stacks by stack id (taken only with switch events).
    pub(crate) stacks: &'a HashMap<i64, Vec<u64>>,
    /// The process's ring, if it had one.
    pub(crate) ring: Option<&'a RingView>,
    /// How long the kernel was observed, ns.
    pub(crate) window_ns: u64,
}

/// The target died during the window: what sched_switch saw of each
/// thread last (its state at its last switch off the CPU, and with switch
/// events its syscall and kernel stack) and where its ring says it was.
pub(crate) fn after_exit(inp: &AfterExit<'_>) -> Report {
    struct Gone;
    impl Lookup for Gone {
        fn fd(&self, _: i32) -> Option<String> {
            None
        }
        fn mem(&self, _: u64, _: usize) -> Option<Vec<u8>> {
            None
        }
    }
    // Thread slots by id, looked up once per thread instead of scanned.
    let slots: HashMap<u64, &RingSlot> = inp
        .ring
        .map(|r| {
            let mut m = HashMap::new();
            for s in r.slots.iter().filter(|s| !s.coroutine) {
                // The first slot with an id wins, as a front-to-back scan had it.
                m.entry(s.id).or_insert(s);
            }
            m
        })
        .unwrap_or_default();
    let mut threads: Vec<Thread> = inp
        .switches
        .iter()
        .filter(|(_, r)| r.switches > 0)
        .map(|(&tid, r)| {
            let slot = slots.get(&u64::from(tid)).copied();
            Thread {
                tid: u64::from(tid),
                ns_tid: slot.and_then(|s| s.ns_id),
                name: slot.map(|s| s.name.clone()).unwrap_or_default(),
                name_source: "ring",
                state: state_from_switch(r.state),
                syscall: decode::decode(r.regs.syscall_nr, &r.regs.args, &Gone),
                blocked: None,
                kernel_stack: inp
                    .stacks
                    .get(&r.kstack_id)
                    .map(|s| s.iter().map(|&a| raw(a)).collect())
                    .unwrap_or_default(),
                location: slot
                    .filter(|s| !s.entries.is_empty())
                    .map(|s| ring_location(&s.entries, s.entries.len() - 1)),
                history: Vec::new(),
                snaps: slot.map(|s| s.snaps),
                polling_task: None,
                waits_for: None,
                frames: Default::default(),
                stack_samples: None,
                exited: true,
            }
        })
        .collect();
    threads.sort_by_key(|t| t.tid);
    let mut warnings =
        vec!["states are as of each thread's last switch off the CPU before the exit".into()];
    let tasks = inp
        .ring
        .map(|r| ring_tasks(r, TaskClock::PostMortem, false))
        .unwrap_or_default();
    if let Some(r) = inp.ring.filter(|_| !tasks.is_empty()) {
        warnings.push(post_mortem_warning(r));
    }
    Report {
        schema: SCHEMA_VERSION,
        mode: Mode::Pid,
        process: inp.process.clone(),
        rings: Vec::new(),
        window_ns: inp.window_ns,
        threads,
        tasks,
        groups: Vec::new(),
        task_groups: Vec::new(),
        warnings,
        deadlocks: Vec::new(),
    }
}

/// The state a sched_switch `prev_state` describes.
fn state_from_switch(s: u64) -> ThreadState {
    if s & task_state::PREEMPTED != 0 || s == 0 {
        ThreadState::Runnable
    } else if s & task_state::UNINTERRUPTIBLE != 0 {
        ThreadState::Uninterruptible
    } else if s & task_state::INTERRUPTIBLE != 0 {
        ThreadState::Sleeping
    } else if s & (task_state::STOPPED) != 0 {
        ThreadState::Stopped
    } else if s & task_state::TRACED != 0 {
        ThreadState::Traced
    } else if s & (task_state::DEAD | task_state::ZOMBIE) != 0 {
        ThreadState::Exited
    } else if s & task_state::IDLE != 0 {
        ThreadState::Idle
    } else {
        ThreadState::Unknown
    }
}

/// Options of a dump.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DumpOptions {
    /// Keep every entry (per-thread history), not only the last.
    pub(crate) history: bool,
    /// Include slots marked exited.
    pub(crate) exited: bool,
    /// What task durations run up to: now (the ring's process is alive on
    /// this boot), or the ring's last record (post-mortem).
    pub(crate) clock: TaskClock,
}

/// Builds a dump report from a ring alone (before symbolization).
pub(crate) fn dump(ring: &RingView, process: ProcessInfo, opts: DumpOptions) -> Report {
    let mut threads: Vec<Thread> = ring
        .slots
        .iter()
        .filter(|s| !s.coroutine && (opts.exited || !s.exited))
        .map(|s| {
            let n = s.entries.len();
            Thread {
                tid: s.id,
                ns_tid: s.ns_id,
                name: s.name.clone(),
                name_source: "ring",
                state: if s.exited {
                    ThreadState::Exited
                } else {
                    ThreadState::Unknown
                },
                syscall: None,
                blocked: None,
                kernel_stack: Default::default(),
                location: (n > 0).then(|| ring_location(&s.entries, n - 1)),
                history: if opts.history && n > 1 {
                    (0..n - 1).map(|i| ring_location(&s.entries, i)).collect()
                } else {
                    Vec::new()
                },
                snaps: Some(s.snaps),
                polling_task: None,
                waits_for: None,
                frames: Default::default(),
                stack_samples: None,
                exited: s.exited,
            }
        })
        .collect();
    threads.sort_by_key(|t| (t.tid, t.exited));
    let mut tasks = ring_tasks(ring, opts.clock, opts.history);
    if !opts.exited {
        tasks.retain(|t| t.state != TaskState::Exited);
    }
    let mut warnings = Vec::new();
    if ring.dropped > 0 {
        warnings.push(dropped_warning(ring));
    }
    if opts.clock == TaskClock::PostMortem && !tasks.is_empty() {
        warnings.push(post_mortem_warning(ring));
    }
    Report {
        schema: SCHEMA_VERSION,
        mode: Mode::Dump,
        process,
        rings: vec![ring_info(ring)],
        window_ns: 0,
        threads,
        tasks,
        groups: Vec::new(),
        task_groups: Vec::new(),
        warnings,
        deadlocks: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_id_above_two_to_the_32_is_kept_whole() {
        use crate::collect::ring::{RingSlot, RingView};
        let slot = |id: u64| RingSlot {
            coroutine: false,
            exited: false,
            id,
            ns_id: None,
            generation: 1,
            name: format!("t{id}"),
            snaps: 1,
            entries: vec![(0, 0x1000)],
            task: None,
        };
        let ring = RingView::with_slots(vec![slot((1 << 32) + 5), slot(5)]);
        let opts = DumpOptions {
            history: false,
            exited: false,
            clock: TaskClock::PostMortem,
        };
        let r = dump(&ring, ProcessInfo::default(), opts);
        let tids: Vec<u64> = r.threads.iter().map(|t| t.tid).collect();
        assert_eq!(tids, [5, (1 << 32) + 5]);
    }

    fn task(tid: u32, state: u32, exec_start: u64, cur: u64) -> TaskRecord {
        TaskRecord {
            tid,
            tgid: 1,
            state,
            on_cpu: 0,
            on_rq: 0,
            kstack_len: 0,
            ns_tid: tid,
            ns_tgid: 1,
            exec_start,
            sum_exec_runtime: 0,
            now_ns: 0,
            cur_exec_start: cur,
            rq_clock_task: 0,
            regs: Default::default(),
            comm: *b"worker\0\0\0\0\0\0\0\0\0\0",
            kstack: [0; rip_ebpf::TASK_STACK_DEPTH],
        }
    }

    #[test]
    fn states() {
        assert_eq!(thread_state(0, 1), ThreadState::Running);
        assert_eq!(thread_state(0, 0), ThreadState::Runnable);
        assert_eq!(thread_state(1, 0), ThreadState::Sleeping);
        assert_eq!(thread_state(2, 0), ThreadState::Uninterruptible);
        assert_eq!(thread_state(0x402, 0), ThreadState::Idle);
        assert_eq!(
            thread_state(0x102, 0),
            ThreadState::Uninterruptible,
            "killable"
        );
        assert_eq!(thread_state(0x104, 0), ThreadState::Stopped);
        assert_eq!(thread_state(0x8, 0), ThreadState::Traced);
    }

    #[test]
    fn blocked_exact_and_lower_bound() {
        let clock = Clock {
            attached_ns: 1_000,
            now_ns: 11_000,
            task_clock_skew_ns: 100,
        };
        // Seen leaving the CPU during the window: exact.
        let sw = ThreadRecord {
            off_cpu_ns: 6_000,
            ..Default::default()
        };
        let b = blocked_for(&task(1, 1, 0, 0), Some(&sw), &clock).unwrap();
        assert_eq!((b.ns, b.exact), (5_000, true));
        // Blocked before attach: task-clock estimate beats the window.
        let b = blocked_for(&task(1, 1, 50_000, 80_000), None, &clock).unwrap();
        assert_eq!((b.ns, b.exact), (29_900, false));
        // Estimate below the window: the window is the bound.
        let b = blocked_for(&task(1, 1, 79_000, 80_000), None, &clock).unwrap();
        assert_eq!((b.ns, b.exact), (10_000, false));
        // Its own CPU's clock, when read, needs no skew allowance; the
        // larger of the two bounds wins.
        let mut t = task(1, 1, 50_000, 80_000);
        t.rq_clock_task = 85_000;
        let b = blocked_for(&t, None, &clock).unwrap();
        assert_eq!((b.ns, b.exact), (35_000, false));
        // An idle CPU's stale clock lowers that bound; the other stands.
        t.rq_clock_task = 51_000;
        assert_eq!(blocked_for(&t, None, &clock).unwrap().ns, 29_900);
        // Running threads are not blocked.
        assert!(blocked_for(&task(1, 0, 0, 0), None, &clock).is_none());
    }
}
