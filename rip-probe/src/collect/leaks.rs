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

use rip_ebpf::leaks::{LeakEvent, call};

use super::{
    kernel::leaks::LeaksProbe,
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

/// Which resource table an acquisition went to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Table {
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
    /// The acquiring stacks (return addresses, innermost first).
    pub stacks: Vec<Arc<[u64]>>,
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
        }
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
        let d = &mut self.data;
        d.series.push(Point {
            at_ns: monotonic_ns().saturating_sub(d.start_ns),
            fds: d.fds.len() as u64,
            mappings: d.mappings.len() as u64,
            mapped_bytes: d.mappings.values().map(|h| h.bytes).sum(),
        });
    }

    /// The stacks unwound since the last call: a command names them while
    /// the process still runs.
    pub fn take_new_stacks(&mut self) -> Vec<Arc<[u64]>> {
        std::mem::take(&mut self.fresh)
    }

    /// Resources outstanding now (for progress).
    pub fn held(&self) -> usize {
        self.data.fds.len() + self.data.mappings.len() + self.data.shm.len()
    }

    /// Detaches the programs and reads the rest, with the outstanding
    /// descriptors' targets from process `pid`'s /proc.
    pub fn finish(mut self, pid: u32) -> Result<LeaksData> {
        self.probe.detach()?;
        self.data.end_ns = monotonic_ns();
        self.serve();
        self.mark();
        let stats = self.probe.stats()?;
        self.data.dropped = stats.dropped;
        self.data.calls_full = stats.calls_full;
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
        let frames: Arc<[u64]> = if ev.ip == 0 {
            Arc::from(Vec::new())
        } else {
            let regs = unwind::regs(ev.ip, ev.sp, ev.bp);
            self.unwinder.unwind_copy(&regs, &self.stack).into()
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

    fn handle(&mut self, ev: &LeakEvent) {
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
