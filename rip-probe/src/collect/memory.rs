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

    /// Fills as much of `buf` from `addr` as can be read, from its start
    /// on; says how many bytes that is (0: none). A live process reads up
    /// to the first page it cannot read, with one system call
    /// ([`ProcessMemory`]); this default, all or nothing.
    fn read_prefix(&self, addr: u64, buf: &mut [u8]) -> usize {
        if self.read(addr, buf).is_ok() {
            buf.len()
        } else {
            0
        }
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

    fn read_prefix(&self, addr: u64, buf: &mut [u8]) -> usize {
        read_prefix(self.pid, addr, buf).unwrap_or(0)
    }
}

/// Where each region of `at` goes in a buffer holding them end to end;
/// `None` when they do not fit in `len` bytes.
fn starts(at: &[(u64, usize)], len: usize) -> Option<Vec<usize>> {
    let mut starts = Vec::with_capacity(at.len());
    let mut off = 0usize;
    for &(_, n) in at {
        starts.push(off);
        off = off.checked_add(n)?;
    }
    (off <= len).then_some(starts)
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
    let Some(starts) = starts(at, into.len()) else {
        return ok;
    };
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

/// [`Memory::read_scattered`], with neighbours read as one: regions
/// less than `gap` bytes apart (sorted by address) are read as a single
/// region and cut apart after. `process_vm_readv` pins the pages of each
/// region on its own, so a region per small object costs far more than
/// the bytes between neighbours (objects of one size packed in a span, or
/// list nodes). A merged region that cannot be read whole (a page between
/// two objects unmapped, or freed meanwhile) is read again region by
/// region, so an unreadable object still fails alone. A merged region
/// is at most `max` bytes long (a longer region alone is read alone).
pub(crate) fn read_coalesced(
    mem: &dyn Memory,
    at: &[(u64, usize)],
    into: &mut [u8],
    gap: u64,
    max: u64,
) -> Vec<bool> {
    let mut ok = vec![false; at.len()];
    let Some(starts) = starts(at, into.len()) else {
        return ok;
    };
    let mut order: Vec<usize> = (0..at.len()).collect();
    order.sort_unstable_by_key(|&i| at[i].0);
    // Merged regions `(start, end)`, and which merged region each
    // region is in.
    let mut merged: Vec<(u64, u64)> = Vec::new();
    let mut within = vec![usize::MAX; at.len()];
    for &i in &order {
        let (addr, n) = at[i];
        if n == 0 {
            ok[i] = true;
            continue;
        }
        let Some(end) = addr.checked_add(n as u64) else {
            continue;
        };
        match merged.last_mut() {
            Some((s, e)) if addr <= e.saturating_add(gap) && end.saturating_sub(*s) <= max => {
                *e = (*e).max(end);
            }
            _ => merged.push((addr, end)),
        }
        within[i] = merged.len() - 1;
    }
    let spans: Vec<(u64, usize)> = merged.iter().map(|&(s, e)| (s, (e - s) as usize)).collect();
    let mut span_at = Vec::with_capacity(spans.len());
    let mut len = 0usize;
    for &(_, n) in &spans {
        span_at.push(len);
        len += n;
    }
    let mut buf = vec![0u8; len];
    let read = mem.read_scattered(&spans, &mut buf);
    let mut again = Vec::new();
    for i in 0..at.len() {
        let m = within[i];
        if m == usize::MAX {
            continue;
        }
        let (addr, n) = at[i];
        if read[m] {
            let from = span_at[m] + (addr - spans[m].0) as usize;
            into[starts[i]..starts[i] + n].copy_from_slice(&buf[from..from + n]);
            ok[i] = true;
        } else {
            again.push(i);
        }
    }
    if !again.is_empty() {
        let regions: Vec<(u64, usize)> = again.iter().map(|&i| at[i]).collect();
        let mut b = vec![0u8; regions.iter().map(|r| r.1).sum()];
        let read = mem.read_scattered(&regions, &mut b);
        let mut from = 0;
        for (k, &i) in again.iter().enumerate() {
            let n = at[i].1;
            if read[k] {
                into[starts[i]..starts[i] + n].copy_from_slice(&b[from..from + n]);
                ok[i] = true;
            }
            from += n;
        }
    }
    ok
}

/// Fills `buf` from `addr` in process `pid` with one `process_vm_readv`;
/// a short read is an error (`EFAULT`), like an unmapped address.
pub(crate) fn read_exact(pid: u32, addr: u64, buf: &mut [u8]) -> io::Result<()> {
    if read_prefix(pid, addr, buf)? != buf.len() {
        return Err(io::Error::from_raw_os_error(libc::EFAULT));
    }
    Ok(())
}

/// Fills `buf` from `addr` in process `pid` with one `process_vm_readv`,
/// up to the first page that cannot be read (the kernel copies page by
/// page and returns what it copied before a page it could not); says how
/// many bytes it filled.
fn read_prefix(pid: u32, addr: u64, buf: &mut [u8]) -> io::Result<usize> {
    if buf.is_empty() {
        return Ok(0);
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
    Ok((n as usize).min(buf.len()))
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

    /// A read that runs off the end of a mapping fills what comes before
    /// the end, in one call; one that starts past it fills nothing.
    #[test]
    fn a_prefix_is_read_up_to_the_end_of_a_mapping() {
        let page = 4096;
        // SAFETY: a fresh private mapping of two pages, of which the
        // second is unmapped again; only the first is touched, through
        // `process_vm_readv`, and it is unmapped before returning.
        unsafe {
            let at = libc::mmap(
                std::ptr::null_mut(),
                2 * page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(at, libc::MAP_FAILED);
            assert_eq!(libc::munmap(at.cast::<u8>().add(page).cast(), page), 0);
            at.cast::<u8>().write_bytes(7, page);
            let me = ProcessMemory::new(std::process::id());
            let mut buf = vec![0u8; 3 * page];
            assert_eq!(me.read_prefix(at as u64, &mut buf), page);
            assert!(buf[..page].iter().all(|&b| b == 7));
            assert_eq!(me.read_prefix(at as u64 + page as u64, &mut buf), 0);
            assert!(me.read(at as u64, &mut buf[..2 * page]).is_err());
            libc::munmap(at, page);
        }
    }

    /// Memory of one region with a hole, counting the regions asked for.
    struct Holed {
        at: u64,
        bytes: Vec<u8>,
        hole: std::ops::Range<u64>,
        regions: std::cell::Cell<usize>,
    }

    impl Memory for Holed {
        fn read(&self, addr: u64, buf: &mut [u8]) -> io::Result<()> {
            self.regions.set(self.regions.get() + 1);
            let end = addr + buf.len() as u64;
            if addr < self.at
                || end > self.at + self.bytes.len() as u64
                || (addr < self.hole.end && end > self.hole.start)
            {
                return Err(io::Error::from_raw_os_error(libc::EFAULT));
            }
            let o = (addr - self.at) as usize;
            buf.copy_from_slice(&self.bytes[o..o + buf.len()]);
            Ok(())
        }
    }

    /// Neighbours are read as one region and cut apart, whatever order
    /// they were asked in; a merged region across a hole is read again
    /// region by region, so only the region in the hole fails; regions
    /// further apart than the gap, or past the longest merge, stay apart.
    #[test]
    fn neighbours_are_read_together_and_fail_alone() {
        let mem = Holed {
            at: 0x1000,
            bytes: (0..0x4000u32).map(|i| (i % 251) as u8).collect(),
            hole: 0x3000..0x3100,
            regions: Default::default(),
        };
        let byte = |addr: u64| ((addr - 0x1000) % 251) as u8;
        // Three neighbours (out of order), one far, two across the hole
        // with one inside it, and an empty one.
        let at = [
            (0x1040, 16),
            (0x1000, 32),
            (0x1020, 8),
            (0x2800, 8),
            (0x2ff0, 8),
            (0x3010, 8),
            (0x3108, 8),
            (0x1800, 0),
        ];
        let mut into = vec![0u8; at.iter().map(|a| a.1).sum()];
        let ok = read_coalesced(&mem, &at, &mut into, 64, 1 << 20);
        assert_eq!(ok, [true, true, true, true, true, false, true, true]);
        let mut off = 0;
        for (i, &(addr, n)) in at.iter().enumerate() {
            if ok[i] {
                for k in 0..n {
                    assert_eq!(into[off + k], byte(addr + k as u64), "region {i}");
                }
            }
            off += n;
        }
        // 0x1000..0x1050 as one, 0x2800 alone, 0x2ff0..0x3110 as one
        // (failed), then its three regions alone.
        assert_eq!(mem.regions.get(), 3 + 3);
        // Past the longest merge, neighbours stay apart.
        mem.regions.set(0);
        let near = [(0x1000, 8), (0x1010, 8), (0x1020, 8)];
        let mut into = vec![0u8; 24];
        let ok = read_coalesced(&mem, &near, &mut into, 64, 24);
        assert_eq!(ok, [true; 3]);
        assert_eq!(mem.regions.get(), 2);
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
