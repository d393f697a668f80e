//! Reading the goroutines of a live Go process from its memory, without
//! stopping it: `runtime.allgs`, each `g`, the sudogs of the goroutines
//! that wait on a channel, the semaphore table for those that wait on a
//! `sync` primitive, and each stack by its frame pointers. Everything read
//! may change while it is read: a goroutine whose status or saved
//! registers differ before and after its stack was read is read again,
//! then marked torn (its stack dropped) rather than printed wrong.

use std::{borrow::Cow, cell::Cell, collections::HashMap, sync::Arc};

use super::layout::{Layout, Status, status};
use crate::collect::memory::{Memory, read_coalesced};

/// Frames read per goroutine stack at most.
pub(crate) const MAX_FRAMES: usize = 64;
/// Goroutines read at most (a larger `allglen` is a torn or wrong read).
const MAX_GOROUTINES: u64 = 50_000_000;

/// The roots of the runtime in the process (load bias applied).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Roots {
    /// `runtime.allgs`: a slice (pointer, length, capacity) of `*g`.
    pub(crate) allgs: u64,
    /// `runtime.semtable` and its size in bytes, if known.
    pub(crate) semtable: Option<(u64, u64)>,
}

/// What a goroutine waits on, as the runtime records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum WaitsOn {
    /// The channels of its sudogs (one; several for a select).
    Channels(Vec<u64>),
    /// The semaphore address it sleeps on (`sync.Mutex`, `WaitGroup`,
    /// `RWMutex`: the address of the primitive's semaphore word).
    Semaphore(u64),
}

/// One goroutine as read.
#[derive(Clone, Debug)]
pub(crate) struct RawG {
    pub(crate) goid: u64,
    pub(crate) status: Status,
    /// The raw wait reason number (meaningful while waiting).
    pub(crate) reason: u8,
    /// `g.waitsince` (nanotime, CLOCK_MONOTONIC), 0 when not recorded.
    pub(crate) waitsince: i64,
    /// The M's thread id, for a running or in-syscall goroutine.
    pub(crate) tid: Option<u32>,
    pub(crate) gopc: u64,
    /// Return addresses (and the saved pc), innermost first, as read;
    /// goroutines parked at one place share one list.
    pub(crate) pcs: Arc<[u64]>,
    /// Where the stack walk ended early (`None`: it reached the end).
    pub(crate) stack_note: Option<&'static str>,
    pub(crate) waits_on: Option<WaitsOn>,
    /// `g.labels`: where its pprof labels are (0: none set).
    pub(crate) labels: u64,
    /// Changed while read, twice: only its id and status are kept.
    pub(crate) torn: bool,
}

/// What [`read`] found, and what it could not read.
#[derive(Debug, Default)]
pub(crate) struct Read {
    pub(crate) goroutines: Vec<RawG>,
    /// Goroutines whose `g` could not be read (freed while read).
    pub(crate) unreadable: usize,
}

fn u64_at(b: &[u8], off: u64) -> u64 {
    let o = off as usize;
    b.get(o..o + 8)
        .map_or(0, |s| u64::from_le_bytes(s.try_into().unwrap_or_default()))
}

fn u32_at(b: &[u8], off: u64) -> u32 {
    let o = off as usize;
    b.get(o..o + 4)
        .map_or(0, |s| u32::from_le_bytes(s.try_into().unwrap_or_default()))
}

/// The fields of a `g` that say whether it moved.
fn moved_key(b: &[u8], l: &Layout) -> (u32, u64, u64, u64, u64, u64, u64) {
    (
        u32_at(b, l.status),
        u64_at(b, l.goid),
        u64_at(b, l.sched_sp),
        u64_at(b, l.sched_pc),
        u64_at(b, l.syscall_sp),
        u64_at(b, l.waiting),
        u64_at(b, l.labels),
    )
}

