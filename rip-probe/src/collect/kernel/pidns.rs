//! rip-probe in a pid namespace other than the host's: a debug container
//! sharing the target's (`kubectl debug --target`, `docker run
//! --pid=container:X`). There the user and /proc number processes and
//! threads as the namespace does, while BPF sees the kernel's global ids,
//! and nothing in the namespace's /proc tells one from the other (`NSpid`
//! starts at /proc's own namespace).
//!
//! So the kernel says: the task iterator records each task's ids in
//! rip-probe's namespace beside the global ones (`rip_ebpf::pid_ns`). A
//! first pass, in a load of its own, finds the target by its pid in the
//! namespace and learns its global ids; the programs are then loaded for
//! the global tgid, and every id read back is turned into the namespace's
//! before anything else in rip-probe sees it. Later passes (the report's
//! own iterator, or [`NsIds::refresh`]) learn the threads created since.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard},
};

use aya::{Btf, Ebpf, programs::Iter};
use rip_ebpf::{Config, SwitchEvent, TaskRecord, TaskWait, names, pid_ns};

use super::{EBPF_OBJECT, program, run_task_iter};
use crate::{
    collect::namespaces,
    collect::{
        Result,
        kernel::{Error, ProgramOp},
    },
};

/// rip-probe's pid namespace (its inode), when it is not the host's.
pub(crate) fn ours() -> Option<u64> {
    namespaces::ours_if_not_host("pid", namespaces::HOST_PID_NS)
}

/// One process's threads: their global ids and their ids in rip-probe's
/// pid namespace, learnt from task iterator records.
#[derive(Clone, Debug, Default)]
pub(crate) struct IdTable {
    /// The process, as the namespace numbers it.
    ns_tgid: u32,
    /// The process, as the kernel does (0: not found yet).
    global_tgid: u32,
    /// Global tid → the namespace's.
    to_ns: HashMap<u32, u32>,
    /// The namespace's tid → the global one.
    from_ns: HashMap<u32, u32>,
}

impl IdTable {
    /// An empty table for process `ns_tgid` of rip-probe's namespace.
    pub(crate) fn new(ns_tgid: u32) -> Self {
        IdTable {
            ns_tgid,
            ..IdTable::default()
        }
    }

    /// Learns the ids of the target's records (from either pass).
    pub(crate) fn learn(&mut self, recs: &[TaskRecord]) {
        for r in recs
            .iter()
            .filter(|r| r.ns_tgid == self.ns_tgid && r.ns_tid != 0)
        {
            self.global_tgid = r.tgid;
            self.to_ns.insert(r.tid, r.ns_tid);
            self.from_ns.insert(r.ns_tid, r.tid);
        }
    }

    /// The target's global pid (what the programs filter on), 0 until
    /// found.
    pub(crate) fn global_tgid(&self) -> u32 {
        self.global_tgid
    }

    /// The global tids of the threads known so far (to seed the programs'
    /// thread table).
    pub(crate) fn global_tids(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.to_ns.keys().copied().collect();
        v.sort_unstable();
        v
    }

    /// The namespace's id of the thread the kernel calls `global`, if
    /// known.
    pub(crate) fn to_ns(&self, global: u32) -> Option<u32> {
        self.to_ns.get(&global).copied()
    }

    /// The kernel's id of the thread the namespace calls `ns`, if known.
    pub(crate) fn to_global(&self, ns: u32) -> Option<u32> {
        self.from_ns.get(&ns).copied()
    }

    /// The report iterator's records, learnt from and then given the
    /// namespace's ids, as if BPF had seen those.
    pub(crate) fn translate_tasks(&mut self, mut recs: Vec<TaskRecord>) -> Vec<TaskRecord> {
        self.learn(&recs);
        recs.retain(|r| r.ns_tid != 0 && r.ns_tgid == self.ns_tgid);
        for r in &mut recs {
            r.tid = r.ns_tid;
            r.tgid = r.ns_tgid;
        }
        recs
    }

    /// The lean iterator's records of the target, given the namespace's
    /// ids (a thread whose id there is 0 is not in it).
    pub(crate) fn translate_waits(&self, mut recs: Vec<TaskWait>) -> Vec<TaskWait> {
        recs.retain(|r| r.ns_tid != 0 && r.ns_tgid == self.ns_tgid);
        for r in &mut recs {
            r.tid = r.ns_tid;
            r.tgid = r.ns_tgid;
        }
        recs
    }

