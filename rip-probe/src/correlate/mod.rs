//! Correlation: joins what the kernel says about each thread (state,
//! syscall, since when, kernel stack) with where the program last said it
//! was (its ring slot, or the last function a uprobe saw it enter), per
//! thread id, into the report model. This is the one place a [`Thread`]
//! is built: live ([`live`]), after the target exited ([`after_exit`]) and
//! from a ring alone ([`dump`]). Addresses are left for the symbolize
//! stage; grouping is an analysis (`crate::analyze`), after symbolization.

pub(crate) mod decode;

use std::{collections::HashMap, sync::Arc};

use rip_ebpf::{FnHit, TaskRecord, ThreadRecord, task_state};

use crate::{
    collect::{
        Lookup,
        ring::{RingSlot, RingView},
        runtime::{self, Clock as CoroutineClock, Process, librip::ring_location},
    },
    model::{
        Blocked, BlockedSource, Coroutine, CoroutineState, Frame, Location, LocationSource, Mode,
        ProcessInfo, Report, RingInfo, SCHEMA_VERSION, StackTable, Syscall, Thread, ThreadState,
    },
    util::{FastMap, timefmt},
};

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
    /// sched_switch has recorded the target's switches since
    /// `attached_ns`. Without (a snapshots-only session), no switch seen
    /// says nothing about a thread, and the window is no bound.
    pub(crate) switches: bool,
}

/// Everything collected about a live process.
pub(crate) struct LiveInputs<'a> {
    /// Process facts.
    pub(crate) process: ProcessInfo,
    /// The task iterator's snapshot of every thread (with what sched_switch
    /// had recorded of each at that moment).
    pub(crate) tasks: &'a [TaskRecord],
    /// Clocks.
    pub(crate) clock: Clock,
    /// The process's ring, if it has one.
    pub(crate) ring: Option<&'a RingView>,
    /// The goroutines read, if it is a Go program that could be read.
    pub(crate) go: Option<&'a runtime::go::GoSnapshot>,
    /// The CPython interpreter read, if the process runs one rip reads
    /// (its asyncio tasks are coroutines).
    pub(crate) python: Option<&'a runtime::python::Snapshot>,
    /// Last function entered per thread (`--uprobe`).
    pub(crate) uprobe_hits: &'a HashMap<u32, FnHit>,
    /// fd and memory access for syscall decoding.
    pub(crate) lookup: &'a dyn Lookup,
}

