//! `rip-probe offcpu`: the `offcpu_switch` program attached to one process,
//! the stack copies it sends drained as the window runs, and its totals
//! read back (see `rip_ebpf::offcpu` for how stacks are named in the
//! kernel).

use std::collections::HashMap;

use aya::{
    Ebpf,
    maps::{HashMap as BpfHashMap, MapData, PerCpuArray, StackTraceMap},
};
use rip_ebpf::{
    names as base_names,
    offcpu::{
        MAX_PENDING, OffCpuConfig, OffKey, OffStart, OffStats, OffTotal, PendingStack, Place,
        ReturnSlots, SnapSlot, names,
    },
};

use super::{
    SwitchSetup,
    features::RegsSource,
    missing,
    pidns::NsIds,
    switch::{self, SwitchChoice, SwitchLink, SwitchNames},
};
use crate::{
    collect::{
        Result,
        kernel::{Error, MapOp},
    },
    util::monotonic_ns,
};

/// How `offcpu` observes.
#[derive(Clone, Copy, Debug, Default)]
pub struct OffCpuOptions {
    /// Off-CPU periods shorter than this many ns are counted, not summed.
    pub min_block_ns: u64,
    /// Take each switch's kernel stack.
    pub kernel_stacks: bool,
    /// Read each thread's last librip snap (the target maps a ring).
    pub snaps: bool,
}

/// `offcpu`'s sched_switch programs.
const OFFCPU_NAMES: SwitchNames = SwitchNames {
    btf: names::OFFCPU_SWITCH_BTF,
    raw_helper: names::OFFCPU_SWITCH,
    raw_kstack: names::OFFCPU_SWITCH_KSTACK,
};

/// `BPF_NOEXIST`: insert only if absent.
const BPF_NOEXIST: u64 = 1;

/// Places (ip, sp) whose return addresses user space can locate at once.
const PLACES: u32 = 1 << 14;
/// Stack hashes user space has unwound.
const KNOWN: u32 = 1 << 16;
/// Distinct kernel stacks.
const KERNEL_STACKS: u32 = 1 << 14;

/// The off-CPU program attached to one process.
///
/// Dropping it detaches and unloads everything (the link is a file
/// descriptor).
pub struct OffCpuProbe {
    ebpf: Ebpf,
    /// The sched_switch program loaded, and why that one.
    choice: SwitchChoice,
    link: Option<SwitchLink>,
    /// In a pid namespace other than the host's (a debug container): the
    /// target's global ids against the namespace's.
    ids: Option<NsIds>,
    /// CLOCK_MONOTONIC ns just before the program was attached.
    start_ns: u64,
}

impl OffCpuProbe {
    /// Loads and attaches the program for process `tgid`, whose thread
    /// count is about `threads` (it sizes the per-thread tables). `regs`
    /// forces a build of the program (see
    /// [`super::KernelProbe::attach_with`]).
    ///
    /// `tgid` and the thread ids this probe takes and gives are
    /// rip-probe's: in a pid namespace of its own, the namespace's,
    /// translated from and to the kernel's.
    pub fn attach(
        tgid: u32,
        threads: usize,
        opts: OffCpuOptions,
        regs: Option<RegsSource>,
    ) -> Result<Self> {
        let mut setup = SwitchSetup::new(tgid, false, regs)?;
        let ids = NsIds::find_with(tgid, &setup)?;
        if let Some(ids) = &ids {
            setup.config.target_tgid = ids.table.global_tgid();
        }
        let wanted = switch::Wanted::new(setup.features.regs_source(), regs);
        let per_thread = u32::try_from(threads.saturating_mul(2).saturating_add(1024))
            .unwrap_or(u32::MAX)
            .min(1 << 18);
        // Each thread blocks in a handful of places with a handful of
        // kernel stacks: room for 8 keys a thread, within bounds (the map
        // is preallocated, about 100 bytes an entry; a full table is
        // counted and reported).
        let keys = per_thread.saturating_mul(8).clamp(1 << 13, 1 << 18);
        let config = OffCpuConfig {
            min_block_ns: opts.min_block_ns,
            kernel_stacks: u32::from(opts.kernel_stacks),
            snaps: u32::from(opts.snaps),
        };
        let mut ebpf = super::loader_without_session_maps()
            .override_global(base_names::CONFIG, &setup.config, true)
            .override_global(names::OFFCPU, &config, true)
            .map_max_entries(names::OFF_SLOTS, PLACES)
            .map_max_entries(names::OFF_KNOWN, KNOWN)
            .map_max_entries(names::OFF_PENDING, MAX_PENDING)
            .map_max_entries(names::OFF_START, per_thread)
            .map_max_entries(names::OFF_TIME, keys)
            .map_max_entries(
                names::OFF_KSTACKS,
                if opts.kernel_stacks { KERNEL_STACKS } else { 1 },
            )
            .map_max_entries(
                names::OFF_SNAP_SLOTS,
                if opts.snaps { per_thread } else { 1 },
            )
            .load(super::EBPF_OBJECT)
            .map_err(Error::load)?;
        let choice = switch::load(&mut ebpf, OFFCPU_NAMES, wanted)?;
        // The window begins just before the attach (after the load, which
        // can take long): every period the program sums starts inside it.
        let start_ns = monotonic_ns();
        let link = switch::attach(&mut ebpf, &choice)?;
        Ok(OffCpuProbe {
            ebpf,
            choice,
            link: Some(link),
            ids,
            start_ns,
        })
    }