    /// A table keyed by global tids, keyed by the namespace's instead;
    /// threads whose id there was never learnt (they came and went between
    /// two passes) are left out.
    pub(crate) fn translate_keys<V>(&self, table: HashMap<u32, V>) -> HashMap<u32, V> {
        table
            .into_iter()
            .filter_map(|(tid, v)| Some((self.to_ns(tid)?, v)))
            .collect()
    }
}

/// An [`IdTable`] with the task iterator that fills it, loaded in
/// `pid_ns::FIND` mode (selecting the target by its pid in rip-probe's
/// namespace) in a BPF object of its own: the programs proper need the
/// global pid before they are loaded.
pub(crate) struct NsIds {
    /// What is known.
    pub(crate) table: IdTable,
    ebpf: Ebpf,
    prog: &'static str,
}

impl NsIds {
    /// Finds process `ns_tgid` (a pid in rip-probe's namespace `ns`) with
    /// a pass of the task iterator `prog` (the build the kernel runs),
    /// loaded with `base`'s offsets and the kernel BTF `btf`.
    pub(crate) fn find(
        ns: u64,
        ns_tgid: u32,
        base: &Config,
        btf: &Btf,
        prog: &'static str,
    ) -> Result<Self> {
        crate::discover::check_proc()?;
        let config = Config {
            target_tgid: ns_tgid,
            pid_ns: pid_ns::FIND,
            emit_events: 0,
            ..*base
        };
        // Only the iterator runs.
        let mut ebpf = super::loader_without_session_maps()
            .override_global(names::CONFIG, &config, true)
            .load(EBPF_OBJECT)
            .map_err(Error::load)?;
        let iter: &mut Iter = program(&mut ebpf, prog)?;
        iter.load("task", btf)
            .map_err(|e| Error::program(ProgramOp::Load, "the task iterator", e))?;
        let mut ids = NsIds {
            table: IdTable::new(ns_tgid),
            ebpf,
            prog,
        };
        ids.refresh()?;
        if ids.table.global_tgid() == 0 {
            return Err(
                if std::path::Path::new(&format!("/proc/{ns_tgid}")).exists() {
                    crate::discover::Error::NotInOurPidNamespace { pid: ns_tgid, ns }
                } else {
                    crate::discover::Error::NoSuchProcess(ns_tgid)
                }
                .into(),
            );
        }
        Ok(ids)
    }

    /// [`Self::find`] for a command with no task iterator of its own
    /// (`locks`, `calls`): reads the kernel's types and features itself.
    /// `None` in the host's pid namespace, where BPF's ids are ours.
    pub(crate) fn find_here(ns_tgid: u32) -> Result<Option<Self>> {
        let Some(ns) = ours() else {
            return Ok(None);
        };
        let layout = super::layout::KernelLayout::shared()?;
        let features = super::features::KernelFeatures::probe(layout)?;
        let base = Config {
            regs: layout.regs,
            task: layout.task,
            ..Config::default()
        };
        let btf = super::layout::aya_shared()?;
        let (_, iter) = features.regs_source().programs();
        Self::find(ns, ns_tgid, &base, btf, iter).map(Some)
    }

    /// [`Self::find_here`] for a command that has read the kernel's types
    /// and features already (`setup`): its offsets and its build of the
    /// iterator.
    pub(crate) fn find_with(ns_tgid: u32, setup: &super::SwitchSetup) -> Result<Option<Self>> {
        let Some(ns) = ours() else {
            return Ok(None);
        };
        let btf = super::layout::aya_shared()?;
        let (_, iter) = setup.features.regs_source().programs();
        Self::find(ns, ns_tgid, &setup.config, btf, iter).map(Some)
    }

    /// Runs the finding pass again: learns the threads created since.
    pub(crate) fn refresh(&mut self) -> Result<()> {
        let recs = run_task_iter(&mut self.ebpf, self.prog)?;
        self.table.learn(&recs);
        Ok(())
    }
}

/// Switch events (global ids, in order), held back from the first one of a
/// thread whose id in the namespace is not known yet (created since the
/// last task iterator pass): observers get them in order, by the
/// namespace's ids, once a pass has learnt it.
#[derive(Clone, Debug, Default)]
pub(crate) struct HeldEvents {
    held: Vec<SwitchEvent>,
}

