//! Off-CPU time of one process, collected: the kernel sums it by stack
//! ([`OffCpuProbe`]); this side answers the program's questions as the
//! window runs — it unwinds each stack copy the program sends, with the
//! CFI of the target's binaries, and tells the program where that stack's
//! return addresses lie (see `rip_ebpf::offcpu`) — and tells it where each
//! thread's librip ring slot is, so the last snap can be read at each
//! switch.

use std::{collections::HashMap, sync::Arc};

use librip::{
    format::{Layout, SlotKind, THREAD_META_SIZE},
    reader::{RingFile, SlotState, open_rings_in},
};
use rip_ebpf::offcpu::{
    MAX_SLOTS, OffKey, OffStart, OffStats, OffTotal, Place, ReturnSlots, STACK_COPY, SnapSlot,
    hash_words,
};

use super::{
    kernel::offcpu::OffCpuProbe,
    memory::ProcessMemory,
    namespaces::TidMap,
    procfs,
    runtime::python::{PyFrame, Python},
    stacks::{Stacks, unwind},
};
use crate::{collect::Result, discover::maps::ProcessMaps, util::monotonic_ns};

/// What a window of off-CPU observation gathered, unsymbolized.
#[derive(Debug, Default)]
pub struct OffCpuData {
    /// The sums, by key.
    pub totals: Vec<(OffKey, OffTotal)>,
    /// Unwound user stacks (innermost first) by the hash the program gave
    /// them. A hash missing here was never unwound (its copy was lost).
    pub user_stacks: HashMap<u64, Arc<[u64]>>,
    /// Kernel stacks (innermost first) by id.
    pub kernel_stacks: HashMap<i32, Vec<u64>>,
    /// The program's counters.
    pub stats: OffStats,
    /// Threads off the CPU for the whole window: asleep when it began, they
    /// never ran during it. Their time (the window) is in `totals`, under
    /// the stack read from their saved registers at the start.
    pub whole_window: Vec<u32>,
    /// The window, ns: from just before the program was attached to just
    /// after it was detached, so that every period summed lies inside it.
    pub window_ns: u64,
    /// The Python frame chains read while periods ran, by the key each
    /// period is summed under, one per period read (`None`: its chain
    /// changed at every read), when the process runs CPython.
    pub(crate) python: Option<HashMap<OffKey, Vec<Option<Vec<PyFrame>>>>>,
}

impl OffCpuData {
    /// The user stack `key`'s time is charged to, and whether it was
    /// unwound: the unwound stack, else where the thread entered the
    /// kernel (its copy was lost), else none.
    pub(crate) fn user_stack(&self, key: &OffKey) -> (Arc<[u64]>, bool) {
        match self.user_stacks.get(&key.hash) {
            Some(s) => (s.clone(), true),
            None if key.ip != 0 => (Arc::from(vec![key.ip]), false),
            None => (Arc::from(Vec::new()), false),
        }
    }

    /// The names of the threads in the sums, read from process `pid`'s
    /// /proc (`None`: the thread exited).
    pub(crate) fn thread_names(&self, pid: u32) -> HashMap<u32, Option<String>> {
        let mut names = HashMap::new();
        for (key, _) in &self.totals {
            names.entry(key.tid).or_insert_with(|| {
                crate::discover::read_proc(pid, key.tid, "comm")
                    .ok()
                    .map(|s| s.trim_end().to_string())
            });
        }
        names
    }
}

/// Answers the off-CPU program during a window.
pub struct OffCpuCollector {
    probe: OffCpuProbe,
    /// CLOCK_MONOTONIC ns when the window began (just before the attach).
    attached_ns: u64,
    /// The periods started for threads asleep at the start, by thread:
    /// their key, and the CPU time the thread had run then.
    seeds: HashMap<u32, (OffKey, u64)>,
    stacks: Stacks,
    user: HashMap<u64, Arc<[u64]>>,
    /// Stacks unwound since [`Self::take_new_stacks`] was last called.
    fresh: Vec<Arc<[u64]>>,
    slots: Vec<u64>,
    python: Option<PythonPeriods>,
}

/// The Python frames of the periods that run, read while they run.
struct PythonPeriods {
    python: Python,
    mem: ProcessMemory,
    /// Periods shorter than this are not summed: a read counts only once
    /// its period has lasted that long.
    min_block_ns: u64,
    /// Periods already read: (tid, start).
    seen: std::collections::HashSet<(u32, u64)>,
    reads: HashMap<OffKey, Vec<Option<Vec<PyFrame>>>>,
}

impl OffCpuCollector {
    /// Serves `probe`, unwinding with `stacks` (the target's unwinder).
    /// Make it as soon as the probe is attached: the window began just
    /// before.
    pub fn new(probe: OffCpuProbe, stacks: Stacks) -> Self {
        OffCpuCollector {
            attached_ns: probe.start_ns(),
            probe,
            seeds: HashMap::new(),
            stacks,
            user: HashMap::new(),
            fresh: Vec::new(),
            slots: Vec::new(),
            python: None,
        }
    }

