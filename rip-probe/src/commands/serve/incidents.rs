//! serve's incident log: when a process's snapshot becomes an incident (a
//! thread stuck past `--stuck`, a deadlock), its full report, JSON and
//! text, written once to `--reports DIR`: each file whole or not at all,
//! the oldest removed past `--max-reports`. Written again only after the
//! process was seen well in between.

use std::{
    collections::HashSet,
    path::{Path, PathBuf},
};

use super::super::output::OutputFile;
use crate::{
    error::{Error, Result},
    model::Report,
    render,
};

/// The file names' prefix: only files of this form are ever removed.
const PREFIX: &str = "rip-incident-";

/// The incident log.
pub(super) struct Incidents {
    dir: PathBuf,
    max: usize,
    /// The processes whose current incident was written.
    open: HashSet<u32>,
}

impl Incidents {
    /// The log in `dir` (created if missing), keeping at most `max`
    /// incidents.
    pub(super) fn new(dir: &Path, max: usize) -> Result<Incidents> {
        std::fs::create_dir_all(dir).map_err(|e| {
            Error::Usage(format!(
                "--reports {}: cannot create the directory ({e}): give a writable directory",
                dir.display()
            ))
        })?;
        // Checked now: a directory that cannot take a file is said at
        // start, not at the first incident.
        OutputFile::check("--reports", &dir.join(format!("{PREFIX}check")))?;
        Ok(Incidents {
            dir: dir.to_path_buf(),
            max: max.max(1),
            open: HashSet::new(),
        })
    }

    /// Records process `pid`'s state: an incident (`report`) is written
    /// when it is new; a process seen well closes its incident. Returns
    /// the JSON file's path when one was written.
    pub(super) fn note(
        &mut self,
        pid: u32,
        incident: bool,
        report: &Report,
        unix_ns: u64,
    ) -> Result<Option<PathBuf>> {
        if !incident {
            self.open.remove(&pid);
            return Ok(None);
        }
        if !self.open.insert(pid) {
            return Ok(None);
        }
        // Sorted by time as names: seconds, then nanoseconds, zero-padded.
        let stem = format!(
            "{PREFIX}{:012}.{:09}-{pid}",
            unix_ns / 1_000_000_000,
            unix_ns % 1_000_000_000
        );
        let json = self.dir.join(format!("{stem}.json"));
        let text = self.dir.join(format!("{stem}.txt"));
        OutputFile::check("--reports", &text)?.write(|w| render::live(report, w))?;
        OutputFile::check("--reports", &json)?.write(|w| render::json(report, w))?;
        self.rotate();
        Ok(Some(json))
    }

    /// The processes whose current incident was written.
    pub(super) fn open_pids(&self) -> impl Iterator<Item = u32> + '_ {
        self.open.iter().copied()
    }

    /// Forgets process `pid` (gone).
    pub(super) fn forget(&mut self, pid: u32) {
        self.open.remove(&pid);
    }

    /// Removes the oldest incidents past the bound.
    fn rotate(&self) {
        let Ok(dir) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let mut stems: Vec<String> = dir
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let stem = name.strip_prefix(PREFIX)?.strip_suffix(".json")?;
                Some(stem.to_string())
            })
            .collect();
        stems.sort();
        let excess = stems.len().saturating_sub(self.max);
        for stem in &stems[..excess] {
            for ext in ["json", "txt"] {
                let _ = std::fs::remove_file(self.dir.join(format!("{PREFIX}{stem}.{ext}")));
            }
        }
    }
}
