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

    /// Reads many regions: `into` holds their lengths end to end (the
    /// region `(addr, len)` of `at` goes at the sum of the lengths before
    /// it); says for each whether it was read whole. One failing region
    /// never fails the others. A live process reads them with few
    /// system calls ([`ProcessMemory`]); this default, one by one.
    fn read_scattered(&self, at: &[(u64, usize)], into: &mut [u8]) -> Vec<bool> {
        let mut off = 0;
        at.iter()
            .map(|&(addr, len)| {
                let ok = into
                    .get_mut(off..off + len)
                    .is_some_and(|b| self.read(addr, b).is_ok());
                off += len;
                ok
            })
            .collect()
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

    fn read_scattered(&self, at: &[(u64, usize)], into: &mut [u8]) -> Vec<bool> {
        read_scattered(self.pid, at, into)
    }
}

/// Regions per `process_vm_readv` at most (the kernel's `IOV_MAX`).
const IOV_MAX: usize = 1024;

/// [`Memory::read_scattered`] of process `pid`: up to [`IOV_MAX`] regions
/// per `process_vm_readv`, whose cost is mostly per call (the target's
/// mm and the ptrace check), not per byte. The kernel stops a call at the
/// first region it cannot read whole and returns the bytes before it:
/// that region is marked unread and the next call starts after it.
pub(crate) fn read_scattered(pid: u32, at: &[(u64, usize)], into: &mut [u8]) -> Vec<bool> {
    let mut ok = vec![false; at.len()];
    let total: usize = at.iter().map(|&(_, n)| n).sum();
    if total > into.len() {
        return ok;
    }
    // Where each region goes in `into`.
    let mut starts = Vec::with_capacity(at.len());
    let mut off = 0usize;
    for &(_, n) in at {
        starts.push(off);
        off += n;
    }
    let base = into.as_mut_ptr();
    let mut i = 0;
    while i < at.len() {
        // Empty regions are read by definition.
        if at[i].1 == 0 {
            ok[i] = true;
            i += 1;
            continue;
        }
        let end = (i + IOV_MAX).min(at.len());
        let (mut local, mut remote) = (Vec::with_capacity(end - i), Vec::with_capacity(end - i));
        for (k, &(addr, n)) in at[i..end].iter().enumerate() {
            local.push(libc::iovec {
                // SAFETY: `starts[i + k] + n <= total <= into.len()`, so the
                // pointer stays within `into`.
                iov_base: unsafe { base.add(starts[i + k]) }.cast(),
                iov_len: n,
            });
            remote.push(libc::iovec {
                iov_base: addr as usize as *mut libc::c_void,
                iov_len: n,
            });
        }
        // SAFETY: the local iovecs cover disjoint parts of `into`, which we
        // own mutably and which outlives the call; the remote ones are only
        // addresses in the other process, which the kernel checks.
        let got = unsafe {
            libc::process_vm_readv(
                pid as libc::pid_t,
                local.as_ptr(),
                local.len() as libc::c_ulong,
                remote.as_ptr(),
                remote.len() as libc::c_ulong,
                0,
            )
        };
        if got < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EFAULT) {
                // The first region is unreadable: go on after it.
                i += 1;
                continue;
            }
            // The process is gone, or may not be read: nothing more will be.
            return ok;
        }
        let mut left = got as usize;
        let mut k = i;
        while k < end && left >= at[k].1 {
            left -= at[k].1;
            ok[k] = true;
            k += 1;
        }
        // `k` is where the call stopped: unread, or partly read.
        i = if k == end { end } else { k + 1 };
    }
    ok
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

    /// Many regions in few calls, an unmapped one among them: the others
    /// are read, it alone is marked unread, wherever it falls in a call.
    #[test]
    fn scattered_reads_skip_only_the_unreadable() {
        let words: Vec<u64> = (0..3000u64).map(|i| i * 0x1_0001).collect();
        let me = ProcessMemory::new(std::process::id());
        let mut at: Vec<(u64, usize)> = words.iter().map(|w| (w as *const u64 as u64, 8)).collect();
        // Unreadable: first, inside the first call, at its boundary, last.
        for i in [0, 17, 1024, 2999] {
            at[i] = (8, 8);
        }
        at[5].1 = 0;
        let mut into = vec![0u8; at.iter().map(|a| a.1).sum()];
        let ok = me.read_scattered(&at, &mut into);
        let mut off = 0;
        for (i, &(_, n)) in at.iter().enumerate() {
            let bad = [0, 17, 1024, 2999].contains(&i);
            assert_eq!(ok[i], !bad, "region {i}");
            if ok[i] && n == 8 {
                assert_eq!(
                    u64::from_le_bytes(into[off..off + 8].try_into().unwrap()),
                    words[i]
                );
            }
            off += n;
        }
    }
}
