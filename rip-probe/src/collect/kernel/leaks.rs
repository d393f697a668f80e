//! `rip-probe leaks`: the `leaks_enter` and `leaks_exit` programs attached
//! to raw_syscalls for one process, and the events they send drained (see
//! `rip_ebpf::leaks`).

use aya::{
    Ebpf,
    maps::{Array, MapData, PerCpuArray, RingBuf},
    programs::TracePoint,
};
use rip_ebpf::{
    leaks::{LeakConfig, LeakEvent, LeakStats, MAX_SYSCALL, names},
    names as base_names,
};
use zerocopy::FromBytes;

use super::{Error, MapOp, ProgramOp, SwitchSetup, features::RegsSource, missing, program};
use crate::collect::Result;

/// Bytes of the ring buffer to user space: about 4,000 acquisitions with
/// their stack copies (or 300,000 releases) between two drains.
const EVENT_BYTES: u32 = 32 << 20;

/// The leak programs attached to one process.
///
/// Dropping it detaches and unloads everything (the links are file
/// descriptors).
pub struct LeaksProbe {
    ebpf: Ebpf,
    events: RingBuf<MapData>,
    links: Vec<(&'static str, aya::programs::trace_point::TracePointLinkId)>,
}

impl LeaksProbe {
    /// Loads the programs for process `tgid` (whose thread count is about
    /// `threads`), traces the syscalls `calls` names (number, one of
    /// `rip_ebpf::leaks::call`), and attaches.
    pub fn attach(tgid: u32, threads: usize, calls: &[(u32, u8)]) -> Result<Self> {
        let mut setup = SwitchSetup::new(tgid, false, None)?;
        // In a pid namespace of rip-probe's own, the programs compare the
        // kernel's id of the process (the events' thread ids stay the
        // kernel's: nothing here is keyed by them).
        if let Some(ids) = super::pidns::NsIds::find_with(tgid, &setup)? {
            setup.config.target_tgid = ids.table.global_tgid();
        }
        let enter = super::tracefs::Format::read(&setup.tracefs, "raw_syscalls", "sys_enter")?;
        let exit = super::tracefs::Format::read(&setup.tracefs, "raw_syscalls", "sys_exit")?;
        let field = |f: &super::tracefs::Format, ev: &str, name: &str, size: u32| {
            f.field(name, size).map_err(|what| Error::Unexpected {
                path: setup
                    .tracefs
                    .join(format!("events/raw_syscalls/{ev}/format")),
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
            .map_max_entries(names::LEAK_EVENTS, EVENT_BYTES)
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
        let map = ebpf
            .take_map(names::LEAK_EVENTS)
            .ok_or_else(|| missing(names::LEAK_EVENTS))?;
        let events =
            RingBuf::try_from(map).map_err(|e| Error::map(MapOp::Open, "LEAK_EVENTS", e))?;
        let mut probe = LeaksProbe {
            ebpf,
            events,
            links: Vec::new(),
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
