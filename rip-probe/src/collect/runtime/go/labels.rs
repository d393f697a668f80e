//! A goroutine's pprof labels (`pprof.Do`, `pprof.SetGoroutineLabels`),
//! read where `g.labels` points: up to Go 1.23 a `map[string]string`
//! (the runtime's hash map: buckets of 8 keys and 8 values), from Go 1.24
//! a slice of `{key, value}` sorted by key. Every count and length read
//! is bounded; a set that cannot be read whole, or reads differently
//! twice, is not shown in part: the reason is.

use std::sync::Arc;

use super::layout::LabelsFormat;
use crate::collect::memory::Memory;

/// Labels read per goroutine at most (more: the set is refused, as a
/// wrong read more likely than a real one).
const MAX_LABELS: u64 = 64;
/// Bytes of a key or a value read at most; a longer one is cut and ends
/// in `…`.
const MAX_STRING: u64 = 512;
/// Bucket count exponent of a labels map read at most (2^6 buckets hold
/// far more than [`MAX_LABELS`]).
const MAX_B: u8 = 6;
/// Overflow buckets followed per bucket at most.
const MAX_OVERFLOW: usize = 8;

/// One label, as the program set it.
pub(crate) type Label = (String, String);

/// The labels at `ptr` (`g.labels`, non-nil), sorted by key, read twice
/// to agree; or why they could not be.
pub(crate) fn read(
    mem: &dyn Memory,
    format: LabelsFormat,
    ptr: u64,
) -> Result<Arc<[Label]>, &'static str> {
    let once = || match format {
        LabelsFormat::Map => read_map(mem, ptr),
        LabelsFormat::Slice => read_slice(mem, ptr),
    };
    let first = once()?;
    // A set is never changed once made, but one freed and reused while
    // read would read differently: two reads must agree.
    if once()? != first {
        return Err("its labels changed while read");
    }
    Ok(first.into())
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    b.get(off..off + 8)
        .map_or(0, |s| u64::from_le_bytes(s.try_into().unwrap_or_default()))
}

/// A Go string (`ptr`, `len`), cut at [`MAX_STRING`] bytes.
fn string(mem: &dyn Memory, ptr: u64, len: u64) -> Result<String, &'static str> {
    if len == 0 {
        return Ok(String::new());
    }
    if len > 1 << 30 {
        return Err("a label's length is not a length");
    }
    let mut b = vec![0u8; len.min(MAX_STRING) as usize];
    mem.read(ptr, &mut b)
        .map_err(|_| "a label's bytes could not be read")?;
    let mut s = String::from_utf8_lossy(&b).into_owned();
    if len > MAX_STRING {
        s.push('…');
    }
    Ok(s)
}

/// A labels set from Go 1.24 on: `{list []label}`, each label two
/// strings (32 bytes).
fn read_slice(mem: &dyn Memory, ptr: u64) -> Result<Vec<Label>, &'static str> {
    let mut hdr = [0u8; 16];
    mem.read(ptr, &mut hdr)
        .map_err(|_| "its labels could not be read")?;
    let (list, len) = (u64_at(&hdr, 0), u64_at(&hdr, 8));
    if len > MAX_LABELS {
        return Err("more labels than are read");
    }
    let mut b = vec![0u8; len as usize * 32];
    if len > 0 {
        mem.read(list, &mut b)
            .map_err(|_| "its labels could not be read")?;
    }
    let mut out = b
        .chunks_exact(32)
        .map(|l| {
            Ok((
                string(mem, u64_at(l, 0), u64_at(l, 8))?,
                string(mem, u64_at(l, 16), u64_at(l, 24))?,
            ))
        })
        .collect::<Result<Vec<Label>, &'static str>>()?;
    out.sort();
    Ok(out)
}

/// Entries of a bucket, `tophash` values from which one is in use
/// (smaller ones mark empty or evacuated slots).
const MIN_TOP_HASH: u8 = 5;
/// Bytes of a `map[string]string` bucket: 8 top hashes, 8 keys, 8
/// values, the overflow pointer.
const BUCKET: usize = 8 + 8 * 16 + 8 * 16 + 8;
/// `hmap.flags`: the map grows to as many buckets (not twice as many).
const SAME_SIZE_GROW: u8 = 8;

