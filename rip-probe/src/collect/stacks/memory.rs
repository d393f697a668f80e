//! The target's memory, read on demand with `process_vm_readv`: no ptrace,
//! no signal, so the process never stops while its stacks are walked.
//!
//! Reads go through a small cache of 4 KiB chunks, because an unwinder
//! reads the same stack page word by word, a dozen times per frame; one
//! system call per chunk instead of one per word.

use std::collections::HashMap;

/// Bytes per cached chunk. Aligned chunks of this size never straddle a
/// page (pages are at least 4 KiB), so a chunk is either readable as a
/// whole or not at all.
const CHUNK: u64 = 4096;

/// Chunks kept before the cache is emptied: bounds memory at 1 MiB
/// whatever the target's stacks look like (a frame walk that reads more
/// than this is bounded elsewhere, by the frame count).
const MAX_CHUNKS: usize = 256;

/// Why memory of the target could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryError {
    /// The address is not mapped readable in the target (or the target is
    /// gone): `process_vm_readv` failed with this errno.
    Unreadable {
        /// The first address that could not be read.
        addr: u64,
        /// The errno of the failed read.
        errno: i32,
    },
    /// The range wraps around the end of the address space.
    Overflow,
}

impl std::fmt::Display for MemoryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MemoryError::Unreadable { addr, errno } => write!(
                f,
                "cannot read {addr:#x}: {}",
                std::io::Error::from_raw_os_error(*errno)
            ),
            MemoryError::Overflow => f.write_str("address range overflows"),
        }
    }
}

impl std::error::Error for MemoryError {}

/// A process's memory, read lazily and cached in 4 KiB chunks.
///
/// The cache holds what the target's memory was when it was read: call
/// [`Memory::clear`] before reading state that may have changed since
/// (e.g. before each thread's stack walk).
pub struct Memory {
    pid: u32,
    /// Chunk address → contents, or the errno that reading it gave (so an
    /// unmapped page costs one system call, not one per word).
    chunks: HashMap<u64, Result<Box<[u8; CHUNK as usize]>, i32>>,
    /// System calls made, for statistics and tests.
    reads: u64,
}

impl Memory {
    /// The memory of process `pid` (any of its threads: they share it).
    pub fn new(pid: u32) -> Memory {
        Memory {
            pid,
            chunks: HashMap::new(),
            reads: 0,
        }
    }

    /// Forgets every cached chunk.
    pub fn clear(&mut self) {
        self.chunks.clear();
    }

    /// `process_vm_readv` calls made so far.
    pub fn syscalls(&self) -> u64 {
        self.reads
    }

    /// Reads a little-endian `u64` at `addr` (any alignment).
    pub fn read_u64(&mut self, addr: u64) -> Result<u64, MemoryError> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Fills `buf` from `addr`, across chunk boundaries; fails if any byte
    /// is unreadable.
    pub fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        addr.checked_add(buf.len() as u64)
            .ok_or(MemoryError::Overflow)?;
        let mut done = 0usize;
        while done < buf.len() {
            let at = addr + done as u64;
            let base = at & !(CHUNK - 1);
            let chunk = self.chunk(base)?;
            let from = (at - base) as usize;
            let n = (CHUNK as usize - from).min(buf.len() - done);
            buf[done..done + n].copy_from_slice(&chunk[from..from + n]);
            done += n;
        }
        Ok(())
    }

    fn chunk(&mut self, base: u64) -> Result<&[u8; CHUNK as usize], MemoryError> {
        if !self.chunks.contains_key(&base) {
            if self.chunks.len() >= MAX_CHUNKS {
                self.chunks.clear();
            }
            self.reads += 1;
            let got = read_remote(self.pid, base);
            self.chunks.insert(base, got);
        }
        match &self.chunks[&base] {
            Ok(c) => Ok(c),
            Err(errno) => Err(MemoryError::Unreadable {
                addr: base,
                errno: *errno,
            }),
        }
    }
}

/// Reads one whole chunk of `pid`'s memory at `base`.
fn read_remote(pid: u32, base: u64) -> Result<Box<[u8; CHUNK as usize]>, i32> {
    let mut buf = Box::new([0u8; CHUNK as usize]);
    // A chunk lies within one page, so a short read means the page went
    // away between the kernel's checks: unreadable all the same.
    crate::collect::memory::read_exact(pid, base, &mut buf[..])
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EFAULT))?;
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Our own memory, read as another process would read it.
    #[test]
    fn reads_across_a_chunk_boundary() {
        let data: Vec<u8> = (0..3 * CHUNK as usize).map(|i| (i % 251) as u8).collect();
        let start = data.as_ptr() as u64;
        // An 8-byte read that starts 3 bytes before a chunk boundary.
        let boundary = (start + CHUNK) & !(CHUNK - 1);
        let at = boundary - 3;
        let mut m = Memory::new(std::process::id());
        let want = u64::from_le_bytes(
            data[(at - start) as usize..(at - start) as usize + 8]
                .try_into()
                .unwrap(),
        );
        assert_eq!(m.read_u64(at).unwrap(), want);
        assert_eq!(m.syscalls(), 2, "two chunks, one call each");
        // A long read across three chunks.
        let mut buf = vec![0u8; 2 * CHUNK as usize];
        m.read(start + 5, &mut buf).unwrap();
        assert_eq!(buf[..], data[5..5 + 2 * CHUNK as usize]);
        // Cached: the same word again costs nothing.
        let calls = m.syscalls();
        assert_eq!(m.read_u64(at).unwrap(), want);
        assert_eq!(m.syscalls(), calls);
    }

    #[test]
    fn an_unmapped_address_is_an_error_not_a_panic() {
        let mut m = Memory::new(std::process::id());
        assert!(matches!(
            m.read_u64(0),
            Err(MemoryError::Unreadable { addr: 0, .. })
        ));
        // Kernel space, and the last bytes of the address space.
        assert!(m.read_u64(0xffff_ffff_ff60_0000 + 0x10_0000).is_err());
        assert_eq!(m.read_u64(u64::MAX - 3), Err(MemoryError::Overflow));
        // A page made unreadable (PROT_NONE, not unmapped: another test
        // thread could map something there), after a readable one.
        // SAFETY: a fresh anonymous mapping of two pages, the second made
        // inaccessible; only its address is used afterwards.
        let p = unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                2 * CHUNK as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            let second = p.cast::<u8>().add(CHUNK as usize).cast();
            assert_eq!(libc::mprotect(second, CHUNK as usize, libc::PROT_NONE), 0);
            p as u64
        };
        assert_eq!(m.read_u64(p).unwrap(), 0);
        let straddling = m.read_u64(p + CHUNK - 4);
        assert!(
            matches!(straddling, Err(MemoryError::Unreadable { addr, .. }) if addr == p + CHUNK),
            "{straddling:?}"
        );
        // SAFETY: unmapping the pages mapped above.
        unsafe { libc::munmap(p as *mut libc::c_void, 2 * CHUNK as usize) };
    }

    #[test]
    fn a_process_that_is_gone_is_an_error() {
        let mut m = Memory::new(u32::MAX >> 2);
        assert!(m.read_u64(0x1000).is_err());
    }
}