/// How long a blocked thread has been off CPU, from one moment's reading
/// of it: its state, and sched_switch's record of it read by the iterator
/// right after. Exact when sched_switch saw it leave the CPU and not come
/// back; otherwise the largest lower bound that holds: the window when no
/// switch of it was seen since attach, or its own CPU's task clock since
/// it last ran. No bound exceeds what is known to be possible: the
/// thread's age, and the time since it was last seen on a CPU. (The
/// iterator's own CPU's clock is not used: two CPUs' task clocks drift
/// apart by more than any allowance can be sure of.)
pub(crate) fn blocked_for(task: &TaskRecord, clock: &Clock) -> Option<Blocked> {
    use BlockedSource as S;
    if !thread_state(task.state, task.on_cpu).is_blocked() {
        return None;
    }
    let now = if task.now_ns != 0 {
        task.now_ns
    } else {
        clock.now_ns
    };
    let bound = |ns: u64, source| {
        Some(Blocked {
            ns,
            exact: source == S::Switch,
            source,
        })
    };
    // Still on a CPU (it has set its sleeping state and not switched
    // yet), or sched_switch last saw it go onto one.
    if task.on_cpu != 0 || task.sw_on_cpu != 0 {
        return bound(0, S::None);
    }
    if task.sw_off_ns != 0 && task.sw_off_ns <= now {
        return bound(now - task.sw_off_ns, S::Switch);
    }
    // The most it can have been blocked: less than its age, and less than
    // the time since it was last seen on a CPU.
    let mut limit = u64::MAX;
    if task.start_ns != 0 {
        limit = limit.min(now.saturating_sub(task.start_ns));
    }
    if task.sw_on_ns != 0 {
        limit = limit.min(now.saturating_sub(task.sw_on_ns));
    }
    // No switch seen says "blocked since before the attach" only of a
    // thread that existed then (a newer one may have switched unrecorded,
    // in a full table).
    let seen = task.sw_off_ns != 0 || task.sw_on_ns != 0;
    let existed = task.start_ns != 0 && task.start_ns <= clock.attached_ns;
    let window = (clock.switches && !seen && existed && clock.attached_ns <= now)
        .then(|| now - clock.attached_ns);
    // Its own CPU's clock, the one exec_start was stamped with when it
    // left: it stops while that CPU idles and leaves out interrupt time,
    // both of which only lower the bound.
    let task_clock = (task.exec_start != 0 && task.rq_clock_task != 0)
        .then(|| task.rq_clock_task.saturating_sub(task.exec_start));
    [(window, S::Window), (task_clock, S::TaskClock)]
        .into_iter()
        .filter_map(|(ns, s)| Some((ns?, s)))
        .filter(|&(ns, _)| ns <= limit)
        .max_by_key(|&(ns, _)| ns)
        .map_or_else(|| bound(0, S::None), |(ns, s)| bound(ns, s))
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
    let mut kstacks: FastMap<&[u64], Arc<[Frame]>> = FastMap::default();
    // One decoding of each distinct call: the threads blocked in it with
    // the same arguments share it (what decoding reads, an fd's file or a
    // timeout's memory, is the same for the same arguments).
    let mut calls: FastMap<(i64, [u64; 6]), Option<Arc<Syscall>>> = FastMap::default();
    let mut threads: Vec<Thread> = inp
        .tasks
        .iter()
        .map(|t| {
            let state = thread_state(t.state, t.on_cpu);
            let slot = ring_by_tid.get(&u64::from(t.tid)).filter(|s| !s.exited);
            let blocked = state.is_blocked();
            let syscall = if blocked {
                calls
                    .entry((t.regs.syscall_nr, t.regs.args))
                    .or_insert_with(|| {
                        decode::decode(t.regs.syscall_nr, &t.regs.args, inp.lookup).map(Arc::new)
                    })
                    .clone()
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
                ns_tid: slot.and_then(|s| s.ns_id),
                syscall,
                blocked: blocked_for(t, &inp.clock),
                kernel_stack,
                location,
                snaps: slot.map(|s| s.snaps),
                ..Thread::new(u64::from(t.tid), name, name_source, state)
            }
        })
        .collect();
    threads.sort_by_key(|t| t.tid);

    let found = Process {
        ring: inp.ring,
        go: inp.go,
        python: inp.python,
    };
    let tasks = runtime::coroutines(found, CoroutineClock::Now(inp.clock.now_ns), false);
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
        // A snapshot with nothing recorded before it observed no window:
        // the time since its session began is no span anything was seen in.
        window_ns: if inp.clock.switches {
            inp.clock.now_ns.saturating_sub(inp.clock.attached_ns)
        } else {
            0
        },
        stacks: StackTable,
        threads,
        tasks,
        groups: Vec::new(),
        task_groups: Vec::new(),
        warnings,
        deadlocks: Vec::new(),
        python: None,
    }
}