/// Unwinding by frame sizes: the binary's function table, and the
/// executable's load bias (process address − binary address).
pub(crate) struct Unwind<'t> {
    pub(crate) table: &'t dyn super::FuncTable,
    pub(crate) bias: u64,
    /// Where every goroutine's stack begins (`runtime.goexit`, and
    /// `runtime.mstart` for g0s), binary addresses: a walk ends there.
    pub(crate) outermost: Vec<(u64, u64)>,
    /// Frame sizes already looked up, by pc (direct-mapped): goroutines
    /// by the thousand park at the same few places, and decoding a
    /// function's SP table costs more than the rest of its frame's walk.
    deltas: Box<[Cell<(u64, i32)>]>,
}

/// Entries of [`Unwind`]'s frame size cache (a power of two).
const DELTAS: usize = 1024;
/// A frame size the table has none for, in the cache.
const NO_DELTA: i32 = i32::MIN;

impl<'t> Unwind<'t> {
    /// Unwinding with `table`, for an executable loaded at `bias`.
    pub(crate) fn new(table: &'t dyn super::FuncTable, bias: u64) -> Self {
        let outermost = ["runtime.goexit", "runtime.mstart"]
            .iter()
            .filter_map(|n| table.func_range(n))
            .collect();
        Unwind {
            table,
            bias,
            outermost,
            deltas: (0..DELTAS).map(|_| Cell::new((u64::MAX, 0))).collect(),
        }
    }

    /// The frame size at binary address `at` ([`super::FuncTable::sp_delta`]),
    /// looked up once per pc.
    fn sp_delta(&self, at: u64) -> Option<i32> {
        let slot = &self.deltas[(at.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 54) as usize % DELTAS];
        let (pc, delta) = slot.get();
        if pc == at {
            return (delta != NO_DELTA).then_some(delta);
        }
        let d = self.table.sp_delta(at);
        slot.set((at, d.unwrap_or(NO_DELTA)));
        d.filter(|&d| d != NO_DELTA)
    }
}

/// The part of a goroutine's stack a walk reads, copied in one read: from
/// its saved SP up to the stack's top (at most [`STACK_COPY`] bytes).
/// Borrowed from the batch's reads when they hold it.
struct StackCopy<'a> {
    at: u64,
    bytes: Cow<'a, [u8]>,
}

/// Bytes of a stack copied at most; deeper words are read one by one.
const STACK_COPY: u64 = 16 * 1024;

impl<'a> StackCopy<'a> {
    fn new(mem: &dyn Memory, ahead: Option<&'a Prefetched<'_>>, sp: u64, hi: u64) -> Self {
        let len = hi.saturating_sub(sp).min(STACK_COPY) as usize;
        if let Some(b) = ahead.and_then(|a| a.slice(sp, len)) {
            return StackCopy {
                at: sp,
                bytes: Cow::Borrowed(b),
            };
        }
        let mut bytes = vec![0u8; len];
        if len == 0 || mem.read(sp, &mut bytes).is_err() {
            bytes.clear();
        }
        StackCopy {
            at: sp,
            bytes: Cow::Owned(bytes),
        }
    }

    /// The word at `addr`: from the copy, else read.
    fn word(&self, mem: &dyn Memory, addr: u64) -> std::io::Result<u64> {
        if let Some(off) = addr.checked_sub(self.at)
            && off + 8 <= self.bytes.len() as u64
        {
            return Ok(u64_at(&self.bytes, off));
        }
        mem.read_u64(addr)
    }
}

/// Goroutines read per batch: their `g`s, stacks and sudogs are read
/// with a few `process_vm_readv` calls, and held only for the batch.
const BATCH: usize = 4096;

/// `g`s closer than this are read as one region ([`read_coalesced`]):
/// the `g`s of one span lie 48 bytes apart (Go 1.19), and a span's worth
/// is pinned and copied at once.
const GAP: u64 = 512;
/// The longest region made of neighbouring `g`s.
const MERGED: u64 = 1 << 20;
/// What the walks read ahead (the live tops of stacks, sudogs) is read
/// with its neighbours on the same page: two 2 KiB stacks share a page,
/// whose pinning costs more than copying the 1.7 KiB between their tops
/// (measured: 5 % less CPU for the whole report on 100,000 goroutines);
/// further apart, the copy would cost more than it saves.
const AHEAD_GAP: u64 = 2048;
const AHEAD_MERGED: u64 = 4096;

