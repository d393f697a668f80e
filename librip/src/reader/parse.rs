//! Copying a ring into private memory and checking it, then decoding
//! slots from the private copy.

use std::{ffi::OsStr, os::unix::ffi::OsStrExt, path::PathBuf};

use super::{Header, Module, ReadError, RingFile, Slot, SlotState, TaskStats, source::Source};
use crate::format::{
    self, BUILD_ID_MAX, ENDIAN_MARK, FIXED_HEADER_SIZE, LAYOUT_VERSION, MAGIC, NAME_LEN, SlotKind,
    decode_entries, hdr, module, slot, state,
};

/// The largest header a reader accepts.
const MAX_HEADER: u64 = 1 << 24;
/// The largest depth a reader accepts: the writer's own limit.
const MAX_DEPTH: u32 = format::MAX_DEPTH;
/// The most slots of one kind a reader accepts: the writer's own limit.
const MAX_SLOTS: u32 = format::MAX_SLOTS;
/// The largest slot metadata a reader accepts.
const MAX_META: u32 = 4096;
/// Attempts at a consistent copy of a slot the writer keeps changing.
const SETTLE_TRIES: usize = 4;
/// Bytes a ring may need beyond what its file has allocated: the header
/// area may be partly holes (an unused module table copied with `cp`),
/// and the last slot page may be partly past the end of the allocation.
const ALLOCATION_SLACK: u64 = 2 * format::PAGE;

/// Why a file without librip's magic cannot be read as a ring: a ring
/// being created (the O_CREAT fallback writes the magic last, after the
/// rest of the header), a ring of the original header-only librip (whole
/// 320-byte slots, and slot 0, thread id 0, never used), or neither.
fn not_ours(src: &impl Source, magic: [u8; 8]) -> Result<ReadError, ReadError> {
    let len = src.len();
    if super::original::looks_original(len) {
        let mut slot0 = vec![0u64; (super::original::SLOT_SIZE / 8) as usize];
        src.words(0, &mut slot0)?;
        let header_started = slot0[1] != 0;
        if magic != [0; 8] || !header_started {
            return Ok(ReadError::OriginalFormat);
        }
    }
    Ok(if magic == [0; 8] {
        ReadError::Incomplete
    } else {
        ReadError::NotARing
    })
}

/// Little-endian fields of a private copy.
struct View<'a>(&'a [u64]);

impl View<'_> {
    fn u64(&self, off: usize) -> u64 {
        self.0[off / 8]
    }

    fn u32(&self, off: usize) -> u32 {
        (self.0[off / 8] >> (8 * (off % 8))) as u32
    }

    fn bytes(&self, off: usize, len: usize) -> Vec<u8> {
        (off..off + len)
            .map(|i| (self.0[i / 8] >> (8 * (i % 8))) as u8)
            .collect()
    }
}

fn words_for(bytes: u64) -> usize {
    bytes.div_ceil(8) as usize
}

fn copy(src: &impl Source, off: u64, bytes: u64) -> Result<Vec<u64>, ReadError> {
    let mut v = vec![0u64; words_for(bytes)];
    src.words(off, &mut v)?;
    Ok(v)
}

fn bad(why: impl Into<String>) -> ReadError {
    ReadError::inconsistent(why)
}

/// Where a region is and what its slots look like.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Region {
    pub(crate) kind: SlotKind,
    pub(crate) offset: u64,
    pub(crate) slot_size: u64,
    pub(crate) meta_size: u64,
    pub(crate) slots: u32,
    pub(crate) used: u32,
}

/// The checked copy of a ring's used slots.
#[derive(Debug)]
pub(crate) struct Snapshot {
    depth: usize,
    pub(crate) regions: Vec<(Region, Vec<u64>)>,
}