    /// CLOCK_MONOTONIC ns just before the program was attached: the
    /// window's start.
    pub fn start_ns(&self) -> u64 {
        self.start_ns
    }

    /// Learns the ids of the threads created since the last call (only in
    /// a pid namespace of rip-probe's own; nothing to do on the host).
    pub fn refresh_ids(&mut self) -> Result<()> {
        match &mut self.ids {
            Some(ids) => ids.refresh(),
            None => Ok(()),
        }
    }

    /// Our id of the thread the kernel calls `global` (0: a thread that
    /// came and went between two looks at the namespace's ids).
    fn ours(&self, global: u32) -> u32 {
        match &self.ids {
            Some(ids) => ids.table.to_ns(global).unwrap_or(0),
            None => global,
        }
    }

    /// The sched_switch program this probe runs, and why that one.
    pub fn switch_choice(&self) -> &SwitchChoice {
        &self.choice
    }

    /// Detaches the program: the totals stop growing and stay readable.
    pub fn detach(&mut self) -> Result<()> {
        drop(self.link.take());
        Ok(())
    }

    fn hash_map<K: aya::Pod, V: aya::Pod>(
        &mut self,
        name: &str,
    ) -> Result<BpfHashMap<&mut MapData, K, V>> {
        BpfHashMap::try_from(self.ebpf.map_mut(name).ok_or_else(|| missing(name))?)
            .map_err(|e| Error::map(MapOp::Open, name, e).into())
    }

    /// Takes the stack copies the program has sent since the last call.
    pub fn take_pending(&mut self) -> Result<Vec<PendingStack>> {
        let map: BpfHashMap<_, u64, PendingStack> = self.hash_map(names::OFF_PENDING)?;
        let keys: Vec<u64> = map.keys().filter_map(|k| k.ok()).collect();
        let mut out = Vec::with_capacity(keys.len());
        for k in keys {
            if let Ok(p) = map.get(&k, 0) {
                out.push(p);
            }
        }
        Ok(out)
    }

    /// Removes copies from the program's pending map once what they taught
    /// is written (a copy removed before would be sent again).
    pub fn release(&mut self, hashes: &[u64]) -> Result<()> {
        let mut map: BpfHashMap<_, u64, PendingStack> = self.hash_map(names::OFF_PENDING)?;
        for h in hashes {
            // Gone already: nothing to do.
            let _ = map.remove(h);
        }
        Ok(())
    }

    /// Tells the program where the return addresses are at `place`, unless
    /// it knows already (first answer wins: the hashes it has summed under
    /// stay meaningful). Whether this answer was taken.
    pub fn teach_slots(&mut self, place: Place, slots: &ReturnSlots) -> Result<bool> {
        let mut map: BpfHashMap<_, Place, ReturnSlots> = self.hash_map(names::OFF_SLOTS)?;
        match map.insert(place, *slots, BPF_NOEXIST) {
            Ok(()) => Ok(true),
            Err(e) if full(&e) || errno(&e) == Some(libc::EEXIST) => Ok(false),
            Err(e) => Err(Error::map(MapOp::Fill, "OFF_SLOTS", e).into()),
        }
    }

    /// Marks stack hashes as unwound: the program stops sending copies.
    pub fn mark_known(&mut self, hash: u64) -> Result<()> {
        let mut map: BpfHashMap<_, u64, u8> = self.hash_map(names::OFF_KNOWN)?;
        match map.insert(hash, 1, 0) {
            // Full: copies of that stack keep coming, and are ignored.
            Ok(()) => Ok(()),
            Err(e) if full(&e) => Ok(()),
            Err(e) => Err(Error::map(MapOp::Fill, "OFF_KNOWN", e).into()),
        }
    }

