//! Resources of one process acquired and released during a window,
//! collected: the kernel sends each traced syscall that succeeded
//! ([`LeaksProbe`]); this side unwinds each acquisition's stack copy with
//! the CFI of the target's binaries and keeps the table of what is
//! outstanding (sp-rtrace's leak filter, applied as the events arrive, so
//! that memory stays bounded by what is held, not by what happened).

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
};

use rip_ebpf::leaks::{LeakEvent, call, heap};

use super::{
    kernel::{
        leaks::{HeapSite, LeaksProbe},
        uprobe::ProbeSite,
    },
    stacks::{Stacks, unwind},
};
use crate::{collect::Result, util::monotonic_ns};

/// x86-64 syscall numbers the tracer knows.
mod nr {
    pub const OPEN: u32 = 2;
    pub const CLOSE: u32 = 3;
    pub const MMAP: u32 = 9;
    pub const MUNMAP: u32 = 11;
    pub const BRK: u32 = 12;
    pub const PIPE: u32 = 22;
    pub const MREMAP: u32 = 25;
    pub const SHMAT: u32 = 30;
    pub const DUP: u32 = 32;
    pub const DUP2: u32 = 33;
    pub const SOCKET: u32 = 41;
    pub const ACCEPT: u32 = 43;
    pub const SOCKETPAIR: u32 = 53;
    pub const SHMDT: u32 = 67;
    pub const FCNTL: u32 = 72;
    pub const CREAT: u32 = 85;
    pub const EPOLL_CREATE: u32 = 213;
    pub const INOTIFY_INIT: u32 = 253;
    pub const OPENAT: u32 = 257;
    pub const SIGNALFD: u32 = 282;
    pub const TIMERFD_CREATE: u32 = 283;
    pub const EVENTFD: u32 = 284;
    pub const ACCEPT4: u32 = 288;
    pub const SIGNALFD4: u32 = 289;
    pub const EVENTFD2: u32 = 290;
    pub const EPOLL_CREATE1: u32 = 291;
    pub const DUP3: u32 = 292;
    pub const PIPE2: u32 = 293;
    pub const INOTIFY_INIT1: u32 = 294;
    pub const PERF_EVENT_OPEN: u32 = 298;
    pub const FANOTIFY_INIT: u32 = 300;
    pub const OPEN_BY_HANDLE_AT: u32 = 304;
    pub const MEMFD_CREATE: u32 = 319;
    pub const USERFAULTFD: u32 = 323;
    pub const IO_URING_SETUP: u32 = 425;
    pub const PIDFD_OPEN: u32 = 434;
    pub const CLOSE_RANGE: u32 = 436;
    pub const OPENAT2: u32 = 437;
    pub const PIDFD_GETFD: u32 = 438;
}

/// Syscalls that return one new descriptor.
const FD_CALLS: &[(u32, &str)] = &[
    (nr::OPEN, "open"),
    (nr::OPENAT, "openat"),
    (nr::OPENAT2, "openat2"),
    (nr::CREAT, "creat"),
    (nr::OPEN_BY_HANDLE_AT, "open_by_handle_at"),
    (nr::SOCKET, "socket"),
    (nr::ACCEPT, "accept"),
    (nr::ACCEPT4, "accept4"),
    (nr::DUP, "dup"),
    (nr::DUP2, "dup2"),
    (nr::DUP3, "dup3"),
    (nr::FCNTL, "fcntl"),
    (nr::EVENTFD, "eventfd"),
    (nr::EVENTFD2, "eventfd2"),
    (nr::EPOLL_CREATE, "epoll_create"),
    (nr::EPOLL_CREATE1, "epoll_create1"),
    (nr::MEMFD_CREATE, "memfd_create"),
    (nr::TIMERFD_CREATE, "timerfd_create"),
    (nr::SIGNALFD, "signalfd"),
    (nr::SIGNALFD4, "signalfd4"),
    (nr::INOTIFY_INIT, "inotify_init"),
    (nr::INOTIFY_INIT1, "inotify_init1"),
    (nr::PIDFD_OPEN, "pidfd_open"),
    (nr::PIDFD_GETFD, "pidfd_getfd"),
    (nr::PERF_EVENT_OPEN, "perf_event_open"),
    (nr::FANOTIFY_INIT, "fanotify_init"),
    (nr::USERFAULTFD, "userfaultfd"),
    (nr::IO_URING_SETUP, "io_uring_setup"),
];

