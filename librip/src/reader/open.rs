//! Opening files named by someone else (a ring's module table, a target's
//! /proc/PID/maps, a path the user typed) as a possibly privileged reader.
//!
//! The path is first opened with `O_PATH`, which runs no driver's `open`
//! and cannot block on a FIFO; `fstat` on that descriptor must say
//! "regular file"; only then is the same inode opened for reading,
//! through `/proc/self/fd`, non-blocking. So a FIFO cannot hang the
//! reader, a device is never opened, and a path swapped between the check
//! and the read changes nothing: the check and the read are on one inode.

use std::{
    os::fd::{AsFd, AsRawFd, OwnedFd},
    path::{Path, PathBuf},
};

use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};

/// A regular file opened for reading, and what `fstat` said about it.
#[derive(Debug)]
pub struct RegularFile {
    fd: OwnedFd,
    /// Size in bytes.
    pub size: u64,
    /// Bytes allocated on disk or in memory (`st_blocks` × 512): less than
    /// `size` for a sparse file.
    pub allocated: u64,
    /// Owner.
    pub uid: u32,
    /// Device and inode: tell whether two opens reached the same file.
    pub dev_ino: (u64, u64),
}

/// Whether a symlink in the last component of the path is followed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Follow {
    /// Follow it (a path the user typed; a library's soname link).
    Yes,
    /// Refuse it (`O_NOFOLLOW`): a path from a file someone else wrote.
    No,
}

/// Why a path was not opened.
#[derive(Debug)]
pub enum OpenError {
    /// The open or fstat failed.
    Io(std::io::Error),
    /// It is not a regular file (a FIFO, a device, a directory, a socket,
    /// or a symlink when not following).
    NotRegular(&'static str),
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::Io(e) => write!(f, "{e}"),
            OpenError::NotRegular(what) => write!(f, "not a regular file ({what})"),
        }
    }
}

impl std::error::Error for OpenError {}

/// What a file of type `t` is, for a message: "a FIFO", "a directory", …
/// (anything but a regular file; shared by every reader and writer that
/// refuses such files).
pub fn file_kind(t: FileType) -> &'static str {
    match t {
        FileType::Fifo => "a FIFO",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        FileType::Directory => "a directory",
        FileType::Socket => "a socket",
        FileType::Symlink => "a symbolic link",
        _ => "not a file",
    }
}

impl RegularFile {
    /// Opens `path` for reading if, and only if, it is a regular file.
    pub fn open(path: &Path, follow: Follow) -> Result<RegularFile, OpenError> {
        let mut flags = OFlags::PATH | OFlags::CLOEXEC;
        if follow == Follow::No {
            flags |= OFlags::NOFOLLOW;
        }
        let handle =
            rustix::fs::open(path, flags, Mode::empty()).map_err(|e| OpenError::Io(e.into()))?;
        Self::from_handle(handle)
    }

    /// Opens `path` as a process whose root directory is `root` would (a
    /// container's `/proc/PID/root`, or its root file system copied to
    /// the host): every component, `..` and absolute symlink included, is
    /// resolved inside `root` (`RESOLVE_IN_ROOT`), and no magic link of
    /// /proc is followed on the way, so a path the container controls
    /// cannot lead out of it. Then as [`RegularFile::open`].
    pub fn open_in_root(
        root: &Path,
        path: &Path,
        follow: Follow,
    ) -> Result<RegularFile, OpenError> {
        let dir = rustix::fs::open(
            root,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| OpenError::Io(e.into()))?;
        let mut flags = OFlags::PATH | OFlags::CLOEXEC;
        if follow == Follow::No {
            flags |= OFlags::NOFOLLOW;
        }
        let handle = rustix::fs::openat2(
            &dir,
            path,
            flags,
            Mode::empty(),
            ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
        )
        .map_err(|e| OpenError::Io(e.into()))?;
        Self::from_handle(handle)
    }

    /// Requires the `O_PATH` descriptor `handle` to be a regular file,
    /// then opens that inode for reading.
    fn from_handle(handle: OwnedFd) -> Result<RegularFile, OpenError> {
        let st = rustix::fs::fstat(&handle).map_err(|e| OpenError::Io(e.into()))?;
        let t = FileType::from_raw_mode(st.st_mode);
        if t != FileType::RegularFile {
            return Err(OpenError::NotRegular(file_kind(t)));
        }
        // The same inode, now for reading; non-blocking all the same.
        let fd = rustix::fs::open(
            format!("/proc/self/fd/{}", handle.as_raw_fd()),
            OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY,
            Mode::empty(),
        )
        .map_err(|e| OpenError::Io(e.into()))?;
        let again = rustix::fs::fstat(&fd).map_err(|e| OpenError::Io(e.into()))?;
        if (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino) {
            return Err(OpenError::NotRegular("replaced while being opened"));
        }
        Ok(RegularFile {
            fd,
            size: st.st_size as u64,
            allocated: (st.st_blocks as u64).saturating_mul(512),
            uid: st.st_uid,
            dev_ino: (st.st_dev, st.st_ino),
        })
    }

    /// A path that opens exactly this file for as long as `self` lives
    /// (`/proc/self/fd/N`), for libraries that take a path.
    pub fn proc_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.fd.as_raw_fd()))
    }

    /// Reads up to `buf.len()` bytes at `off`; fewer at the end of the file.
    pub fn read_at(&self, off: u64, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut done = 0;
        while done < buf.len() {
            match rustix::io::pread(&self.fd, &mut buf[done..], off + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(done)
    }

    /// The descriptor.
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }

    pub(crate) fn into_fd(self) -> OwnedFd {
        self.fd
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("rip-open-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir(&d).unwrap();
        d
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let d = scratch("fifo");
        let fifo = d.join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let e = RegularFile::open(&fifo, Follow::Yes).unwrap_err();
        assert!(matches!(e, OpenError::NotRegular("a FIFO")), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn symlinks_only_when_asked_and_devices_never() {
        let d = scratch("link");
        let target = d.join("target");
        std::fs::write(&target, b"x").unwrap();
        let link = d.join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(RegularFile::open(&link, Follow::No).is_err());
        let f = RegularFile::open(&link, Follow::Yes).unwrap();
        assert_eq!(f.size, 1);
        let mut b = [0u8; 4];
        assert_eq!(f.read_at(0, &mut b).unwrap(), 1);
        assert!(matches!(
            RegularFile::open(Path::new("/dev/null"), Follow::Yes),
            Err(OpenError::NotRegular("a character device"))
        ));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_root_directory_holds_absolute_symlinks_and_dotdot() {
        let d = scratch("root");
        std::fs::create_dir_all(d.join("lib")).unwrap();
        std::fs::write(d.join("lib/libx.so.1"), b"inside").unwrap();
        // An absolute link and a climb out both stay inside the root.
        std::os::unix::fs::symlink("/lib/libx.so.1", d.join("lib/libx.so")).unwrap();
        std::os::unix::fs::symlink("../../../../etc/hostname", d.join("escape")).unwrap();
        let f = RegularFile::open_in_root(&d, Path::new("/lib/libx.so"), Follow::Yes).unwrap();
        assert_eq!(f.size, 6);
        assert!(RegularFile::open_in_root(&d, Path::new("/lib/libx.so"), Follow::No).is_err());
        assert!(RegularFile::open_in_root(&d, Path::new("/escape"), Follow::Yes).is_err());
        assert!(
            RegularFile::open_in_root(&d, Path::new("/../../etc/hostname"), Follow::Yes).is_err()
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}
