//! For tests: a file mapped private, read-only and executable, as a loader
//! maps code, and unmapped when dropped.

use std::os::fd::AsRawFd;

/// One page of a file, mapped `PROT_READ | PROT_EXEC`; never executed nor
/// dereferenced by the tests, only looked up in /proc/self/maps.
pub(crate) struct ExecMapping(*mut libc::c_void);

impl ExecMapping {
    /// Maps the first page of `f`.
    pub(crate) fn of(f: &std::fs::File) -> ExecMapping {
        // SAFETY: a fresh private mapping of a file we hold open; the
        // kernel picks the address, nothing else uses it.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_EXEC,
                libc::MAP_PRIVATE,
                f.as_raw_fd(),
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED, "mmap");
        ExecMapping(p)
    }

    /// Where it is mapped.
    pub(crate) fn addr(&self) -> u64 {
        self.0 as u64
    }
}

impl Drop for ExecMapping {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the page `of` mapped.
        unsafe { libc::munmap(self.0, 4096) };
    }
}