    /// Reads the Python frames of process `pid`'s threads (it runs
    /// `python`) while their off-CPU periods run ([`Self::read_python`]),
    /// for the periods of at least `min_block_ns`.
    pub(crate) fn watch_python(&mut self, python: Python, pid: u32, min_block_ns: u64) {
        self.python = Some(PythonPeriods {
            python,
            mem: ProcessMemory::new(pid),
            min_block_ns,
            seen: Default::default(),
            reads: HashMap::new(),
        });
    }

    /// Reads the Python frame chain of each thread whose off-CPU period
    /// started since the last call, and keeps it for that period's key
    /// only when the same period still runs after the read (the thread
    /// did not run in between, so the chain is the one it left the CPU
    /// with) and has lasted long enough to be summed. A period that ended
    /// before it was read has no read: its key is left native.
    pub fn read_python(&mut self) -> Result<()> {
        let Some(p) = &mut self.python else {
            return Ok(());
        };
        let new: Vec<(u32, OffStart)> = self
            .probe
            .starts()?
            .into_iter()
            .filter(|(tid, s)| s.start_ns != 0 && !p.seen.contains(&(*tid, s.start_ns)))
            .collect();
        if new.is_empty() {
            return Ok(());
        }
        let frames = p.python.thread_frames(&p.mem);
        let again: HashMap<u32, OffStart> = self.probe.starts()?.into_iter().collect();
        let now = monotonic_ns();
        for (tid, start) in new {
            let Some(chain) = frames.get(&u64::from(tid)) else {
                // No thread state: not a Python thread.
                p.seen.insert((tid, start.start_ns));
                continue;
            };
            if again.get(&tid) != Some(&start) {
                // It ran in between: the period read is over.
                p.seen.insert((tid, start.start_ns));
                continue;
            }
            if now.saturating_sub(start.start_ns) < p.min_block_ns {
                // Not summed yet, maybe never: read again next time.
                continue;
            }
            p.seen.insert((tid, start.start_ns));
            p.reads.entry(start.key).or_default().push(chain.clone());
        }
        Ok(())
    }

    /// Charges the threads of process `pid` asleep at the window's start
    /// from the start: each is given a period starting then, under the
    /// stack its saved registers show (and, with `snaps`, its last snap),
    /// which its first wakeup ends. Call it right after the attach.
    ///
    /// A thread found asleep with no switch seen since the attach has been
    /// off the CPU since before it. One that switched in between keeps
    /// the program's own period; one that wakes between the look and the
    /// seed runs with a stale period, which its next switch off replaces,
    /// and which is dropped at the end if it never switched again (it ran:
    /// its CPU time moved).
    pub fn seed_sleepers(&mut self, pid: u32, snaps: bool) -> Result<()> {
        let last = if snaps {
            last_snaps(pid)
        } else {
            HashMap::new()
        };
        let mut starts = Vec::new();
        let mut run = HashMap::new();
        for tid in procfs::tids(pid).unwrap_or_default() {
            let Some(ran) = procfs::run_time_ns(pid, tid) else {
                continue;
            };
            if !procfs::asleep(pid, tid) {
                continue;
            }
            // Not in a syscall (a fault): no registers to name it by.
            let Some(regs) = procfs::syscall_regs(pid, tid) else {
                continue;
            };
            let frames = self.stacks.unwind(&regs);
            let hash = hash_words(regs.ip, regs.sp, frames.iter().copied()) ^ SEED_MARK;
            self.user.insert(hash, frames.into());
            let key = OffKey {
                tid,
                kstack_id: -1,
                hash,
                ip: regs.ip,
                snap: last.get(&tid).copied().unwrap_or(0),
                ..OffKey::default()
            };
            starts.push((
                tid,
                OffStart {
                    start_ns: self.attached_ns,
                    key,
                },
            ));
            run.insert(tid, (key, ran));
        }
        for tid in self.probe.seed(&starts)? {
            if let Some(s) = run.remove(&tid) {
                self.seeds.insert(tid, s);
            }
        }
        Ok(())
    }