pub(crate) fn parse(src: &impl Source) -> Result<RingFile, ReadError> {
    let len = src.len();
    if len < 8 {
        return Err(if len == 0 {
            ReadError::Incomplete
        } else {
            ReadError::NotARing
        });
    }
    let magic = copy(src, 0, 8)?[0].to_le_bytes();
    if magic != MAGIC {
        return Err(not_ours(src, magic)?);
    }
    let fixed = u64::from(FIXED_HEADER_SIZE);
    if len < fixed {
        return Err(ReadError::Truncated { needed: fixed, len });
    }
    let f = copy(src, 0, fixed)?;
    let f = View(&f);
    let version = f.u32(hdr::VERSION);
    if version > LAYOUT_VERSION {
        return Err(ReadError::VersionTooNew {
            found: version,
            supported: LAYOUT_VERSION,
        });
    }
    if version == 0 {
        return Err(bad("layout version 0"));
    }
    match f.u32(hdr::ENDIAN) {
        ENDIAN_MARK => {}
        m if m == ENDIAN_MARK.swap_bytes() => {
            return Err(bad(
                "written big-endian; this reader reads little-endian rings",
            ));
        }
        m => return Err(bad(format!("endianness marker {m:#x}"))),
    }
    if f.u32(hdr::WORD_SIZE) != format::WORD_SIZE {
        return Err(bad(format!(
            "word size {}, expected 8",
            f.u32(hdr::WORD_SIZE)
        )));
    }
    let header_size = u64::from(f.u32(hdr::HEADER_SIZE));
    if header_size < fixed || header_size % 8 != 0 || header_size > MAX_HEADER {
        return Err(bad(format!("header size {header_size}")));
    }
    let file_size = f.u64(hdr::FILE_SIZE);
    if file_size < header_size {
        return Err(bad(format!(
            "file size {file_size} below header size {header_size}"
        )));
    }
    if len < file_size {
        return Err(ReadError::Truncated {
            needed: file_size,
            len,
        });
    }
    if f.u32(hdr::ENTRY_SIZE) != format::ENTRY_SIZE {
        return Err(bad(format!(
            "entry size {}, expected 8",
            f.u32(hdr::ENTRY_SIZE)
        )));
    }
    let depth = f.u32(hdr::DEPTH);
    if !depth.is_power_of_two() || depth > MAX_DEPTH {
        return Err(bad(format!(
            "depth {depth} is not a power of two up to {MAX_DEPTH}"
        )));
    }
    let regions = [
        region(&f, SlotKind::Thread, depth, header_size, file_size)?,
        region(&f, SlotKind::Coroutine, depth, header_size, file_size)?,
    ];
    let [t, c] = regions;
    let (t_end, c_end) = (
        t.offset + t.slot_size * u64::from(t.slots),
        c.offset + c.slot_size * u64::from(c.slots),
    );
    if t.slots > 0 && c.slots > 0 && t.offset < c_end && c.offset < t_end {
        return Err(bad("the thread and coroutine regions overlap"));
    }

    // Total work is bounded by what the file really holds: a sparse file
    // claiming gigabytes of used slots is refused before anything is
    // allocated for them.
    let alloc_region = f.u64(hdr::ALLOC_REGION);
    let alloc_size = if alloc_region == 0 {
        0
    } else {
        f.u64(hdr::ALLOC_REGION_SIZE)
    };
    // Of the allocation table, only its region header: how much of the
    // table a writer reserves up front is its own choice (librip's has
    // changed), the rest is reserved as sampling reaches it, and holes
    // read as free entries. Reading the entries is bounded by the largest
    // table a reader accepts, a chunk at a time (reader::alloc).
    let alloc_held = alloc_size.min(u64::from(format::alloc::HEADER_SIZE));
    let claimed = regions
        .iter()
        .try_fold(header_size.checked_add(alloc_held), |acc, r| {
            let acc = acc?;
            Some(
                r.slot_size
                    .checked_mul(u64::from(r.used))
                    .and_then(|b| b.checked_add(acc)),
            )
        })
        .flatten()
        .ok_or_else(|| bad("used slots past 2^64 bytes"))?;
    let held = src
        .allocated()
        .saturating_add(header_size + ALLOCATION_SLACK);
    if claimed > held {
        return Err(bad(format!(
            "its header claims {claimed} bytes of header and used slots, but the file holds only {} bytes",
            src.allocated()
        )));
    }
    let h = copy(src, 0, header_size)?;
    let h = View(&h);
    let header = header_fields(&h, header_size as usize, depth, &t, &c)?;
    let modules = module_table(&h, header_size as usize)?;
    let snapshot = Snapshot {
        depth: depth as usize,
        regions: regions
            .into_iter()
            .map(|r| copy_region(src, r).map(|w| (r, w)))
            .collect::<Result<_, _>>()?,
    };
    let allocations = if alloc_region == 0 {
        None
    } else {
        let slots_end = t_end.max(c_end).max(header_size);
        super::alloc::read(src, alloc_region, alloc_size, slots_end, file_size)?
    };
    Ok(RingFile {
        owner: 0,
        header,
        modules,
        snapshot,
        allocations,
    })
}

