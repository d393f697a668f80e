//! Reading ring files with librip's reader.

use std::path::Path;

use librip::reader::{RingFile, SlotKind, SlotState};

use super::ModuleMap;
use super::{RingSlot, RingView};
use crate::collect::Error;

impl RingView {
    /// Reads a ring file. Errors are librip's, mapped to one-line messages.
    pub fn open(path: &Path) -> Result<Self, Error> {
        crate::discover::may_read(path)?;
        let ring = RingFile::open(path)?;
        Ok(Self::from_ring(path, &ring))
    }

    pub(super) fn from_ring(path: &Path, ring: &RingFile) -> Self {
        let h = ring.header();
        RingView {
            path: path.to_path_buf(),
            owner: ring.owner(),
            version: h.version,
            pid: h.pid,
            pid_ns: h.pid_ns,
            mnt_ns: h.mnt_ns,
            ns_note: None,
            process_start_time: h.process_start_ticks,
            exe: (!h.exe.as_os_str().is_empty()).then(|| h.exe.display().to_string()),
            created_unix_ns: h.created_realtime_ns,
            created_monotonic_ns: h.created_monotonic_ns,
            depth: h.depth,
            dropped: h.dropped_snaps,
            modules: ring
                .modules()
                .iter()
                // The vDSO has no file to symbolize from after the fact.
                .filter(|m| !m.is_vdso)
                .map(|m| ModuleMap {
                    path: m.path.clone(),
                    start: m.start,
                    end: m.end,
                    file_offset: m.file_offset,
                    build_id: m.build_id.clone(),
                    root: None,
                })
                .collect(),
            slots: ring
                .slots()
                .map(|s| RingSlot {
                    coroutine: s.kind == SlotKind::Coroutine,
                    exited: s.state == SlotState::Exited,
                    id: s.id,
                    ns_id: None,
                    generation: s.generation,
                    name: s.name,
                    snaps: s.snaps,
                    entries: s.entries.iter().map(|e| (e.seq, e.addr)).collect(),
                    task: s.task,
                })
                .collect(),
            allocations: ring.allocations().map(|t| super::AllocEvidence {
                mean: t.mean,
                sampled: t.sampled,
                freed: t.freed,
                dropped: t.dropped,
                file_full: t.file_full,
                torn: t.torn,
                live: t
                    .live
                    .iter()
                    .map(|a| super::LiveSample {
                        requested: a.requested,
                        estimated_bytes: librip::reader::alloc::estimated_bytes(
                            a.requested,
                            t.mean,
                        ),
                        time_ns: a.time_ns,
                        frames: a.frames.clone(),
                    })
                    .collect(),
            }),
        }
    }
}
