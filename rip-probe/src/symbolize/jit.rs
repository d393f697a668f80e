//! Names for code a JIT generated (Java, Node, .NET), from the perf map
//! the runtime writes for profilers: `/tmp/perf-PID.map`, PID being the
//! process's pid in its own pid namespace (Java: `jcmd PID
//! Compiler.perfmap`, or `-XX:+UnlockDiagnosticVMOptions
//! -XX:+DumpPerfMapAtExit`; Node: `--perf-basic-prof`).
//!
//! The file is the target's, in a directory everyone may write, and
//! rip-probe usually runs as root: it is opened inside the process's root
//! (`/proc/PID/root`, nothing resolved outside it, no magic link
//! followed), its last component never followed if it is a symlink, and
//! read only if it is a regular file owned by the process's effective user
//! (so no other user can plant names, and nothing is read that the process
//! could not write) and at most [`MAX_PERF_MAP`] bytes long. librip's
//! fuzzed [`PerfMap`] parses it.

use std::{collections::HashMap, path::Path, sync::Arc};

use librip::reader::{Follow, OpenError, PerfMap, RegularFile};

/// The largest perf map read: 64 MiB. A long-running Java service's map
/// holds tens of thousands of methods in a few MiB; a larger file is
/// refused with a warning rather than read into memory.
pub(crate) const MAX_PERF_MAP: u64 = 64 << 20;

/// The perf maps of the processes symbolized, each read again only when
/// it changed (a runtime appends as it compiles).
#[derive(Default)]
pub(crate) struct JitMaps {
    by_pid: HashMap<u32, Loaded>,
}

type FileKey = ((u64, u64), u64, (i64, u64));

struct Loaded {
    /// Device, inode, size and modification time of the file read.
    key: FileKey,
    map: Arc<PerfMap>,
}

/// Where a process's perf map is, as the process names it.
pub(crate) fn perf_map_name(pid: u32) -> String {
    let own = crate::collect::namespaces::innermost_id(pid, 0).unwrap_or(u64::from(pid));
    format!("/tmp/perf-{own}.map")
}

impl JitMaps {
    /// Drops the maps of the processes `live` says are no longer watched.
    pub(crate) fn retain(&mut self, live: impl Fn(u32) -> bool) {
        self.by_pid.retain(|&pid, _| live(pid));
    }

    /// The perf map of process `pid`: `Ok(None)` when it writes none.
    pub(crate) fn get(&mut self, pid: u32) -> Result<Option<Arc<PerfMap>>, String> {
        let name = perf_map_name(pid);
        let Some(file) = open(pid, &name)? else {
            self.by_pid.remove(&pid);
            return Ok(None);
        };
        // jcmd rewrites the whole file: its size may stay the same.
        let mtime = rustix::fs::fstat(file.fd())
            .map(|st| (st.st_mtime, st.st_mtime_nsec))
            .unwrap_or_default();
        let key = (file.dev_ino, file.size, mtime);
        if let Some(l) = self.by_pid.get(&pid)
            && l.key == key
        {
            return Ok(Some(Arc::clone(&l.map)));
        }
        let mut bytes = vec![0u8; file.size as usize];
        let n = file
            .read_at(0, &mut bytes)
            .map_err(|e| format!("{name}: cannot read: {}", e.kind()))?;
        bytes.truncate(n);
        // A runtime may be writing its last line: only whole lines count.
        let whole = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        let map = Arc::new(PerfMap::parse(&bytes[..whole]));
        self.by_pid.insert(
            pid,
            Loaded {
                key,
                map: Arc::clone(&map),
            },
        );
        Ok(Some(map))
    }
}

/// Opens process `pid`'s perf map `name` (see the module's documentation
/// for what is checked). `Ok(None)`: there is none.
fn open(pid: u32, name: &str) -> Result<Option<RegularFile>, String> {
    let root = format!("/proc/{pid}/root");
    let file = match RegularFile::open_in_root(Path::new(&root), Path::new(name), Follow::No) {
        Ok(f) => f,
        Err(OpenError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(OpenError::Io(e)) => return Err(format!("{name}: cannot open: {}", e.kind())),
        Err(OpenError::NotRegular(what)) => {
            return Err(format!(
                "{name}: not a regular file ({what}); it is not read"
            ));
        }
    };
    let euid =
        effective_uid(pid).ok_or_else(|| format!("{name}: the process's user is unknown"))?;
    if file.uid != euid {
        return Err(format!(
            "{name}: owned by uid {}, not by the process's user (uid {euid}); it is not read",
            file.uid
        ));
    }
    if file.size > MAX_PERF_MAP {
        return Err(format!(
            "{name}: {} MiB, more than the {} MiB rip-probe reads; it is not read",
            file.size >> 20,
            MAX_PERF_MAP >> 20
        ));
    }
    Ok(Some(file))
}

/// The effective uid of process `pid` (the second of `Uid:` in its status).
fn effective_uid(pid: u32) -> Option<u32> {
    let status = crate::discover::read_proc(pid, 0, "status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// This process's perf map, written by the test: rip-probe reads it as
    /// it reads any target's.
    fn write_own(contents: &[u8]) -> std::path::PathBuf {
        let path = std::path::PathBuf::from(perf_map_name(std::process::id()));
        let _ = std::fs::remove_file(&path);
        std::fs::write(&path, contents).unwrap();
        path
    }

    // One test, for the file is one per process and tests run as threads.
    #[test]
    fn the_perf_map_is_read_only_when_it_is_the_process_users_regular_file() {
        let pid = std::process::id();
        let path = write_own(b"1000 100 first\n2000 10 partial");
        let mut maps = JitMaps::default();
        let m = maps.get(pid).unwrap().expect("a map");
        assert_eq!(m.find(0x1050).unwrap().name, "first");
        // The last line is being written: left out until it is whole.
        assert!(m.find(0x2000).is_none());

        // Appended to: read again.
        std::fs::write(&path, b"1000 100 first\n2000 10 the second\n").unwrap();
        let m = maps.get(pid).unwrap().expect("a map");
        assert_eq!(m.find(0x2000).unwrap().name, "the second");

        // Someone else's file: refused, and said so.
        std::os::unix::fs::chown(&path, Some(65534), None).unwrap();
        let e = maps.get(pid).unwrap_err();
        assert!(e.contains("owned by uid 65534"), "{e}");
        std::fs::remove_file(&path).unwrap();

        // A symlink to a file the process's user owns: not followed.
        let secret = std::env::temp_dir().join(format!("rip-jit-secret-{pid}"));
        std::fs::write(&secret, b"1000 100 secret\n").unwrap();
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::symlink(&secret, &path).unwrap();
        let e = maps.get(pid).unwrap_err();
        assert!(e.contains("symbolic link") && !e.contains("secret"), "{e}");
        std::fs::remove_file(&path).unwrap();
        std::fs::remove_file(&secret).unwrap();

        // A FIFO: refused without blocking.
        let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = maps.get(pid).unwrap_err();
        assert!(e.contains("FIFO"), "{e}");
        std::fs::remove_file(&path).unwrap();

        // Larger than the cap (sparse: no disk used): refused.
        let f = std::fs::File::create(&path).unwrap();
        f.set_len(MAX_PERF_MAP + 1).unwrap();
        let e = maps.get(pid).unwrap_err();
        assert!(e.contains("more than the 64 MiB"), "{e}");
        std::fs::remove_file(&path).unwrap();

        // None: nothing to say.
        assert!(maps.get(pid).unwrap().is_none());
    }
}