/// Syscalls that return two descriptors through user memory.
const PAIR_CALLS: &[(u32, &str)] = &[
    (nr::PIPE, "pipe"),
    (nr::PIPE2, "pipe2"),
    (nr::SOCKETPAIR, "socketpair"),
];

/// Syscalls that map memory.
const MAP_CALLS: &[(u32, &str)] = &[(nr::MMAP, "mmap"), (nr::MREMAP, "mremap"), (nr::BRK, "brk")];

/// `fcntl`'s commands that make a descriptor.
const F_DUPFD: u64 = 0;
const F_DUPFD_CLOEXEC: u64 = 1030;
/// `close_range`'s flag that marks instead of closing.
const CLOSE_RANGE_CLOEXEC: u64 = 1 << 2;
/// `MAP_FIXED`, `MAP_FIXED_NOREPLACE`: a mapping over others replaces them.
const PAGE: u64 = 4096;

/// The syscalls traced, with what each is to the programs: what
/// [`LeaksProbe::attach`] takes.
pub fn traced_calls(descriptors: bool, mappings: bool, shm: bool) -> Vec<(u32, u8)> {
    let mut out = Vec::new();
    if descriptors {
        out.extend(
            FD_CALLS
                .iter()
                .chain(PAIR_CALLS)
                .map(|&(n, _)| (n, call::ACQUIRE)),
        );
        out.extend([(nr::CLOSE, call::RELEASE), (nr::CLOSE_RANGE, call::RELEASE)]);
    }
    if mappings {
        out.extend(MAP_CALLS.iter().map(|&(n, _)| (n, call::ACQUIRE)));
        out.push((nr::MUNMAP, call::RELEASE));
    }
    if shm {
        out.extend([(nr::SHMAT, call::ACQUIRE), (nr::SHMDT, call::RELEASE)]);
    }
    out
}

/// The name of syscall `n` among those traced.
fn call_name(n: u32) -> &'static str {
    FD_CALLS
        .iter()
        .chain(PAIR_CALLS)
        .chain(MAP_CALLS)
        .find(|(c, _)| *c == n)
        .map(|(_, name)| *name)
        .unwrap_or(match n {
            nr::SHMAT => "shmat",
            _ => "?",
        })
}

/// The name of allocator function `f` (`rip_ebpf::leaks::heap`).
pub fn heap_name(f: u32) -> &'static str {
    match f {
        heap::MALLOC => "malloc",
        heap::CALLOC => "calloc",
        heap::REALLOC => "realloc",
        heap::FREE => "free",
        heap::POSIX_MEMALIGN => "posix_memalign",
        heap::ALIGNED_ALLOC => "aligned_alloc",
        heap::MEMALIGN => "memalign",
        heap::VALLOC => "valloc",
        heap::PVALLOC => "pvalloc",
        heap::REALLOCARRAY => "reallocarray",
        _ => "?",
    }
}

/// The bytes asked for by allocator function `f` called with `a`.
fn heap_bytes(f: u32, a: &[u64; 6]) -> u64 {
    match f {
        heap::MALLOC | heap::VALLOC => a[0],
        heap::CALLOC => a[0].saturating_mul(a[1]),
        heap::REALLOC => a[1],
        heap::REALLOCARRAY => a[1].saturating_mul(a[2]),
        heap::POSIX_MEMALIGN => a[2],
        heap::ALIGNED_ALLOC | heap::MEMALIGN => a[1],
        heap::PVALLOC => a[0].div_ceil(PAGE) * PAGE,
        _ => 0,
    }
}

