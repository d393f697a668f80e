//! `rip-probe calls`: the `calls_entry` and `calls_return` programs
//! attached to each chosen function of one process, and their per-CPU
//! counts read back (see `rip_ebpf::calls`).

use aya::{
    Ebpf,
    maps::{Array, HashMap as BpfHashMap, MapData, PerCpuArray, RingBuf},
    programs::TracePoint,
};
use rip_ebpf::calls::{CallOutlier, CallStats, MAX_FUNCTIONS, names};
use zerocopy::FromBytes;

use super::{Error, MapOp, ProgramOp};
use super::{
    missing, pidns, privileges, program, tracefs,
    uprobe::Held,
    uprobe::{self, ProbeSite},
};
use crate::{collect::Result, discover::Lacks};

/// Every function of one process counted and timed.
///
/// Dropping it detaches everything (the links are file descriptors).
pub struct CallsProbe {
    ebpf: Ebpf,
    functions: usize,
    addrs: Vec<u64>,
    outliers: RingBuf<MapData>,
    /// In a pid namespace other than the host's: the target's thread ids
    /// there (the programs see global ones; the uprobes themselves are
    /// attached by our pid, which the kernel translates).
    ids: Option<pidns::NsIds>,
    /// The size of the tables of calls in flight (threads, and nested
    /// calls).
    in_flight: u32,
    /// The uprobe_multi links, two per binary (closing them detaches).
    _links: Vec<Held>,
}

impl CallsProbe {
    /// Attaches to each of `sites` (at most
    /// [`rip_ebpf::calls::MAX_FUNCTIONS`]) in process `pid`; function id
    /// `i` is `sites[i]`. `threads` sizes the table of calls in flight.
    pub fn attach(pid: u32, sites: &[ProbeSite], threads: usize) -> Result<Self> {
        if sites.len() > MAX_FUNCTIONS as usize {
            return Err(Error::TooManyToTime {
                count: sites.len(),
                max: MAX_FUNCTIONS,
            }
            .into());
        }
        privileges::check()?;
        tracefs::ensure_mounted()?;
        let addrs = runtime_addresses(pid, sites)?;
        let ns_ids = pidns::NsIds::find_here(pid)?;
        // Room for nested calls of every thread, and of threads created
        // during the window.
        let in_flight = u32::try_from(threads.saturating_mul(2).saturating_add(256) * 8)
            .unwrap_or(u32::MAX)
            .clamp(4096, 1 << 18);
        let mut ebpf = super::loader_without_session_maps()
            .map_max_entries(names::CALL_ENTRIES, in_flight)
            .map_max_entries(names::CALL_DEPTH, in_flight)
            .load(super::EBPF_OBJECT)
            .map_err(Error::load)?;

        let mut ids: BpfHashMap<_, u64, u32> = BpfHashMap::try_from(
            ebpf.map_mut(names::CALL_IDS)
                .ok_or_else(|| missing(names::CALL_IDS))?,
        )
        .map_err(|e| Error::map(MapOp::Open, "CALL_IDS", e))?;
        for (id, addr) in addrs.iter().enumerate() {
            ids.insert(addr, id as u32, 0)
                .map_err(|e| Error::map(MapOp::Fill, "CALL_IDS", e))?;
        }

        // Threads that exit free their entries, before any entry is
        // made: a program whose threads come and go does not fill the
        // tables with the dead.
        let prog: &mut TracePoint = program(&mut ebpf, names::CALLS_THREAD_EXIT)?;
        prog.load()
            .map_err(|e| Error::program(ProgramOp::Load, "calls_thread_exit", e))?;
        prog.attach("sched", "sched_process_exit")
            .map_err(|e| Error::program(ProgramOp::Attach, "sched:sched_process_exit", e))?;
        // Returns first: a call entered once the entry probe is on then
        // always has its return probe, so no entry waits forever.
        let mut links = uprobe::attach_program(&mut ebpf, names::CALLS_RETURN, true, pid, sites)?;
        links.extend(uprobe::attach_program(
            &mut ebpf,
            names::CALLS_ENTRY,
            false,
            pid,
            sites,
        )?);
        let map = ebpf
            .take_map(names::CALL_OUTLIERS)
            .ok_or_else(|| missing(names::CALL_OUTLIERS))?;
        let outliers =
            RingBuf::try_from(map).map_err(|e| Error::map(MapOp::Open, "CALL_OUTLIERS", e))?;
        Ok(CallsProbe {
            ebpf,
            functions: sites.len(),
            addrs,
            outliers,
            ids: ns_ids,
            in_flight,
            _links: links,
        })
    }

