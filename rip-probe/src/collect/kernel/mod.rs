//! The kernel side of collection: rip-ebpf's programs loaded with aya,
//! attached to one target process, and read back.
//!
//! The sched_switch raw tracepoint is filtered in the kernel to the
//! target's thread group; the offsets into `struct pt_regs` and `struct
//! task_struct` come from BTF, passed to the program as globals.

pub(crate) mod batch;
pub(crate) mod btf;
pub mod calls;
pub mod contention;
mod error;
pub mod features;
mod iter;
mod layout;
pub mod leaks;
mod near_names;
pub mod offcpu;
pub(crate) mod pidns;
pub(crate) mod privileges;
pub mod switch;
pub(crate) mod tracefs;
pub mod uprobe;
mod uprobe_multi;

pub use error::{Error, MapOp, ProgramOp};

use std::{collections::HashMap, path::PathBuf, time::Duration};

use aya::{
    Ebpf, EbpfLoader,
    maps::{MapData, RingBuf, StackTraceMap},
    programs::Iter,
};
use rip_ebpf::{
    Config, FnHit, SlotStats, SwitchEvent, TaskRecord, TaskWait, ThreadRecord, ThreadSlot, names,
};
use rustix::{
    event::{PollFd, PollFlags, poll},
    io::Errno,
    time::Timespec,
};
use zerocopy::FromBytes;

use crate::{collect::Result, util::timing};

/// rip-ebpf's object file, built by build.rs and embedded in this library.
pub static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/rip-ebpf"));

/// The sched_switch program attached to one process.
///
/// Dropping it detaches and unloads everything: links are file descriptors,
/// so even a SIGKILLed rip-probe leaves nothing behind.
pub struct KernelProbe {
    ebpf: Ebpf,
    tgid: u32,
    config: Config,
    iter_loaded: bool,
    /// The lean task iterator is loaded (see [`KernelProbe::waits`]).
    waits_loaded: bool,
    /// sched_switch records the target's switches (see
    /// [`KernelProbe::snapshots_only`]).
    switches: bool,
    switch_link: Option<switch::SwitchLink>,
    /// The sched_switch program loaded, and why (none without switches).
    switch_choice: Option<switch::SwitchChoice>,
    /// What the kernel offers, and so which build of the programs is loaded.
    features: features::KernelFeatures,
    /// When rip-probe runs in a pid namespace other than the host's: the
    /// target's threads' ids there, by global id.
    ids: Option<pidns::SharedIds>,
    /// `--uprobe`'s links, one per binary on a kernel with `uprobe_multi`
    /// (closing each detaches all its functions).
    uprobe_links: Vec<uprobe::Held>,
}

/// Entries of the per-thread maps: room for the target's threads now and
/// as many again created during the window, at least [`MIN_THREAD_ENTRIES`].
/// The maps are preallocated (see rip-ebpf), so this is kernel memory spent.
fn thread_entries(threads: usize) -> u32 {
    let want = threads
        .saturating_mul(2)
        .saturating_add(MIN_THREAD_ENTRIES as usize);
    u32::try_from(want)
        .unwrap_or(u32::MAX)
        .min(MAX_THREAD_ENTRIES)
}

/// What a probe records while the target runs.
#[derive(Clone, Copy)]
enum Watch {
    /// Context switches (sched_switch); each sent to user space too with
    /// `events`.
    Switches { events: bool },
    /// Nothing: snapshots only.
    Nothing,
}

/// Where the per-thread records are kept.
#[derive(Clone, Copy)]
enum Table {
    /// `THREADS`, a hash map (the raw tracepoint programs).
    Hash,
    /// `SLOTS`, an array (the BTF-typed program).
    Slots,
}

/// Entries of the `SLOTS` array for `entries` threads: a power of two
/// (a thread's slots are found by masking its id), within the bound.
fn slot_entries(entries: u32) -> u32 {
    entries
        .max(MIN_THREAD_ENTRIES)
        .checked_next_power_of_two()
        .unwrap_or(MAX_THREAD_ENTRIES)
        .min(MAX_THREAD_ENTRIES)
}