/// Blocks younger than this keep their stack copy un-unwound: most are
/// freed by then, and a balanced path's blocks never cost an unwind.
const UNWIND_AFTER_NS: u64 = 200_000_000;
/// Past this many blocks waiting, all are unwound at the next mark (their
/// copies' memory is bounded).
const MAX_WAITING: usize = 50_000;

/// A heap block whose stack is not unwound yet.
#[derive(Debug)]
struct Waiting {
    at_ns: u64,
    call: &'static str,
    bytes: u64,
    regs: (u64, u64, u64),
    stack: Box<[u8]>,
}

/// Which resource table an acquisition went to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Table {
    /// Heap blocks.
    Heap,
    /// File descriptors.
    Fd,
    /// Mappings.
    Mapping,
    /// SysV shm attachments.
    Shm,
}

/// One resource still held.
#[derive(Clone, Debug)]
pub struct Held {
    /// Index of its acquiring stack in [`LeaksData::stacks`].
    pub stack: usize,
    /// CLOCK_MONOTONIC ns when it was acquired.
    pub at_ns: u64,
    /// The acquiring syscall's name.
    pub call: &'static str,
    /// Its bytes (mappings); 0 for descriptors.
    pub bytes: u64,
    /// Its end address (mappings).
    end: u64,
}

/// A count and bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Count {
    /// Resources.
    pub count: u64,
    /// Bytes.
    pub bytes: u64,
}

/// Outstanding totals at one point.
#[derive(Clone, Copy, Debug, Default)]
pub struct Point {
    /// ns since the window began.
    pub at_ns: u64,
    /// Descriptors held.
    pub fds: u64,
    /// Mappings held.
    pub mappings: u64,
    /// Their bytes.
    pub mapped_bytes: u64,
    /// Heap blocks held.
    pub heap_count: u64,
    /// Their bytes.
    pub heap_bytes: u64,
    /// Heap calls (allocations and frees) since the previous point.
    pub heap_calls: u64,
}