fn region(
    f: &View<'_>,
    kind: SlotKind,
    depth: u32,
    header_size: u64,
    file_size: u64,
) -> Result<Region, ReadError> {
    let (meta, size, slots, offset, used, min_meta) = match kind {
        SlotKind::Thread => (
            hdr::THREAD_META_SIZE,
            hdr::THREAD_SLOT_SIZE,
            hdr::THREAD_SLOTS,
            hdr::THREAD_REGION,
            hdr::THREAD_HIGH_WATER,
            slot::REGISTERED_NS + 16,
        ),
        SlotKind::Coroutine => (
            hdr::COROUTINE_META_SIZE,
            hdr::COROUTINE_SLOT_SIZE,
            hdr::COROUTINE_SLOTS,
            hdr::COROUTINE_REGION,
            hdr::COROUTINE_HIGH_WATER,
            slot::CREATED_NS + 16,
        ),
    };
    let name = match kind {
        SlotKind::Thread => "thread",
        SlotKind::Coroutine => "coroutine",
    };
    let meta_size = f.u32(meta);
    if meta_size < min_meta as u32 || !meta_size.is_multiple_of(8) || meta_size > MAX_META {
        return Err(bad(format!("{name} slot metadata size {meta_size}")));
    }
    let slot_size = f.u32(size);
    if u64::from(slot_size) != u64::from(meta_size) + 8 * u64::from(depth) {
        return Err(bad(format!(
            "{name} slot size {slot_size} is not {meta_size} + 8 x depth {depth}"
        )));
    }
    let r = Region {
        kind,
        offset: f.u64(offset),
        slot_size: u64::from(slot_size),
        meta_size: u64::from(meta_size),
        slots: f.u32(slots),
        used: f.u32(used),
    };
    if r.slots > MAX_SLOTS {
        return Err(bad(format!(
            "{} {name} slots, more than librip's limit of {MAX_SLOTS}",
            r.slots
        )));
    }
    if r.used > r.slots {
        return Err(bad(format!("{} {name} slots used of {}", r.used, r.slots)));
    }
    let end = r
        .slot_size
        .checked_mul(u64::from(r.slots))
        .and_then(|b| b.checked_add(r.offset));
    if r.offset < header_size || !r.offset.is_multiple_of(8) || end.is_none_or(|e| e > file_size) {
        return Err(bad(format!(
            "{name} region at {} ({} slots of {}) does not fit between the header and the end of the file",
            r.offset, r.slots, r.slot_size
        )));
    }
    Ok(r)
}

/// `len` bytes at `off` of the header, if they lie inside it.
fn header_bytes(
    h: &View<'_>,
    size: usize,
    off: u32,
    len: u32,
    what: &str,
) -> Result<Vec<u8>, ReadError> {
    let (off, len) = (off as usize, len as usize);
    if off.checked_add(len).is_none_or(|e| e > size) {
        return Err(bad(format!(
            "{what} at {off}+{len} lies outside the {size}-byte header"
        )));
    }
    Ok(h.bytes(off, len))
}

fn build_id(h: &View<'_>, off: usize, len: u32, what: &str) -> Result<Option<Vec<u8>>, ReadError> {
    match len as usize {
        0 => Ok(None),
        n if n <= BUILD_ID_MAX => Ok(Some(h.bytes(off, n))),
        n => Err(bad(format!("{what} build-id of {n} bytes"))),
    }
}

fn path(bytes: &[u8]) -> PathBuf {
    PathBuf::from(OsStr::from_bytes(bytes))
}

fn header_fields(
    h: &View<'_>,
    size: usize,
    depth: u32,
    t: &Region,
    c: &Region,
) -> Result<Header, ReadError> {
    let exe = header_bytes(
        h,
        size,
        h.u32(hdr::EXE_PATH),
        h.u32(hdr::EXE_PATH_LEN),
        "executable path",
    )?;
    Ok(Header {
        version: h.u32(hdr::VERSION),
        pid: h.u32(hdr::PID),
        process_start_ticks: h.u64(hdr::PROCESS_START_TICKS),
        clock_ticks_per_sec: h.u32(hdr::CLOCK_TICKS),
        exe: path(&exe),
        build_id: build_id(
            h,
            hdr::EXE_BUILD_ID,
            h.u32(hdr::EXE_BUILD_ID_LEN),
            "executable",
        )?,
        created_realtime_ns: h.u64(hdr::CREATED_REALTIME_NS),
        created_monotonic_ns: h.u64(hdr::CREATED_MONOTONIC_NS),
        depth,
        thread_slots: t.slots,
        coroutine_slots: c.slots,
        thread_high_water: t.used,
        coroutine_high_water: c.used,
        dropped_snaps: h.u64(hdr::DROPPED_SNAPS),
        sink_addr: h.u64(hdr::SINK_ADDR),
        modules_truncated: h.u32(hdr::FLAGS) & format::flags::MODULES_TRUNCATED != 0,
        pid_ns: h.u64(hdr::PID_NS),
        mnt_ns: h.u64(hdr::MNT_NS),
    })
}

