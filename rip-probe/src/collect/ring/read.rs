//! Reading ring files with librip's reader.

use std::path::{Path, PathBuf};

use librip::reader::{Follow, ProcessMaps, RingFile, SlotKind, SlotState};

use super::ModuleMap;
use super::{RingSlot, RingView};
use crate::error::Error;

impl RingView {
    /// Reads a ring file. Errors are librip's, mapped to one-line messages.
    pub fn open(path: &Path) -> Result<Self, Error> {
        let ring = RingFile::open(path).map_err(Error::Ring)?;
        Ok(Self::from_ring(path, &ring))
    }

    /// Reads a ring whose path came from a process's maps: a symlink put
    /// in its place is not followed.
    pub fn open_found(path: &Path) -> Result<Self, Error> {
        let ring = RingFile::open_with(path, Follow::No).map_err(Error::Ring)?;
        Ok(Self::from_ring(path, &ring))
    }

    /// The rings a live process has mapped (`/proc/PID/maps`).
    pub fn find(pid: u32) -> Result<Vec<PathBuf>, Error> {
        librip::reader::find_rings(pid).map_err(Error::Ring)
    }

    /// [`Self::find`] in a map already open.
    pub fn find_in(pid: u32, maps: &ProcessMaps) -> Result<Vec<PathBuf>, Error> {
        librip::reader::find_rings_in(pid, maps).map_err(Error::Ring)
    }

    fn from_ring(path: &Path, ring: &RingFile) -> Self {
        let h = ring.header();
        RingView {
            path: path.to_path_buf(),
            owner: ring.owner(),
            version: h.version,
            pid: h.pid,
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
                })
                .collect(),
            slots: ring
                .slots()
                .map(|s| RingSlot {
                    coroutine: s.kind == SlotKind::Coroutine,
                    exited: s.state == SlotState::Exited,
                    id: s.id,
                    generation: s.generation,
                    name: s.name.clone(),
                    snaps: s.snaps,
                    entries: s.entries.iter().map(|e| (e.seq, e.addr)).collect(),
                    task: s.task,
                })
                .collect(),
        }
    }
}
