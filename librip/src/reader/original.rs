//! Rings written by the original header-only librip (fastly/librip): no
//! header, one fixed 320-byte slot per thread id, `name[64]` then
//! `rip[32]`, each entry `counter << 56 | address` (an 8-bit counter, a
//! 56-bit address), and `rip_exit()` writes an all-ones entry.
//!
//! The file is as long as the writer's `max_procs` (pid_max by default,
//! 1.3 GB) but sparse: only the extents that hold data are read
//! (`SEEK_DATA`), so the work is bounded by what the file really stores.

use super::{ReadError, source::Source};

/// Bytes of one slot: `char name[64]` and `uintptr_t rip[32]`.
pub const SLOT_SIZE: u64 = 64 + 8 * ENTRIES as u64;
/// Bytes of a slot's name.
pub const NAME_SIZE: usize = 64;
/// Entries per slot.
pub const ENTRIES: usize = 32;
/// What `rip_exit()` stores: `(uintptr_t)0 - 1`.
pub const EXITED: u64 = u64::MAX;
/// Bits of an entry's address.
pub const ADDR_MASK: u64 = (1 << 56) - 1;
/// Slots read per `pread`.
const BATCH: u64 = 1024;

/// A ring of the original librip, as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OriginalRing {
    /// The file's size.
    pub file_size: u64,
    /// Slots the file has room for (`file_size / 320`).
    pub slot_count: u64,
    /// Slots with a name or an entry, by thread id.
    pub slots: Vec<OriginalSlot>,
}

/// One thread's (or coroutine's) slot of an original ring.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OriginalSlot {
    /// Its index: the thread id (or the id given to `rip_init`).
    pub id: u64,
    /// The name given to `rip_init`.
    pub name: String,
    /// `rip_exit()` was called.
    pub exited: bool,
    /// Its last snaps, newest first.
    pub entries: Vec<OriginalEntry>,
}

/// One snap of an original ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OriginalEntry {
    /// The 8-bit counter the writer stored.
    pub counter: u8,
    /// Snaps since the oldest entry kept, from the counters' differences:
    /// increases from oldest to newest.
    pub seq: u64,
    /// The recorded instruction address.
    pub addr: u64,
}

/// Whether a file of `len` bytes without librip's magic can be a ring of
/// the original header: a whole number of slots.
pub fn looks_original(len: u64) -> bool {
    len > 0 && len.is_multiple_of(SLOT_SIZE)
}

pub(crate) fn parse(src: &impl Source) -> Result<OriginalRing, ReadError> {
    let len = src.len();
    if !looks_original(len) {
        return Err(ReadError::NotARing);
    }
    let slot_count = len / SLOT_SIZE;
    let mut slots = Vec::new();
    let mut next = 0u64; // first slot not read yet
    let mut budget = src.allocated().saturating_add(SLOT_SIZE * BATCH);
    for (start, end) in src.data_extents()? {
        let first = (start / SLOT_SIZE).max(next);
        let last = end.div_ceil(SLOT_SIZE).min(slot_count);
        let mut i = first;
        while i < last {
            let n = (last - i).min(BATCH);
            let bytes = n * SLOT_SIZE;
            // Extents come from the file itself: never read more than it holds.
            budget = budget.checked_sub(bytes).ok_or_else(|| {
                ReadError::inconsistent("more data extents than the file's allocated size")
            })?;
            let mut w = vec![0u64; (bytes / 8) as usize];
            src.words(i * SLOT_SIZE, &mut w)?;
            for (k, s) in w.chunks_exact((SLOT_SIZE / 8) as usize).enumerate() {
                if let Some(slot) = decode(i + k as u64, s) {
                    slots.push(slot);
                }
            }
            i += n;
        }
        next = next.max(last);
    }
    Ok(OriginalRing {
        file_size: len,
        slot_count,
        slots,
    })
}

fn decode(id: u64, s: &[u64]) -> Option<OriginalSlot> {
    let mut name = [0u8; NAME_SIZE];
    for (chunk, w) in name.chunks_exact_mut(8).zip(s) {
        chunk.copy_from_slice(&w.to_le_bytes());
    }
    let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(NAME_SIZE)];
    let raw = &s[NAME_SIZE / 8..];
    let exited = raw.contains(&EXITED);
    // In ring order; the writer's index wraps at 32, the counter at 256.
    let ring: Vec<(u8, u64)> = raw
        .iter()
        .filter(|&&e| e != 0 && e != EXITED)
        .map(|&e| ((e >> 56) as u8, e & ADDR_MASK))
        .collect();
    if name.is_empty() && ring.is_empty() && !exited {
        return None;
    }
    // Like read_rip: the first break in the counters' +1 sequence is where
    // the newest entry is followed by the oldest; rotate there.
    let cut = ring
        .windows(2)
        .position(|w| w[1].0 != w[0].0.wrapping_add(1))
        .map_or(0, |i| i + 1);
    let mut seq = 0u64;
    let mut prev: Option<u8> = None;
    let mut entries: Vec<OriginalEntry> = ring[cut..]
        .iter()
        .chain(&ring[..cut])
        .map(|&(counter, addr)| {
            seq = match prev {
                None => u64::from(counter),
                Some(p) => match counter.wrapping_sub(p) {
                    0 => seq + 256,
                    d => seq + u64::from(d),
                },
            };
            prev = Some(counter);
            OriginalEntry { counter, seq, addr }
        })
        .collect();
    entries.reverse();
    Some(OriginalSlot {
        id,
        name: String::from_utf8_lossy(name).into_owned(),
        exited,
        entries,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reader::source::Bytes;

    fn slot(name: &str, entries: &[u64]) -> Vec<u8> {
        let mut v = vec![0u8; SLOT_SIZE as usize];
        v[..name.len()].copy_from_slice(name.as_bytes());
        for (i, e) in entries.iter().enumerate() {
            v[64 + 8 * i..72 + 8 * i].copy_from_slice(&e.to_le_bytes());
        }
        v
    }

    #[test]
    fn wrapped_counters_give_newest_first_and_the_exit_mark() {
        // 40 snaps (counters 0..40) into 32 positions, then rip_exit.
        let mut e = [0u64; 32];
        for c in 0u64..40 {
            e[(c % 32) as usize] = c << 56 | (0x1000 + c);
        }
        e[40 % 32] = EXITED;
        let mut file = slot("", &[]);
        file.extend(slot("lol", &e));
        let ring = parse(&Bytes(&file)).unwrap();
        assert_eq!(ring.slot_count, 2);
        let s = &ring.slots[0];
        assert_eq!((s.id, s.name.as_str(), s.exited), (1, "lol", true));
        let counters: Vec<u8> = s.entries.iter().map(|e| e.counter).collect();
        assert_eq!(counters, (9..40).rev().collect::<Vec<u8>>());
        assert_eq!(s.entries[0].addr, 0x1000 + 39);
    }

    #[test]
    fn counters_wrapping_at_256_keep_increasing_sequence_numbers() {
        let mut e = [0u64; 32];
        for c in 250u64..270 {
            e[(c % 32) as usize] = (c % 256) << 56 | c;
        }
        let ring = parse(&Bytes(&slot("t", &e))).unwrap();
        let s = &ring.slots[0];
        assert_eq!(s.entries.len(), 20);
        assert!(s.entries.windows(2).all(|w| w[0].seq == w[1].seq + 1));
        assert_eq!(s.entries[0].addr, 269);
    }

    #[test]
    fn only_whole_slots() {
        assert!(parse(&Bytes(&[1u8; 321])).is_err());
        assert!(parse(&Bytes(&[])).is_err());
    }
}
