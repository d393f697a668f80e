//! Finding the rings a live process maps, and the one /proc/PID/maps
//! parser rip uses.

use std::path::{Path, PathBuf};

use super::{Follow, ReadError, RegularFile};
use crate::format::MAGIC;

/// One line of /proc/PID/maps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapsLine {
    /// First address.
    pub start: u64,
    /// First address past the mapping.
    pub end: u64,
    /// `rwxp` / `rwxs` flags, as printed.
    pub perms: String,
    /// File offset mapped at `start`.
    pub offset: u64,
    /// Device (major, minor) of the mapped file.
    pub dev: (u32, u32),
    /// Inode of the mapped file (0: anonymous).
    pub inode: u64,
    /// What the kernel printed after the inode: a path (which may hold
    /// spaces), `[heap]`, `[anon:NAME]`, or nothing; with its ` (deleted)`
    /// suffix removed (see `deleted`).
    pub name: String,
    /// The file was unlinked (` (deleted)`, as memfd files always are).
    pub deleted: bool,
}

impl MapsLine {
    /// The path of a mapped file still linked in the file system: `None`
    /// for anonymous and pseudo mappings, deleted files and memfds.
    pub fn file(&self) -> Option<&Path> {
        (self.inode != 0 && !self.deleted && self.name.starts_with('/'))
            .then(|| Path::new(&self.name))
    }

    /// Executable.
    pub fn is_exec(&self) -> bool {
        self.perms.as_bytes().get(2) == Some(&b'x')
    }

    /// `/proc/PID/map_files/START-END`: opens exactly the mapped file,
    /// whatever its path is now (root only).
    pub fn map_files(&self, pid: u32) -> PathBuf {
        PathBuf::from(format!(
            "/proc/{pid}/map_files/{:x}-{:x}",
            self.start, self.end
        ))
    }
}

/// Parses a /proc/PID/maps text; malformed lines are left out. Columns
/// are split one space at a time for the five fixed fields, so a path is
/// everything after them, spaces included.
pub fn parse_maps(text: &str) -> Vec<MapsLine> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<MapsLine> {
    let mut rest = line;
    let mut field = || -> Option<&str> {
        let (f, r) = rest
            .trim_start_matches(' ')
            .split_once(' ')
            .unwrap_or((rest, ""));
        rest = r;
        (!f.is_empty()).then_some(f)
    };
    let (range, perms, offset, dev, inode) = (field()?, field()?, field()?, field()?, field()?);
    let (start, end) = range.split_once('-')?;
    let (major, minor) = dev.split_once(':')?;
    let hex = |s: &str| u64::from_str_radix(s, 16).ok();
    let name = rest.trim_start_matches(' ');
    let (name, deleted) = match name.strip_suffix(" (deleted)") {
        Some(n) => (n, true),
        None => (name, false),
    };
    Some(MapsLine {
        start: hex(start)?,
        end: hex(end)?,
        perms: perms.to_owned(),
        offset: hex(offset)?,
        dev: (
            u32::from_str_radix(major, 16).ok()?,
            u32::from_str_radix(minor, 16).ok()?,
        ),
        inode: inode.parse().ok()?,
        name: name.to_owned(),
        deleted,
    })
}

/// The ring files process `pid` maps: every file mapping in
/// /proc/PID/maps whose first bytes carry the ring magic, by the path the
/// process sees (which, in another mount namespace, may not exist here).
/// Each is opened as [`open_mapped`] does.
pub fn find_rings(pid: u32) -> Result<Vec<PathBuf>, ReadError> {
    Ok(open_rings(pid)?.into_iter().map(|r| r.path).collect())
}

/// A ring file a live process maps, opened.
#[derive(Debug)]
pub struct MappedRing {
    /// The path the process sees (a path of its mount namespace).
    pub path: PathBuf,
    /// The mapped file itself.
    pub file: RegularFile,
    /// How it was reached.
    pub via: Via,
}

/// How [`open_mapped`] reached a mapped file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Via {
    /// `/proc/PID/map_files/START-END`: the mapped inode, whatever its
    /// path (needs CAP_SYS_ADMIN).
    MapFiles(PathBuf),
    /// Its path, which here reaches the same inode.
    Path,
    /// Its path resolved inside `/proc/PID/root` (the process's root, in
    /// its own mount namespace), still the same inode.
    Root(PathBuf),
}

/// [`find_rings`], with each ring opened.
pub fn open_rings(pid: u32) -> Result<Vec<MappedRing>, ReadError> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .map_err(|e| ReadError::reading_maps(pid, e))?;
    let files: Vec<MapsLine> = parse_maps(&text)
        .into_iter()
        .filter(|m| m.inode != 0)
        .collect();
    open_rings_in(pid, &files)
}