/// A labels set up to Go 1.23: `g.labels` points to the map's header
/// pointer. Every bucket is read, the old ones too while the map grows
/// (an entry not yet moved is still in use there; one moved is marked),
/// and the entries found must be the map's count.
fn read_map(mem: &dyn Memory, ptr: u64) -> Result<Vec<Label>, &'static str> {
    let h = mem
        .read_u64(ptr)
        .map_err(|_| "its labels could not be read")?;
    if h == 0 {
        return Ok(Vec::new());
    }
    let mut hmap = [0u8; 48];
    mem.read(h, &mut hmap)
        .map_err(|_| "its labels' map could not be read")?;
    let count = u64_at(&hmap, 0);
    let (flags, b) = (hmap[8], hmap[9]);
    if count > MAX_LABELS || b > MAX_B {
        return Err("more labels than are read");
    }
    let (buckets, old) = (u64_at(&hmap, 16), u64_at(&hmap, 24));
    let mut out = Vec::new();
    read_buckets(mem, buckets, 1 << b, &mut out)?;
    if old != 0 {
        let n = if flags & SAME_SIZE_GROW != 0 || b == 0 {
            1 << b
        } else {
            1 << (b - 1)
        };
        read_buckets(mem, old, n, &mut out)?;
    }
    if out.len() as u64 != count {
        return Err("its labels' map read other than its count");
    }
    out.sort();
    Ok(out)
}

