//! Discovery: the target process, held by a pidfd so that its exit — or the
//! reuse of its pid by another process — during observation is detected
//! instead of silently misattributing threads.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::{
    collect::procfs,
    error::{Error, Result},
};

/// A live process, pinned by a pidfd.
pub struct Target {
    pid: u32,
    pidfd: OwnedFd,
    start_time: u64,
    comm: String,
    exe: Option<String>,
}

/// Why a target is no longer the process we attached to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lost {
    /// It exited.
    Exited,
    /// It exited and another process now has its pid.
    PidReused,
}

impl Target {
    /// Opens process `pid`, or [`Error::NoSuchProcess`].
    pub fn open(pid: u32) -> Result<Self> {
        let raw = i32::try_from(pid).map_err(|_| Error::NoSuchProcess(pid))?;
        if raw <= 0 {
            return Err(Error::NoSuchProcess(pid));
        }
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, raw, 0) };
        if fd < 0 {
            let e = std::io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::ESRCH) | Some(libc::EINVAL) => Error::NoSuchProcess(pid),
                _ => Error::io(format!("pidfd_open({pid})"), e),
            });
        }
        // SAFETY: a fresh fd returned by the kernel, owned from here on.
        let pidfd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        // Read identity after the pidfd exists: if the pid was reused in
        // between, the start time below belongs to the process the pidfd
        // refers to... unless it exited already, which `lost` reports.
        let st = procfs::stat(pid, 0).ok_or(Error::NoSuchProcess(pid))?;
        Ok(Target {
            pid,
            pidfd,
            start_time: st.start_time,
            comm: st.comm,
            exe: procfs::exe(pid).map(|p| p.display().to_string()),
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Process name.
    pub fn comm(&self) -> &str {
        &self.comm
    }

    /// Executable path, when readable.
    pub fn exe(&self) -> Option<&str> {
        self.exe.as_deref()
    }

    /// Start time in clock ticks since boot (from /proc/PID/stat).
    pub fn start_time(&self) -> u64 {
        self.start_time
    }

    /// `None` while the process we opened is alive; otherwise whether it
    /// exited or its pid now belongs to someone else.
    pub fn lost(&self) -> Option<Lost> {
        let mut pfd = libc::pollfd {
            fd: self.pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, zero timeout.
        let rc = unsafe { libc::poll(&mut pfd, 1, 0) };
        if rc > 0 && pfd.revents & libc::POLLIN != 0 {
            // The pidfd turns readable when the process exits.
            return Some(match procfs::stat(self.pid, 0) {
                Some(st) if st.start_time != self.start_time => Lost::PidReused,
                _ => Lost::Exited,
            });
        }
        None
    }

    /// Blocks up to `timeout` or until the process exits; returns whether
    /// it exited.
    pub fn wait_exit(&self, timeout: std::time::Duration) -> bool {
        let mut pfd = libc::pollfd {
            fd: self.pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: one valid pollfd.
        let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
        rc > 0 && pfd.revents & libc::POLLIN != 0
    }
}

impl Lost {
    /// A sentence for reports.
    pub fn describe(&self, pid: u32) -> String {
        match self {
            Lost::Exited => format!("process {pid} exited during observation"),
            Lost::PidReused => format!(
                "process {pid} exited during observation and its pid was reused; \
                 nothing from the new process is reported"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_is_alive() {
        let t = Target::open(std::process::id()).unwrap();
        assert!(t.lost().is_none());
        assert!(t.start_time() > 0);
        assert!(t.exe().is_some());
    }

    #[test]
    fn missing_process() {
        assert!(matches!(Target::open(0), Err(Error::NoSuchProcess(0))));
        assert!(matches!(
            Target::open(u32::MAX),
            Err(Error::NoSuchProcess(_))
        ));
    }

    #[test]
    fn detects_exit() {
        let mut child = std::process::Command::new("sleep")
            .arg("0.2")
            .spawn()
            .unwrap();
        let t = Target::open(child.id()).unwrap();
        assert!(t.lost().is_none());
        assert!(t.wait_exit(std::time::Duration::from_secs(5)));
        child.wait().unwrap();
        assert!(t.lost().is_some());
    }
}