/// [`open_rings`] over the file-backed mappings of `pid`, already listed
/// (a caller that asks the kernel for them more cheaply than the text
/// gives them). Rings are shared file mappings, so only those are looked
/// at.
pub fn open_rings_in(pid: u32, files: &[MapsLine]) -> Result<Vec<MappedRing>, ReadError> {
    let mut rings: Vec<MappedRing> = Vec::new();
    for m in files {
        let Some(path) = m.file() else { continue };
        // A ring is a shared mapping: the process's binaries and libraries
        // (private) are not opened to look for one.
        if !m.perms.ends_with('s') || rings.iter().any(|r| r.path == path) {
            continue;
        }
        if let Some((file, via)) = open_mapped_via(pid, m)
            && has_magic(&file)
        {
            let path = path.to_path_buf();
            rings.push(MappedRing { path, file, via });
        }
    }
    if rings.is_empty() {
        return Err(ReadError::NoRing(pid));
    }
    Ok(rings)
}

/// Opens the file a maps line names: through map_files, or by path (here,
/// or inside the process's root) if that is still the mapped inode.
pub fn open_mapped(pid: u32, m: &MapsLine) -> Option<RegularFile> {
    open_mapped_via(pid, m).map(|(f, _)| f)
}

/// [`open_mapped`], saying how.
pub fn open_mapped_via(pid: u32, m: &MapsLine) -> Option<(RegularFile, Via)> {
    let map_files = m.map_files(pid);
    if let Ok(f) = RegularFile::open(&map_files, Follow::Yes) {
        return Some((f, Via::MapFiles(map_files)));
    }
    let path = m.file()?;
    let same = |f: &RegularFile| {
        let dev = f.dev_ino.0;
        f.dev_ino.1 == m.inode
            && (rustix::fs::major(dev), rustix::fs::minor(dev)) == (m.dev.0, m.dev.1)
    };
    if let Ok(f) = RegularFile::open(path, Follow::No)
        && same(&f)
    {
        return Some((f, Via::Path));
    }
    // Another mount namespace: the path is the process's, so resolve it
    // from the process's root, never leaving it.
    let root = PathBuf::from(format!("/proc/{pid}/root"));
    let f = RegularFile::open_in_root(&root, path, Follow::No).ok()?;
    same(&f).then_some((
        f,
        Via::Root(root.join(path.strip_prefix("/").unwrap_or(path))),
    ))
}

fn has_magic(f: &RegularFile) -> bool {
    let mut buf = [0u8; 8];
    f.read_at(0, &mut buf).is_ok_and(|n| n == 8 && buf == MAGIC)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_paths_with_spaces_deleted_memfd_and_anon_names() {
        let maps = "\
55d0c0a00000-55d0c0a02000 r-xp 00001000 fe:00 1234   /usr/bin/cat
7f0000000000-7f0000100000 rw-s 00000000 00:19 99     /dev/shm/rip-0/my prog.7.ring
7f0000200000-7f0000300000 rw-s 00000000 00:19 98     /dev/shm/old.ring (deleted)
7f0000300000-7f0000301000 r-xp 00000000 00:01 77     /memfd:jit (deleted)
7f0000400000-7f0000401000 rw-p 00000000 00:00 0      [anon:my heap]
7f0000500000-7f0000501000 r-xp 00000000 fe:00 55     /tmp/a b
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0      [stack]
7ffd00100000-7ffd00101000 rw-p 00000000 00:00 0
garbage
";
        let got = parse_maps(maps);
        assert_eq!(got.len(), 8);
        let files: Vec<_> = got.iter().filter_map(MapsLine::file).collect();
        assert_eq!(
            files,
            [
                Path::new("/usr/bin/cat"),
                Path::new("/dev/shm/rip-0/my prog.7.ring"),
                Path::new("/tmp/a b")
            ]
        );
        assert_eq!(
            (got[0].offset, got[0].dev, got[0].inode),
            (0x1000, (0xfe, 0), 1234)
        );
        assert!(got[0].is_exec() && !got[1].is_exec());
        assert!(got[2].deleted && got[3].deleted);
        assert_eq!(got[3].name, "/memfd:jit");
        assert_eq!(got[4].name, "[anon:my heap]");
        assert_eq!(got[7].name, "");
    }

    #[test]
    fn a_missing_process_and_one_without_a_ring_are_told_apart() {
        assert!(matches!(
            find_rings(u32::MAX),
            Err(ReadError::NoSuchProcess(_))
        ));
        // This test process maps no ring (the unit tests never create one).
        assert!(matches!(
            find_rings(std::process::id()),
            Err(ReadError::NoRing(_))
        ));
    }
}