/// The goroutines' stacks (return addresses), each distinct one once:
/// goroutines parked at one place share it.
#[derive(Default)]
struct Stacks(foldhash::HashSet<Arc<[u64]>>);

impl Stacks {
    fn intern(&mut self, pcs: &[u64]) -> Arc<[u64]> {
        if let Some(s) = self.0.get(pcs) {
            return s.clone();
        }
        let s: Arc<[u64]> = pcs.into();
        self.0.insert(s.clone());
        s
    }
}

/// Every goroutine of the process (dead ones skipped), in `allgs` order;
/// stacks unwound by frame sizes with `unwind`, else by frame pointers.
pub(crate) fn read(
    mem: &dyn Memory,
    l: &Layout,
    roots: Roots,
    unwind: Option<&Unwind<'_>>,
) -> std::io::Result<Read> {
    // The slice's pointer and length in one read: one moment's pair.
    let mut hdr = [0u8; 16];
    mem.read(roots.allgs, &mut hdr)?;
    let ptr = u64_at(&hdr, 0);
    let len = u64_at(&hdr, 8);
    if len > MAX_GOROUTINES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("runtime.allgs's length reads {len}: not a goroutine count"),
        ));
    }
    let mut raw = vec![0u8; len as usize * 8];
    mem.read(ptr, &mut raw)?;
    let gs: Vec<u64> = raw
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
        .collect();
    let sema = roots
        .semtable
        .map(|(at, size)| semaphore_waiters(mem, l, at, size))
        .unwrap_or_default();
    let mut out = Read::default();
    let mut stacks = Stacks::default();
    for batch in gs.chunks(BATCH) {
        read_batch(mem, l, batch, &sema, unwind, &mut stacks, &mut out);
    }
    Ok(out)
}

/// The goroutines of `gs` (a batch of `allgs`) into `out`: every `g`
/// read, then what their walks will read (stacks, sudogs) read ahead, the
/// goroutines made from those copies, then every `g` read again. A `g`
/// whose status or registers moved meanwhile is read again alone, then
/// marked torn (its stack dropped) if it moved again.
fn read_batch(
    mem: &dyn Memory,
    l: &Layout,
    gs: &[u64],
    sema: &HashMap<u64, u64>,
    unwind: Option<&Unwind<'_>>,
    stacks: &mut Stacks,
    out: &mut Read,
) {
    let g_len = l.g_read as usize;
    let regions: Vec<(u64, usize)> = gs.iter().map(|&gp| (gp, g_len)).collect();
    let mut first = vec![0u8; g_len * gs.len()];
    let read = read_coalesced(mem, &regions, &mut first, GAP, MERGED);
    let mut ahead = Prefetched::new(mem);
    // What the walks will read: each stack from its saved SP up (as
    // `walk_sp` copies it), each waiting goroutine's first sudog.
    let sudog_len = [l.sudog_c, l.sudog_waitlink, l.sudog_elem]
        .into_iter()
        .max()
        .unwrap_or(0) as usize
        + 8;
    let mut wants = Vec::new();
    let mut sudogs = Vec::new();
    for (i, b) in first.chunks_exact(g_len).enumerate() {
        if !read[i] || gs[i] == 0 {
            continue;
        }
        let st = status(u32_at(b, l.status));
        let hi = u64_at(b, l.stack_hi);
        let sp = match st {
            Status::Syscall => u64_at(b, l.syscall_sp),
            Status::Waiting | Status::Runnable => u64_at(b, l.sched_sp),
            _ => 0,
        };
        if unwind.is_some() && sp != 0 && hi > sp {
            wants.push((sp, hi.saturating_sub(sp).min(STACK_COPY) as usize));
        }
        let s = u64_at(b, l.waiting);
        if st == Status::Waiting && s != 0 {
            sudogs.push((s, sudog_len));
        }
    }
    wants.extend_from_slice(&sudogs);
    ahead.fetch(&wants);
    // The sudogs of a select: one per case, linked by `waitlink`.
    for _ in 0..MAX_SUDOGS {
        let next: Vec<(u64, usize)> = sudogs
            .iter()
            .filter_map(|&(s, _)| ahead.read_u64(s + l.sudog_waitlink).ok())
            .filter(|&n| n != 0 && !ahead.has(n))
            .map(|n| (n, sudog_len))
            .collect();
        if next.is_empty() {
            break;
        }
        ahead.fetch(&next);
        sudogs = next;
    }
    let mut again = vec![0u8; g_len * gs.len()];
    let reread = read_coalesced(mem, &regions, &mut again, GAP, MERGED);
    let mut scratch = Vec::with_capacity(MAX_FRAMES);
    for (i, &gp) in gs.iter().enumerate() {
        if !read[i] || gp == 0 {
            out.unreadable += 1;
            continue;
        }
        let was = &first[i * g_len..(i + 1) * g_len];
        let now = &again[i * g_len..(i + 1) * g_len];
        let g = if reread[i] && moved_key(now, l) == moved_key(was, l) {
            one(
                &ahead,
                Some(&ahead),
                l,
                gp,
                was,
                sema,
                unwind,
                stacks,
                &mut scratch,
            )
        } else {
            // It moved (or could not be read again): alone, from its
            // latest bytes, and once more to see it hold still.
            let buf = if reread[i] { now } else { was };
            let g = one(mem, None, l, gp, buf, sema, unwind, stacks, &mut scratch);
            let mut check = vec![0u8; g_len];
            let held =
                mem.read(gp, &mut check).is_ok() && moved_key(&check, l) == moved_key(buf, l);
            g.map(|mut g| {
                if !held {
                    g.torn = true;
                    g.pcs = stacks.intern(&[]);
                    g.waits_on = None;
                    g.labels = 0;
                    g.stack_note = Some("changed while read");
                }
                g
            })
        };
        if let Some(g) = g {
            out.goroutines.push(g);
        }
    }
}

