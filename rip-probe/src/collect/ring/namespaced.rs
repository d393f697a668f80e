//! Rings of processes in other namespaces: found in the process's maps
//! and read through its own view of files (`/proc/PID/map_files`,
//! `/proc/PID/root`), their thread ids turned into ours, their binaries
//! resolved in the process's root, and their writer recognised by
//! namespace identity.

use std::path::PathBuf;

use librip::reader::{MappedRing, ReadError, RingFile, Via, open_rings, open_rings_in};

use super::RingView;
use crate::{
    collect::Error,
    collect::namespaces::{self, TidMap, Writer},
    discover,
    discover::maps::ProcessMaps,
};

impl RingView {
    /// The ring live process `pid` maps: the first one it wrote itself
    /// (a forked child may still map its parent's), else the first one,
    /// read through the process's own view of the file. Its thread ids
    /// are ours and its binaries are looked up in the process's root.
    pub fn of_process(pid: u32) -> Result<RingView, Error> {
        Self::of_rings(pid, open_rings(pid)?)
    }

    /// [`Self::of_process`] with the process's map already open.
    pub fn of_process_in(pid: u32, maps: &ProcessMaps) -> Result<RingView, Error> {
        let files = maps
            .file_backed()
            .map_err(|e| ReadError::reading_maps(pid, e))?;
        Self::of_rings(pid, open_rings_in(pid, files)?)
    }

    fn of_rings(pid: u32, rings: Vec<MappedRing>) -> Result<RingView, Error> {
        let mut first = None;
        for m in rings {
            let Ok(ring) = RingFile::read(m.file, &m.path) else {
                continue;
            };
            let mut view = Self::from_ring(&m.path, &ring);
            if namespaces::differs(pid, "mnt") {
                let how = match &m.via {
                    Via::MapFiles(p) | Via::Root(p) => p.display().to_string(),
                    Via::Path => "its path".into(),
                };
                let ns = namespaces::inode(Some(pid), "mnt").unwrap_or_default();
                view.ns_note = Some(format!(
                    "the path in the mount namespace of pid {pid} (mnt:[{ns}]), read through {how}"
                ));
            }
            if view.written_by(pid) {
                view.join_process(pid);
                return Ok(view);
            }
            first.get_or_insert(view);
        }
        first.ok_or(Error::Ring(ReadError::NoRing(pid)))
    }

    /// Whether live process `pid` (ours) wrote this ring: its innermost
    /// pid is the ring's, in the ring's pid namespace, and it started when
    /// the ring's writer did.
    pub fn written_by(&self, pid: u32) -> bool {
        if self.pid_ns != 0 && namespaces::inode(Some(pid), "pid").is_some_and(|n| n != self.pid_ns)
        {
            return false;
        }
        let same_pid = self.pid == pid
            || namespaces::innermost_id(pid, 0).is_some_and(|n| n == u64::from(self.pid));
        same_pid
            && discover::stat(pid, 0).is_some_and(|st| st.start_time == self.process_start_time)
    }

    /// Whether the ring's writer still runs, and as which of our pids.
    /// A ring written in our pid namespace (or before rings recorded
    /// theirs) names it by pid; one from another namespace is looked for
    /// by namespace, pid there and start time.
    pub fn writer(&self) -> Writer {
        let ours = namespaces::inode(None, "pid");
        if self.pid_ns == 0 || Some(self.pid_ns) == ours {
            // A killed process lingers as a zombie until reaped: its maps
            // are gone.
            let alive = discover::stat(self.pid, 0).is_some_and(|st| {
                st.start_time == self.process_start_time && !matches!(st.state, 'Z' | 'X')
            });
            return if alive {
                Writer::Alive(self.pid)
            } else {
                Writer::Gone
            };
        }
        namespaces::find_writer(self.pid_ns, self.pid, self.process_start_time)
    }

    /// Joins the ring with its live writer, our pid `pid`: thread ids
    /// become ours (when its pid namespace is not ours) and binaries are
    /// looked up in its root (when its mount namespace is not ours).
    pub fn join_process(&mut self, pid: u32) {
        if let Some(map) = TidMap::of(pid) {
            self.map_tids_to_ours(&map);
        }
        if namespaces::differs(pid, "mnt") {
            self.resolve_in(PathBuf::from(format!("/proc/{pid}/root")));
        }
    }

    /// Rewrites thread ids (slots and the tids polling tasks) from the
    /// writer's pid namespace to ours. Every thread slot keeps its
    /// namespace id in `ns_id`; one whose thread is gone keeps that id.
    pub(crate) fn map_tids_to_ours(&mut self, map: &TidMap) {
        for s in &mut self.slots {
            if let Some(t) = &mut s.task
                && t.polling_tid != 0
                && let Some(host) = map.host(u64::from(t.polling_tid))
            {
                t.polling_tid = host;
            }
            if !s.coroutine {
                s.ns_id = Some(s.id);
                if let Some(host) = map.host(s.id) {
                    s.id = u64::from(host);
                }
            }
        }
    }

    /// The ring's binaries are paths under `root` (a container's root:
    /// `/proc/PID/root` live, its root file system post-mortem).
    pub fn resolve_in(&mut self, root: PathBuf) {
        for m in &mut self.modules {
            m.root = Some(root.clone());
        }
    }

    /// A post-mortem ring from another pid namespace: its ids are that
    /// namespace's, and there is no live process to map them to ours.
    pub(crate) fn mark_namespace_ids(&mut self) {
        for s in self.slots.iter_mut().filter(|s| !s.coroutine) {
            s.ns_id = Some(s.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::ring::{RingSlot, TaskStats};

    fn slot(id: u64, task: Option<TaskStats>) -> RingSlot {
        RingSlot {
            coroutine: task.is_some(),
            exited: false,
            id,
            ns_id: None,
            generation: 1,
            name: format!("s{id}"),
            snaps: 1,
            entries: vec![(0, 0x1000)],
            task,
        }
    }

    #[test]
    fn namespace_ids_become_ours_and_are_kept_beside() {
        let polled = TaskStats {
            polling_tid: 42,
            ..TaskStats::default()
        };
        // Thread 42 of the namespace (our 4711) polls task 3; thread 43
        // is gone.
        let mut r =
            RingView::with_slots(vec![slot(42, None), slot(43, None), slot(3, Some(polled))]);
        r.map_tids_to_ours(&TidMap::from_pairs(&[(42, 4711)]));
        let ids: Vec<_> = r.slots.iter().map(|s| (s.id, s.ns_id)).collect();
        assert_eq!(ids, [(4711, Some(42)), (43, Some(43)), (3, None)]);
        assert_eq!(r.slots[2].task.unwrap().polling_tid, 4711);
    }
}
