//! Futex contention of one process over a window (`rip-probe locks`):
//! rip-ebpf's futex programs loaded and attached to the syscalls
//! tracepoints of futex(2) (and futex_waitv(2) where the kernel has it),
//! filtered in the kernel to the target, and their maps read back once.

use std::collections::HashMap;

use aya::{
    Ebpf, EbpfLoader,
    maps::{HashMap as BpfHashMap, MapData, StackTraceMap},
    programs::{TracePoint, trace_point::TracePointLinkId},
};
use rip_ebpf::{
    Config,
    contention::{LockConfig, LockStat, WaiterKey, WaiterStat, WakerKey, WakerStat, names},
};

use super::{EBPF_OBJECT, features, layout, pidns, privileges, program, tracefs};
use super::{Error, MapOp, ProgramOp};
use crate::collect::Result;

/// How many distinct futex words are counted; more are dropped (and the
/// report says so). Each costs the kernel about 560 bytes, preallocated.
pub const MAX_LOCKS: u32 = 4096;
/// Distinct (lock, waiting thread) pairs counted.
const MAX_WAITERS: u32 = 16384;
/// Distinct (lock, waking stack) pairs counted, and user stacks kept.
const MAX_WAKERS: u32 = 4096;
/// Threads in a futex call at once.
const MAX_PENDING: u32 = 1 << 16;

/// The futex programs attached to one process.
///
/// Dropping it detaches and unloads everything (links are file
/// descriptors).
pub struct LockProbe {
    ebpf: Ebpf,
    /// The attachments, by program: detached by [`Self::stop`].
    links: Vec<(&'static str, TracePointLinkId)>,
    /// Whether futex_waitv(2) is counted too (5.16 on).
    waitv: bool,
    /// In a pid namespace other than the host's: the target's thread ids
    /// there (the programs see global ones).
    ids: Option<pidns::NsIds>,
}

/// What the programs counted, copied out of their maps.
#[derive(Clone, Debug, Default)]
pub struct Counted {
    /// Per futex word.
    pub locks: Vec<(u64, LockStat)>,
    /// Per (futex word, waiting thread).
    pub waiters: Vec<(WaiterKey, WaiterStat)>,
    /// Per (futex word, waker's user stack).
    pub wakers: Vec<(WakerKey, WakerStat)>,
    /// Wakers' user stacks by id, innermost first.
    pub stacks: HashMap<i64, Vec<u64>>,
    /// Whether the per-lock table filled up (more locks were contended
    /// than it holds).
    pub locks_full: bool,
}

impl LockProbe {
    /// Loads the futex programs for process `tgid` and attaches them.
    pub fn attach(tgid: u32) -> Result<Self> {
        Self::attach_with(tgid, None)
    }

    /// [`Self::attach`], loading the given build of the exit program (the
    /// one that reads a waker's stack pointer) instead of the one the
    /// kernel's features select: the build for kernels before 5.15 also
    /// runs on newer ones, which is how it is tested.
    pub fn attach_with(tgid: u32, regs: Option<features::RegsSource>) -> Result<Self> {
        if tgid == 0 || !std::path::Path::new(&format!("/proc/{tgid}/task")).is_dir() {
            return Err(crate::discover::Error::NoSuchProcess(tgid).into());
        }
        privileges::check()?;
        let tracefs = tracefs::ensure_mounted()?;
        let layout = super::layout::KernelLayout::shared()?;
        let features = features::KernelFeatures::probe(layout)?;
        let field = |event: &str, name: &str, size: u32| -> Result<u32> {
            let fmt = tracefs::Format::read(&tracefs, "syscalls", event)?;
            fmt.field(name, size).map(|f| f.offset).map_err(|what| {
                Error::Unexpected {
                    path: tracefs.join(format!("events/syscalls/{event}/format")),
                    what,
                }
                .into()
            })
        };
        let waitv = tracefs
            .join("events/syscalls/sys_enter_futex_waitv")
            .is_dir();
        // The exit program reads a waker's stack pointer the way the
        // sched_switch program reads registers: same offsets, same builds.
        let mut config = Config {
            target_tgid: tgid,
            regs: layout.regs,
            task: layout.task,
            ..Config::default()
        };
        // The programs filter on the kernel's global pid.
        let ids = match pidns::ours() {
            Some(ns) => {
                let btf = layout::aya_shared()?;
                let (_, iter) = features.regs_source().programs();
                Some(pidns::NsIds::find(ns, tgid, &config, btf, iter)?)
            }
            None => None,
        };
        if let Some(ids) = &ids {
            config.target_tgid = ids.table.global_tgid();
        }
        let lock_config = LockConfig {
            target_tgid: config.target_tgid,
            uaddr_off: field("sys_enter_futex", "uaddr", 8)?,
            op_off: field("sys_enter_futex", "op", 8)?,
            val_off: field("sys_enter_futex", "val", 8)?,
            ret_off: field("sys_exit_futex", "ret", 8)?,
            waiters_off: if waitv {
                field("sys_enter_futex_waitv", "waiters", 8)?
            } else {
                0
            },
        };
        if waitv && field("sys_exit_futex_waitv", "ret", 8)? != lock_config.ret_off {
            return Err(Error::Unexpected {
                path: tracefs.join("events/syscalls/sys_exit_futex_waitv/format"),
                what: "its ret is not where sys_exit_futex has it".into(),
            }
            .into());
        }
        let pending = crate::collect::procfs::tids(tgid)?
            .len()
            .saturating_mul(2)
            .saturating_add(1024)
            .min(MAX_PENDING as usize) as u32;
        let mut ebpf = EbpfLoader::new()
            .btf(None)
            .override_global(rip_ebpf::names::CONFIG, &config, true)
            .override_global(names::LOCK_CONFIG, &lock_config, true)
            // The other programs' maps are not used here: smallest sizes.
            .map_max_entries(rip_ebpf::names::THREADS, 1)
            .map_max_entries(rip_ebpf::names::LAST_FN, 1)
            .map_max_entries(rip_ebpf::names::STACKS, 1)
            .map_max_entries(rip_ebpf::names::EVENTS, 4096)
            .map_max_entries(names::FUTEX_PENDING, pending)
            .map_max_entries(names::LOCK_STATS, MAX_LOCKS)
            .map_max_entries(names::LOCK_WAITERS, MAX_WAITERS)
            .map_max_entries(names::LOCK_WAKERS, MAX_WAKERS)
            .map_max_entries(names::USER_STACKS, MAX_WAKERS)
            .load(EBPF_OBJECT)
            .map_err(Error::load)?;

        // The helper's build only where the kernel has the helper.
        let source = match regs {
            Some(features::RegsSource::KernelStack) => features::RegsSource::KernelStack,
            _ => features.regs_source(),
        };
        let exit = match source {
            features::RegsSource::Helper => names::FUTEX_EXIT,
            features::RegsSource::KernelStack => names::FUTEX_EXIT_KSTACK,
        };
        let mut links = Vec::new();
        let mut attach = |prog: &'static str, events: &[&str]| -> Result<()> {
            let p: &mut TracePoint = program(&mut ebpf, prog)?;
            p.load()
                .map_err(|e| Error::program(ProgramOp::Load, prog, e))?;
            for ev in events {
                let id = p
                    .attach("syscalls", ev)
                    .map_err(|e| Error::program(ProgramOp::Attach, format!("syscalls:{ev}"), e))?;
                links.push((prog, id));
            }
            Ok(())
        };
        // Exits first: a wait whose entry is seen is then always ended.
        if waitv {
            attach(exit, &["sys_exit_futex", "sys_exit_futex_waitv"])?;
            attach(names::FUTEX_WAITV_ENTER, &["sys_enter_futex_waitv"])?;
        } else {
            attach(exit, &["sys_exit_futex"])?;
        }
        attach(names::FUTEX_ENTER, &["sys_enter_futex"])?;
        Ok(LockProbe {
            ebpf,
            links,
            waitv,
            ids,
        })
    }