/// The `--pid` session's sched_switch programs.
const SWITCH_NAMES: switch::SwitchNames = switch::SwitchNames {
    btf: names::SCHED_SWITCH_BTF,
    raw_helper: names::SCHED_SWITCH,
    raw_kstack: names::SCHED_SWITCH_KSTACK,
};

/// The smallest per-thread map.
const MIN_THREAD_ENTRIES: u32 = 1024;
/// The largest (the programs' compiled-in size).
const MAX_THREAD_ENTRIES: u32 = 1 << 17;

/// What every sched_switch program of rip-ebpf needs for one target: the
/// configuration global (the register and task offsets from BTF), and
/// which build of the programs the kernel takes.
pub(crate) struct SwitchSetup {
    /// The `CONFIG` global.
    pub(crate) config: Config,
    /// What the kernel offers.
    pub(crate) features: features::KernelFeatures,
}

impl SwitchSetup {
    /// Checks that `tgid` exists and that rip-probe may trace it, and
    /// reads the layouts (sched_switch is a raw or BTF-typed tracepoint:
    /// no tracefs). `regs` forces a build of the register-reading programs
    /// (see [`KernelProbe::attach_with`]).
    pub(crate) fn new(
        tgid: u32,
        events: bool,
        regs: Option<features::RegsSource>,
    ) -> Result<SwitchSetup> {
        let task_dir = PathBuf::from(format!("/proc/{tgid}/task"));
        if tgid == 0 || !task_dir.is_dir() {
            return Err(crate::discover::Error::NoSuchProcess(tgid).into());
        }
        privileges::check()?;
        let layout = layout::KernelLayout::shared()?;
        let mut features = features::KernelFeatures::probe(layout)?;
        if let Some(regs) = regs {
            features.task_pt_regs = regs == features::RegsSource::Helper && features.task_pt_regs;
        }
        let config = Config {
            target_tgid: tgid,
            regs: layout.regs,
            task: layout.task,
            emit_events: u32::from(events),
            pid_ns: rip_ebpf::pid_ns::HOST,
            switch_state_arg: u32::from(layout.switch_state_arg),
            slot_mask: 0,
            switch_clock: 0,
        };

        Ok(SwitchSetup { config, features })
    }
}

impl KernelProbe {
    /// Loads the programs for process `tgid` and attaches the sched_switch
    /// tracepoint. With `events`, every switch of the target is also sent
    /// to user space (see [`Self::take_events`]); without, the program only
    /// keeps the per-thread table, which is all a report needs.
    ///
    /// `tgid` and every thread id this probe hands back are rip-probe's:
    /// in a pid namespace other than the host's (a debug container), the
    /// namespace's, translated from the kernel's global ids.
    pub fn attach(tgid: u32, events: bool) -> Result<Self> {
        Self::attach_with(tgid, events, None)
    }

    /// [`Self::attach`], loading the given build of the register-reading
    /// programs instead of the one the kernel's features select: the build
    /// for older kernels also runs on newer ones, which is how it is tested
    /// without booting them. A forced build also means the raw
    /// sched_switch tracepoint rather than the BTF-typed one (see
    /// [`switch`]).
    pub fn attach_with(
        tgid: u32,
        events: bool,
        regs: Option<features::RegsSource>,
    ) -> Result<Self> {
        Self::load(tgid, Watch::Switches { events }, regs, None)
    }

    /// [`Self::attach`] with `slots` entries in the BTF-typed program's
    /// per-thread array (a power of two, at least
    /// [`rip_ebpf::SLOT_PROBES`]) instead of room for twice the target's
    /// threads: how a full array is tested.
    pub fn attach_with_slots(tgid: u32, slots: u32) -> Result<Self> {
        let slots = slots.max(rip_ebpf::SLOT_PROBES).next_power_of_two();
        Self::load(tgid, Watch::Switches { events: false }, None, Some(slots))
    }