    /// Unwinds the stack copies the program sent since the last call and
    /// teaches it their return-address positions. Call it often (every
    /// tenth of a second): the program holds few copies at once.
    pub fn serve(&mut self) -> Result<()> {
        let pending = self.probe.take_pending()?;
        if pending.is_empty() {
            return Ok(());
        }
        let mut done = Vec::with_capacity(pending.len());
        for p in &pending {
            let len = (p.len as usize).min(STACK_COPY);
            let regs = unwind::regs(p.ip, p.sp, p.bp);
            let frames = self
                .stacks
                .unwind_copy_slots(&regs, &p.bytes[..len], &mut self.slots);
            let slots = return_slots(p.sp, &self.slots, len);
            let frames: Arc<[u64]> = frames.into();
            // The first answer for a place wins in the program (the hashes
            // summed so far stay meaningful); when this one is taken, the
            // program's next hash at this place is the one computed here.
            if self
                .probe
                .teach_slots(Place { ip: p.ip, sp: p.sp }, &slots)?
            {
                let words = frames.iter().skip(1).take(slots.count as usize).copied();
                let h = hash_words(p.ip, p.sp, words);
                self.probe.mark_known(h)?;
                self.user.insert(h, frames.clone());
            }
            self.probe.mark_known(p.hash)?;
            self.fresh.push(frames.clone());
            self.user.insert(p.hash, frames);
            done.push(p.hash);
        }
        self.probe.release(&done)
    }

    /// The stacks unwound since the last call: a command names them while
    /// the process still runs (see [`crate::StackSymbolizer`]'s cache).
    pub fn take_new_stacks(&mut self) -> Vec<Arc<[u64]>> {
        std::mem::take(&mut self.fresh)
    }

    /// Tells the program where the threads' ring slots are (by our
    /// thread ids; in a pid namespace of rip-probe's own, the ids of the
    /// threads created since the last call are learnt first).
    pub fn set_snap_slots(&mut self, slots: &[(u32, SnapSlot)]) -> Result<()> {
        self.probe.refresh_ids()?;
        self.probe.set_snap_slots(slots)
    }

    /// The off-CPU periods summed so far (for progress).
    pub fn summed(&self) -> u64 {
        self.probe.stats().map_or(0, |s| s.summed)
    }

    /// Detaches the program and reads everything back, for process `pid`,
    /// with off-CPU periods shorter than `min_block_ns` left out.
    ///
    /// The kernel sums a period when it ends. The periods still running at
    /// the end are cut there and added. A period started for a thread
    /// asleep at the start ([`Self::seed_sleepers`]) and never ended is
    /// the whole window if the thread has not run since, else dropped.
    /// A thread's last switch, as it exits, starts no period: it is
    /// charged until it exits.
    pub fn finish(mut self, pid: u32, min_block_ns: u64) -> Result<OffCpuData> {
        // The periods still running, read before they are cut.
        self.read_python()?;
        self.probe.detach()?;
        // The window ends once the detach has returned: no period summed
        // ends after it, so none reaches outside the window.
        let end_ns = monotonic_ns();
        // Threads created during the window (in a pid namespace of
        // rip-probe's own, their ids there).
        self.probe.refresh_ids()?;
        let window_ns = end_ns.saturating_sub(self.attached_ns);
        self.serve()?;
        let python = self.python.take().map(|p| p.reads);
        // Two keys may become one (threads whose ids in rip-probe's pid
        // namespace were never learnt are all 0): add, never overwrite.
        let mut totals: HashMap<OffKey, OffTotal> = HashMap::new();
        for (k, t) in self.probe.totals()? {
            let e = totals.entry(k).or_default();
            e.ns += t.ns;
            e.count += t.count;
        }
        let mut whole_window = Vec::new();
        for (tid, start) in self.probe.starts()? {
            if start.start_ns == 0 {
                continue;
            }
            let seeded = self
                .seeds
                .get(&tid)
                .filter(|(key, _)| start.start_ns == self.attached_ns && *key == start.key);
            if let Some(&(_, ran)) = seeded {
                // Never woken in the window, or woken before its period
                // was written and running since (its CPU time moved).
                if procfs::run_time_ns(pid, tid) != Some(ran) {
                    continue;
                }
                whole_window.push(tid);
            }
            let ns = end_ns.saturating_sub(start.start_ns);
            if ns >= min_block_ns {
                let t = totals.entry(start.key).or_default();
                t.ns += ns;
                t.count += 1;
            }
        }
        Ok(OffCpuData {
            totals: totals.into_iter().collect(),
            user_stacks: self.user,
            kernel_stacks: self.probe.kernel_stacks()?,
            stats: self.probe.stats()?,
            whole_window,
            window_ns,
            python,
        })
    }
}

/// Mixed into the hash of a stack read at the start for a thread asleep
/// then, so it never equals one the program computed.
const SEED_MARK: u64 = 0x5157_4f4c_455f_5749;

/// The return-address slots of an unwound copy as the program reads them:
/// byte offsets from `sp`, word-aligned, inside the copy, at most
/// [`MAX_SLOTS`]; the first that is not ends the list (the hash covers a
/// prefix of the frames).
fn return_slots(sp: u64, slots: &[u64], copied: usize) -> ReturnSlots {
    let mut out = ReturnSlots::default();
    for &a in slots.iter().take(MAX_SLOTS) {
        let Some(off) = a.checked_sub(sp) else { break };
        if off % 8 != 0 || off + 8 > copied as u64 {
            break;
        }
        out.offsets[out.count as usize] = off as u32;
        out.count += 1;
        out.span = off as u32 + 8;
    }
    out
}