/// Sudogs of one goroutine followed at most (a select's cases).
const MAX_SUDOGS: usize = 64;

/// Regions of a process's memory read ahead in batches, served to the
/// reads that follow them; any other read goes to the process.
struct Prefetched<'m> {
    mem: &'m dyn Memory,
    /// `(start, length, offset in bytes)` of each region read whole,
    /// sorted by start.
    regions: Vec<(u64, usize, usize)>,
    bytes: Vec<u8>,
}

impl<'m> Prefetched<'m> {
    fn new(mem: &'m dyn Memory) -> Self {
        Prefetched {
            mem,
            regions: Vec::new(),
            bytes: Vec::new(),
        }
    }

    /// Reads `at` ahead (those that cannot be read are left to the
    /// process's own reads, which fail the same way).
    fn fetch(&mut self, at: &[(u64, usize)]) {
        let mut buf = vec![0u8; at.iter().map(|&(_, n)| n).sum()];
        let ok = read_coalesced(self.mem, at, &mut buf, AHEAD_GAP, AHEAD_MERGED);
        let base = self.bytes.len();
        let mut off = 0;
        for (i, &(addr, n)) in at.iter().enumerate() {
            if ok[i] && n > 0 {
                self.regions.push((addr, n, base + off));
            }
            off += n;
        }
        self.bytes.extend_from_slice(&buf);
        self.regions.sort_unstable_by_key(|r| r.0);
    }

    /// The region whose start is the last at or below `addr`.
    fn region(&self, addr: u64) -> Option<(u64, usize, usize)> {
        let i = self.regions.partition_point(|r| r.0 <= addr);
        i.checked_sub(1).map(|i| self.regions[i])
    }

    /// Whether a region starts at `addr`.
    fn has(&self, addr: u64) -> bool {
        self.region(addr).is_some_and(|r| r.0 == addr)
    }

    /// The `len` bytes at `addr`, when one region read ahead holds them.
    fn slice(&self, addr: u64, len: usize) -> Option<&[u8]> {
        let (start, n, off) = self.region(addr)?;
        let from = (addr - start) as usize;
        (from + len <= n).then(|| &self.bytes[off + from..off + from + len])
    }
}

