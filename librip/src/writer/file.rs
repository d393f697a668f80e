//! Creating the ring file without ever trusting what is at its path.
//!
//! The file is made nameless with `O_TMPFILE` in the target directory, sized,
//! given its complete header, and only then linked to its name with
//! `linkat`, which never replaces an existing path and never follows a
//! symlink planted there; readers never see a half-written file. Where
//! `O_TMPFILE` is unsupported, `O_CREAT|O_EXCL|O_NOFOLLOW` is used and the
//! magic is written last. Either way the result is checked with fstat:
//! regular, ours, mode 0600, one link.

use std::{
    ffi::{CString, OsStr},
    fs::File,
    io,
    os::{
        fd::{AsRawFd, FromRawFd, OwnedFd},
        unix::{ffi::OsStrExt, ffi::OsStringExt, fs::FileExt, fs::MetadataExt},
    },
    path::{Path, PathBuf},
};

use crate::{Error, format};

/// tmpfs's statfs magic.
const TMPFS_MAGIC: i64 = 0x0102_1994;

/// The default ring path: `/dev/shm/rip-<uid>/<comm>.<pid>.ring`.
pub(crate) fn default_path() -> PathBuf {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let comm = std::fs::read_to_string("/proc/self/comm").unwrap_or_default();
    let comm: String = comm
        .trim_end()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_+".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    let comm = if comm.is_empty() {
        "process".into()
    } else {
        comm
    };
    PathBuf::from(format!(
        "/dev/shm/rip-{uid}/{comm}.{}.ring",
        std::process::id()
    ))
}