/// Where each live thread's ring slot is in process `pid`'s memory, by
/// the thread's id as the kernel (and rip-probe) numbers it. Empty when
/// the process maps no ring.
pub fn snap_slots(pid: u32) -> Vec<(u32, SnapSlot)> {
    ring_threads(pid)
        .into_iter()
        .map(|t| (t.tid, t.slot))
        .collect()
}

/// Each live thread's last snap in process `pid`'s rings, by thread id
/// (kernel numbering).
pub fn last_snaps(pid: u32) -> HashMap<u32, u64> {
    ring_threads(pid)
        .into_iter()
        .filter_map(|t| Some((t.tid, t.last?)))
        .collect()
}

/// A live thread slot of a ring a process maps.
struct RingThread {
    tid: u32,
    slot: SnapSlot,
    last: Option<u64>,
}

fn ring_threads(pid: u32) -> Vec<RingThread> {
    let Ok(maps) = ProcessMaps::open(pid) else {
        return Vec::new();
    };
    let Ok(files) = maps.file_backed() else {
        return Vec::new();
    };
    let Ok(rings) = open_rings_in(pid, files) else {
        return Vec::new();
    };
    let ids = TidMap::of(pid);
    let mut out = Vec::new();
    for r in rings {
        let Some(base) = files
            .iter()
            .find(|m| m.file() == Some(r.path.as_path()) && m.offset == 0)
        else {
            continue;
        };
        let Ok(ring) = RingFile::read(r.file, &r.path) else {
            continue;
        };
        let h = ring.header();
        let Ok(layout) = Layout::new(h.thread_slots, h.coroutine_slots, h.depth) else {
            continue;
        };
        for s in ring.slots() {
            if s.kind != SlotKind::Thread || s.state != SlotState::Live {
                continue;
            }
            let tid = match &ids {
                Some(ids) => ids.host(s.id),
                None => u32::try_from(s.id).ok(),
            };
            let Some(tid) = tid else { continue };
            // The sequence word ends the slot's metadata; entries follow.
            let offset = layout.thread_region
                + u64::from(s.index) * u64::from(layout.thread_slot_size)
                + u64::from(THREAD_META_SIZE)
                - 8;
            let end = offset + 8 + u64::from(h.depth) * 8;
            if end > base.end - base.start {
                continue;
            }
            out.push(RingThread {
                tid,
                slot: SnapSlot {
                    seq_addr: base.start + offset,
                    mask: u64::from(h.depth.max(1) - 1),
                },
                last: s.entries.last().map(|e| e.addr),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Stack copies come from the target: random bytes, with registers
    /// pointing into our own code, unwind without panicking, and every
    /// slot found lies in the copy, one per frame after the first.
    #[test]
    fn hostile_stack_copies_unwind_to_slots_inside_the_copy() {
        let mut stacks = Stacks::new(std::process::id()).unwrap();
        let ip = hostile_stack_copies_unwind_to_slots_inside_the_copy as *const () as usize as u64;
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut slots = Vec::new();
        for round in 0..2000 {
            let len = (next() % 4096) as usize & !7;
            let mut bytes = vec![0u8; len];
            for w in bytes.chunks_mut(8) {
                // Half the words look like return addresses into our code.
                let v = if next() % 2 == 0 {
                    ip + next() % 0x10000
                } else {
                    next()
                };
                w.copy_from_slice(&v.to_le_bytes()[..w.len()]);
            }
            let sp = 0x7ff0_0000_0000 + (next() % 0x1000) * 8;
            let regs = unwind::regs(ip + round % 64, sp, next());
            let frames = stacks.unwind_copy_slots(&regs, &bytes, &mut slots);
            assert_eq!(slots.len(), frames.len().saturating_sub(1));
            let rs = return_slots(sp, &slots, len);
            assert!(rs.count as usize <= slots.len());
            assert!(rs.span as usize <= len);
            for &o in &rs.offsets[..rs.count as usize] {
                assert!(o as usize + 8 <= len && o % 8 == 0);
            }
        }
    }

    #[test]
    fn slots_stop_at_the_first_outside_the_copy() {
        let s = return_slots(1000, &[1008, 1040, 1000 + 4096, 2000], 4096);
        assert_eq!(s.count, 2);
        assert_eq!(&s.offsets[..2], &[8, 40]);
        assert_eq!(s.span, 48);
        let s = return_slots(1000, &[999], 4096);
        assert_eq!(s.count, 0);
        let s = return_slots(1000, &[1003], 4096);
        assert_eq!(s.count, 0);
    }
}