    /// Loads only what a snapshot of process `tgid` needs: the task
    /// iterator, and no program that runs while the target does (no
    /// sched_switch), so that taking snapshots costs the target nothing.
    /// Each [`Self::snapshot`] is then one pass of the iterator; blocked
    /// times are lower bounds from each task's own clocks, since no
    /// switch is recorded. A probe can take any number of snapshots: the
    /// iterator is loaded once.
    pub fn snapshots_only(tgid: u32) -> Result<Self> {
        Self::snapshots_only_with(tgid, None)
    }

    /// [`Self::snapshots_only`] with the given build of the task iterator
    /// (as [`Self::attach_with`]).
    pub fn snapshots_only_with(tgid: u32, regs: Option<features::RegsSource>) -> Result<Self> {
        Self::load(tgid, Watch::Nothing, regs, None)
    }

    /// Whether this probe records the target's context switches (see
    /// [`Self::snapshots_only`]).
    pub fn watches_switches(&self) -> bool {
        self.switches
    }

    fn load(
        tgid: u32,
        watch: Watch,
        regs: Option<features::RegsSource>,
        slots: Option<u32>,
    ) -> Result<Self> {
        let events = matches!(watch, Watch::Switches { events: true });
        let switches = matches!(watch, Watch::Switches { .. });
        let SwitchSetup {
            mut config,
            features,
        } = SwitchSetup::new(tgid, events, regs)?;
        let (_, iter_prog) = features.regs_source().programs();

        // The programs need no CO-RE relocations, so the loader goes
        // without the kernel's BTF. In a pid namespace of rip-probe's own,
        // a first pass of the iterator finds the target's global ids.
        let (ids, tids) = match pidns::ours() {
            Some(ns) => {
                let btf = layout::aya_shared()?;
                let ids = pidns::NsIds::find(ns, tgid, &config, btf, iter_prog)?;
                config.target_tgid = ids.table.global_tgid();
                config.pid_ns = rip_ebpf::pid_ns::RECORD;
                let tids = ids.table.global_tids();
                let table = std::sync::Arc::new(std::sync::Mutex::new(ids.table));
                (Some(table), tids)
            }
            None => (None, Vec::new()),
        };
        // The per-thread tables are sized to the target (they are
        // preallocated); without sched_switch nothing writes them, and they
        // get their smallest size (every map of the object is created).
        let entries = if switches {
            thread_entries(match tids.len() {
                0 => super::procfs::thread_count(tgid)?,
                n => n,
            })
        } else {
            1
        };
        let slots = slots.unwrap_or_else(|| slot_entries(entries));
        let object = |config: &Config, table: Table| {
            let (hash, slots) = match table {
                Table::Hash => (entries, 1),
                Table::Slots => (1, slots),
            };
            EbpfLoader::new()
                .btf(None)
                .override_global(names::CONFIG, config, true)
                .map_max_entries(names::THREADS, hash)
                .map_max_entries(names::SLOTS, slots)
                .map_max_entries(names::LAST_FN, entries)
                // Kernel stacks at switch time are only taken for observers.
                .map_max_entries(names::STACKS, if events { 1 << 14 } else { 1 })
                .map_max_entries(names::EVENTS, if events { 1 << 20 } else { 4096 })
                .load(EBPF_OBJECT)
                .map_err(Error::load)
        };

        // The program learns the target's threads from the tasks it sees
        // switch: the table needs no seeding. The BTF-typed program keeps
        // them in an array, the raw one in a hash map: the object is
        // loaded for the first, and again for the second if the kernel
        // refuses the first (the maps are sized before the programs load).
        let wanted = switch::Wanted::new(features.regs_source(), regs);
        let mut refused = None;
        let mut slotted = None;
        if switches && wanted.btf {
            config.slot_mask = slots - 1;
            // The scheduler's clock where the kernel has the run queue's
            // path from a task (see `rip_ebpf::Config::switch_clock`).
            config.switch_clock =
                u32::from(config.task.se_cfs_rq != 0 && config.task.rq_clock != 0);
            let mut ebpf = object(&config, Table::Slots)?;
            match timing::phase("load sched_switch", || {
                switch::try_btf(&mut ebpf, SWITCH_NAMES.btf)
            }) {
                Ok(()) => slotted = Some(ebpf),
                Err(why) => refused = Some(why),
            }
        }
        let (mut ebpf, choice) = match slotted {
            Some(ebpf) => (ebpf, Some(switch::btf_choice(SWITCH_NAMES))),
            None => {
                config.slot_mask = 0;
                let mut ebpf = object(&config, Table::Hash)?;
                let choice = if switches {
                    let why = refused.unwrap_or_else(|| wanted.not_btf());
                    Some(switch::load_raw(&mut ebpf, SWITCH_NAMES, wanted.raw, why)?)
                } else {
                    None
                };
                (ebpf, choice)
            }
        };
        let (switch_link, switch_choice) = match choice {
            Some(choice) => (Some(switch::attach(&mut ebpf, &choice)?), Some(choice)),
            None => (None, None),
        };

        Ok(KernelProbe {
            ebpf,
            tgid,
            config,
            iter_loaded: false,
            waits_loaded: false,
            switches,
            switch_link,
            switch_choice,
            features,
            ids,
            uprobe_links: Vec::new(),
        })
    }