impl Memory for Prefetched<'_> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> std::io::Result<()> {
        if let Some((start, len, off)) = self.region(addr) {
            let from = (addr - start) as usize;
            if from + buf.len() <= len {
                buf.copy_from_slice(&self.bytes[off + from..off + from + buf.len()]);
                return Ok(());
            }
        }
        self.mem.read(addr, buf)
    }
}

/// One goroutine from its `g` bytes; `None` for a dead one. Its stack is
/// read from `ahead` when that holds it (else from `mem`), walked into
/// `scratch` and interned in `stacks`.
#[allow(clippy::too_many_arguments)]
fn one(
    mem: &dyn Memory,
    ahead: Option<&Prefetched<'_>>,
    l: &Layout,
    gp: u64,
    b: &[u8],
    sema: &HashMap<u64, u64>,
    unwind: Option<&Unwind<'_>>,
    stacks: &mut Stacks,
    scratch: &mut Vec<u64>,
) -> Option<RawG> {
    let st = status(u32_at(b, l.status));
    if st == Status::Skip {
        return None;
    }
    let lo = u64_at(b, l.stack_lo);
    let hi = u64_at(b, l.stack_hi);
    let m = u64_at(b, l.m);
    let tid = match st {
        Status::Running | Status::Syscall if m != 0 => mem
            .read_u64(m + l.m_procid)
            .ok()
            .and_then(|t| u32::try_from(t).ok())
            .filter(|&t| t != 0),
        _ => None,
    };
    let reason = b.get(l.waitreason as usize).copied().unwrap_or(0);
    scratch.clear();
    let stack_note = match st {
        Status::Running => Some("running: its saved registers are stale"),
        Status::Syscall => match unwind {
            Some(u) => {
                let (pc, sp) = (u64_at(b, l.syscall_pc), u64_at(b, l.syscall_sp));
                let copy = StackCopy::new(mem, ahead, sp, hi);
                walk_sp(mem, &copy, u, pc, sp, lo, hi, scratch)
            }
            // Without frame sizes, its frames cannot be told apart: the
            // frame pointer its thread holds has moved on.
            None => {
                scratch.push(u64_at(b, l.syscall_pc));
                Some("in a system call: the frames above its entry need the binary's pclntab")
            }
        },
        _ => match unwind {
            Some(u) => {
                let (pc, sp) = (u64_at(b, l.sched_pc), u64_at(b, l.sched_sp));
                let copy = StackCopy::new(mem, ahead, sp, hi);
                walk_sp(mem, &copy, u, pc, sp, lo, hi, scratch)
            }
            None => walk(
                mem,
                u64_at(b, l.sched_pc),
                u64_at(b, l.sched_bp),
                lo,
                hi,
                scratch,
            ),
        },
    };
    let pcs = stacks.intern(scratch);
    let waits_on = if st == Status::Waiting {
        let s = u64_at(b, l.waiting);
        match (s != 0).then(|| channels(mem, l, s)) {
            Some(Some(c)) => Some(WaitsOn::Channels(c)),
            // A sudog without a channel: newer runtimes (Go 1.27's does)
            // point a goroutine at its semaphore's (or sync.Cond's) sudog.
            Some(None) => mem
                .read_u64(s + l.sudog_elem)
                .ok()
                .filter(|&a| a != 0)
                .map(WaitsOn::Semaphore),
            None => sema.get(&gp).map(|&a| WaitsOn::Semaphore(a)),
        }
    } else {
        None
    };
    Some(RawG {
        goid: u64_at(b, l.goid),
        status: st,
        reason,
        waitsince: u64_at(b, l.waitsince) as i64,
        tid,
        gopc: u64_at(b, l.gopc),
        pcs,
        stack_note,
        waits_on,
        labels: u64_at(b, l.labels),
        torn: false,
    })
}

