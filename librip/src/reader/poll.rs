//! Following a live ring: the snaps taken since the last look.
//!
//! A [`Poller`] keeps, for each used slot, the owner it saw (generation
//! and id) and the sequence word it read. Each [`Poller::poll`] reads the
//! high-water words and every used slot's metadata, and the entries of a
//! slot only when its sequence word moved (or its owner changed): a slot
//! that did not snap costs one small `pread`, never a copy of its entries.
//! What a poll returns was counted by the sequence word after the previous
//! poll read it and before this one did, so a caller that notes the time
//! around each poll knows when each snap was taken to within two polls.
//!
//! The file is hostile as everywhere in this reader: it is read with
//! `pread` into private buffers, never mapped; the layout was checked
//! once by the full parse, counts read since are held to it, and each
//! entry is kept only when its tag matches the sequence number it should
//! hold (an entry overwritten before the poll read it is counted, not
//! guessed).

use std::path::{Path, PathBuf};

use super::{ReadError, RegularFile, RingFile, parse::Region, source::Source};
use crate::format::{Entry, SlotKind, decode_entries, hdr, slot, state};

/// What a poll found new in one slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fresh {
    /// Thread or coroutine slot.
    pub kind: SlotKind,
    /// Index in its region.
    pub index: u32,
    /// The owner's thread id (in the writer's pid namespace) or coroutine
    /// id.
    pub id: u64,
    /// The owner's generation of the slot.
    pub generation: u32,
    /// The slot changed owners (or was taken) since the last poll: its
    /// snaps are all the new owner's that the slot still holds.
    pub new_owner: bool,
    /// The snaps the sequence word counted since the last poll that the
    /// slot still held, oldest first.
    pub snaps: Vec<Entry>,
    /// Snaps it counted since the last poll whose entries were already
    /// overwritten by later ones (the owner snapped more than the depth
    /// between two polls). Known only for an owner seen before: 0 for a
    /// new one.
    pub overwritten: u64,
}

/// What the poller knows of one slot from its last read.
#[derive(Clone, Copy, Debug, Default)]
struct Mark {
    /// Read live or exited (not free, not being set up).
    known: bool,
    generation: u32,
    id: u64,
    /// Its sequence word.
    seq: u64,
}

/// A live ring followed by its sequence words.
pub struct Poller {
    src: super::source::FileSource,
    path: PathBuf,
    depth: usize,
    regions: Vec<Region>,
    /// Per region, per used slot.
    marks: Vec<Vec<Mark>>,
    /// `pread` calls made so far.
    reads: u64,
}

impl std::fmt::Debug for Poller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Poller")
            .field("path", &self.path)
            .field("depth", &self.depth)
            .field("reads", &self.reads)
            .finish_non_exhaustive()
    }
}

impl Poller {
    /// Reads the ring in `file` (as [`RingFile::read`] does: `path` names
    /// it in errors) and takes the first look: what its slots hold now is
    /// the baseline, never returned by [`Poller::poll`].
    pub fn new(file: RegularFile, path: &Path) -> Result<(Poller, RingFile), ReadError> {
        let owner = file.uid;
        let src = super::file_source(file);
        let mut ring = super::parse::parse(&src).map_err(|e| e.at(path))?;
        ring.owner = owner;
        let regions: Vec<Region> = ring.snapshot.regions.iter().map(|(r, _)| *r).collect();
        let mut p = Poller {
            src,
            path: path.to_path_buf(),
            depth: ring.header.depth as usize,
            marks: vec![Vec::new(); regions.len()],
            regions,
            reads: 0,
        };
        p.look(true)?;
        Ok((p, ring))
    }

    /// The snaps counted since the last look, by slot (slots with none
    /// are left out).
    pub fn poll(&mut self) -> Result<Vec<Fresh>, ReadError> {
        self.look(false)
    }

    /// `pread` calls made so far (the first look's included, not the
    /// full parse's).
    pub fn reads(&self) -> u64 {
        self.reads
    }

    fn read(&mut self, off: u64, out: &mut [u64]) -> Result<(), ReadError> {
        self.reads += 1;
        self.src.words(off, out).map_err(|e| e.at(&self.path))
    }