    /// The observed process.
    pub fn tgid(&self) -> u32 {
        self.tgid
    }

    /// The configuration handed to the programs (tracepoint and register
    /// offsets), for diagnostics.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The sched_switch program this probe runs, and why that one (`None`
    /// for a probe that takes snapshots only).
    pub fn switch_choice(&self) -> Option<&switch::SwitchChoice> {
        self.switch_choice.as_ref()
    }

    /// What the running kernel offers, as probed at attach.
    pub fn features(&self) -> &features::KernelFeatures {
        &self.features
    }

    /// Names of the programs loaded in the kernel, as `bpftool prog` shows them.
    pub fn program_names(&self) -> Vec<String> {
        self.ebpf
            .programs()
            .filter(|(_, p)| p.fd().is_ok())
            .map(|(n, _)| n.to_string())
            .collect()
    }

    /// The per-thread records the programs have written so far.
    pub fn threads(&self) -> Result<HashMap<u32, ThreadRecord>> {
        Ok(self.our_ids(self.switch_records()?))
    }

    /// The per-thread records by the kernel's thread ids: from `SLOTS`
    /// (the BTF-typed program) or `THREADS` (the raw one).
    fn switch_records(&self) -> Result<HashMap<u32, ThreadRecord>> {
        if self.config.slot_mask == 0 {
            return self.read_global_table::<ThreadRecord>(names::THREADS);
        }
        let map = self
            .ebpf
            .map(names::SLOTS)
            .and_then(batch::array_data)
            .ok_or_else(|| missing(names::SLOTS))?;
        let slots = batch::lookup_all::<ThreadSlot>(map)
            .map_err(|e| Error::map_batch(MapOp::Read, names::SLOTS, e))?;
        Ok(slots
            .into_iter()
            .filter_map(|(_, s)| Some((u32::try_from(s.tid).ok().filter(|&t| t != 0)?, s.rec)))
            .collect())
    }

    /// How the BTF-typed program's slots fared, summed over the CPUs
    /// (`None`: the raw program runs, with its hash map).
    pub fn slot_stats(&self) -> Result<Option<SlotStats>> {
        if self.config.slot_mask == 0 {
            return Ok(None);
        }
        let map: aya::maps::PerCpuArray<_, SlotStats> = aya::maps::PerCpuArray::try_from(
            self.ebpf
                .map(names::SLOT_STATS)
                .ok_or_else(|| missing(names::SLOT_STATS))?,
        )
        .map_err(|e| Error::map(MapOp::Open, names::SLOT_STATS, e))?;
        let per_cpu = map
            .get(&0, 0)
            .map_err(|e| Error::map(MapOp::Read, names::SLOT_STATS, e))?;
        let mut sum = SlotStats::default();
        per_cpu.iter().for_each(|c| sum.merge(c));
        Ok(Some(sum))
    }