    /// Tells the program where each thread's librip ring slot is.
    pub fn set_snap_slots(&mut self, slots: &[(u32, SnapSlot)]) -> Result<()> {
        let global: Vec<(u32, SnapSlot)> = slots
            .iter()
            .filter_map(|&(tid, s)| match &self.ids {
                Some(ids) => Some((ids.table.to_global(tid)?, s)),
                None => Some((tid, s)),
            })
            .collect();
        let mut map: BpfHashMap<_, u32, SnapSlot> = self.hash_map(names::OFF_SNAP_SLOTS)?;
        for (tid, s) in &global {
            match map.insert(tid, s, 0) {
                Ok(()) => {}
                Err(e) if full(&e) => break,
                Err(e) => return Err(Error::map(MapOp::Fill, "OFF_SNAP_SLOTS", e).into()),
            }
        }
        Ok(())
    }

    /// Each thread's last switch off the CPU seen (`start_ns` 0: it has
    /// run since).
    pub fn starts(&mut self) -> Result<Vec<(u32, OffStart)>> {
        let map: BpfHashMap<_, u32, OffStart> = self.hash_map(names::OFF_START)?;
        let raw: Vec<(u32, OffStart)> = map.iter().filter_map(|e| e.ok()).collect();
        Ok(raw
            .into_iter()
            .map(|(tid, mut s)| {
                s.key.tid = self.ours(s.key.tid);
                (self.ours(tid), s)
            })
            .collect())
    }

    /// Starts an off-CPU period for each thread of `starts` (rip-probe's
    /// ids) that has none yet: the threads found asleep once the program
    /// was attached, whose first wakeup in the window then ends a period
    /// the program can sum. A thread the program already saw switch keeps
    /// its own entry. Which threads took theirs.
    pub fn seed(&mut self, starts: &[(u32, OffStart)]) -> Result<Vec<u32>> {
        let global: Vec<(u32, u32)> = starts
            .iter()
            .filter_map(|&(tid, _)| match &self.ids {
                Some(ids) => Some((tid, ids.table.to_global(tid)?)),
                None => Some((tid, tid)),
            })
            .collect();
        let by_tid: HashMap<u32, OffStart> = starts.iter().copied().collect();
        let mut map: BpfHashMap<_, u32, OffStart> = self.hash_map(names::OFF_START)?;
        let mut took = Vec::new();
        for (ours, g) in global {
            let mut s = by_tid[&ours];
            s.key.tid = g;
            match map.insert(g, s, BPF_NOEXIST) {
                Ok(()) => took.push(ours),
                Err(e) if full(&e) || errno(&e) == Some(libc::EEXIST) => {}
                Err(e) => return Err(Error::map(MapOp::Fill, "OFF_START", e).into()),
            }
        }
        Ok(took)
    }

    /// The off-CPU totals so far.
    pub fn totals(&mut self) -> Result<Vec<(OffKey, OffTotal)>> {
        let map: BpfHashMap<_, OffKey, OffTotal> = self.hash_map(names::OFF_TIME)?;
        let raw: Vec<(OffKey, OffTotal)> = map.iter().filter_map(|e| e.ok()).collect();
        Ok(raw
            .into_iter()
            .map(|(mut k, t)| {
                k.tid = self.ours(k.tid);
                (k, t)
            })
            .collect())
    }

    /// The program's counters, summed over the CPUs.
    pub fn stats(&self) -> Result<OffStats> {
        let map: PerCpuArray<_, OffStats> = PerCpuArray::try_from(
            self.ebpf
                .map(names::OFF_STATS)
                .ok_or_else(|| missing(names::OFF_STATS))?,
        )
        .map_err(|e| Error::map(MapOp::Open, "OFF_STATS", e))?;
        let per_cpu = map
            .get(&0, 0)
            .map_err(|e| Error::map(MapOp::Read, "OFF_STATS", e))?;
        let mut s = OffStats::default();
        per_cpu.iter().for_each(|c| s.merge(c));
        Ok(s)
    }

    /// Every kernel stack the program recorded, innermost first, by id.
    pub fn kernel_stacks(&self) -> Result<HashMap<i32, Vec<u64>>> {
        let map = StackTraceMap::try_from(
            self.ebpf
                .map(names::OFF_KSTACKS)
                .ok_or_else(|| missing(names::OFF_KSTACKS))?,
        )
        .map_err(|e| Error::map(MapOp::Open, "OFF_KSTACKS", e))?;
        Ok(map
            .iter()
            .filter_map(|e| e.ok())
            .map(|(id, st)| (id as i32, st.frames().iter().map(|f| f.ip).collect()))
            .collect())
    }
}

/// The errno of a failed map syscall.
fn errno(e: &aya::maps::MapError) -> Option<i32> {
    match e {
        aya::maps::MapError::SyscallError(e) => e.io_error.raw_os_error(),
        _ => None,
    }
}

/// Whether an insert failed because the map is full (`E2BIG`; `ENOMEM`
/// from a preallocated map out of elements).
fn full(e: &aya::maps::MapError) -> bool {
    matches!(errno(e), Some(libc::E2BIG | libc::ENOMEM))
}
