//! Where the commands' output goes: stdout, or the file `-o/--output`
//! names ([`Sink`], the one place a report is written, flushed and its
//! closed pipe told apart), and the files the CLI writes (`-o`, `offcpu
//! --svg`): checked before the window, so a bad path does not cost the
//! observation, and written so that rip-probe, often run as root, never
//! replaces or writes through anything but a regular file or a new name.
//!
//! The directory is opened once, at the check; the final name is looked
//! at without following a symbolic link (`AT_SYMLINK_NOFOLLOW`); the
//! report goes to a new temporary file in that directory (`O_EXCL`,
//! `O_NOFOLLOW`) and is renamed over the name within the same directory
//! descriptor (`renameat`), after the name was looked at once more. A
//! device, FIFO, socket or symbolic link placed where the output goes is
//! refused with one line, before and after the window; nothing is left
//! behind when writing fails.
//!
//! When rip-probe runs with capabilities for a user other than root, the
//! directory and the file must be writable by that user (the real one,
//! capabilities left out: `faccessat` without `AT_EACCESS`), so a
//! capability such as CAP_DAC_OVERRIDE does not let them write where they
//! could not.

use std::{
    ffi::OsStr,
    io::Write,
    os::unix::ffi::OsStrExt,
    path::{Path, PathBuf},
};

use rustix::{
    fd::OwnedFd,
    fs::{Access, AtFlags, FileType, Mode, OFlags},
    io::Errno,
};

use crate::error::{Error, Result};

/// Where a command's report goes: stdout, or the file `-o` named.
pub(crate) enum Sink<'a> {
    /// The CLI's stdout (or a test's buffer).
    Stdout(&'a mut dyn Write),
    /// `-o FILE`: each report replaces the file whole.
    File(OutputFile),
}

impl Sink<'_> {
    /// Writes one report with `render`: to stdout, then flushed (a
    /// reader that stopped reading is an error `Error::is_broken_pipe`
    /// recognizes), or as the whole file, replaced atomically (nothing
    /// is left behind when `render` fails).
    pub(crate) fn emit(
        &mut self,
        render: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
    ) -> Result<()> {
        match self {
            Sink::Stdout(out) => render(&mut **out)
                .and_then(|()| out.flush())
                .map_err(|e| Error::io("stdout", e)),
            Sink::File(f) => f.write(render),
        }
    }

    /// Whether reports go to a file (each replacing the last) rather than
    /// one after another on stdout.
    pub(crate) fn is_file(&self) -> bool {
        matches!(self, Sink::File(_))
    }
}

/// The files a command writes beside its report (`--svg`, `--pprof`,
/// `--timeline`): each checked before the window ([`Outputs::check`]), so
/// a bad path costs no observation, and all looked at again before the
/// first is written ([`Outputs::recheck`]), so that one refused at the
/// end leaves none of them written.
#[derive(Default)]
pub(crate) struct Outputs {
    /// `--svg FILE`.
    pub(crate) svg: Option<OutputFile>,
    /// `--pprof FILE`.
    pub(crate) pprof: Option<OutputFile>,
    /// `--timeline FILE`.
    pub(crate) timeline: Option<OutputFile>,
}

impl Outputs {
    /// Checks each file given ([`OutputFile::check`]).
    pub(crate) fn check(
        svg: Option<&Path>,
        pprof: Option<&Path>,
        timeline: Option<&Path>,
    ) -> Result<Outputs> {
        let one = |flag, p: Option<&Path>| p.map(|p| OutputFile::check(flag, p)).transpose();
        Ok(Outputs {
            svg: one("--svg", svg)?,
            pprof: one("--pprof", pprof)?,
            timeline: one("--timeline", timeline)?,
        })
    }

    /// Looks at every file again ([`OutputFile::recheck`]) before any is
    /// written.
    pub(crate) fn recheck(&self) -> Result<()> {
        for f in [&self.svg, &self.pprof, &self.timeline]
            .into_iter()
            .flatten()
        {
            f.recheck()?;
        }
        Ok(())
    }
}

/// Refuses a window of length zero for `command`: it observes nothing.
pub(crate) fn require_window(
    command: &str,
    duration: Option<std::time::Duration>,
    example: &str,
) -> Result<()> {
    if duration.is_some_and(|d| d.is_zero()) {
        return Err(Error::Usage(format!(
            "{command} needs a window: give --duration a length, e.g. --duration {example}"
        )));
    }
    Ok(())
}