    /// Switch events the kernel dropped because the ring buffer was full,
    /// summed over the CPUs: exact, both kinds.
    pub fn events_lost(&self) -> Result<u64> {
        let map: aya::maps::PerCpuArray<_, u64> = aya::maps::PerCpuArray::try_from(
            self.ebpf
                .map(names::EVENTS_LOST)
                .ok_or_else(|| missing(names::EVENTS_LOST))?,
        )
        .map_err(|e| Error::map(MapOp::Open, names::EVENTS_LOST, e))?;
        let per_cpu = map
            .get(&0, 0)
            .map_err(|e| Error::map(MapOp::Read, names::EVENTS_LOST, e))?;
        Ok(per_cpu.iter().sum())
    }

    /// `table`, keyed by the BPF's thread ids, keyed by rip-probe's
    /// instead (the same on the host; see [`pidns`]).
    fn our_ids<V>(&self, table: HashMap<u32, V>) -> HashMap<u32, V> {
        match &self.ids {
            Some(ids) => pidns::lock(ids).translate_keys(table),
            None => table,
        }
    }

    /// A whole `HashMap<u32, V>` map of the programs (keyed by thread),
    /// copied out, with the kernel's global thread ids.
    fn read_global_table<V: aya::Pod + Default>(&self, name: &str) -> Result<HashMap<u32, V>> {
        let map = self
            .ebpf
            .map(name)
            .and_then(batch::hash_map_data)
            .ok_or_else(|| missing(name))?;
        let entries = batch::lookup_all(map).map_err(|e| Error::map_batch(MapOp::Read, name, e))?;
        Ok(entries.into_iter().collect())
    }

    /// What a report needs from the kernel, read in this order: the
    /// per-thread table and uprobe hits, then (`with_tasks`) a pass of the
    /// task iterator, so that no switch recorded is newer than the
    /// iterator's snapshot. Inside a pid namespace the tables are
    /// translated after the pass, which learns the ids of threads created
    /// during the window.
    pub fn snapshot(&mut self, with_tasks: bool) -> Result<KernelSnapshot> {
        let switches = timing::phase("read thread map", || self.switch_records())?;
        let hits = self.read_global_table::<FnHit>(names::LAST_FN)?;
        let tasks = if with_tasks {
            timing::phase("task iterator", || self.tasks())?
        } else {
            Vec::new()
        };
        Ok(KernelSnapshot {
            switches: self.our_ids(switches),
            uprobe_hits: self.our_ids(hits),
            tasks,
        })
    }

    /// The kernel stack recorded under `id` (innermost first), if any.
    pub fn kernel_stack(&self, id: i64) -> Option<Vec<u64>> {
        let id = u32::try_from(id).ok()?;
        let map = StackTraceMap::try_from(self.ebpf.map(names::STACKS)?).ok()?;
        let st = map.get(&id, 0).ok()?;
        Some(st.frames().iter().map(|f| f.ip).collect())
    }

    /// Every thread of the target as the kernel sees it right now: state,
    /// saved user registers and kernel stack, in one pass of a BPF task
    /// iterator.
    pub fn tasks(&mut self) -> Result<Vec<TaskRecord>> {
        self.load_iter()?;
        let (_, iter_prog) = self.features.regs_source().programs();
        let (tgid, hint) = self.pass_of_target();
        let tasks = iter::run(&mut self.ebpf, iter_prog, tgid, hint)?;
        Ok(match &self.ids {
            Some(ids) => pidns::lock(ids).translate_tasks(tasks),
            None => tasks,
        })
    }

