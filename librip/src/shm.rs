//! Word-wise atomic access to a shared mapping.
//!
//! Another process may write the mapping at any time, so no `&[u8]` or `&T`
//! is ever formed over it: every access is one atomic load or store of an
//! aligned word, bounds-checked against the mapping's length.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// A mapping of `len` bytes at `base`, accessed only through atomics.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shm {
    base: *mut u8,
    len: usize,
}

// SAFETY: all access goes through atomic operations on the mapping, which
// stays mapped for as long as any `Shm` over it is used (see `Shm::new`).
unsafe impl Send for Shm {}
// SAFETY: as for Send; `&Shm` only allows atomic access.
unsafe impl Sync for Shm {}

impl Shm {
    /// # Safety
    /// `base` is 8-aligned and `len` bytes stay mapped (readable, and
    /// writable if any store is made) for as long as the `Shm` is used.
    pub(crate) unsafe fn new(base: *mut u8, len: usize) -> Shm {
        assert_eq!(base as usize % 8, 0, "mapping is not word-aligned");
        Shm { base, len }
    }

    /// The mapping's first byte.
    pub(crate) fn base(&self) -> *mut u8 {
        self.base
    }

    /// Bytes mapped.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn at<T>(&self, off: u64) -> *mut T {
        let size = std::mem::size_of::<T>() as u64;
        assert!(
            off.is_multiple_of(size) && off.checked_add(size).is_some_and(|e| e <= self.len as u64),
            "shared-memory access at {off} outside the {}-byte mapping",
            self.len
        );
        // In bounds, as just checked.
        self.base.wrapping_add(off as usize).cast()
    }

    fn word(&self, off: u64) -> &AtomicU64 {
        // SAFETY: `at` checked alignment and bounds; the mapping outlives
        // `self` (contract of `new`) and is only accessed atomically.
        unsafe { AtomicU64::from_ptr(self.at(off)) }
    }

    fn half(&self, off: u64) -> &AtomicU32 {
        // SAFETY: as in `word`.
        unsafe { AtomicU32::from_ptr(self.at(off)) }
    }

    /// Stores a u64 at `off`.
    pub(crate) fn store_u64(&self, off: u64, v: u64, order: Ordering) {
        self.word(off).store(v, order)
    }

    /// Loads the u32 at `off`.
    pub(crate) fn load_u32(&self, off: u64, order: Ordering) -> u32 {
        self.half(off).load(order)
    }

    /// Stores a u32 at `off`.
    pub(crate) fn store_u32(&self, off: u64, v: u32, order: Ordering) {
        self.half(off).store(v, order)
    }

    /// Stores `bytes` at the word-aligned `off`, zero-padding the last word.
    pub(crate) fn store_bytes(&self, off: u64, bytes: &[u8]) {
        for (i, chunk) in bytes.chunks(8).enumerate() {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.store_u64(off + 8 * i as u64, u64::from_le_bytes(w), Ordering::Relaxed);
        }
    }

    /// Zeroes `len` bytes (a multiple of 8) at the word-aligned `off`.
    pub(crate) fn zero(&self, off: u64, len: u64) {
        for i in (0..len).step_by(8) {
            self.store_u64(off + i, 0, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stores_words_within_bounds() {
        let mut buf = vec![0u64; 8];
        // SAFETY: the vector outlives the Shm and is only used through it.
        let shm = unsafe { Shm::new(buf.as_mut_ptr().cast(), 64) };
        shm.store_bytes(8, b"hello, world");
        shm.store_u32(4, 7, Ordering::Relaxed);
        assert_eq!(shm.load_u32(4, Ordering::Relaxed), 7);
        assert_eq!(buf[0] >> 32, 7);
        assert_eq!(&buf[1].to_le_bytes(), b"hello, w");
        assert_eq!(&buf[2].to_le_bytes(), b"orld\0\0\0\0");
    }

    #[test]
    #[should_panic(expected = "outside")]
    fn refuses_out_of_bounds_access() {
        let mut buf = vec![0u64; 2];
        // SAFETY: as above.
        let shm = unsafe { Shm::new(buf.as_mut_ptr().cast(), 16) };
        shm.store_u64(16, 1, Ordering::Relaxed);
    }
}