fn module_table(h: &View<'_>, size: usize) -> Result<Vec<Module>, ReadError> {
    let (off, cap, esize, count) = (
        h.u32(hdr::MODULE_TABLE) as usize,
        h.u32(hdr::MODULE_CAPACITY) as usize,
        h.u32(hdr::MODULE_ENTRY_SIZE) as usize,
        h.u32(hdr::MODULE_COUNT) as usize,
    );
    if count > cap {
        return Err(bad(format!("{count} modules in a table of {cap}")));
    }
    if count == 0 {
        return Ok(Vec::new());
    }
    let table_end = esize.checked_mul(cap).and_then(|b| b.checked_add(off));
    if esize < module::BUILD_ID + BUILD_ID_MAX
        || esize % 8 != 0
        || off % 8 != 0
        || table_end.is_none_or(|e| e > size)
    {
        return Err(bad(format!(
            "module table at {off}: {cap} entries of {esize} bytes"
        )));
    }
    (0..count)
        .map(|i| {
            let e = off + i * esize;
            let flags = h.u32(e + module::FLAGS);
            let p = header_bytes(
                h,
                size,
                h.u32(e + module::PATH),
                h.u32(e + module::PATH_LEN),
                "module path",
            )?;
            Ok(Module {
                path: path(&p),
                start: h.u64(e + module::START),
                end: h.u64(e + module::END),
                file_offset: h.u64(e + module::FILE_OFFSET),
                load_bias: h.u64(e + module::LOAD_BIAS),
                build_id: build_id(
                    h,
                    e + module::BUILD_ID,
                    h.u32(e + module::BUILD_ID_LEN),
                    "module",
                )?,
                is_main: flags & module::MAIN_EXE != 0,
                is_vdso: flags & module::VDSO != 0,
            })
        })
        .collect()
}

/// Copies the used slots, re-copying any slot whose state, generation or
/// sequence word changed during the copy (a live writer), then checks states.
///
/// Whether a slot changed is seen by reading the region again, a piece
/// at a time, and comparing each slot's words with its copy: one read per
/// piece, not two per slot (100,000 slots were 200,000 system calls).
/// Only the slots that moved are read again one by one.
fn copy_region(src: &impl Source, r: Region) -> Result<Vec<u64>, ReadError> {
    /// Slots compared per read of the region's second look.
    const PIECE: usize = 64;
    let slot_words = words_for(r.slot_size);
    let bytes = r.slot_size * u64::from(r.used);
    let mut w = copy(src, r.offset, bytes)?;
    let seq_word = (r.meta_size / 8 - 1) as usize;
    let used = r.used as usize;
    let mut again = vec![0u64; PIECE.min(used) * slot_words];
    for first in (0..used).step_by(PIECE) {
        let n = PIECE.min(used - first);
        let look = &mut again[..n * slot_words];
        src.words(r.offset + (first * slot_words * 8) as u64, look)?;
        for (k, now) in look.chunks_exact(slot_words).enumerate() {
            let i = first + k;
            let s = &mut w[i * slot_words..(i + 1) * slot_words];
            if now[0] != s[0] || now[seq_word] != s[seq_word] {
                settle_slot(src, r.offset + (i * slot_words * 8) as u64, s, seq_word)?;
            }
        }
    }
    for i in 0..used {
        let st = View(&w[i * slot_words..]).u32(slot::STATE);
        if st > state::EXITED {
            return Err(bad(
                format!("{:?} slot {i} has state {st}", r.kind).to_lowercase()
            ));
        }
    }
    Ok(w)
}

/// Copies the slot at `off` into `s` until its head (state, generation)
/// and sequence word (`s[seq_word]`) read the same after the copy as in
/// it, at most [`SETTLE_TRIES`] times.
fn settle_slot(
    src: &impl Source,
    off: u64,
    s: &mut [u64],
    seq_word: usize,
) -> Result<(), ReadError> {
    let mut probe = [0u64; 1];
    for _ in 0..SETTLE_TRIES {
        src.words(off, s)?;
        src.words(off, &mut probe)?;
        let head = probe[0];
        src.words(off + 8 * seq_word as u64, &mut probe)?;
        if head == s[0] && probe[0] == s[seq_word] {
            return Ok(());
        }
    }
    // Still changing after the last copy. A moving sequence word is a
    // busy snapper, whose entries their tags check; a moving head (state,
    // generation) is a slot changing owners, whose copy may mix two
    // owners: leave it out as if free.
    src.words(off, &mut probe)?;
    if probe[0] != s[0] {
        s[0] = 0;
    }
    Ok(())
}