    /// What a pass of an iterator over the target's threads is given: the
    /// process to visit (none while rip-probe looks for it by its id in
    /// rip-probe's pid namespace) and how many threads it has now. The
    /// link names the process by its id in rip-probe's own pid namespace,
    /// the one the kernel looks it up in (`task_active_pid_ns(current)`
    /// when the iterator is opened), not by the global id the programs
    /// compare with.
    fn pass_of_target(&self) -> (Option<u32>, usize) {
        let tgid = (self.config.pid_ns != rip_ebpf::pid_ns::FIND).then_some(self.tgid);
        let threads = super::procfs::thread_count(self.tgid).unwrap_or(0);
        (tgid, threads + 64)
    }

    /// Every thread of the target's state and system call (with its first
    /// argument) right now, in one pass of the lean task iterator: what
    /// says which futex each thread waits in, for a fraction of the cost
    /// of [`Self::tasks`] (no kernel stacks, clocks or names). Loaded the
    /// first time it is asked for.
    pub fn waits(&mut self) -> Result<Vec<TaskWait>> {
        let prog = self.features.regs_source().waits_program();
        if !self.waits_loaded {
            let btf = layout::aya_shared()?;
            let iter: &mut Iter = program(&mut self.ebpf, prog)?;
            iter.load("task", btf)
                .map_err(|e| Error::program(ProgramOp::Load, "the lean task iterator", e))?;
            self.waits_loaded = true;
        }
        let (tgid, hint) = self.pass_of_target();
        let waits = iter::run::<TaskWait>(&mut self.ebpf, prog, tgid, hint)?;
        Ok(match &self.ids {
            Some(ids) => pidns::lock(ids).translate_waits(waits),
            None => waits,
        })
    }

    /// Loads the task iterator: sessions call this while they observe, so
    /// the verifier's work is not added after the window.
    pub fn prepare(&mut self) -> Result<()> {
        self.load_iter()
    }

    /// Detaches sched_switch from the tracepoint, on another thread: the
    /// kernel waits for an RCU grace period before the close returns
    /// (tens of milliseconds), which need not delay the report. The maps
    /// stay readable.
    pub fn detach_switches(&mut self) -> Result<()> {
        let Some(link) = self.switch_link.take() else {
            return Ok(());
        };
        crate::util::background::spawn("rip-detach", move || drop(link));
        Ok(())
    }

    /// Loads the task iterator (once).
    fn load_iter(&mut self) -> Result<()> {
        if self.iter_loaded {
            return Ok(());
        }
        let btf = layout::aya_shared()?;
        let (_, iter_prog) = self.features.regs_source().programs();
        let iter: &mut Iter = program(&mut self.ebpf, iter_prog)?;
        iter.load("task", btf)
            .map_err(|e| Error::program(ProgramOp::Load, "the task iterator", e))?;
        self.iter_loaded = true;
        Ok(())
    }

    /// Attaches the `fn_entry` uprobe to each site (see [`uprobe`]).
    pub fn attach_uprobes(&mut self, sites: &[uprobe::ProbeSite]) -> Result<()> {
        let links = uprobe::attach(&mut self.ebpf, self.tgid, sites)?;
        self.uprobe_links.extend(links);
        Ok(())
    }

    /// Takes the switch-event stream. Only one stream exists per probe.
    pub fn take_events(&mut self) -> Result<EventStream> {
        let map = self
            .ebpf
            .take_map(names::EVENTS)
            .ok_or_else(|| missing(names::EVENTS))?;
        let ring = RingBuf::try_from(map)
            .map_err(|e| Error::map(MapOp::Open, "the EVENTS ring buffer", e))?;
        Ok(EventStream {
            ring,
            ids: self
                .ids
                .clone()
                .map(|ids| (ids, pidns::HeldEvents::default())),
        })
    }
}

/// The kernel's side of one report, by rip-probe's thread ids (see
/// [`KernelProbe::snapshot`]).
#[derive(Clone, Debug, Default)]
pub struct KernelSnapshot {
    /// sched_switch's per-thread records.
    pub switches: HashMap<u32, ThreadRecord>,
    /// The last function each thread entered (`--uprobe`).
    pub uprobe_hits: HashMap<u32, FnHit>,
    /// The task iterator's records (empty when not asked for).
    pub tasks: Vec<TaskRecord>,
}

