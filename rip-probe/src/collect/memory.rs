//! Reading a live target's memory without stopping it: `process_vm_readv`,
//! never ptrace. What it returns is a copy taken while the target runs, so
//! callers validate it before they believe it.

use std::io;

/// Memory that can be read at an address: a live process, or a fixture in
/// tests.
pub trait Memory {
    /// Fills `buf` from `addr`, or fails (unmapped, process gone, short).
    fn read(&self, addr: u64, buf: &mut [u8]) -> io::Result<()>;

    /// The little-endian `u32` at `addr`.
    fn read_u32(&self, addr: u64) -> io::Result<u32> {
        let mut b = [0u8; 4];
        self.read(addr, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    /// The little-endian `u64` at `addr`.
    fn read_u64(&self, addr: u64) -> io::Result<u64> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }
}

/// A live process's memory, read with `process_vm_readv` (needs the right
/// to ptrace it, which root has; the target is never stopped).
#[derive(Clone, Copy, Debug)]
pub struct ProcessMemory {
    pid: u32,
}

impl ProcessMemory {
    /// The memory of process `pid`.
    pub fn new(pid: u32) -> Self {
        ProcessMemory { pid }
    }
}

impl Memory for ProcessMemory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> io::Result<()> {
        read_exact(self.pid, addr, buf)
    }
}

/// Fills `buf` from `addr` in process `pid` with one `process_vm_readv`;
/// a short read is an error (`EFAULT`), like an unmapped address.
pub(crate) fn read_exact(pid: u32, addr: u64, buf: &mut [u8]) -> io::Result<()> {
    if buf.is_empty() {
        return Ok(());
    }
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as usize as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: one local iovec over `buf`, which we own mutably and which
    // outlives the call; the remote one is only an address in the other
    // process, which the kernel checks (EFAULT when unmapped).
    let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n as usize != buf.len() {
        return Err(io::Error::from_raw_os_error(libc::EFAULT));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_memory_and_refuses_unmapped() {
        let word: u64 = 0x1122_3344_5566_7788;
        let me = ProcessMemory::new(std::process::id());
        assert_eq!(me.read_u64(&word as *const u64 as u64).unwrap(), word);
        assert_eq!(
            me.read_u32(&word as *const u64 as u64).unwrap(),
            0x5566_7788
        );
        // The first page is never mapped.
        assert!(me.read_u32(8).is_err());
    }
}