    /// Stops counting: detaches every program (the maps stay readable), so
    /// that what [`Self::read`] copies out is one consistent snapshot.
    pub fn stop(&mut self) -> Result<()> {
        for (prog, id) in self.links.drain(..) {
            let p: &mut TracePoint = program(&mut self.ebpf, prog)?;
            p.detach(id)
                .map_err(|e| Error::program(ProgramOp::Detach, prog, e))?;
        }
        Ok(())
    }

    /// Whether futex_waitv(2) waits are counted (the kernel has it).
    pub fn counts_waitv(&self) -> bool {
        self.waitv
    }

    /// Copies out what the programs counted so far, with thread ids as
    /// rip-probe's pid namespace numbers them.
    pub fn read(&mut self) -> Result<Counted> {
        let locks: Vec<(u64, LockStat)> = self.table(names::LOCK_STATS)?;
        let mut waiters: Vec<(WaiterKey, WaiterStat)> = self.table(names::LOCK_WAITERS)?;
        let mut wakers: Vec<(WakerKey, WakerStat)> = self.table(names::LOCK_WAKERS)?;
        if let Some(ids) = &mut self.ids {
            // Threads created during the window are learnt now.
            ids.refresh()?;
            let t = &ids.table;
            // A waiter that came and went inside the window has no id
            // here: its waits stay in the lock's totals, its row goes.
            waiters.retain_mut(|(k, _)| match t.to_ns(k.tid) {
                Some(tid) => {
                    k.tid = tid;
                    true
                }
                None => false,
            });
            // A waking stack is kept whoever woke from it last (0: such a
            // thread).
            for (_, w) in &mut wakers {
                w.tid = t.to_ns(w.tid).unwrap_or(0);
            }
        }
        let mut stacks = HashMap::new();
        if let Some(map) = self.ebpf.map(names::USER_STACKS) {
            let map = StackTraceMap::try_from(map)
                .map_err(|e| Error::map(MapOp::Open, names::USER_STACKS, e))?;
            for w in &wakers {
                let id = w.0.stack_id;
                if let (Ok(key), false) = (u32::try_from(id), stacks.contains_key(&id))
                    && let Ok(st) = map.get(&key, 0)
                {
                    stacks.insert(id, st.frames().iter().map(|f| f.ip).collect());
                }
            }
        }
        Ok(Counted {
            locks_full: locks.len() >= MAX_LOCKS as usize,
            locks,
            waiters,
            wakers,
            stacks,
        })
    }

    /// A whole hash map of the programs, copied out.
    fn table<K: aya::Pod, V: aya::Pod>(&self, name: &str) -> Result<Vec<(K, V)>> {
        let map: BpfHashMap<&MapData, K, V> =
            BpfHashMap::try_from(self.ebpf.map(name).ok_or_else(|| super::missing(name))?)
                .map_err(|e| Error::map(MapOp::Open, name, e))?;
        map.iter()
            .map(|kv| kv.map_err(|e| Error::map(MapOp::Read, name, e).into()))
            .collect()
    }
}
