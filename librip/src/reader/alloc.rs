//! Reading the allocation table (`docs/FORMAT.md`, "The allocation
//! table"): the sampled allocations live when it was read, each checked
//! against its state word and check word so that an entry torn by a crash
//! or by a concurrent writer is counted, never returned.

use super::{ReadError, source::Source};
use crate::format::alloc::{self as fmt, entry, hdr, state};

/// The largest entry a reader accepts.
const MAX_ENTRY_SIZE: u32 = 1024;
/// The most return addresses a reader accepts per entry.
const MAX_FRAMES: u32 = 64;
/// Attempts at a consistent copy of an entry a live writer is rewriting.
const SETTLE_TRIES: usize = 4;
/// Entries read at a time (at most 1 MiB of the largest entries).
const CHUNK_ENTRIES: u32 = 1024;

/// One sampled allocation that was live when the table was read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allocation {
    /// The address the allocator returned.
    pub addr: u64,
    /// Its usable size in bytes (what `malloc_usable_size` said; the
    /// requested size where the sampler could not ask).
    pub size: u64,
    /// The bytes asked for.
    pub requested: u64,
    /// The allocating thread.
    pub tid: u32,
    /// When it was allocated (CLOCK_MONOTONIC ns).
    pub time_ns: u64,
    /// Return addresses, innermost (the allocator's caller) first. Each is
    /// the address after a call: subtract one to name the calling line.
    pub frames: Vec<u64>,
}

/// The table as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllocTable {
    /// The sampling mean in bytes (1: every allocation was recorded).
    pub mean: u64,
    /// Entries the table has.
    pub capacity: u32,
    /// Allocations sampled and recorded since the ring was created.
    pub sampled: u64,
    /// Sampled allocations that found no free entry (the table was full
    /// around their address): not in `live`, so `live` is a lower bound
    /// when this is not 0.
    pub dropped: u64,
    /// Recorded allocations freed since.
    pub freed: u64,
    /// Whether the writer could not reserve room in the file for more of
    /// the table (the file system holding the ring was full): `dropped`
    /// then counts samples that found no room in the file.
    pub file_full: bool,
    /// Entries found half-written (a writer killed while recording, or a
    /// corrupt file): left out and counted.
    pub torn: u32,
    /// The sampled allocations live at the time of reading.
    pub live: Vec<Allocation>,
}

/// The bytes one sampled allocation of `size` bytes stands for at sampling
/// mean `mean`: it was sampled with probability `1 - exp(-size/mean)`.
pub fn estimated_bytes(size: u64, mean: u64) -> f64 {
    if mean <= 1 || size == 0 {
        return size as f64;
    }
    let s = size as f64;
    let p = -(-s / mean as f64).exp_m1();
    if p > 0.0 { s / p } else { s }
}

impl AllocTable {
    /// The estimated bytes of all live allocations.
    pub fn estimated_bytes(&self) -> f64 {
        self.live
            .iter()
            .map(|a| estimated_bytes(a.requested, self.mean))
            .sum()
    }
}

/// Reads a table region on its own (its header then its entries), as
/// found at the header's `alloc_region`: for tests and fuzzing.
pub fn from_region_bytes(bytes: &[u8]) -> Result<Option<AllocTable>, ReadError> {
    let len = bytes.len() as u64;
    read(&super::source::Bytes(bytes), 0, len, 0, len)
}

fn bad(why: impl Into<String>) -> ReadError {
    ReadError::inconsistent(why)
}

fn u32_at(words: &[u64], off: usize) -> u32 {
    (words[off / 8] >> (8 * (off % 8))) as u32
}