/// The entries in use of `n` buckets at `at` and their overflow buckets.
fn read_buckets(
    mem: &dyn Memory,
    at: u64,
    n: usize,
    out: &mut Vec<Label>,
) -> Result<(), &'static str> {
    if at == 0 {
        return Ok(());
    }
    let mut all = vec![0u8; n * BUCKET];
    mem.read(at, &mut all)
        .map_err(|_| "its labels' buckets could not be read")?;
    for first in all.chunks_exact(BUCKET) {
        let mut bucket = first.to_vec();
        for _ in 0..=MAX_OVERFLOW {
            for i in 0..8 {
                if bucket[i] < MIN_TOP_HASH {
                    continue;
                }
                if out.len() as u64 >= MAX_LABELS {
                    return Err("more labels than are read");
                }
                let k = 8 + i * 16;
                let v = 8 + 8 * 16 + i * 16;
                out.push((
                    string(mem, u64_at(&bucket, k), u64_at(&bucket, k + 8))?,
                    string(mem, u64_at(&bucket, v), u64_at(&bucket, v + 8))?,
                ));
            }
            let next = u64_at(&bucket, BUCKET - 8);
            if next == 0 {
                break;
            }
            mem.read(next, &mut bucket)
                .map_err(|_| "its labels' buckets could not be read")?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// A process's memory: regions by start address.
    #[derive(Default)]
    struct Fake(BTreeMap<u64, Vec<u8>>);

    impl Memory for Fake {
        fn read(&self, addr: u64, buf: &mut [u8]) -> std::io::Result<()> {
            let (start, bytes) = self
                .0
                .range(..=addr)
                .next_back()
                .ok_or(std::io::ErrorKind::NotFound)?;
            let from = (addr - start) as usize;
            let src = bytes
                .get(from..from + buf.len())
                .ok_or(std::io::ErrorKind::NotFound)?;
            buf.copy_from_slice(src);
            Ok(())
        }
    }

    fn put(d: &mut [u8], off: usize, v: u64) {
        d[off..off + 8].copy_from_slice(&v.to_le_bytes());
    }

    impl Fake {
        /// A Go string's bytes, at `at`: its (ptr, len).
        fn string(&mut self, at: u64, s: &str) -> (u64, u64) {
            self.0.insert(at, s.as_bytes().to_vec());
            (at, s.len() as u64)
        }
    }

    fn labels(v: &[(&str, &str)]) -> Vec<Label> {
        v.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_slice_of_labels_is_read_sorted_and_bounded() {
        let mut m = Fake::default();
        let (k1, v1) = (m.string(0x5000, "worker"), m.string(0x5100, "7"));
        let (k0, v0) = (m.string(0x5200, "job"), m.string(0x5300, "resize"));
        let mut list = vec![0u8; 64];
        for (i, (k, v)) in [(k1, v1), (k0, v0)].into_iter().enumerate() {
            put(&mut list, i * 32, k.0);
            put(&mut list, i * 32 + 8, k.1);
            put(&mut list, i * 32 + 16, v.0);
            put(&mut list, i * 32 + 24, v.1);
        }
        m.0.insert(0x4000, list);
        let mut hdr = vec![0u8; 24];
        put(&mut hdr, 0, 0x4000);
        put(&mut hdr, 8, 2);
        put(&mut hdr, 16, 2);
        m.0.insert(0x3000, hdr.clone());
        assert_eq!(
            &*read(&m, LabelsFormat::Slice, 0x3000).unwrap(),
            &labels(&[("job", "resize"), ("worker", "7")])[..]
        );
        // A length no labels set has is refused, not read.
        put(&mut hdr, 8, 100_000);
        m.0.insert(0x3000, hdr);
        assert_eq!(
            read(&m, LabelsFormat::Slice, 0x3000),
            Err("more labels than are read")
        );
    }

    /// A `map[string]string` with its buckets at `at`: `(tophash, key,
    /// value)` per slot of each bucket.
    fn buckets(m: &mut Fake, at: u64, slots: &[&[(u8, &str, &str)]]) {
        let mut b = vec![0u8; slots.len() * BUCKET];
        let mut s = 0x9000 + at;
        for (n, bucket) in slots.iter().enumerate() {
            for (i, &(top, k, v)) in bucket.iter().enumerate() {
                let base = n * BUCKET;
                b[base + i] = top;
                let k = m.string(s, k);
                let v = m.string(s + 0x40, v);
                s += 0x80;
                put(&mut b, base + 8 + i * 16, k.0);
                put(&mut b, base + 16 + i * 16, k.1);
                put(&mut b, base + 136 + i * 16, v.0);
                put(&mut b, base + 144 + i * 16, v.1);
            }
        }
        m.0.insert(at, b);
    }

    #[test]
    fn a_growing_map_of_labels_is_read_from_old_and_new_buckets() {
        let mut m = Fake::default();
        // Growing from one bucket to two: "a" moved already (its old slot
        // marked evacuated, 2), "b" not yet; "c" was added after.
        buckets(&mut m, 0x20_000, &[&[(2, "a", "1"), (9, "b", "2")]]);
        buckets(&mut m, 0x30_000, &[&[(7, "a", "1")], &[(8, "c", "3")]]);
        let mut h = vec![0u8; 48];
        put(&mut h, 0, 3);
        h[9] = 1;
        put(&mut h, 16, 0x30_000);
        put(&mut h, 24, 0x20_000);
        m.0.insert(0x1000, h.clone());
        let mut p = vec![0u8; 8];
        put(&mut p, 0, 0x1000);
        m.0.insert(0x800, p);
        assert_eq!(
            &*read(&m, LabelsFormat::Map, 0x800).unwrap(),
            &labels(&[("a", "1"), ("b", "2"), ("c", "3")])[..]
        );
        // A count the buckets do not hold: not shown in part.
        put(&mut h, 0, 4);
        m.0.insert(0x1000, h);
        assert_eq!(
            read(&m, LabelsFormat::Map, 0x800),
            Err("its labels' map read other than its count")
        );
    }

    #[test]
    fn a_long_value_is_cut_and_says_so() {
        let mut m = Fake::default();
        let long = "x".repeat(2000);
        let k = m.string(0x5000, "path");
        let v = m.string(0x6000, &long);
        let mut list = vec![0u8; 32];
        put(&mut list, 0, k.0);
        put(&mut list, 8, k.1);
        put(&mut list, 16, v.0);
        put(&mut list, 24, v.1);
        m.0.insert(0x4000, list);
        let mut hdr = vec![0u8; 24];
        put(&mut hdr, 0, 0x4000);
        put(&mut hdr, 8, 1);
        m.0.insert(0x3000, hdr);
        let got = read(&m, LabelsFormat::Slice, 0x3000).unwrap();
        assert_eq!(got[0].1.len(), MAX_STRING as usize + '…'.len_utf8());
        assert!(got[0].1.ends_with('…'));
    }
}