/// The frames from a saved `pc` and frame pointer `bp`, within the stack
/// `[lo, hi)`, into `pcs`: each frame's saved frame pointer is at `bp`,
/// its return address at `bp + 8`. Says where the walk ended early.
fn walk(
    mem: &dyn Memory,
    pc: u64,
    mut bp: u64,
    lo: u64,
    hi: u64,
    pcs: &mut Vec<u64>,
) -> Option<&'static str> {
    pcs.push(pc);
    while pcs.len() < MAX_FRAMES {
        if bp == 0 {
            return None;
        }
        if bp < lo || bp + 16 > hi || !bp.is_multiple_of(8) {
            return Some("a frame pointer left the goroutine's stack");
        }
        let mut f = [0u8; 16];
        if mem.read(bp, &mut f).is_err() {
            return Some("its stack could not be read");
        }
        let next = u64::from_le_bytes(f[..8].try_into().unwrap_or_default());
        let ret = u64::from_le_bytes(f[8..].try_into().unwrap_or_default());
        if ret == 0 {
            return None;
        }
        pcs.push(ret);
        // Frames grow toward higher addresses, strictly.
        if next != 0 && next <= bp {
            return Some("a frame pointer went backwards");
        }
        bp = next;
    }
    Some("deeper than the frames read")
}

/// The frames from a saved `pc` and `sp`, by the frame sizes of the
/// binary's function table, into `pcs`: each frame's return address is
/// its frame size above its SP, and the caller's SP 8 bytes above that.
/// Ends after `runtime.goexit`, where every goroutine starts; says where
/// it ended early. `copy` holds the stack from `sp` up.
#[allow(clippy::too_many_arguments)]
fn walk_sp(
    mem: &dyn Memory,
    copy: &StackCopy<'_>,
    u: &Unwind<'_>,
    mut pc: u64,
    mut sp: u64,
    lo: u64,
    hi: u64,
    pcs: &mut Vec<u64>,
) -> Option<&'static str> {
    pcs.push(pc);
    while pcs.len() < MAX_FRAMES {
        let at = pc.wrapping_sub(u.bias);
        let call = at.saturating_sub(1);
        if u.outermost.iter().any(|&(a, b)| (a..b).contains(&call)) {
            return None;
        }
        let Some(delta) = u.sp_delta(at).and_then(|d| u64::try_from(d).ok()) else {
            return Some("a frame the binary's pclntab has no size for");
        };
        let slot = sp + delta;
        if slot < lo || slot + 8 > hi {
            return Some("a frame left the goroutine's stack");
        }
        let Ok(ret) = copy.word(mem, slot) else {
            return Some("its stack could not be read");
        };
        if ret == 0 {
            return None;
        }
        pcs.push(ret);
        pc = ret;
        sp = slot + 8;
    }
    Some("deeper than the frames read")
}

/// The channels of the sudog list starting at `s` (a select has one per
/// case); `None` when none names a channel.
fn channels(mem: &dyn Memory, l: &Layout, mut s: u64) -> Option<Vec<u64>> {
    let mut v = Vec::new();
    while s != 0 && v.len() < 64 {
        let c = mem.read_u64(s + l.sudog_c).ok()?;
        if c != 0 && !v.contains(&c) {
            v.push(c);
        }
        s = mem.read_u64(s + l.sudog_waitlink).ok()?;
    }
    (!v.is_empty()).then_some(v)
}

/// Sudog fields the semaphore table's walk reads (stable across the
/// supported versions: `g`, `next`, `prev` lead the struct).
const SUDOG_G: u64 = 0;
const SUDOG_NEXT: u64 = 8;
const SUDOG_PREV: u64 = 16;
/// `semaRoot.treap`, after its 8-byte `mutex`.
const SEMAROOT_TREAP: u64 = 8;
/// `semTabSize`.
const SEMTAB: u64 = 251;

