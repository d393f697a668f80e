//! `rip-probe leaks`: the `leaks_enter` and `leaks_exit` programs attached
//! to raw_syscalls for one process, and the events they send drained (see
//! `rip_ebpf::leaks`).

use aya::{
    Ebpf,
    maps::{Array, HashMap as BpfHashMap, MapData, PerCpuArray, RingBuf},
    programs::TracePoint,
};
use rip_ebpf::{
    leaks::{LeakConfig, LeakEvent, LeakStats, MAX_SYSCALL, heap, names},
    names as base_names,
};
use zerocopy::FromBytes;

use super::{
    Error, MapOp, ProgramOp, SwitchSetup,
    features::RegsSource,
    missing, program,
    uprobe::{self, Held, ProbeSite},
};
use crate::collect::Result;

/// Bytes of the ring buffer to user space: about 4,000 acquisitions with
/// their stack copies (or 300,000 releases) between two drains.
const EVENT_BYTES: u32 = 32 << 20;
/// The same when the heap is traced: about 8,000 allocations with their
/// stack copies between two drains (a process allocating through its
/// uprobes makes at most some tens of thousands a second per CPU).
const HEAP_EVENT_BYTES: u32 = 64 << 20;

/// The leak programs attached to one process.
///
/// Dropping it detaches and unloads everything (the links are file
/// descriptors).
pub struct LeaksProbe {
    ebpf: Ebpf,
    events: RingBuf<MapData>,
    links: Vec<(&'static str, aya::programs::trace_point::TracePointLinkId)>,
    /// The heap's entry probes, then its return probes (closing them
    /// detaches).
    heap_entries: Vec<Held>,
    heap_returns: Vec<Held>,
}

/// An allocator function to probe: where, and which of
/// `rip_ebpf::leaks::heap`'s functions it is.
#[derive(Clone, Debug)]
pub struct HeapSite {
    /// The function in its binary.
    pub site: ProbeSite,
    /// Its `rip_ebpf::leaks::heap` number.
    pub func: u32,
}

impl LeaksProbe {
    /// Loads the programs for process `tgid` (whose thread count is about
    /// `threads`), traces the syscalls `calls` names (number, one of
    /// `rip_ebpf::leaks::call`), and attaches; with `heap` sites, the
    /// allocator's probes too, counting calls only until
    /// [`Self::heap_on`].
    pub fn attach(
        tgid: u32,
        threads: usize,
        calls: &[(u32, u8)],
        heap: &[HeapSite],
    ) -> Result<Self> {
        let mut setup = SwitchSetup::new(tgid, false, None)?;
        // In a pid namespace of rip-probe's own, the programs compare the
        // kernel's id of the process (the events' thread ids stay the
        // kernel's: nothing here is keyed by them).
        if let Some(ids) = super::pidns::NsIds::find_with(tgid, &setup)? {
            setup.config.target_tgid = ids.table.global_tgid();
        }
        // The system calls' tracepoints are classic ones: their record
        // layouts, and attaching them, need tracefs.
        let tracefs = super::tracefs::ensure_mounted()?;
        let enter = super::tracefs::Format::read(&tracefs, "raw_syscalls", "sys_enter")?;
        let exit = super::tracefs::Format::read(&tracefs, "raw_syscalls", "sys_exit")?;
        let field = |f: &super::tracefs::Format, ev: &str, name: &str, size: u32| {
            f.field(name, size).map_err(|what| Error::Unexpected {
                path: tracefs.join(format!("events/raw_syscalls/{ev}/format")),
                what,
            })
        };
        let config = LeakConfig {
            enter_id_off: field(&enter, "sys_enter", "id", 8)?.offset,
            enter_args_off: field(&enter, "sys_enter", "args", 48)?.offset,
            exit_id_off: field(&exit, "sys_exit", "id", 8)?.offset,
            exit_ret_off: field(&exit, "sys_exit", "ret", 8)?.offset,
        };
        let in_flight = u32::try_from(threads.saturating_mul(2).saturating_add(1024))
            .unwrap_or(u32::MAX)
            .min(1 << 18);
        let mut ebpf = super::loader_without_session_maps()
            .override_global(base_names::CONFIG, &setup.config, true)
            .override_global(names::LEAK_CONFIG, &config, true)
            .map_max_entries(names::LEAK_IN_FLIGHT, in_flight)
            .map_max_entries(names::HEAP_IN_FLIGHT, in_flight)
            .map_max_entries(
                names::LEAK_EVENTS,
                if heap.is_empty() {
                    EVENT_BYTES
                } else {
                    HEAP_EVENT_BYTES
                },
            )
            .load(super::EBPF_OBJECT)
            .map_err(Error::load)?;
        {
            let mut table: Array<_, u8> = Array::try_from(
                ebpf.map_mut(names::LEAK_CALLS)
                    .ok_or_else(|| missing(names::LEAK_CALLS))?,
            )
            .map_err(|e| Error::map(MapOp::Open, "LEAK_CALLS", e))?;
            for &(nr, c) in calls.iter().filter(|(nr, _)| *nr < MAX_SYSCALL) {
                table
                    .set(nr, c, 0)
                    .map_err(|e| Error::map(MapOp::Fill, "LEAK_CALLS", e))?;
            }
        }
        let exit_prog = match setup.features.regs_source() {
            RegsSource::Helper => names::LEAKS_EXIT,
            RegsSource::KernelStack => names::LEAKS_EXIT_KSTACK,
        };
        // Before the buffer is taken out of `ebpf`: a uprobe_multi program
        // is loaded apart, with its maps found in `ebpf`. The probes only
        // count calls until `heap_on`.
        let (heap_entries, heap_returns) = if heap.is_empty() {
            (Vec::new(), Vec::new())
        } else {
            attach_heap(&mut ebpf, tgid, heap)?
        };
        let map = ebpf
            .take_map(names::LEAK_EVENTS)
            .ok_or_else(|| missing(names::LEAK_EVENTS))?;
        let events =
            RingBuf::try_from(map).map_err(|e| Error::map(MapOp::Open, "LEAK_EVENTS", e))?;
        let mut probe = LeaksProbe {
            ebpf,
            events,
            links: Vec::new(),
            heap_entries,
            heap_returns,
        };
        // The exit first: a call whose entry was seen always has its exit
        // seen too.
        for (name, event) in [(exit_prog, "sys_exit"), (names::LEAKS_ENTER, "sys_enter")] {
            let prog: &mut TracePoint = program(&mut probe.ebpf, name)?;
            prog.load()
                .map_err(|e| Error::program(ProgramOp::Load, name, e))?;
            let link = prog.attach("raw_syscalls", event).map_err(|e| {
                Error::program(ProgramOp::Attach, format!("raw_syscalls:{event}"), e)
            })?;
            probe.links.push((name, link));
        }
        Ok(probe)
    }

