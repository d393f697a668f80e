//! What a long-lived symbolizer keeps, and for which targets: `serve`
//! names every target's stacks with one [`super::Symbolizer`] across its
//! passes (a binary's debug information is parsed once, not once per
//! snapshot), and drops a binary's state once no target it still watches
//! has used it.

use std::{
    collections::{HashMap, HashSet},
    hash::Hash,
    path::PathBuf,
};

use librip::reader::RegularFile;

/// A file's identity and version: device, inode, size and modification
/// time. A file replaced (a new inode) or rewritten in place (a new size
/// or time) has another key, so that nothing cached from the old one is
/// read for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct FileKey {
    /// Device and inode.
    pub dev_ino: (u64, u64),
    /// Size in bytes.
    pub size: u64,
    /// Modification time (seconds, nanoseconds).
    pub mtime: (i64, u64),
}

impl FileKey {
    /// The key of an open file (its `fstat`).
    pub(crate) fn of(file: &RegularFile) -> Self {
        let mtime = rustix::fs::fstat(file.fd())
            .map(|st| (st.st_mtime, st.st_mtime_nsec))
            .unwrap_or_default();
        FileKey {
            dev_ino: file.dev_ino,
            size: file.size,
            mtime,
        }
    }

    /// The key of the file at `path` (its `stat`), if it can be read.
    pub(crate) fn at(path: &std::path::Path) -> Option<Self> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).ok()?;
        Some(FileKey {
            dev_ino: (m.dev(), m.ino()),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec() as u64),
        })
    }
}

/// Something a symbolizer caches for a binary.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Cached {
    /// blazesym's state for the file it opened at this path (its own
    /// cache checks the file's device, inode, size and time at each use).
    Elf(PathBuf),
    /// rip's own tables of a file: its Go tables, its site table, its
    /// separate debug file.
    File(FileKey),
    /// A binary named by a ring's module table, opened once by its path.
    Module(PathBuf),
}

/// Which targets (by pid) used each cached thing: a thing no target
/// still watched has used is released.
#[derive(Debug)]
pub(crate) struct Holders<K> {
    by_pid: HashMap<u32, HashSet<K>>,
}

impl<K> Default for Holders<K> {
    fn default() -> Self {
        Holders {
            by_pid: HashMap::new(),
        }
    }
}

impl<K: Clone + Eq + Hash> Holders<K> {
    /// Target `pid` used `key`.
    pub(crate) fn note(&mut self, pid: u32, key: K) {
        self.by_pid.entry(pid).or_default().insert(key);
    }

    /// Forgets the targets `live` says are no longer watched; returns the
    /// keys that none of the others used (each once), to be released.
    pub(crate) fn retain(&mut self, live: impl Fn(u32) -> bool) -> Vec<K> {
        let gone: Vec<u32> = self.by_pid.keys().copied().filter(|&p| !live(p)).collect();
        let mut released: HashSet<K> = HashSet::new();
        for pid in gone {
            released.extend(self.by_pid.remove(&pid).unwrap_or_default());
        }
        for kept in self.by_pid.values() {
            released.retain(|k| !kept.contains(k));
        }
        released.into_iter().collect()
    }

    /// How many targets hold something.
    #[cfg(test)]
    pub(crate) fn targets(&self) -> usize {
        self.by_pid.len()
    }

    /// The pids holding something.
    pub(crate) fn pids(&self) -> impl Iterator<Item = u32> + '_ {
        self.by_pid.keys().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key is released when the last target that used it is gone, not
    /// before; a target gone releases what it alone used; many targets
    /// coming and going leave nothing behind.
    #[test]
    fn a_key_goes_with_the_last_target_that_used_it() {
        let mut h = Holders::default();
        h.note(1, "libc");
        h.note(1, "app-v1");
        h.note(2, "libc");
        h.note(2, "app-v2");
        let mut gone = h.retain(|p| p == 2);
        gone.sort();
        assert_eq!(gone, ["app-v1"]);
        assert_eq!(h.targets(), 1);
        // Nothing is gone: nothing is released, twice.
        assert!(h.retain(|_| true).is_empty());
        let mut gone = h.retain(|_| false);
        gone.sort();
        assert_eq!(gone, ["app-v2", "libc"]);
        assert_eq!(h.targets(), 0);
        // A thousand targets, ten at a time, all sharing one library and
        // each with a binary of its own: after each batch is gone, only
        // the live batch's keys are held.
        let mut released = 0;
        for batch in 0..100u32 {
            for pid in batch * 10..batch * 10 + 10 {
                h.note(pid, "libc");
                h.note(pid, if pid % 2 == 0 { "even" } else { "odd" });
            }
            let live = batch * 10..batch * 10 + 10;
            released += h.retain(|p| live.contains(&p)).len();
            assert_eq!(h.targets(), 10);
        }
        assert_eq!(
            released, 0,
            "libc, even and odd are always held by a live target"
        );
        let mut gone = h.retain(|_| false);
        gone.sort();
        assert_eq!(gone, ["even", "libc", "odd"]);
    }

    /// A file rewritten in place (same device and inode, another time or
    /// size) has another key: its old tables are never read for it.
    #[test]
    fn a_rewritten_file_has_another_key() {
        let dir = std::env::temp_dir().join(format!("rip-held-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bin");
        std::fs::write(&path, b"one").unwrap();
        let before = FileKey::at(&path).unwrap();
        let file = RegularFile::open(&path, librip::reader::Follow::No).unwrap();
        assert_eq!(FileKey::of(&file), before);
        drop(file);
        // Same inode, other contents (and size); then the same size with
        // another time.
        std::fs::write(&path, b"three").unwrap();
        let rewritten = FileKey::at(&path).unwrap();
        assert_eq!(rewritten.dev_ino, before.dev_ino);
        assert_ne!(rewritten, before);
        let f = std::fs::File::options().write(true).open(&path).unwrap();
        f.set_modified(std::time::SystemTime::UNIX_EPOCH).unwrap();
        let touched = FileKey::at(&path).unwrap();
        assert_eq!(touched.size, rewritten.size);
        assert_ne!(touched, rewritten);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