/// `g` address → the semaphore address it sleeps on, from the runtime's
/// semaphore table: each root's treap of waited-on addresses (`prev`,
/// `next` its children), each with its list of waiters (`waitlink`).
fn semaphore_waiters(mem: &dyn Memory, l: &Layout, at: u64, size: u64) -> HashMap<u64, u64> {
    let mut out = HashMap::new();
    if size == 0 || !size.is_multiple_of(SEMTAB) {
        return out;
    }
    let stride = size / SEMTAB;
    let mut table = vec![0u8; size as usize];
    if mem.read(at, &mut table).is_err() {
        return out;
    }
    // Bounded: a table changing under the reader cannot loop it.
    let mut budget = 10_000_000usize;
    for i in 0..SEMTAB {
        let mut todo = vec![u64_at(&table, i * stride + SEMAROOT_TREAP)];
        while let Some(node) = todo.pop() {
            if node == 0 || budget == 0 {
                continue;
            }
            budget -= 1;
            let Ok(elem) = mem.read_u64(node + l.sudog_elem) else {
                continue;
            };
            let mut w = node;
            while w != 0 && budget > 0 {
                budget -= 1;
                if let Ok(g) = mem.read_u64(w + SUDOG_G) {
                    out.insert(g, elem);
                }
                w = mem.read_u64(w + l.sudog_waitlink).unwrap_or(0);
            }
            todo.push(mem.read_u64(node + SUDOG_PREV).unwrap_or(0));
            todo.push(mem.read_u64(node + SUDOG_NEXT).unwrap_or(0));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Memory made of a few regions.
    struct Fixture(Vec<(u64, Vec<u8>)>);

    impl Memory for Fixture {
        fn read(&self, addr: u64, buf: &mut [u8]) -> std::io::Result<()> {
            for (at, d) in &self.0 {
                if addr >= *at && addr + buf.len() as u64 <= at + d.len() as u64 {
                    let o = (addr - at) as usize;
                    buf.copy_from_slice(&d[o..o + buf.len()]);
                    return Ok(());
                }
            }
            Err(std::io::Error::from_raw_os_error(libc::EFAULT))
        }
    }

    fn put(d: &mut [u8], off: u64, v: u64) {
        d[off as usize..off as usize + 8].copy_from_slice(&v.to_le_bytes());
    }

    /// A live process in miniature: fixed regions, and `g`s whose bytes
    /// depend on how often each was read (the last version repeats): a
    /// goroutine that moves while it is read.
    struct Moving {
        fixed: Fixture,
        gs: HashMap<u64, Vec<Vec<u8>>>,
        reads: std::cell::RefCell<HashMap<u64, usize>>,
    }

    impl Memory for Moving {
        fn read(&self, addr: u64, buf: &mut [u8]) -> std::io::Result<()> {
            let Some(versions) = self.gs.get(&addr) else {
                return self.fixed.read(addr, buf);
            };
            let mut reads = self.reads.borrow_mut();
            let n = reads.entry(addr).or_default();
            let g = &versions[(*n).min(versions.len() - 1)];
            *n += 1;
            buf.copy_from_slice(&g[..buf.len()]);
            Ok(())
        }
    }

    /// Every frame 16 bytes, the walk's end at `runtime.goexit`.
    struct Frames;

    impl super::super::FuncTable for Frames {
        fn func_range(&self, name: &str) -> Option<(u64, u64)> {
            (name == "runtime.goexit").then_some((0x9000, 0x9100))
        }
        fn sp_delta(&self, _pc: u64) -> Option<i32> {
            Some(0x10)
        }
    }

    /// A `g` waiting (chan receive) on the stack `[0x10000, 0x12000)`,
    /// parked with `sp` and `pc`.
    fn g_bytes(l: &Layout, goid: u64, sp: u64, pc: u64) -> Vec<u8> {
        let mut b = vec![0u8; l.g_read as usize];
        put(&mut b, l.stack_lo, 0x10000);
        put(&mut b, l.stack_hi, 0x12000);
        put(&mut b, l.sched_sp, sp);
        put(&mut b, l.sched_pc, pc);
        put(&mut b, l.goid, goid);
        b[l.status as usize..l.status as usize + 4].copy_from_slice(&4u32.to_le_bytes());
        b[l.waitreason as usize] = 14;
        b
    }

    /// Goroutines that move while read: one holds still (its stack read
    /// ahead with the others'), one moves once (read again alone, its
    /// latest stack kept), one moves on every read (marked torn, its stack
    /// dropped, never a stack of mixed moments).
    #[test]
    fn goroutines_that_move_while_read_are_read_again_or_marked_torn() {
        let l = super::super::layout::table("go1.19.8").unwrap();
        let mut stack = vec![0u8; 0x2000];
        // From sp 0x11000: a return into 0x1001 at +0x10, then one into
        // goexit at +0x28. From sp 0x11800: 0x2001, then goexit.
        put(&mut stack, 0x1010, 0x1001);
        put(&mut stack, 0x1028, 0x9001);
        put(&mut stack, 0x1810, 0x2001);
        put(&mut stack, 0x1828, 0x9001);
        let mut allgs = vec![0u8; 16];
        put(&mut allgs, 0, 0x200);
        put(&mut allgs, 8, 3);
        let mut list = vec![0u8; 24];
        put(&mut list, 0, 0x1000);
        put(&mut list, 8, 0x2000);
        put(&mut list, 16, 0x3000);
        let still = g_bytes(&l, 1, 0x11000, 0x500);
        let (a, b) = (
            g_bytes(&l, 2, 0x11000, 0x500),
            g_bytes(&l, 2, 0x11800, 0x600),
        );
        let (c, d) = (
            g_bytes(&l, 3, 0x11000, 0x500),
            g_bytes(&l, 3, 0x11800, 0x600),
        );
        let mem = Moving {
            fixed: Fixture(vec![(0x100, allgs), (0x200, list), (0x10000, stack)]),
            gs: HashMap::from([
                (0x1000, vec![still]),
                // Moves between the first read and the second, then holds.
                (0x2000, vec![a, b]),
                // Moves on every read.
                (0x3000, vec![c.clone(), d.clone(), c.clone(), d, c]),
            ]),
            reads: Default::default(),
        };
        let u = Unwind::new(&Frames, 0);
        let roots = Roots {
            allgs: 0x100,
            semtable: None,
        };
        let r = read(&mem, &l, roots, Some(&u)).unwrap();
        let by_id = |id| r.goroutines.iter().find(|g| g.goid == id).unwrap();
        let g1 = by_id(1);
        assert_eq!(
            (g1.pcs.to_vec(), g1.torn, g1.stack_note),
            (vec![0x500, 0x1001, 0x9001], false, None)
        );
        let g2 = by_id(2);
        assert!(!g2.torn, "it held still once read again");
        assert_eq!(
            *g2.pcs,
            [0x600, 0x2001, 0x9001],
            "the stack of its latest registers"
        );
        let g3 = by_id(3);
        assert!(g3.torn);
        assert!(g3.pcs.is_empty());
        assert_eq!(g3.stack_note, Some("changed while read"));
        assert_eq!(g3.status, Status::Waiting, "its id and status are kept");
        assert_eq!(r.unreadable, 0);
    }

    #[test]
    fn frame_pointers_are_followed_within_the_stack_only() {
        let (lo, hi) = (0x1000, 0x2000);
        let mut stack = vec![0u8; 0x1000];
        // bp 0x1100 → [0x1200, ret 0xaaa]; 0x1200 → [0, ret 0xbbb].
        put(&mut stack, 0x100, 0x1200);
        put(&mut stack, 0x108, 0xaaa);
        put(&mut stack, 0x200, 0);
        put(&mut stack, 0x208, 0xbbb);
        let mem = Fixture(vec![(lo, stack.clone())]);
        let walked = |mem: &Fixture| {
            let mut pcs = Vec::new();
            let note = walk(mem, 0x999, 0x1100, lo, hi, &mut pcs);
            (pcs, note)
        };
        assert_eq!(walked(&mem), (vec![0x999, 0xaaa, 0xbbb], None));
        // A frame pointer out of the stack ends the walk, and says so.
        put(&mut stack, 0x200, 0x9000);
        let mem = Fixture(vec![(lo, stack.clone())]);
        let (pcs, note) = walked(&mem);
        assert_eq!(pcs, [0x999, 0xaaa, 0xbbb]);
        assert!(note.unwrap().contains("left"));
        // Backwards: a loop is not walked.
        put(&mut stack, 0x200, 0x1100);
        let mem = Fixture(vec![(lo, stack)]);
        let (pcs, note) = walked(&mem);
        assert_eq!(pcs.len(), 3);
        assert!(note.unwrap().contains("backwards"));
    }
}