    /// Starts sending the heap's blocks (until now its probes counted
    /// calls only).
    pub fn heap_on(&mut self) -> Result<()> {
        let mut on: Array<_, u32> = Array::try_from(
            self.ebpf
                .map_mut(names::HEAP_ON)
                .ok_or_else(|| missing(names::HEAP_ON))?,
        )
        .map_err(|e| Error::map(MapOp::Open, "HEAP_ON", e))?;
        on.set(0, 1, 0)
            .map_err(|e| Error::map(MapOp::Set, "HEAP_ON", e))?;
        Ok(())
    }

    /// Hands each event sent since the last call to `f`, with its stack
    /// copy (empty for releases).
    pub fn take_events(&mut self, mut f: impl FnMut(&LeakEvent, &[u8])) {
        while let Some(item) = self.events.next() {
            if let Ok((ev, rest)) = LeakEvent::read_from_prefix(&item) {
                let len = (ev.len as usize).min(rest.len());
                f(&ev, &rest[..len]);
            }
        }
    }

    /// Detaches the programs: no event is sent after it returns.
    pub fn detach(&mut self) -> Result<()> {
        // Entries before returns, so no call starts unseen by its return.
        self.heap_entries.clear();
        self.heap_returns.clear();
        // The entry first, so no call starts unseen by the exit.
        while let Some((name, id)) = self.links.pop() {
            let prog: &mut TracePoint = program(&mut self.ebpf, name)?;
            prog.detach(id)
                .map_err(|e| Error::program(ProgramOp::Detach, name, e))?;
        }
        Ok(())
    }

    /// The programs' counters, summed over the CPUs.
    pub fn stats(&self) -> Result<LeakStats> {
        let map: PerCpuArray<_, LeakStats> = PerCpuArray::try_from(
            self.ebpf
                .map(names::LEAK_STATS)
                .ok_or_else(|| missing(names::LEAK_STATS))?,
        )
        .map_err(|e| Error::map(MapOp::Open, "LEAK_STATS", e))?;
        let per_cpu = map
            .get(&0, 0)
            .map_err(|e| Error::map(MapOp::Read, "LEAK_STATS", e))?;
        let mut s = LeakStats::default();
        per_cpu.iter().for_each(|c| s.merge(c));
        Ok(s)
    }
}

/// Attaches the allocator's probes of process `pid` to `heap`: returns
/// first, so that an allocation whose entry is seen has its return seen
/// too. What holds the entries, and the returns.
fn attach_heap(ebpf: &mut Ebpf, pid: u32, heap: &[HeapSite]) -> Result<(Vec<Held>, Vec<Held>)> {
    let all: Vec<ProbeSite> = heap.iter().map(|h| h.site.clone()).collect();
    let addrs = super::calls::runtime_addresses(pid, &all)?;
    {
        let mut fns: BpfHashMap<_, u64, u32> = BpfHashMap::try_from(
            ebpf.map_mut(names::HEAP_FNS)
                .ok_or_else(|| missing(names::HEAP_FNS))?,
        )
        .map_err(|e| Error::map(MapOp::Open, "HEAP_FNS", e))?;
        for (addr, h) in addrs.iter().zip(heap) {
            fns.insert(addr, h.func, 0)
                .map_err(|e| Error::map(MapOp::Fill, "HEAP_FNS", e))?;
        }
    }
    let allocating: Vec<ProbeSite> = heap
        .iter()
        .filter(|h| h.func != heap::FREE)
        .map(|h| h.site.clone())
        .collect();
    let returns = if allocating.is_empty() {
        Vec::new()
    } else {
        uprobe::attach_program(ebpf, names::HEAP_RETURN, true, pid, &allocating)?
    };
    let entries = uprobe::attach_program(ebpf, names::HEAP_ENTRY, false, pid, &all)?;
    Ok((entries, returns))
}
