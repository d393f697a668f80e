//! Finding the rings a live process maps.

use std::{
    fs::File,
    io::{self, Read},
    path::{Path, PathBuf},
};

use super::ReadError;
use crate::format::MAGIC;

/// The ring files process `pid` maps: every file mapping in
/// /proc/PID/maps whose first bytes carry the ring magic.
pub fn find_rings(pid: u32) -> Result<Vec<PathBuf>, ReadError> {
    let maps = PathBuf::from(format!("/proc/{pid}/maps"));
    let text = match std::fs::read_to_string(&maps) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(ReadError::NoSuchProcess(pid)),
        Err(e) => return Err(ReadError::io(maps, e)),
    };
    let mut rings: Vec<PathBuf> = Vec::new();
    for path in mapped_files(&text) {
        if !rings.contains(&path) && has_magic(&path) {
            rings.push(path);
        }
    }
    if rings.is_empty() {
        return Err(ReadError::NoRing(pid));
    }
    Ok(rings)
}

/// The paths of the file mappings in a /proc/PID/maps text (deleted files
/// and pseudo-files like `[heap]` left out).
fn mapped_files(maps: &str) -> impl Iterator<Item = PathBuf> + '_ {
    maps.lines().filter_map(|line| {
        // address perms offset dev inode pathname (which may hold spaces)
        let mut rest = line;
        for _ in 0..5 {
            rest = rest.trim_start().split_once(' ')?.1;
        }
        let path = rest.trim_start();
        (path.starts_with('/') && !path.ends_with(" (deleted)")).then(|| PathBuf::from(path))
    })
}

fn has_magic(path: &Path) -> bool {
    let mut buf = [0u8; 8];
    File::open(path)
        .and_then(|mut f| f.read_exact(&mut buf))
        .is_ok_and(|()| buf == MAGIC)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_file_mappings_with_spaces_and_skips_the_rest() {
        let maps = "\
55d0c0a00000-55d0c0a02000 r--p 00000000 fe:00 1234   /usr/bin/cat
7f0000000000-7f0000100000 rw-s 00000000 00:19 99     /dev/shm/rip-0/my prog.7.ring
7f0000200000-7f0000300000 rw-s 00000000 00:19 98     /dev/shm/old.ring (deleted)
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0      [stack]
7ffd00100000-7ffd00101000 rw-p 00000000 00:00 0
";
        let got: Vec<_> = mapped_files(maps).collect();
        assert_eq!(
            got,
            [
                PathBuf::from("/usr/bin/cat"),
                PathBuf::from("/dev/shm/rip-0/my prog.7.ring")
            ]
        );
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