/// An output file checked before observing: its directory opened, its
/// name known to be new or a regular file.
pub(crate) struct OutputFile {
    /// The option that named it, for messages (`--svg`).
    flag: &'static str,
    /// The path as given.
    path: PathBuf,
    /// The directory it goes in, opened at the check.
    dir: OwnedFd,
    /// Its last component.
    name: PathBuf,
}

/// What is at the output's name.
enum Existing {
    /// Nothing: a new file.
    New,
    /// A regular file with these permission bits.
    Regular(u32),
}

impl OutputFile {
    /// Checks that `path` (given with `flag`) can be written: its directory
    /// exists and is writable, and the name is new or a regular file.
    pub(crate) fn check(flag: &'static str, path: &Path) -> Result<OutputFile> {
        let usage = |what: String| Error::Usage(format!("{flag} {}: {what}", path.display()));
        let name = match path.file_name() {
            Some(n) if !path.as_os_str().as_bytes().ends_with(b"/") => PathBuf::from(n),
            _ => {
                return Err(usage(
                    "is a directory, not a file name; give a file name".into(),
                ));
            }
        };
        let dir_path = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let dir = rustix::fs::open(
            dir_path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            Errno::NOENT => usage(format!("directory {} does not exist", dir_path.display())),
            Errno::NOTDIR => usage(format!("{} is not a directory", dir_path.display())),
            e => usage(format!(
                "cannot open directory {}: {}",
                dir_path.display(),
                std::io::Error::from(e)
            )),
        })?;
        let out = OutputFile {
            flag,
            path: path.to_path_buf(),
            dir,
            name,
        };
        let existing = out.existing()?;
        // The real user's rights, without capabilities (see the module).
        let (target, mode, what) = match existing {
            Existing::New => (
                Path::new("."),
                Access::WRITE_OK | Access::EXEC_OK,
                "directory",
            ),
            Existing::Regular(_) => (out.name.as_path(), Access::WRITE_OK, "file"),
        };
        if rustix::fs::accessat(&out.dir, target, mode, AtFlags::SYMLINK_NOFOLLOW).is_err() {
            return Err(usage(format!(
                "the {what} is not writable by user {} (who runs rip-probe); write it somewhere \
                 that user may",
                rustix::process::getuid().as_raw()
            )));
        }
        // A file can be made there (not so in /proc or a read-only mount):
        // found out now rather than after the window.
        out.can_create()?;
        Ok(out)
    }

    /// Whether a file can be made in the directory now: a temporary one
    /// is created and removed.
    fn can_create(&self) -> Result<()> {
        let tmp = self.temporary();
        let fd = self.create(&tmp, 0o600).map_err(|e| {
            Error::Usage(format!(
                "{} {}: cannot create a file in {}: {e}",
                self.flag,
                self.path.display(),
                match self.path.parent() {
                    Some(d) if !d.as_os_str().is_empty() => d,
                    _ => Path::new("."),
                }
                .display()
            ))
        })?;
        drop(fd);
        let _ = rustix::fs::unlinkat(&self.dir, &tmp, AtFlags::empty());
        Ok(())
    }

    /// Looks again, after the window, at what [`Self::check`] looked at:
    /// the name still new or a regular file, a file still creatable in
    /// the directory (it may have been removed meanwhile).
    pub(crate) fn recheck(&self) -> Result<()> {
        self.existing()?;
        self.can_create()
    }

    /// The temporary name the file is written under, in its directory.
    fn temporary(&self) -> PathBuf {
        let mut tmp = Vec::from(b".".as_slice());
        tmp.extend_from_slice(self.name.as_os_str().as_bytes());
        tmp.extend_from_slice(format!(".{}.tmp", std::process::id()).as_bytes());
        PathBuf::from(OsStr::from_bytes(&tmp))
    }

    /// Creates `name` in the directory: a new file, never through a link.
    fn create(&self, name: &Path, mode: u32) -> std::io::Result<OwnedFd> {
        Ok(rustix::fs::openat(
            &self.dir,
            name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(mode),
        )?)
    }

    /// The path as given.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// What is at the name now, refusing anything but a regular file.
    fn existing(&self) -> Result<Existing> {
        let st = match rustix::fs::statat(&self.dir, &self.name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::NOENT) => return Ok(Existing::New),
            Err(e) => {
                return Err(Error::io(self.path.clone(), e.into()));
            }
        };
        let kind = match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile => return Ok(Existing::Regular(st.st_mode & 0o777)),
            t => librip::reader::file_kind(t),
        };
        Err(Error::Usage(format!(
            "{} {}: is {kind}; rip-probe writes only regular files: give a new path or a \
             regular file's",
            self.flag,
            self.path.display()
        )))
    }

    /// Writes the file whole with `render`: into a new temporary file in
    /// the same directory, then renamed over the name, which must still be
    /// new or a regular file.
    pub(crate) fn write(
        &self,
        render: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
    ) -> Result<()> {
        let mode = match self.existing()? {
            Existing::New => 0o644,
            // The permissions it had (not its set-id bits: masked above).
            Existing::Regular(mode) => mode,
        };
        let tmp = self.temporary();
        let io = |e: std::io::Error| Error::io(self.path.clone(), e);
        let fd = self.create(&tmp, mode).map_err(io)?;
        let result = (|| -> Result<()> {
            // The umask does not narrow the permissions of a replaced file.
            rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode)).map_err(|e| io(e.into()))?;
            let mut w = std::io::BufWriter::new(std::fs::File::from(fd));
            render(&mut w).map_err(io)?;
            w.into_inner()
                .map_err(|e| io(e.into_error()))?
                .sync_all()
                .map_err(io)?;
            // Looked at again: something else may have been put there
            // during the window.
            self.existing()?;
            rustix::fs::renameat(&self.dir, &tmp, &self.dir, &self.name).map_err(|e| io(e.into()))
        })();
        if result.is_err() {
            let _ = rustix::fs::unlinkat(&self.dir, &tmp, AtFlags::empty());
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};

    use super::*;

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("rip-output-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn usage(e: Error) -> String {
        match e {
            Error::Usage(s) => s,
            e => panic!("not a usage error: {e}"),
        }
    }

    #[test]
    fn new_and_regular_files_are_written_whole() {
        let d = tmpdir("regular");
        let p = d.join("out.svg");
        let o = OutputFile::check("--svg", &p).unwrap();
        o.write(|w| w.write_all(b"one")).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"one");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        let o = OutputFile::check("--svg", &p).unwrap();
        o.write(|w| w.write_all(b"two")).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        // A failing render leaves the old file and no temporary one.
        let o = OutputFile::check("--svg", &p).unwrap();
        assert!(o.write(|_| Err(std::io::Error::other("no"))).is_err());
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1);
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A writer whose reader went away.
    struct ClosedPipe;

    impl Write for ClosedPipe {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// The sink writes a report whole to stdout, flushed, or as the file;
    /// a closed stdout is the error the CLI ends quietly on.
    #[test]
    fn a_sink_writes_stdout_or_the_file_and_tells_a_closed_pipe() {
        let mut buf = Vec::new();
        Sink::Stdout(&mut buf)
            .emit(|w| w.write_all(b"report\n"))
            .unwrap();
        assert_eq!(buf, b"report\n");
        let mut closed = ClosedPipe;
        let e = Sink::Stdout(&mut closed)
            .emit(|w| w.write_all(b"report\n"))
            .unwrap_err();
        assert!(e.is_broken_pipe(), "{e}");
        let d = tmpdir("sink");
        let p = d.join("out.txt");
        let mut sink = Sink::File(OutputFile::check("--output", &p).unwrap());
        assert!(sink.is_file());
        sink.emit(|w| w.write_all(b"first, longer\n")).unwrap();
        sink.emit(|w| w.write_all(b"second\n")).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"second\n");
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn links_fifos_and_directories_are_refused() {
        let d = tmpdir("refused");
        let fifo = d.join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            FileType::Fifo,
            Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        let e = usage(OutputFile::check("--svg", &fifo).err().unwrap());
        assert!(e.contains("is a FIFO"), "{e}");
        let file = d.join("file");
        std::fs::write(&file, b"x").unwrap();
        let link = d.join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        let e = usage(OutputFile::check("--svg", &link).err().unwrap());
        assert!(e.contains("is a symbolic link"), "{e}");
        let e = usage(OutputFile::check("--svg", &d).err().unwrap());
        assert!(e.contains("is a directory"), "{e}");
        let e = usage(
            OutputFile::check("--svg", Path::new(&format!("{}/", d.display())))
                .err()
                .unwrap(),
        );
        assert!(e.contains("give a file name"), "{e}");
        let e = usage(
            OutputFile::check("--svg", &d.join("nope/out.svg"))
                .err()
                .unwrap(),
        );
        assert!(e.contains("does not exist"), "{e}");
        // A link put in place during the window is refused at the write,
        // and not followed.
        let later = d.join("later");
        let o = OutputFile::check("--svg", &later).unwrap();
        std::os::unix::fs::symlink(&fifo, &later).unwrap();
        let e = usage(o.write(|w| w.write_all(b"y")).err().unwrap());
        assert!(e.contains("is a symbolic link"), "{e}");
        assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
        assert_eq!(std::fs::read(&file).unwrap(), b"x");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