impl Snapshot {
    pub(crate) fn slots(&self) -> impl Iterator<Item = Slot> + '_ {
        self.regions.iter().flat_map(move |(r, w)| {
            let n = words_for(r.slot_size);
            w.chunks_exact(n)
                .enumerate()
                .filter_map(move |(i, s)| self.decode(r, i as u32, s))
        })
    }

    fn decode(&self, r: &Region, index: u32, s: &[u64]) -> Option<Slot> {
        let v = View(s);
        let state = match v.u32(slot::STATE) {
            state::LIVE => SlotState::Live,
            state::EXITED => SlotState::Exited,
            _ => return None,
        };
        let mut name = [0u8; NAME_LEN];
        for (chunk, w) in name.chunks_exact_mut(8).zip(&s[slot::NAME / 8..]) {
            chunk.copy_from_slice(&w.to_le_bytes());
        }
        let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(NAME_LEN)];
        let meta_words = (r.meta_size / 8) as usize;
        let snaps = s[meta_words - 1];
        let task = (r.kind == SlotKind::Coroutine).then(|| TaskStats {
            polls: v.u64(slot::POLLS),
            last_poll_start_ns: v.u64(slot::LAST_POLL_START_NS),
            last_poll_end_ns: v.u64(slot::LAST_POLL_END_NS),
            polling_tid: v.u32(slot::POLLING_TID),
            created_ns: v.u64(slot::CREATED_NS),
            flags: v.u32(slot::TASK_FLAGS),
        });
        Some(Slot {
            index,
            kind: r.kind,
            state,
            id: v.u64(slot::ID),
            generation: v.u32(slot::GENERATION),
            name: String::from_utf8_lossy(name).into_owned(),
            registered_ns: v.u64(slot::REGISTERED_NS),
            snaps,
            entries: decode_entries(snaps, &s[meta_words..meta_words + self.depth]),
            task,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;
    use crate::reader::source::Bytes;

    /// A compact real ring (fuzz seed): a 1 KiB header, two thread slots,
    /// one coroutine slot at 1664.
    const COMPACT: &[u8] = include_bytes!("../../../fuzz/corpus/reader/seed-compact");
    const COROUTINE: u64 = 1664;

    /// The compact ring with one word of the coroutine slot changing
    /// before every copy that covers it, as a writer running alongside
    /// would: each read sees a new value.
    struct Changing {
        bytes: Vec<u8>,
        word: u64,
        /// Added to the word at each read, times the reads so far.
        step: u64,
        reads: Cell<u64>,
    }

    fn changing(word: u64, step: u64) -> Changing {
        Changing {
            bytes: COMPACT.to_vec(),
            word,
            step,
            reads: Cell::new(0),
        }
    }

    impl Source for Changing {
        fn len(&self) -> u64 {
            self.bytes.len() as u64
        }

        fn words(&self, off: u64, out: &mut [u64]) -> Result<(), ReadError> {
            Bytes(&self.bytes).words(off, out)?;
            let at = self.word;
            if (off..off + 8 * out.len() as u64).contains(&at) {
                self.reads.set(self.reads.get() + 1);
                out[((at - off) / 8) as usize] += self.step * self.reads.get();
            }
            Ok(())
        }
    }

    fn coroutines(src: &Changing) -> Vec<Slot> {
        let ring = parse(src).unwrap();
        ring.slots()
            .filter(|s| s.kind == SlotKind::Coroutine)
            .collect()
    }

    #[test]
    fn a_slot_that_keeps_changing_owners_is_left_out() {
        let steady = changing(COROUTINE, 0);
        assert_eq!(coroutines(&steady).len(), 1, "the seed has a coroutine");
        // The generation (upper half of the head word) moves at each read.
        let churning = changing(COROUTINE + slot::STATE as u64, 1 << 32);
        assert!(coroutines(&churning).is_empty());
        assert!(churning.reads.get() > SETTLE_TRIES as u64);
    }

    #[test]
    fn a_busy_snapper_is_kept() {
        let seq = COROUTINE + u64::from(format::COROUTINE_META_SIZE) - 8;
        let busy = changing(seq, 1);
        let got = coroutines(&busy);
        assert_eq!(got.len(), 1, "kept, its entries checked by their tags");
        assert!(busy.reads.get() > SETTLE_TRIES as u64);
        assert!(got[0].snaps > 7, "the sequence word as last copied");
    }
}