/// What a window of leak tracing gathered, unsymbolized.
#[derive(Debug, Default)]
pub struct LeaksData {
    /// Outstanding descriptors by number.
    pub fds: BTreeMap<i32, Held>,
    /// Outstanding mappings by start address.
    pub mappings: BTreeMap<u64, Held>,
    /// Outstanding shm attachments by address (`bytes`: the segment id).
    pub shm: BTreeMap<u64, Held>,
    /// Outstanding heap blocks by address.
    pub heap: HashMap<u64, Held>,
    /// Allocator calls the probes saw in the window.
    pub heap_calls: u64,
    /// Frees of blocks not allocated in the window (allocated before it).
    pub heap_older_frees: u64,
    /// Allocations not followed: the table of calls in flight was full.
    pub heap_full: u64,
    /// Allocation returns that matched no entry (nested allocator calls).
    pub heap_unmatched: u64,
    /// The acquiring stacks (return addresses, innermost first).
    pub stacks: Vec<Arc<[u64]>>,
    /// Everything acquired in the window, released since or not, by
    /// table, call and stack index: `None` unless asked for
    /// ([`LeaksCollector::count_acquired`]).
    pub acquired: Option<HashMap<(Table, &'static str, usize), Count>>,
    /// Released within the window, by table.
    pub released: BTreeMap<Table, Count>,
    /// Releases of what was never seen acquired.
    pub unmatched_releases: u64,
    /// Descriptors open when the window began (`None`: unreadable).
    pub open_at_start: Option<u64>,
    /// The targets of the outstanding descriptors (`/proc/PID/fd` links)
    /// at the end.
    pub fd_targets: HashMap<i32, String>,
    /// Totals over the window.
    pub series: Vec<Point>,
    /// Events the ring buffer could not take.
    pub dropped: u64,
    /// Calls whose entry could not be remembered.
    pub calls_full: u64,
    /// CLOCK_MONOTONIC ns at the window's start and end.
    pub start_ns: u64,
    /// See `start_ns`.
    pub end_ns: u64,
}

/// Drains the leak programs during a window and keeps what is held.
pub struct LeaksCollector {
    probe: LeaksProbe,
    unwinder: Stacks,
    data: LeaksData,
    interned: HashMap<Arc<[u64]>, usize>,
    /// Stacks made since [`Self::take_new_stacks`] was last called.
    fresh: Vec<Arc<[u64]>>,
    /// The program break as last seen (brk's result).
    brk: Option<u64>,
    events: Vec<(LeakEvent, Vec<u8>)>,
    /// The stack copy of the event being handled.
    stack: Vec<u8>,
    /// Heap blocks whose stacks are not unwound yet, by address.
    waiting: HashMap<u64, Waiting>,
    /// Heap blocks held (in `data.heap` and `waiting`), and their bytes.
    heap_live: Count,
    /// Heap events since the last mark.
    heap_events: u64,
    /// The probes' heap call count when the window began.
    heap_calls_before: u64,
}

/// Adds one acquisition of `bytes` to `acquired` (when it is counted).
fn acquired(
    acquired: &mut Option<HashMap<(Table, &'static str, usize), Count>>,
    table: Table,
    call: &'static str,
    stack: usize,
    bytes: u64,
) {
    if let Some(a) = acquired {
        let c = a.entry((table, call, stack)).or_default();
        c.count += 1;
        c.bytes += bytes;
    }
}

impl LeaksCollector {
    /// Serves `probe`, unwinding with `unwinder`; `open_at_start` is the
    /// count of descriptors open before the attach.
    pub fn new(probe: LeaksProbe, unwinder: Stacks, open_at_start: Option<u64>) -> Self {
        LeaksCollector {
            probe,
            unwinder,
            data: LeaksData {
                open_at_start,
                start_ns: monotonic_ns(),
                ..LeaksData::default()
            },
            interned: HashMap::new(),
            fresh: Vec::new(),
            brk: None,
            events: Vec::new(),
            stack: Vec::new(),
            waiting: HashMap::new(),
            heap_live: Count::default(),
            heap_events: 0,
            heap_calls_before: 0,
        }
    }

    /// Begins the window of the heap, whose probes counted `calls` so far
    /// (the cost estimate's): from now on they send blocks.
    pub fn heap_on(&mut self, calls: u64) -> Result<()> {
        self.heap_calls_before = calls;
        // What the syscalls acquired and released while the heap's probes
        // only counted is from before the window, as what was open before
        // the attach: the window begins now for every kind (a mapping
        // older than the window would be a claim the window cannot back).
        self.serve();
        let d = &mut self.data;
        d.fds.clear();
        d.mappings.clear();
        d.shm.clear();
        d.released.clear();
        d.unmatched_releases = 0;
        if let Some(a) = &mut d.acquired {
            a.clear();
        }
        d.start_ns = monotonic_ns();
        self.probe.heap_on()
    }

    /// Counts everything acquired in the window by stack, released since
    /// or not ([`LeaksData::acquired`]). Each heap block's stack is then
    /// unwound, also of the blocks freed before [`UNWIND_AFTER_NS`] that
    /// would otherwise never cost an unwind.
    pub fn count_acquired(&mut self) {
        self.data.acquired = Some(HashMap::new());
    }

    /// The allocator calls the heap probes counted so far.
    pub fn heap_calls(&self) -> Result<u64> {
        Ok(self.probe.stats()?.heap_calls)
    }

    /// Handles the events sent since the last call. Call it often: the
    /// ring buffer holds a few thousand.
    pub fn serve(&mut self) {
        let mut events = std::mem::take(&mut self.events);
        self.probe
            .take_events(|ev, stack| events.push((*ev, stack.to_vec())));
        for (ev, stack) in events.drain(..) {
            self.stack = stack;
            self.handle(&ev);
        }
        self.events = events;
    }

    /// Notes the outstanding totals now, for the series.
    pub fn mark(&mut self) {
        let now = monotonic_ns();
        let d = &mut self.data;
        d.series.push(Point {
            at_ns: now.saturating_sub(d.start_ns),
            fds: d.fds.len() as u64,
            mappings: d.mappings.len() as u64,
            mapped_bytes: d.mappings.values().map(|h| h.bytes).sum(),
            heap_count: self.heap_live.count,
            heap_bytes: self.heap_live.bytes,
            heap_calls: std::mem::take(&mut self.heap_events),
        });
        let before = if self.waiting.len() > MAX_WAITING {
            u64::MAX
        } else {
            now.saturating_sub(UNWIND_AFTER_NS)
        };
        self.unwind_waiting(before);
    }

    /// Unwinds the stacks of the waiting blocks allocated before
    /// `before_ns` (CLOCK_MONOTONIC), which then join `data.heap`.
    fn unwind_waiting(&mut self, before_ns: u64) {
        let due: Vec<u64> = self
            .waiting
            .iter()
            .filter(|(_, w)| w.at_ns <= before_ns)
            .map(|(&a, _)| a)
            .collect();
        for addr in due {
            let Some(w) = self.waiting.remove(&addr) else {
                continue;
            };
            let stack = self.unwound(w.regs, &w.stack);
            acquired(&mut self.data.acquired, Table::Heap, w.call, stack, w.bytes);
            self.data.heap.insert(
                addr,
                Held {
                    stack,
                    at_ns: w.at_ns,
                    call: w.call,
                    bytes: w.bytes,
                    end: 0,
                },
            );
        }
    }

    /// The stacks unwound since the last call: a command names them while
    /// the process still runs.
    pub fn take_new_stacks(&mut self) -> Vec<Arc<[u64]>> {
        std::mem::take(&mut self.fresh)
    }

    /// Resources outstanding now (for progress).
    pub fn held(&self) -> usize {
        self.data.fds.len()
            + self.data.mappings.len()
            + self.data.shm.len()
            + self.heap_live.count as usize
    }

    /// Detaches the programs and reads the rest, with the outstanding
    /// descriptors' targets from process `pid`'s /proc.
    pub fn finish(mut self, pid: u32) -> Result<LeaksData> {
        self.probe.detach()?;
        self.data.end_ns = monotonic_ns();
        self.serve();
        self.mark();
        self.unwind_waiting(u64::MAX);
        let stats = self.probe.stats()?;
        self.data.dropped = stats.dropped;
        self.data.calls_full = stats.calls_full;
        self.data.heap_calls = stats.heap_calls.saturating_sub(self.heap_calls_before);
        self.data.heap_full = stats.heap_full;
        self.data.heap_unmatched = stats.heap_unmatched;
        for &fd in self.data.fds.keys() {
            if let Ok(t) = std::fs::read_link(format!("/proc/{pid}/fd/{fd}")) {
                self.data
                    .fd_targets
                    .insert(fd, t.to_string_lossy().into_owned());
            }
        }
        Ok(self.data)
    }

    fn stack_of(&mut self, ev: &LeakEvent) -> usize {
        let stack = std::mem::take(&mut self.stack);
        let i = self.unwound((ev.ip, ev.sp, ev.bp), &stack);
        self.stack = stack;
        i
    }

    /// The index of the stack unwound from registers `(ip, sp, bp)` over
    /// the copy `stack`.
    fn unwound(&mut self, (ip, sp, bp): (u64, u64, u64), stack: &[u8]) -> usize {
        let frames: Arc<[u64]> = if ip == 0 {
            Arc::from(Vec::new())
        } else {
            let regs = unwind::regs(ip, sp, bp);
            self.unwinder.unwind_copy(&regs, stack).into()
        };
        if let Some(&i) = self.interned.get(&frames) {
            return i;
        }
        let i = self.data.stacks.len();
        self.data.stacks.push(frames.clone());
        self.interned.insert(frames.clone(), i);
        self.fresh.push(frames);
        i
    }

    fn release(&mut self, table: Table, held: Option<Held>) {
        match held {
            Some(h) => {
                let c = self.data.released.entry(table).or_default();
                c.count += 1;
                c.bytes += h.bytes;
            }
            None => self.data.unmatched_releases += 1,
        }
    }

    fn close_fd(&mut self, fd: i32) {
        let h = self.data.fds.remove(&fd);
        self.release(Table::Fd, h);
    }

    fn open_fd(&mut self, fd: i32, ev: &LeakEvent, call: &'static str) {
        if fd < 0 {
            return;
        }
        let stack = self.stack_of(ev);
        acquired(&mut self.data.acquired, Table::Fd, call, stack, 0);
        let held = Held {
            stack,
            at_ns: ev.ts_ns,
            call,
            bytes: 0,
            end: 0,
        };
        // A number reused without a close seen (dup2 over an open one
        // closes it): the old one is gone.
        if let Some(old) = self.data.fds.insert(fd, held) {
            self.release(Table::Fd, Some(old));
        }
    }

    /// Removes `[start, end)` from the outstanding mappings: whole ones
    /// are released, ones cut keep what is left.
    fn unmap(&mut self, start: u64, end: u64) -> bool {
        let overlapping: Vec<u64> = self
            .data
            .mappings
            .range(..end)
            .filter(|(_, h)| h.end > start)
            .map(|(&s, _)| s)
            .collect();
        let found = !overlapping.is_empty();
        for s in overlapping {
            let Some(h) = self.data.mappings.remove(&s) else {
                continue;
            };
            if s < start {
                let mut left = h.clone();
                left.end = start;
                left.bytes = start - s;
                self.data.mappings.insert(s, left);
            }
            if h.end > end {
                let mut right = h.clone();
                right.bytes = h.end - end;
                self.data.mappings.insert(end, right);
            }
            let gone = h.end.min(end) - s.max(start);
            let c = self.data.released.entry(Table::Mapping).or_default();
            if s >= start && h.end <= end {
                c.count += 1;
            }
            c.bytes += gone;
        }
        found
    }

    fn map(&mut self, start: u64, len: u64, ev: &LeakEvent, call: &'static str) {
        if len == 0 {
            return;
        }
        let end = start.saturating_add(len.div_ceil(PAGE) * PAGE);
        // Mapped over others (MAP_FIXED): those parts are gone.
        self.unmap(start, end);
        let stack = self.stack_of(ev);
        acquired(
            &mut self.data.acquired,
            Table::Mapping,
            call,
            stack,
            end - start,
        );
        self.data.mappings.insert(
            start,
            Held {
                stack,
                at_ns: ev.ts_ns,
                call,
                bytes: end - start,
                end,
            },
        );
    }

    /// Removes heap block `addr`: it was freed, or its address handed out
    /// again (its free was not seen).
    fn free_block(&mut self, addr: u64) {
        let bytes = match self.waiting.remove(&addr) {
            Some(w) => {
                if self.data.acquired.is_some() {
                    let stack = self.unwound(w.regs, &w.stack);
                    acquired(&mut self.data.acquired, Table::Heap, w.call, stack, w.bytes);
                }
                w.bytes
            }
            None => match self.data.heap.remove(&addr) {
                Some(h) => h.bytes,
                None => {
                    self.data.heap_older_frees += 1;
                    return;
                }
            },
        };
        self.heap_live.count -= 1;
        self.heap_live.bytes -= bytes;
        let c = self.data.released.entry(Table::Heap).or_default();
        c.count += 1;
        c.bytes += bytes;
    }

    fn heap(&mut self, ev: &LeakEvent) {
        self.heap_events += 1;
        let f = (ev.nr - heap::BASE) as u32;
        let a = ev.args;
        match f {
            heap::FREE => return self.free_block(a[0]),
            heap::REALLOC | heap::REALLOCARRAY if a[0] != 0 => self.free_block(a[0]),
            _ => {}
        }
        let block = ev.ret as u64;
        if self.waiting.contains_key(&block) || self.data.heap.contains_key(&block) {
            self.free_block(block);
        }
        let bytes = heap_bytes(f, &a);
        self.heap_live.count += 1;
        self.heap_live.bytes += bytes;
        self.waiting.insert(
            block,
            Waiting {
                at_ns: ev.ts_ns,
                call: heap_name(f),
                bytes,
                regs: (ev.ip, ev.sp, ev.bp),
                stack: std::mem::take(&mut self.stack).into_boxed_slice(),
            },
        );
    }

    fn handle(&mut self, ev: &LeakEvent) {
        if ev.nr >= heap::BASE {
            return self.heap(ev);
        }
        let n = ev.nr as u32;
        let ret = ev.ret;
        let a = ev.args;
        match n {
            nr::CLOSE => self.close_fd(a[0] as i32),
            nr::CLOSE_RANGE if a[2] & CLOSE_RANGE_CLOEXEC == 0 => {
                let (lo, hi) = (a[0] as u32, a[1] as u32);
                let fds: Vec<i32> = self
                    .data
                    .fds
                    .keys()
                    .copied()
                    .filter(|&fd| (fd as u32) >= lo && (fd as u32) <= hi)
                    .collect();
                for fd in fds {
                    self.close_fd(fd);
                }
            }
            nr::CLOSE_RANGE => {}
            nr::PIPE | nr::PIPE2 | nr::SOCKETPAIR => {
                let name = call_name(n);
                for fd in ev.fds {
                    self.open_fd(fd, ev, name);
                }
            }
            nr::FCNTL if a[1] != F_DUPFD && a[1] != F_DUPFD_CLOEXEC => {}
            // signalfd on an existing descriptor changes its mask.
            nr::SIGNALFD | nr::SIGNALFD4 if a[0] as i32 != -1 => {}
            nr::MMAP => self.map(ret as u64, a[1], ev, "mmap"),
            nr::MUNMAP => {
                let end = a[0].saturating_add(a[1].div_ceil(PAGE) * PAGE);
                if !self.unmap(a[0], end) {
                    self.data.unmatched_releases += 1;
                }
            }
            nr::MREMAP => {
                let old_end = a[0].saturating_add(a[1].div_ceil(PAGE) * PAGE);
                self.unmap(a[0], old_end);
                self.map(ret as u64, a[2], ev, "mremap");
            }
            nr::BRK => {
                let now = ret as u64;
                match self.brk.replace(now) {
                    Some(old) if now > old => self.map(old, now - old, ev, "brk"),
                    Some(old) if now < old => {
                        self.unmap(now, old);
                    }
                    _ => {}
                }
            }
            nr::SHMAT => {
                let stack = self.stack_of(ev);
                acquired(&mut self.data.acquired, Table::Shm, "shmat", stack, 0);
                self.data.shm.insert(
                    ret as u64,
                    Held {
                        stack,
                        at_ns: ev.ts_ns,
                        call: "shmat",
                        bytes: 0,
                        end: a[0],
                    },
                );
            }
            nr::SHMDT => {
                let h = self.data.shm.remove(&a[0]);
                self.release(Table::Shm, h);
            }
            _ if FD_CALLS.iter().any(|&(c, _)| c == n) => {
                self.open_fd(ret as i32, ev, call_name(n));
            }
            _ => {}
        }
    }
}

/// The descriptors process `pid` has open now (`None`: unreadable).
pub fn open_descriptors(pid: u32) -> Option<u64> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()
        .map(|d| d.count() as u64)
}

/// The malloc family, by the names every known allocator exports (glibc,
/// jemalloc, tcmalloc and mimalloc all export these when they serve
/// malloc).
const ALLOCATOR_FUNCTIONS: &[(&str, u32)] = &[
    ("malloc", heap::MALLOC),
    ("free", heap::FREE),
    ("calloc", heap::CALLOC),
    ("realloc", heap::REALLOC),
    ("reallocarray", heap::REALLOCARRAY),
    ("posix_memalign", heap::POSIX_MEMALIGN),
    ("aligned_alloc", heap::ALIGNED_ALLOC),
    ("memalign", heap::MEMALIGN),
    ("valloc", heap::VALLOC),
    ("pvalloc", heap::PVALLOC),
];

/// Allocator libraries that replace glibc's malloc when loaded, by what
/// their file names contain, with the allocator's name.
const ALLOCATOR_LIBRARIES: &[(&str, &str)] = &[
    ("libjemalloc", "jemalloc"),
    ("libtcmalloc", "tcmalloc"),
    ("libmimalloc", "mimalloc"),
];

/// The allocator a process uses, found in its binaries.
#[derive(Clone, Debug)]
pub struct Allocator {
    /// Its name: `glibc`, `jemalloc`, `tcmalloc`, `mimalloc`, or `the
    /// executable's own`.
    pub name: String,
    /// The binary defining it, as the process maps it.
    pub binary: String,
    /// Its malloc family's functions.
    pub sites: Vec<HeapSite>,
    /// The executable maps no shared library.
    pub static_exe: bool,
}

/// Where process `pid`'s `malloc` comes from: the executable when it
/// defines one (statically linked, or an allocator of its own), else a
/// replacement allocator library it maps, else glibc. `Err` says, in a
/// sentence, why the heap cannot be traced.
pub fn find_allocator(pid: u32) -> Result<std::result::Result<Allocator, String>> {
    use crate::collect::kernel::uprobe::functions_named;
    let names: Vec<&str> = ALLOCATOR_FUNCTIONS.iter().map(|(n, _)| *n).collect();
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", crate::discover::view_pid(pid)))
        .unwrap_or_default();
    let maps = librip::reader::parse_maps(&maps);
    let mapped = |lib: &str| {
        maps.iter().any(|m| {
            m.file()
                .and_then(std::path::Path::file_name)
                .is_some_and(|f| f.to_string_lossy().contains(lib))
        })
    };
    let static_exe = !mapped(".so");
    let found = |sites: Vec<(ProbeSite, usize)>| -> Option<Vec<HeapSite>> {
        // An allocator serves malloc and free at least.
        let has = |f: u32| sites.iter().any(|(_, i)| ALLOCATOR_FUNCTIONS[*i].1 == f);
        (has(heap::MALLOC) && has(heap::FREE)).then(|| {
            sites
                .iter()
                .map(|(s, i)| HeapSite {
                    site: s.clone(),
                    func: ALLOCATOR_FUNCTIONS[*i].1,
                })
                .collect()
        })
    };
    let mut candidates: Vec<(Option<&str>, &str)> = vec![(None, "the executable's own")];
    candidates.extend(
        ALLOCATOR_LIBRARIES
            .iter()
            .filter(|(lib, _)| mapped(lib))
            .map(|&(lib, name)| (Some(lib), name)),
    );
    if mapped("libc.so") {
        candidates.push((Some("libc.so"), "glibc"));
    }
    for (lib, name) in candidates {
        // A binary whose symbols cannot be read serves no malloc we can
        // name: the next one is asked.
        let Ok(sites) = functions_named(pid, lib, &names) else {
            continue;
        };
        if let Some(sites) = found(sites) {
            let binary = sites[0].site.mapped.display().to_string();
            return Ok(Ok(Allocator {
                name: name.to_string(),
                binary,
                sites,
                static_exe,
            }));
        }
    }
    Ok(Err(if static_exe {
        "heap not traced: the executable is statically linked and its symbol table names no \
         malloc and free (stripped, or a runtime with a heap of its own such as Go's); \
         descriptors and mappings are traced (syscalls), and the heap's growth shows as mappings"
            .to_string()
    } else {
        "heap not traced: no known allocator (glibc, jemalloc, tcmalloc, mimalloc) defines malloc \
         and free in this process; descriptors and mappings are traced (syscalls)"
            .to_string()
    }))
}