    fn look(&mut self, baseline: bool) -> Result<Vec<Fresh>, ReadError> {
        // Both high-water words share one aligned word.
        let mut hw = [0u64; 1];
        self.read(hdr::THREAD_HIGH_WATER as u64, &mut hw)?;
        let mut out = Vec::new();
        for ri in 0..self.regions.len() {
            let r = self.regions[ri];
            let used = match r.kind {
                SlotKind::Thread => hw[0] as u32,
                SlotKind::Coroutine => (hw[0] >> 32) as u32,
            };
            if used > r.slots {
                return Err(ReadError::inconsistent(format!(
                    "{used} {} slots used of {}",
                    kind_name(r.kind),
                    r.slots
                ))
                .at(&self.path));
            }
            // The high water never goes down; a file that says it did
            // keeps what was seen of the slots above it.
            let marks = &mut self.marks[ri];
            if marks.len() < used as usize {
                marks.resize(used as usize, Mark::default());
            }
            for i in 0..used {
                if let Some(f) = self.slot(ri, i, baseline)? {
                    out.push(f);
                }
            }
        }
        Ok(out)
    }

    /// Reads slot `index` of region `ri`: its new snaps, if any.
    fn slot(&mut self, ri: usize, index: u32, baseline: bool) -> Result<Option<Fresh>, ReadError> {
        let r = self.regions[ri];
        let off = r.offset + r.slot_size * u64::from(index);
        let meta_words = (r.meta_size / 8) as usize;
        let mut meta = vec![0u64; meta_words];
        self.read(off, &mut meta)?;
        let head = meta[slot::STATE / 8];
        let (st, generation) = (head as u32, (head >> 32) as u32);
        let id = meta[slot::ID / 8];
        let seq = meta[meta_words - 1];
        let mark = self.marks[ri][index as usize];
        if !matches!(st, state::LIVE | state::EXITED) {
            // Free, being set up for a new owner, or not a state at all:
            // whoever owns it next is new.
            self.marks[ri][index as usize].known = false;
            return Ok(None);
        }
        let same = mark.known && mark.generation == generation && mark.id == id && seq >= mark.seq;
        if same && seq == mark.seq {
            return Ok(None);
        }
        let now = Mark {
            known: true,
            generation,
            id,
            seq,
        };
        if baseline {
            self.marks[ri][index as usize] = now;
            return Ok(None);
        }
        let mut raw = vec![0u64; self.depth];
        self.read(off + r.meta_size, &mut raw)?;
        // The owner must be the one whose sequence word was read: a slot
        // handed to another thread meanwhile holds a mix of both.
        let mut again = [0u64; 1];
        self.read(off, &mut again)?;
        if again[0] != head {
            self.marks[ri][index as usize].known = false;
            return Ok(None);
        }
        self.marks[ri][index as usize] = now;
        let from = same.then_some(mark.seq);
        // Entries the sequence word counted (below it): an entry at `seq`
        // is being written and is counted at the next poll.
        let snaps: Vec<Entry> = decode_entries(seq, &raw)
            .into_iter()
            .filter(|e| e.seq < seq && from.is_none_or(|f| e.seq >= f))
            .collect();
        let overwritten = from.map_or(0, |f| (seq - f).saturating_sub(snaps.len() as u64));
        if snaps.is_empty() && overwritten == 0 {
            return Ok(None);
        }
        Ok(Some(Fresh {
            kind: r.kind,
            index,
            id,
            generation,
            new_owner: from.is_none(),
            snaps,
            overwritten,
        }))
    }
}