/// `path` with `.n` before its `.ring` (after the name when it has none):
/// the `n`th other ring a chain of programs in one process makes there.
#[cfg_attr(not(feature = "sampler"), allow(dead_code))]
pub(crate) fn numbered(path: &Path, n: u32) -> PathBuf {
    let bytes = path.as_os_str().as_bytes();
    let (stem, ext) = match bytes.strip_suffix(b".ring") {
        Some(stem) => (stem, &b".ring"[..]),
        None => (bytes, &b""[..]),
    };
    let mut out = stem.to_vec();
    out.extend_from_slice(format!(".{n}").as_bytes());
    out.extend_from_slice(ext);
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

/// Expands `%p` to the pid and `%%` to `%`.
pub(crate) fn expand(path: &Path) -> PathBuf {
    let bytes = path.as_os_str().as_bytes();
    if !bytes.contains(&b'%') {
        return path.to_path_buf();
    }
    let mut out = Vec::with_capacity(bytes.len() + 8);
    let mut i = 0;
    while i < bytes.len() {
        match (bytes[i], bytes.get(i + 1)) {
            (b'%', Some(b'p')) => {
                out.extend_from_slice(std::process::id().to_string().as_bytes());
                i += 2;
            }
            (b'%', Some(b'%')) => {
                out.push(b'%');
                i += 2;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    PathBuf::from(OsStr::from_bytes(&out))
}

/// A created ring file, linked at its path, ready to be mapped.
pub(crate) struct Created {
    pub(crate) file: File,
    pub(crate) on_tmpfs: bool,
}

/// The last bytes of a file that the header announces (the allocation
/// table), and how many of them, from their start, are reserved with the
/// header.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tail {
    pub(crate) len: u64,
    pub(crate) reserved: u64,
}

impl Tail {
    /// No tail.
    pub(crate) const NONE: Tail = Tail {
        len: 0,
        reserved: 0,
    };
}

/// Creates `path` (in a private 0700 directory that is made or checked when
/// `private_dir`) holding `header` followed by zeroes up to `size` bytes,
/// the header's pages and the reserved part of `tail` reserved before the
/// file gets its name.
pub(crate) fn create(
    path: &Path,
    header: &[u8],
    size: u64,
    tail: Tail,
    private_dir: bool,
) -> Result<Created, Error> {
    let (dir_path, name) = split(path)?;
    let dir = if private_dir {
        private_directory(&dir_path)?
    } else {
        open_dir(&dir_path, path)?
    };
    let file = match tmpfile(&dir, &dir_path)? {
        Some(tmp) => {
            prepare(&tmp, path, header, size, tail)?;
            link(&tmp, &dir, &name, path)?;
            let file = reopen(&dir, &name, path)?;
            let (a, b) = (meta(&tmp, path)?, meta(&file, path)?);
            if (a.dev(), a.ino()) != (b.dev(), b.ino()) {
                return Err(unsafe_path(
                    path,
                    "it was replaced while being created: use a directory only you can write, such as the default /dev/shm/rip-<uid>/",
                ));
            }
            check(&file, path, 1)?;
            file
        }
        None => create_excl(&dir, &name, path, header, size, tail)?,
    };
    let on_tmpfs = is_tmpfs(&file);
    Ok(Created { file, on_tmpfs })
}

fn unsafe_path(path: &Path, reason: impl Into<String>) -> Error {
    Error::Unsafe {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

fn cstring(p: &OsStr, path: &Path) -> Result<CString, Error> {
    CString::new(p.as_bytes())
        .map_err(|_| unsafe_path(path, "the path contains a NUL byte: remove it"))
}

fn split(path: &Path) -> Result<(PathBuf, CString), Error> {
    let name = match path.file_name() {
        Some(n) if !path.as_os_str().as_bytes().ends_with(b"/") => n,
        _ => {
            return Err(unsafe_path(
                path,
                "the path does not name a file: give a file path such as /dev/shm/app.ring",
            ));
        }
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok((dir, cstring(name, path)?))
}

fn last_err() -> io::Error {
    io::Error::last_os_error()
}

/// `openat(dir, name, flags | O_CLOEXEC, 0600)` as an owned descriptor
/// (`dir` is `AT_FDCWD` for a path taken as it is).
fn open_at(dir: libc::c_int, name: &std::ffi::CStr, flags: libc::c_int) -> io::Result<OwnedFd> {
    let mode = 0o600 as libc::c_uint;
    // SAFETY: a NUL-terminated name; the mode only matters with O_CREAT or
    // O_TMPFILE; the result is checked.
    let fd = unsafe { libc::openat(dir, name.as_ptr(), flags | libc::O_CLOEXEC, mode) };
    if fd < 0 {
        return Err(last_err());
    }
    // SAFETY: a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn open_dir(dir: &Path, path: &Path) -> Result<OwnedFd, Error> {
    let c = cstring(dir.as_os_str(), path)?;
    open_at(libc::AT_FDCWD, &c, libc::O_DIRECTORY | libc::O_RDONLY)
        .map_err(|e| Error::io("open the directory of", path, e))
}

/// Makes or checks a per-user directory: ours, mode 0700, not a symlink.
fn private_directory(dir: &Path) -> Result<OwnedFd, Error> {
    let c = cstring(dir.as_os_str(), dir)?;
    // SAFETY: valid NUL-terminated path.
    if unsafe { libc::mkdir(c.as_ptr(), 0o700) } != 0
        && last_err().kind() != io::ErrorKind::AlreadyExists
    {
        return Err(Error::io("create directory", dir, last_err()));
    }
    let flags = libc::O_DIRECTORY | libc::O_RDONLY | libc::O_NOFOLLOW;
    let fd = open_at(libc::AT_FDCWD, &c, flags).map_err(|err| match err.raw_os_error() {
        Some(libc::ELOOP) | Some(libc::ENOTDIR) => unsafe_path(
            dir,
            "it is not a directory (a symlink or a file was planted there): remove it",
        ),
        _ => Error::io("open directory", dir, err),
    })?;
    let m = File::from(
        fd.try_clone()
            .map_err(|e| Error::io("open directory", dir, e))?,
    )
    .metadata()
    .map_err(|e| Error::io("stat directory", dir, e))?;
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    if m.uid() != uid {
        return Err(unsafe_path(
            dir,
            format!(
                "it belongs to uid {}, not to us ({uid}): remove it",
                m.uid()
            ),
        ));
    }
    if m.mode() & 0o777 != 0o700 {
        return Err(unsafe_path(
            dir,
            format!("its mode is {:o}, not 700: chmod 700 it", m.mode() & 0o777),
        ));
    }
    Ok(fd)
}

/// An unnamed file in `dir`, or `None` where the filesystem lacks O_TMPFILE.
fn tmpfile(dir: &OwnedFd, dir_path: &Path) -> Result<Option<File>, Error> {
    match open_at(dir.as_raw_fd(), c".", libc::O_TMPFILE | libc::O_RDWR) {
        Ok(fd) => Ok(Some(File::from(fd))),
        Err(err) => match err.raw_os_error() {
            Some(libc::EOPNOTSUPP) | Some(libc::EISDIR) | Some(libc::EINVAL) => Ok(None),
            _ => Err(Error::io("create a file in", dir_path, err)),
        },
    }
}

fn meta(file: &File, path: &Path) -> Result<std::fs::Metadata, Error> {
    file.metadata().map_err(|e| Error::io("stat", path, e))
}

/// Regular, ours, mode 0600 (fixed if a umask narrowed it), `links` links.
fn check(file: &File, path: &Path, links: u64) -> Result<(), Error> {
    let m = meta(file, path)?;
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    if !m.file_type().is_file() {
        return Err(unsafe_path(
            path,
            "it is not a regular file: pick another path",
        ));
    }
    if m.uid() != uid {
        return Err(unsafe_path(
            path,
            format!(
                "it belongs to uid {}, not to us ({uid}): pick another path",
                m.uid()
            ),
        ));
    }
    if m.nlink() != links {
        return Err(unsafe_path(
            path,
            format!(
                "it has {} links, expected {links}: pick another path",
                m.nlink()
            ),
        ));
    }
    if m.mode() & 0o7777 != 0o600 {
        // SAFETY: valid descriptor.
        if unsafe { libc::fchmod(file.as_raw_fd(), 0o600) } != 0 {
            return Err(Error::io("chmod 600", path, last_err()));
        }
    }
    Ok(())
}

/// Sizes the file, reserves the header's pages and writes the header.
fn prepare(file: &File, path: &Path, header: &[u8], size: u64, tail: Tail) -> Result<(), Error> {
    check(file, path, 0)?;
    size_and_reserve(file, path, size, header.len() as u64, tail)?;
    file.write_all_at(header, 0)
        .map_err(|e| Error::io("write the header of", path, e))
}

fn size_and_reserve(
    file: &File,
    path: &Path,
    size: u64,
    header: u64,
    tail: Tail,
) -> Result<(), Error> {
    file.set_len(size).map_err(|e| Error::io("size", path, e))?;
    reserve(file, 0, header).map_err(|e| Error::io("reserve space for", path, e))?;
    let reserved = tail.reserved.min(tail.len);
    if reserved > 0 {
        reserve(file, size - tail.len, reserved)
            .map_err(|e| Error::io("reserve space for", path, e))?;
    }
    Ok(())
}

/// Allocates the pages backing `len` bytes at `off`, so later stores into
/// them cannot fault for lack of space. Filesystems without fallocate are
/// not tmpfs; there a store may still fault, which the creation warning
/// already said.
pub(crate) fn reserve(file: &File, off: u64, len: u64) -> io::Result<()> {
    // SAFETY: valid descriptor; plain integer arguments.
    let r = unsafe { libc::fallocate(file.as_raw_fd(), 0, off as i64, len as i64) };
    if r == 0 {
        return Ok(());
    }
    let err = last_err();
    match err.raw_os_error() {
        Some(libc::EOPNOTSUPP) => Ok(()),
        _ => Err(err),
    }
}

fn link(tmp: &File, dir: &OwnedFd, name: &CString, path: &Path) -> Result<(), Error> {
    // SAFETY: valid descriptors and NUL-terminated names.
    let r = unsafe {
        libc::linkat(
            tmp.as_raw_fd(),
            c"".as_ptr(),
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::AT_EMPTY_PATH,
        )
    };
    if r == 0 {
        return Ok(());
    }
    let mut err = last_err();
    if matches!(err.raw_os_error(), Some(libc::ENOENT) | Some(libc::EPERM)) {
        // AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH; /proc/self/fd does not.
        let proc =
            CString::new(format!("/proc/self/fd/{}", tmp.as_raw_fd())).expect("no NUL in a number");
        // SAFETY: valid NUL-terminated paths and descriptor.
        let r = unsafe {
            libc::linkat(
                libc::AT_FDCWD,
                proc.as_ptr(),
                dir.as_raw_fd(),
                name.as_ptr(),
                libc::AT_SYMLINK_FOLLOW,
            )
        };
        if r == 0 {
            return Ok(());
        }
        err = last_err();
    }
    Err(match err.raw_os_error() {
        Some(libc::EEXIST) => Error::Exists(path.to_path_buf()),
        _ => Error::io("link", path, err),
    })
}

/// Opens the linked file by name (so /proc/PID/maps shows its path).
fn reopen(dir: &OwnedFd, name: &CString, path: &Path) -> Result<File, Error> {
    open_at(dir.as_raw_fd(), name, libc::O_RDWR | libc::O_NOFOLLOW)
        .map(File::from)
        .map_err(|e| Error::io("open", path, e))
}

/// The fallback: create by name, exclusively, header with its magic last.
fn create_excl(
    dir: &OwnedFd,
    name: &CString,
    path: &Path,
    header: &[u8],
    size: u64,
    tail: Tail,
) -> Result<File, Error> {
    let flags = libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_RDWR;
    let fd = open_at(dir.as_raw_fd(), name, flags).map_err(|err| match err.raw_os_error() {
        Some(libc::EEXIST) | Some(libc::ELOOP) => Error::Exists(path.to_path_buf()),
        _ => Error::io("create", path, err),
    })?;
    let file = File::from(fd);
    let fill = || -> Result<(), Error> {
        check(&file, path, 1)?;
        size_and_reserve(&file, path, size, header.len() as u64, tail)?;
        let magic = format::MAGIC.len();
        file.write_all_at(&header[magic..], magic as u64)
            .and_then(|()| file.sync_data())
            .and_then(|()| file.write_all_at(&header[..magic], 0))
            .map_err(|e| Error::io("write the header of", path, e))
    };
    if let Err(e) = fill() {
        // Leave nothing half-made behind. The name is ours: O_EXCL made it.
        // SAFETY: valid descriptor and NUL-terminated name.
        unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), 0) };
        return Err(e);
    }
    Ok(file)
}

fn is_tmpfs(file: &File) -> bool {
    // SAFETY: an all-zero statfs is a valid out buffer.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid descriptor and out pointer.
    let r = unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) };
    r == 0 && st.f_type as i64 == TMPFS_MAGIC
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_rings_keep_their_extension() {
        assert_eq!(
            numbered(Path::new("/x/a.12.ring"), 1),
            PathBuf::from("/x/a.12.1.ring")
        );
        assert_eq!(
            numbered(Path::new("/x/a.out"), 3),
            PathBuf::from("/x/a.out.3")
        );
    }

    #[test]
    fn expands_pid_and_percent() {
        let pid = std::process::id();
        assert_eq!(
            expand(Path::new("/x/a.%p.ring")),
            PathBuf::from(format!("/x/a.{pid}.ring"))
        );
        assert_eq!(expand(Path::new("/x/100%%")), PathBuf::from("/x/100%"));
        assert_eq!(expand(Path::new("/x/%q")), PathBuf::from("/x/%q"));
    }

    #[test]
    fn default_path_is_in_a_per_user_directory() {
        let p = default_path();
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        assert_eq!(
            p.parent().unwrap(),
            Path::new(&format!("/dev/shm/rip-{uid}"))
        );
        assert!(
            p.to_str()
                .unwrap()
                .ends_with(&format!(".{}.ring", std::process::id()))
        );
    }

    #[test]
    fn a_private_directory_must_be_ours_0700_and_no_symlink() {
        use std::os::unix::fs::PermissionsExt;
        let base = PathBuf::from(format!("/dev/shm/rip-unit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir(&base).unwrap();
        let dir = base.join("d");
        assert!(private_directory(&dir).is_ok(), "made");
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        assert!(private_directory(&dir).is_ok(), "checked again");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = private_directory(&dir).unwrap_err().to_string();
        assert!(e.contains("chmod 700"), "{e}");
        let link = base.join("l");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        let e = private_directory(&link).unwrap_err().to_string();
        assert!(e.contains("symlink"), "{e}");
        std::fs::remove_dir_all(&base).unwrap();
    }

    /// The path taken where O_TMPFILE is unsupported (tmpfs and ext4 have it).
    #[test]
    fn the_exclusive_fallback_creates_once_and_never_follows_a_symlink() {
        use std::os::unix::fs::MetadataExt;
        let base = PathBuf::from(format!("/dev/shm/rip-unit-excl-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir(&base).unwrap();
        let dir = open_dir(&base, &base).unwrap();
        let path = base.join("a.ring");
        let name = CString::new("a.ring").unwrap();
        let mut header = vec![7u8; 4096];
        header[..8].copy_from_slice(&format::MAGIC);
        let f = create_excl(&dir, &name, &path, &header, 8192, Tail::NONE).unwrap();
        let m = f.metadata().unwrap();
        assert_eq!((m.len(), m.mode() & 0o7777, m.nlink()), (8192, 0o600, 1));
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[..4096], &header[..]);
        let again = create_excl(&dir, &name, &path, &header, 8192, Tail::NONE);
        assert!(matches!(again, Err(Error::Exists(_))));
        let target = base.join("target");
        std::os::unix::fs::symlink(&target, base.join("l.ring")).unwrap();
        let l = CString::new("l.ring").unwrap();
        let linked = create_excl(&dir, &l, &base.join("l.ring"), &header, 8192, Tail::NONE);
        assert!(matches!(linked, Err(Error::Exists(_))));
        assert!(!target.exists());
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn refuses_paths_without_a_file_name() {
        assert!(matches!(
            split(Path::new("/tmp/")),
            Err(Error::Unsafe { .. })
        ));
        assert!(matches!(split(Path::new("/")), Err(Error::Unsafe { .. })));
    }
}