/// Reads the table whose region the header places at `region` (`size`
/// bytes), inside a file of `file_size` bytes whose slots end at
/// `slots_end`. `Ok(None)`: the region's header is not written yet (a ring
/// being created).
pub(crate) fn read(
    src: &impl Source,
    region: u64,
    size: u64,
    slots_end: u64,
    file_size: u64,
) -> Result<Option<AllocTable>, ReadError> {
    let fits = region.checked_add(size).is_some_and(|end| end <= file_size);
    if region < slots_end
        || !region.is_multiple_of(8)
        || !fits
        || size < u64::from(fmt::HEADER_SIZE)
    {
        return Err(bad(format!(
            "allocation table at {region} ({size} bytes) does not fit between the slots and the end of the file"
        )));
    }
    let mut h = vec![0u64; 9];
    src.words(region, &mut h)?;
    if h[hdr::MAGIC / 8] == 0 {
        return Ok(None);
    }
    if h[hdr::MAGIC / 8].to_le_bytes() != fmt::MAGIC {
        return Err(bad("allocation table without its magic"));
    }
    let version = u32_at(&h, hdr::VERSION);
    if version != fmt::VERSION {
        return Err(bad(format!(
            "allocation table version {version}; this reader reads version {}",
            fmt::VERSION
        )));
    }
    let entry_size = u32_at(&h, hdr::ENTRY_SIZE);
    let frames = u32_at(&h, hdr::FRAMES);
    let capacity = u32_at(&h, hdr::CAPACITY);
    if frames > MAX_FRAMES
        || entry_size > MAX_ENTRY_SIZE
        || !entry_size.is_multiple_of(8)
        || (entry_size as usize) < entry::FRAMES + 8 * frames as usize
    {
        return Err(bad(format!(
            "allocation table entries of {entry_size} bytes with {frames} frames"
        )));
    }
    if !capacity.is_power_of_two() || capacity > fmt::MAX_CAPACITY {
        return Err(bad(format!("allocation table of {capacity} entries")));
    }
    let table_bytes = u64::from(capacity) * u64::from(entry_size);
    if u64::from(fmt::HEADER_SIZE) + table_bytes > size {
        return Err(bad(format!(
            "allocation table of {capacity} entries of {entry_size} bytes is larger than its region ({size} bytes)"
        )));
    }
    let mean = h[hdr::MEAN / 8];
    if mean == 0 {
        return Err(bad("allocation table with a sampling mean of 0"));
    }
    let base = region + u64::from(fmt::HEADER_SIZE);
    let ew = (entry_size / 8) as usize;
    // A chunk at a time: the table's later zones may be holes (a writer
    // reserves them as it reaches them), so what the file holds does not
    // bound the table's size; this bounds what reading it takes.
    let chunk = (CHUNK_ENTRIES as usize).min(capacity as usize);
    let mut words = vec![0u64; ew * chunk];
    let mut table = AllocTable {
        mean,
        capacity,
        sampled: h[hdr::SAMPLED / 8],
        dropped: h[hdr::DROPPED / 8],
        freed: h[hdr::FREED / 8],
        file_full: h[hdr::FILE_FULL / 8] != 0,
        torn: 0,
        live: Vec::new(),
    };
    for first in (0..capacity as usize).step_by(chunk) {
        let at = base + (first * ew * 8) as u64;
        src.words(at, &mut words)?;
        for (i, e) in words.chunks_exact_mut(ew).enumerate() {
            let mut tries = 0;
            loop {
                match decode(e, frames) {
                    Decoded::Free => break,
                    Decoded::Live(a) => {
                        table.live.push(a);
                        break;
                    }
                    Decoded::Torn if tries < SETTLE_TRIES => {
                        // A live writer may be rewriting it: copy it again.
                        tries += 1;
                        src.words(at + (i * ew * 8) as u64, e)?;
                    }
                    Decoded::Torn => {
                        table.torn += 1;
                        break;
                    }
                }
            }
        }
    }
    Ok(Some(table))
}

enum Decoded {
    Free,
    Live(Allocation),
    Torn,
}