fn kind_name(k: SlotKind) -> &'static str {
    match k {
        SlotKind::Thread => "thread",
        SlotKind::Coroutine => "coroutine",
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::FileExt;

    use super::*;
    use crate::format::{ADDR_BITS, ADDR_MASK};
    use crate::reader::Follow;

    /// The compact real ring (fuzz seed): depth 32, thread slots at 1024
    /// and 1344 (64 bytes of metadata, sequence words 6 and 10), one
    /// coroutine slot at 1664.
    const COMPACT: &[u8] = include_bytes!("../../../fuzz/corpus/reader/seed-compact");
    const SLOT0: u64 = 1024;
    const SLOT1: u64 = 1344;
    const META: u64 = 64;
    const DEPTH: u64 = 32;

    /// A copy of the seed in a file of its own, written as a writer would.
    struct Ring {
        path: PathBuf,
        file: std::fs::File,
    }

    impl Ring {
        fn new(tag: &str) -> Ring {
            let path =
                std::env::temp_dir().join(format!("librip-poll-{tag}-{}.ring", std::process::id()));
            std::fs::write(&path, COMPACT).unwrap();
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .unwrap();
            Ring { path, file }
        }

        fn poller(&self) -> Poller {
            let f = RegularFile::open(&self.path, Follow::No).unwrap();
            Poller::new(f, &self.path).unwrap().0
        }

        fn word(&self, off: u64) -> u64 {
            let mut b = [0u8; 8];
            self.file.read_at(&mut b, off).unwrap();
            u64::from_le_bytes(b)
        }

        fn set(&self, off: u64, v: u64) {
            self.file.write_at(&v.to_le_bytes(), off).unwrap();
        }

        /// `n` snaps into the slot at `slot`, as `snap` stores them: the
        /// entry tagged with its sequence number, then the word counted.
        fn snap(&self, slot: u64, n: u64, addr: u64) {
            for _ in 0..n {
                let seq = self.word(slot + META - 8);
                let e = (seq << ADDR_BITS) | (addr & ADDR_MASK);
                self.set(slot + META + 8 * (seq % DEPTH), e);
                self.set(slot + META - 8, seq + 1);
            }
        }
    }

    impl Drop for Ring {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.path);
        }
    }

    fn seqs(f: &Fresh) -> Vec<u64> {
        f.snaps.iter().map(|e| e.seq).collect()
    }

    /// What the first look saw is not new; each poll returns exactly the
    /// snaps counted since the one before, read from the slots that moved.
    #[test]
    fn a_poll_returns_the_snaps_counted_since_the_last() {
        let r = Ring::new("counted");
        let mut p = r.poller();
        let first = p.reads();
        assert_eq!(p.poll().unwrap(), []);
        // A poll of three unchanged slots: the high-water word and one
        // read of each slot's metadata, no entries.
        assert_eq!(p.reads() - first, 1 + 3);
        r.snap(SLOT0, 3, 0x1234);
        // A snap being written (entry stored, word not yet counted) waits
        // for the next poll.
        r.set(SLOT1 + META + 8 * (10 % DEPTH), (10 << ADDR_BITS) | 0x99);
        let got = p.poll().unwrap();
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(
            (got[0].kind, got[0].index, got[0].id),
            (SlotKind::Thread, 0, 15933)
        );
        assert_eq!(seqs(&got[0]), [6, 7, 8]);
        assert!(got[0].snaps.iter().all(|e| e.addr == 0x1234));
        assert!(!got[0].new_owner);
        assert_eq!(got[0].overwritten, 0);
        r.set(SLOT1 + META - 8, 11);
        let got = p.poll().unwrap();
        assert_eq!((got.len(), got[0].index), (1, 1));
        assert_eq!(seqs(&got[0]), [10]);
        assert_eq!(got[0].snaps[0].addr, 0x99);
        assert_eq!(p.poll().unwrap(), []);
    }

    /// More snaps than the depth between two polls: the ones still held
    /// are returned, the others counted.
    #[test]
    fn snaps_overwritten_before_a_poll_are_counted() {
        let r = Ring::new("overwritten");
        let mut p = r.poller();
        r.snap(SLOT0, DEPTH + 5, 0x10);
        let got = p.poll().unwrap();
        assert_eq!(got[0].snaps.len() as u64, DEPTH);
        assert_eq!(got[0].overwritten, 5);
        assert_eq!(got[0].snaps[0].seq, 6 + 5);
    }

    /// A slot taken by another thread since the last poll: its snaps are
    /// the new owner's, all of them; a slot being set up is left alone.
    #[test]
    fn a_slot_that_changed_owners_is_read_whole() {
        let r = Ring::new("owners");
        let mut p = r.poller();
        // Being set up: FREE.
        r.set(SLOT0, 1 << 32);
        assert_eq!(p.poll().unwrap(), []);
        for i in 0..DEPTH {
            r.set(SLOT0 + META + 8 * i, 0);
        }
        r.set(SLOT0 + 8, 4242);
        r.set(SLOT0 + META - 8, 0);
        r.set(SLOT0, (2 << 32) | u64::from(state::LIVE));
        r.snap(SLOT0, 2, 0x77);
        let got = p.poll().unwrap();
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!((got[0].id, got[0].generation), (4242, 2));
        assert!(got[0].new_owner);
        assert_eq!(seqs(&got[0]), [0, 1]);
    }

    /// A high-water word past the slots the layout has is an error, not a
    /// read past the region.
    #[test]
    fn a_high_water_past_the_slots_is_refused() {
        let r = Ring::new("highwater");
        let mut p = r.poller();
        r.set(hdr::THREAD_HIGH_WATER as u64, (1 << 32) | 3);
        assert!(matches!(p.poll(), Err(ReadError::Inconsistent(_))));
    }
}