    /// Where each function (by id) is mapped in the process.
    pub fn addresses(&self) -> &[u64] {
        &self.addrs
    }

    /// The counts and latencies of each function so far, summed over the
    /// CPUs, by function id.
    pub fn stats(&self) -> Result<Vec<CallStats>> {
        let map: PerCpuArray<_, CallStats> = PerCpuArray::try_from(
            self.ebpf
                .map(names::CALL_STATS)
                .ok_or_else(|| missing(names::CALL_STATS))?,
        )
        .map_err(|e| Error::map(MapOp::Open, "CALL_STATS", e))?;
        (0..self.functions as u32)
            .map(|id| {
                let per_cpu = map
                    .get(&id, 0)
                    .map_err(|e| Error::map(MapOp::Read, "CALL_STATS", e))?;
                let mut sum = CallStats::default();
                per_cpu.iter().for_each(|s| sum.merge(s));
                Ok(sum)
            })
            .collect()
    }

    /// How full the table of threads in probed calls is: (threads in it
    /// now, its size). A thread stays in it from its first probed call to
    /// its exit; once it is full, new threads' calls go untimed.
    pub fn table_use(&self) -> Result<(usize, u32)> {
        let map: BpfHashMap<_, u32, u32> = BpfHashMap::try_from(
            self.ebpf
                .map(names::CALL_DEPTH)
                .ok_or_else(|| missing(names::CALL_DEPTH))?,
        )
        .map_err(|e| Error::map(MapOp::Open, "CALL_DEPTH", e))?;
        Ok((map.keys().filter(|k| k.is_ok()).count(), self.in_flight))
    }

    /// Sets the outlier threshold of each function, by id, in ns (0: none).
    pub fn set_thresholds(&mut self, thresholds: &[u64]) -> Result<()> {
        let mut map: Array<_, u64> = Array::try_from(
            self.ebpf
                .map_mut(names::CALL_THRESHOLDS)
                .ok_or_else(|| missing(names::CALL_THRESHOLDS))?,
        )
        .map_err(|e| Error::map(MapOp::Open, "CALL_THRESHOLDS", e))?;
        for (id, t) in thresholds.iter().enumerate().take(self.functions) {
            map.set(id as u32, t, 0)
                .map_err(|e| Error::map(MapOp::Set, "CALL_THRESHOLDS", e))?;
        }
        Ok(())
    }

    /// The outliers recorded since the last call, with thread ids as
    /// rip-probe's pid namespace numbers them.
    pub fn take_outliers(&mut self) -> Result<Vec<CallOutlier>> {
        let mut out = Vec::new();
        while let Some(item) = self.outliers.next() {
            if let Ok((o, _)) = CallOutlier::read_from_prefix(&item) {
                out.push(o);
            }
        }
        if let Some(ids) = &mut self.ids {
            // Learn the threads created since the last pass, only when
            // one of them made an outlier.
            if out.iter().any(|o| ids.table.to_ns(o.tid).is_none()) {
                ids.refresh()?;
            }
            // 0: a thread that came and went between two passes.
            for o in &mut out {
                o.tid = ids.table.to_ns(o.tid).unwrap_or(0);
            }
        }
        Ok(out)
    }
}

/// Where each site's code is mapped in process `pid` now: the address the
/// entry probe sees as its instruction pointer.
pub(crate) fn runtime_addresses(pid: u32, sites: &[ProbeSite]) -> Result<Vec<u64>> {
    // Through a live thread when the leader exited (its maps are empty).
    let view = crate::discover::view_pid(pid);
    let path = format!("/proc/{view}/maps");
    let maps = crate::discover::maps::ProcessMaps::open(view)
        .and_then(|m| m.executable())
        .map_err(|e| crate::discover::unreadable(pid, &path, e, Lacks::Functions))?;
    sites
        .iter()
        .map(|s| {
            maps.iter()
                .find(|m| {
                    m.is_exec()
                        && m.file() == Some(s.mapped.as_path())
                        && (m.offset..m.offset + (m.end - m.start)).contains(&s.file_offset)
                })
                .map(|m| m.start + (s.file_offset - m.offset))
                .ok_or_else(|| {
                    Error::NotMappedExecutable {
                        binary: s.mapped.clone(),
                        pid,
                        function: s.name.clone(),
                    }
                    .into()
                })
        })
        .collect()
}