/// A thread inside a task's poll is where that task's last snap says (its
/// own slot's last snap predates the poll). The last function it entered
/// under `--uprobe` stays its location unless the task's is a snap: a
/// task's other locations (a goroutine's saved pc) say where the thread is
/// now, which its stack shows already, and would hide what was asked for.
fn point_threads_at_their_tasks(threads: &mut [Thread], tasks: &[Coroutine]) {
    let source = |l: &Option<Location>| l.as_ref().map(|l| l.source);
    for task in tasks.iter().filter(|t| t.state == CoroutineState::Polling) {
        let Some(tid) = task.polling_tid else {
            continue;
        };
        // Threads are sorted by tid: a binary search, not a scan per task.
        if let Ok(i) = threads.binary_search_by_key(&u64::from(tid), |t| t.tid) {
            let t = &mut threads[i];
            t.polling_task = Some(task.id);
            let keep_hit = source(&t.location) == Some(LocationSource::Uprobe)
                && source(&task.location) != Some(LocationSource::Ring);
            if task.location.is_some() && !keep_hit {
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
    let at = r.unix_ns(runtime::librip::horizon(r));
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
            let name = slot.map(|s| s.name.clone()).unwrap_or_default();
            Thread {
                ns_tid: slot.and_then(|s| s.ns_id),
                syscall: decode::decode(r.regs.syscall_nr, &r.regs.args, &Gone).map(Arc::new),
                kernel_stack: inp
                    .stacks
                    .get(&r.kstack_id)
                    .map(|s| s.iter().map(|&a| raw(a)).collect())
                    .unwrap_or_default(),
                location: slot
                    .filter(|s| !s.entries.is_empty())
                    .map(|s| ring_location(&s.entries, s.entries.len() - 1)),
                snaps: slot.map(|s| s.snaps),
                exited: true,
                ..Thread::new(u64::from(tid), name, "ring", state_from_switch(r.state))
            }
        })
        .collect();
    threads.sort_by_key(|t| t.tid);
    let mut warnings =
        vec!["states are as of each thread's last switch off the CPU before the exit".into()];
    let found = Process {
        ring: inp.ring,
        go: None,
        python: None,
    };
    let tasks = runtime::coroutines(found, CoroutineClock::PostMortem, false);
    if let Some(r) = inp.ring.filter(|_| !tasks.is_empty()) {
        warnings.push(post_mortem_warning(r));
    }
    Report {
        schema: SCHEMA_VERSION,
        mode: Mode::Pid,
        process: inp.process.clone(),
        rings: Vec::new(),
        window_ns: inp.window_ns,
        stacks: StackTable,
        threads,
        tasks,
        groups: Vec::new(),
        task_groups: Vec::new(),
        warnings,
        deadlocks: Vec::new(),
        python: None,
    }
}

/// The state change one context switch event says: `running` when the
/// thread got a CPU, else the state it left in, with the system call it
/// was in (its registers at the switch).
pub(crate) fn state_change(ev: &rip_ebpf::SwitchEvent) -> crate::model::events::StateChange {
    let on = ev.kind == rip_ebpf::SWITCH_ON;
    let state = if on {
        ThreadState::Running
    } else {
        state_from_switch(ev.state)
    };
    let syscall = (!on && state != ThreadState::Runnable && ev.regs.syscall_nr >= 0)
        .then(|| decode::syscall_name(ev.regs.syscall_nr));
    crate::model::events::StateChange {
        ts_ns: ev.ts_ns,
        tid: ev.tid,
        state,
        syscall,
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
    pub(crate) clock: CoroutineClock,
}

/// Builds a dump report from a ring alone (before symbolization).
pub(crate) fn dump(ring: &RingView, process: ProcessInfo, opts: DumpOptions) -> Report {
    let mut threads: Vec<Thread> = ring
        .slots
        .iter()
        .filter(|s| !s.coroutine && (opts.exited || !s.exited))
        .map(|s| {
            let n = s.entries.len();
            let state = if s.exited {
                ThreadState::Exited
            } else {
                ThreadState::Unknown
            };
            Thread {
                ns_tid: s.ns_id,
                location: (n > 0).then(|| ring_location(&s.entries, n - 1)),
                history: if opts.history && n > 1 {
                    (0..n - 1).map(|i| ring_location(&s.entries, i)).collect()
                } else {
                    Vec::new()
                },
                snaps: Some(s.snaps),
                exited: s.exited,
                ..Thread::new(s.id, s.name.clone(), "ring", state)
            }
        })
        .collect();
    threads.sort_by_key(|t| (t.tid, t.exited));
    let found = Process {
        ring: Some(ring),
        go: None,
        python: None,
    };
    let mut tasks = runtime::coroutines(found, opts.clock, opts.history);
    if !opts.exited {
        tasks.retain(|t| t.state != CoroutineState::Exited);
    }
    let mut warnings = Vec::new();
    if ring.dropped > 0 {
        warnings.push(dropped_warning(ring));
    }
    if opts.clock == CoroutineClock::PostMortem && !tasks.is_empty() {
        warnings.push(post_mortem_warning(ring));
    }
    Report {
        schema: SCHEMA_VERSION,
        mode: Mode::Dump,
        process,
        rings: vec![ring_info(ring)],
        window_ns: 0,
        stacks: StackTable,
        threads,
        tasks,
        groups: Vec::new(),
        task_groups: Vec::new(),
        warnings,
        deadlocks: Vec::new(),
        python: None,
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
            clock: CoroutineClock::PostMortem,
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
            start_ns: 0,
            sw_off_ns: 0,
            sw_on_ns: 0,
            sw_on_cpu: 0,
            _pad: 0,
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
        use BlockedSource as S;
        let clock = Clock {
            attached_ns: 100_000,
            now_ns: 110_000,
            switches: true,
        };
        let get = |t: &TaskRecord| {
            let b = blocked_for(t, &clock).unwrap();
            (b.ns, b.exact, b.source)
        };
        // Seen leaving the CPU during the window: exact.
        let mut t = task(1, 1, 0, 0);
        t.sw_off_ns = 105_000;
        assert_eq!(get(&t), (5_000, true, S::Switch));
        // Blocked since before attach: the window, or its own CPU's clock
        // when that says more.
        let mut t = task(1, 1, 50_000, 0);
        t.start_ns = 1;
        t.rq_clock_task = 51_000;
        assert_eq!(get(&t), (10_000, false, S::Window));
        t.rq_clock_task = 85_000;
        assert_eq!(get(&t), (35_000, false, S::TaskClock));
        // Never more than its age: a clock that says more is not used.
        t.start_ns = 90_000;
        assert_eq!(get(&t), (10_000, false, S::Window));
        // The iterator's own CPU's clock is not a bound.
        let mut t = task(1, 1, 50_000, 80_000);
        t.start_ns = 1;
        assert_eq!(get(&t), (10_000, false, S::Window));
        // A thread of unknown age may have switched unrecorded: no window.
        t.start_ns = 0;
        assert_eq!(get(&t), (0, false, S::None));
        // Running threads are not blocked.
        assert!(blocked_for(&task(1, 0, 0, 0), &clock).is_none());
    }

    /// Without sched_switch (snapshots only) a thread blocked since
    /// before the snapshot's session began is bounded by its own CPU's
    /// clock alone: the session's age says nothing of it.
    #[test]
    fn snapshots_only_bound_blocked_time_by_the_task_clock() {
        use BlockedSource as S;
        let clock = Clock {
            attached_ns: 100_000,
            now_ns: 110_000,
            switches: false,
        };
        let get = |t: &TaskRecord| {
            let b = blocked_for(t, &clock).unwrap();
            (b.ns, b.exact, b.source)
        };
        let mut t = task(1, 1, 50_000, 0);
        t.start_ns = 1;
        t.rq_clock_task = 51_000;
        assert_eq!(get(&t), (1_000, false, S::TaskClock));
        t.rq_clock_task = 85_000;
        assert_eq!(get(&t), (35_000, false, S::TaskClock));
        // No clock: nothing is known.
        t.rq_clock_task = 0;
        assert_eq!(get(&t), (0, false, S::None));
    }

    /// A hot mutex: sched_switch saw the thread go onto a CPU in the
    /// window and the iterator finds it asleep (it set its state and has
    /// not switched yet): not the whole window, nothing more than 0.
    #[test]
    fn a_thread_last_seen_on_a_cpu_is_not_blocked_all_window() {
        let clock = Clock {
            attached_ns: 1_000,
            now_ns: 312_000_000,
            switches: true,
        };
        let mut t = task(1, 1, 0, 0);
        t.sw_on_cpu = 1;
        t.sw_on_ns = 311_000_000;
        t.sw_off_ns = 310_000_000;
        let b = blocked_for(&t, &clock).unwrap();
        assert_eq!((b.ns, b.exact, b.source), (0, false, BlockedSource::None));
        // Still on its CPU by the task's own flag.
        let mut t = task(1, 1, 0, 0);
        t.on_cpu = 1;
        assert_eq!(blocked_for(&t, &clock).unwrap().ns, 0);
    }

    /// Recorded iterator and sched_switch states of threads whose true
    /// history is known, drawn at random: an exact time is the true one,
    /// a lower bound never exceeds the time the thread has really been
    /// off the CPU, and no time exceeds the thread's age.
    #[test]
    fn blocked_times_never_exceed_the_truth_over_recorded_states() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n.max(1)
        };
        const MS: u64 = 1_000_000;
        for _ in 0..100_000 {
            // The thread starts, runs and sleeps in turn up to `now`.
            let start = 1_000 * MS + rnd(2_000 * MS);
            let attach = 1_000 * MS + rnd(3_000 * MS);
            let mut runs = Vec::new(); // (on, off)
            let mut t = start;
            let now = start.max(attach) + 1 + rnd(2_000 * MS);
            loop {
                let on = t;
                let off = on + 1 + rnd(5 * MS);
                if off >= now {
                    break;
                }
                runs.push((on, off));
                let nap = [MS, 50 * MS, 3_000 * MS][rnd(3) as usize];
                t = off + 1 + rnd(nap);
                if t >= now {
                    break;
                }
            }
            // Asleep at `now` since its last switch off, or still on its
            // CPU about to sleep (its state set, no switch yet).
            let about_to_sleep = runs.is_empty() || rnd(8) == 0;
            let (last_on, last_off) = *runs.last().unwrap_or(&(start, start));
            let (truth, on_cpu) = if about_to_sleep {
                (0, 1)
            } else {
                (now - last_off, 0)
            };
            // sched_switch's record: switches from the attach on; threads
            // alive at the attach are seeded, newer ones enter at their
            // first switch off (or never, in a full table).
            let mut rec = ThreadRecord::default();
            let seeded = start < attach;
            let full = rnd(10) == 0;
            let mut present = seeded;
            for &(on, off) in &runs {
                if on >= attach && present {
                    rec.on_cpu_ns = on;
                    rec.on_cpu = 1;
                }
                if off >= attach && (present || !full) {
                    present = true;
                    rec.off_cpu_ns = off;
                    rec.on_cpu = 0;
                }
            }
            if about_to_sleep && last_on >= attach && present && !runs.is_empty() {
                // Its current run began at the switch on after `last_off`.
                rec.on_cpu_ns = last_off + 1;
                rec.on_cpu = 1;
            }
            // Each CPU's task clock leaves out interrupt time; a CPU's
            // clock stops while it idles.
            let left_out = |t: u64, rate: u64| t - t / 1_000 * rate;
            let rate = rnd(200);
            let exec_start = if rnd(10) == 0 {
                0
            } else {
                left_out(last_off, rate)
            };
            let updated = last_off + rnd(now - last_off + 1);
            let mut tr = task(1, 1, exec_start, rnd(u64::MAX));
            tr.rq_clock_task = if rnd(10) == 0 {
                0
            } else {
                left_out(updated, rate)
            };
            tr.on_cpu = on_cpu;
            tr.now_ns = now;
            tr.start_ns = if rnd(4) == 0 { 0 } else { start };
            // Or a snapshots-only session: nothing recorded.
            let switches = rnd(2) == 0;
            if !switches {
                rec = ThreadRecord::default();
            }
            tr.sw_off_ns = rec.off_cpu_ns;
            tr.sw_on_ns = rec.on_cpu_ns;
            tr.sw_on_cpu = rec.on_cpu;
            let clock = Clock {
                attached_ns: attach,
                now_ns: now,
                switches,
            };
            let b = blocked_for(&tr, &clock).unwrap();
            let case = format!(
                "start {start} attach {attach} now {now} runs {} truth {truth} rec {rec:?} \
                 got {b:?}",
                runs.len()
            );
            if b.exact {
                assert_eq!(b.ns, truth, "{case}");
            } else {
                assert!(b.ns <= truth, "{case}");
            }
            assert!(b.ns <= now - start, "{case}");
        }
    }
}