fn decode(e: &[u64], max_frames: u32) -> Decoded {
    let st = e[entry::STATE / 8];
    match st & 3 {
        state::FREE => return Decoded::Free,
        state::LIVE => {}
        _ => return Decoded::Torn,
    }
    // The check word covers the entry's fixed part and all its frames
    // (the writer's entry size is the format's; a larger one from a newer
    // writer is checked over the words the format defines).
    let defined = (fmt::ENTRY_SIZE / 8) as usize;
    if e.len() < defined || fmt::check(&e[..defined]) != e[entry::CHECK / 8] {
        return Decoded::Torn;
    }
    let n = u32_at(e, entry::FRAME_COUNT);
    if n > max_frames {
        return Decoded::Torn;
    }
    let f0 = entry::FRAMES / 8;
    Decoded::Live(Allocation {
        addr: e[entry::ADDR / 8],
        size: e[entry::SIZE / 8],
        requested: e[entry::REQUESTED / 8],
        tid: u32_at(e, entry::TID),
        time_ns: e[entry::TIME_NS / 8],
        frames: e[f0..f0 + n as usize].to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A region of `n` entries at mean 1, each entry given as its words.
    fn region(entries: &[Vec<u64>]) -> Vec<u8> {
        let ew = (fmt::ENTRY_SIZE / 8) as usize;
        let mut w = vec![0u64; (fmt::HEADER_SIZE / 8) as usize + ew * entries.len()];
        w[0] = u64::from_le_bytes(fmt::MAGIC);
        w[1] = u64::from(fmt::VERSION) | u64::from(fmt::ENTRY_SIZE) << 32;
        w[2] = entries.len() as u64 | u64::from(fmt::FRAMES) << 32;
        w[3] = 1;
        for (i, e) in entries.iter().enumerate() {
            let at = (fmt::HEADER_SIZE / 8) as usize + i * ew;
            w[at..at + e.len()].copy_from_slice(e);
        }
        w.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    /// An entry in state `st`, generation 3, its check word right or not.
    fn entry(st: u64, addr: u64, good_check: bool) -> Vec<u64> {
        let mut e = vec![0u64; (fmt::ENTRY_SIZE / 8) as usize];
        e[0] = 3 << 2 | st;
        e[entry::ADDR / 8] = addr;
        e[entry::SIZE / 8] = 48;
        e[entry::REQUESTED / 8] = 40;
        e[entry::TID / 8] = 77 | 2 << 32;
        e[entry::FRAMES / 8] = 0x1234;
        e[entry::FRAMES / 8 + 1] = 0x5678;
        e[entry::CHECK / 8] = fmt::check(&e) ^ u64::from(!good_check);
        e
    }

    #[test]
    fn torn_entries_are_counted_not_returned() {
        let bytes = region(&[
            entry(state::LIVE, 0x1000, true),
            entry(state::WRITING, 0x2000, true),
            entry(state::LIVE, 0x3000, false),
            entry(state::FREE, 0x4000, true),
        ]);
        let t = from_region_bytes(&bytes).unwrap().unwrap();
        assert_eq!(t.torn, 2);
        assert_eq!(
            t.live,
            [Allocation {
                addr: 0x1000,
                size: 48,
                requested: 40,
                tid: 77,
                time_ns: 0,
                frames: vec![0x1234, 0x5678],
            }]
        );
        // A frame count beyond the entry's room is torn too.
        let mut e = entry(state::LIVE, 0x1000, true);
        e[entry::FRAME_COUNT / 8] = 999 << 32 | 77;
        e[entry::CHECK / 8] = fmt::check(&e);
        let t = from_region_bytes(&region(&[e])).unwrap().unwrap();
        assert_eq!((t.torn, t.live.len()), (1, 0));
    }

    #[test]
    fn bad_region_headers_are_errors_or_absent() {
        let good = region(&[entry(state::LIVE, 0x1000, true)]);
        // Magic not yet written: a table being set up.
        let mut b = good.clone();
        b[..8].fill(0);
        assert_eq!(from_region_bytes(&b).unwrap(), None);
        // Capacity past the region, version, frames, mean 0, truncation.
        for (off, v) in [(16usize, 8u8), (8, 9), (20, 200), (24, 0)] {
            let mut b = good.clone();
            b[off] = v;
            assert!(from_region_bytes(&b).is_err(), "byte {off} = {v}");
        }
        assert!(from_region_bytes(&good[..100]).is_err());
    }

    #[test]
    fn the_estimator_scales_small_samples_up_and_leaves_large_ones() {
        let m = 512 * 1024;
        // A 1 KiB allocation is sampled with probability ~1/512.
        let e = estimated_bytes(1024, m);
        assert!((e - 524_800.0).abs() < 600.0, "{e}");
        // Far above the mean, sampling is near certain.
        let big = 64 * m;
        assert!((estimated_bytes(big, m) - big as f64).abs() < 1.0);
        assert_eq!(estimated_bytes(100, 1), 100.0);
    }
}
