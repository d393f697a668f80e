//! The target's memory, read on demand with `process_vm_readv`: no ptrace,
//! no signal, so the process never stops while its stacks are walked.
//!
//! Reads go through a small cache of 4 KiB chunks, because an unwinder
//! reads the same stack page word by word, a dozen times per frame; one
//! system call per chunk instead of one per word.

use crate::util::FastMap;

/// Bytes per cached chunk. Aligned chunks of this size never straddle a
/// page (pages are at least 4 KiB), so a chunk is either readable as a
/// whole or not at all.
pub(crate) const CHUNK: u64 = 4096;

/// One cached chunk.
type Chunk = [u8; CHUNK as usize];

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
    chunks: FastMap<u64, Result<Box<Chunk>, i32>>,
    /// Chunks read only from an offset on (a stack's top, from its stack
    /// pointer up): chunk address → first valid offset.
    partial: FastMap<u64, usize>,
    /// Chunks of earlier walks, kept for the next ones: a walk per thread
    /// allocates nothing.
    spare: Vec<Box<Chunk>>,
    /// System calls made, for statistics and tests.
    reads: u64,
}

impl Memory {
    /// The memory of process `pid` (any of its threads: they share it).
    pub fn new(pid: u32) -> Memory {
        Memory {
            pid,
            chunks: FastMap::default(),
            partial: FastMap::default(),
            spare: Vec::new(),
            reads: 0,
        }
    }

    /// Forgets every cached chunk.
    pub fn clear(&mut self) {
        self.partial.clear();
        let spare = &mut self.spare;
        spare.extend(
            self.chunks
                .drain()
                .filter_map(|(_, c)| c.ok())
                .take(MAX_CHUNKS.saturating_sub(spare.len())),
        );
    }

    /// The process this memory is of.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Caches `bytes`, read by the caller (many threads' stack tops in one
    /// system call), as the end of the chunk at `base` (aligned) from
    /// offset `from` on. A read below `from` reads the whole chunk again.
    pub fn keep(&mut self, base: u64, from: usize, bytes: &[u8]) {
        if !base.is_multiple_of(CHUNK) || from.checked_add(bytes.len()) != Some(CHUNK as usize) {
            return;
        }
        let mut chunk = self
            .spare
            .pop()
            .unwrap_or_else(|| Box::new([0; CHUNK as usize]));
        chunk[from..].copy_from_slice(bytes);
        if let Some(Ok(old)) = self.chunks.insert(base, Ok(chunk)) {
            self.spare.push(old);
        }
        if from > 0 {
            self.partial.insert(base, from);
        } else {
            self.partial.remove(&base);
        }
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
            let from = (at - base) as usize;
            if self.partial.get(&base).is_some_and(|&valid| from < valid) {
                // Below the part kept: the chunk is read whole.
                self.partial.remove(&base);
                if let Some(Ok(old)) = self.chunks.remove(&base) {
                    self.spare.push(old);
                }
            }
            let chunk = self.chunk(base)?;
            let n = (CHUNK as usize - from).min(buf.len() - done);
            buf[done..done + n].copy_from_slice(&chunk[from..from + n]);
            done += n;
        }
        Ok(())
    }

    fn chunk(&mut self, base: u64) -> Result<&Chunk, MemoryError> {
        if !self.chunks.contains_key(&base) {
            if self.chunks.len() >= MAX_CHUNKS {
                self.clear();
            }
            self.reads += 1;
            let buf = self
                .spare
                .pop()
                .unwrap_or_else(|| Box::new([0; CHUNK as usize]));
            let got = read_remote(self.pid, base, buf);
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

/// Reads one whole chunk of `pid`'s memory at `base` into `buf`.
fn read_remote(pid: u32, base: u64, mut buf: Box<Chunk>) -> Result<Box<Chunk>, i32> {
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

    /// A chunk kept from an offset on answers reads from there without a
    /// system call, and is read whole for a read below it.
    #[test]
    fn a_chunk_kept_from_an_offset_is_read_whole_below_it() {
        let data: Vec<u8> = (0..2 * CHUNK as usize).map(|i| (i % 251) as u8).collect();
        let start = data.as_ptr() as u64;
        let base = (start + CHUNK - 1) & !(CHUNK - 1);
        let mut m = Memory::new(std::process::id());
        let from = 100;
        // Bytes unlike the real ones: where they are read from shows.
        m.keep(base, from, &vec![0xaa; CHUNK as usize - from]);
        assert_eq!(
            m.read_u64(base + from as u64).unwrap(),
            u64::from_le_bytes([0xaa; 8])
        );
        assert_eq!(m.syscalls(), 0);
        let off = (base - start) as usize;
        let real = u64::from_le_bytes(data[off..off + 8].try_into().unwrap());
        assert_eq!(m.read_u64(base).unwrap(), real);
        assert_eq!(m.syscalls(), 1);
        // Whole now: the upper part is the real memory too.
        let up = off + from;
        let real_up = u64::from_le_bytes(data[up..up + 8].try_into().unwrap());
        assert_eq!(m.read_u64(base + from as u64).unwrap(), real_up);
        assert_eq!(m.syscalls(), 1);
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