/// How long a reader waits between looks at the event ring buffer.
pub const EVENT_BATCH: Duration = Duration::from_millis(10);

/// Context switches of the target's threads, in the order the kernel
/// recorded them.
pub struct EventStream {
    ring: RingBuf<MapData>,
    /// Inside a pid namespace: the ids there (see [`pidns`]), and the
    /// events waiting to learn theirs.
    ids: Option<(pidns::SharedIds, pidns::HeldEvents)>,
}

impl EventStream {
    /// Returns the events recorded so far, waiting up to `timeout` (at most
    /// [`EVENT_BATCH`]) when there are none yet. The program does not wake
    /// the reader per event (that would cost the traced threads a wakeup
    /// per switch), so events arrive in batches.
    pub fn poll(&mut self, timeout: Duration) -> Result<Vec<SwitchEvent>> {
        let mut out = self.drain();
        if !out.is_empty() {
            return Ok(out);
        }
        let timeout = timeout.min(EVENT_BATCH);
        let mut fds = [PollFd::new(&self.ring, PollFlags::IN)];
        let timeout = Timespec::try_from(timeout).expect("at most EVENT_BATCH");
        match poll(&mut fds, Some(&timeout)) {
            Ok(_) | Err(Errno::INTR) => {}
            Err(e) => return Err(Error::PollEvents(e.into()).into()),
        }
        out.extend(self.drain());
        Ok(out)
    }

    fn drain(&mut self) -> Vec<SwitchEvent> {
        let mut out = Vec::new();
        while let Some(item) = self.ring.next() {
            // The program writes whole SwitchEvents (a longer record would
            // be a newer program's: its prefix is still ours).
            if let Ok((ev, _)) = SwitchEvent::read_from_prefix(&item) {
                out.push(ev);
            }
        }
        match &mut self.ids {
            Some((ids, held)) => held.translate(&pidns::lock(ids), out, false),
            None => out,
        }
    }

    /// Inside a pid namespace: whether events of a thread created since
    /// the last task iterator pass wait for one (see
    /// [`KernelProbe::tasks`]), which learns its id there.
    pub fn waiting_for_ids(&self) -> bool {
        self.ids.as_ref().is_some_and(|(_, held)| held.waiting())
    }

    /// After a task iterator pass: the events that waited for it, by the
    /// namespace's ids (those of threads gone before it are dropped).
    pub fn release_held(&mut self) -> Vec<SwitchEvent> {
        match &mut self.ids {
            Some((ids, held)) => held.translate(&pidns::lock(ids), Vec::new(), true),
            None => Vec::new(),
        }
    }
}

/// One pass of the (loaded) task iterator `prog` of `ebpf` over every
/// task of the host: its records.
pub(crate) fn run_task_iter(ebpf: &mut Ebpf, prog: &str) -> Result<Vec<TaskRecord>> {
    iter::run(ebpf, prog, None, 0)
}

/// A loader of rip-ebpf's object for a command that runs none of the
/// `--pid` session's programs: every loader creates every map of the
/// object, so the session's per-thread tables, stacks and events get their
/// smallest sizes.
pub(crate) fn loader_without_session_maps<'a>() -> EbpfLoader<'a> {
    let mut l = EbpfLoader::new();
    l.btf(None)
        .map_max_entries(names::THREADS, 1)
        .map_max_entries(names::SLOTS, 1)
        .map_max_entries(names::LAST_FN, 1)
        .map_max_entries(names::STACKS, 1)
        .map_max_entries(names::EVENTS, 4096);
    l
}

/// Program `name` of `ebpf`, as its type `P`.
fn program<'a, P>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut P>
where
    &'a mut P: TryFrom<&'a mut aya::programs::Program, Error = aya::programs::ProgramError>,
{
    ebpf.program_mut(name)
        .ok_or_else(|| missing(name))?
        .try_into()
        .map_err(|e| Error::program(ProgramOp::Find, name, e).into())
}

fn missing(what: &str) -> Error {
    Error::MissingFromObject(what.to_string())
}