impl HeldEvents {
    /// The held events then `raw`, translated as far as `ids` knows their
    /// threads; the rest is held. With `after_pass` (a task iterator pass
    /// just ran), events of threads still unknown (gone before it) are
    /// dropped instead.
    pub(crate) fn translate(
        &mut self,
        ids: &IdTable,
        raw: Vec<SwitchEvent>,
        after_pass: bool,
    ) -> Vec<SwitchEvent> {
        let pending = std::mem::take(&mut self.held);
        let mut out = Vec::new();
        for mut ev in pending.into_iter().chain(raw) {
            if !self.held.is_empty() {
                self.held.push(ev);
                continue;
            }
            match ids.to_ns(ev.tid) {
                Some(tid) => {
                    ev.tid = tid;
                    out.push(ev);
                }
                None if after_pass => {}
                None => self.held.push(ev),
            }
        }
        out
    }

    /// Whether events wait for a task iterator pass.
    pub(crate) fn waiting(&self) -> bool {
        !self.held.is_empty()
    }
}

/// An [`IdTable`] shared between a probe and its event stream.
pub(crate) type SharedIds = Arc<Mutex<IdTable>>;

/// Locks `ids`; a panic elsewhere while it was held leaves a table that is
/// still valid, so poisoning is ignored.
pub(crate) fn lock(ids: &SharedIds) -> MutexGuard<'_, IdTable> {
    ids.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(tid: u32, tgid: u32, ns_tid: u32, ns_tgid: u32) -> TaskRecord {
        // SAFETY: TaskRecord is plain integers; all zeroes is valid.
        let mut r: TaskRecord = unsafe { std::mem::zeroed() };
        (r.tid, r.tgid, r.ns_tid, r.ns_tgid) = (tid, tgid, ns_tid, ns_tgid);
        r
    }

    #[test]
    fn events_of_new_threads_wait_for_a_pass_in_order() {
        let ev = |tid, ts_ns| SwitchEvent {
            tid,
            ts_ns,
            ..SwitchEvent::default()
        };
        let mut t = IdTable::new(1);
        t.learn(&[rec(4711, 4711, 1, 1)]);
        let mut h = HeldEvents::default();
        // 4800 is new: it and everything after it wait.
        let out = h.translate(&t, vec![ev(4711, 1), ev(4800, 2), ev(4711, 3)], false);
        assert_eq!(
            out.iter().map(|e| (e.tid, e.ts_ns)).collect::<Vec<_>>(),
            [(1, 1)]
        );
        assert!(h.waiting());
        // A pass learns 4800; 4900 came and went before it: dropped.
        t.learn(&[rec(4800, 4711, 2, 1)]);
        let out = h.translate(&t, vec![ev(4900, 4), ev(4800, 5)], true);
        let got: Vec<_> = out.iter().map(|e| (e.tid, e.ts_ns)).collect();
        assert_eq!(got, [(2, 2), (1, 3), (2, 5)]);
        assert!(!h.waiting());
    }

    #[test]
    fn ids_are_learnt_and_translated() {
        let mut t = IdTable::new(1);
        assert_eq!(t.global_tgid(), 0);
        // The finding pass: the target's threads, global and ours.
        t.learn(&[rec(4711, 4711, 1, 1), rec(4712, 4711, 2, 1)]);
        assert_eq!(t.global_tgid(), 4711);
        assert_eq!(t.global_tids(), [4711, 4712]);
        // The report's pass: a thread created since is learnt; one outside
        // our namespace (ns_tid 0) is left out, never shown by a bogus id.
        let recs = t.translate_tasks(vec![
            rec(4711, 4711, 1, 1),
            rec(4800, 4711, 3, 1),
            rec(4801, 4711, 0, 0),
        ]);
        let ids: Vec<_> = recs.iter().map(|r| (r.tid, r.tgid)).collect();
        assert_eq!(ids, [(1, 1), (3, 1)]);
        assert_eq!(t.to_ns(4800), Some(3));
        let table = HashMap::from([(4712, 'a'), (4800, 'b'), (9999, 'c')]);
        let mut keys: Vec<_> = t.translate_keys(table).into_iter().collect();
        keys.sort_unstable();
        assert_eq!(keys, [(2, 'a'), (3, 'b')]);
    }
}
