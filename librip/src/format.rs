//! The ring file layout, shared by the writer and the reader.
//!
//! `docs/FORMAT.md` is the prose specification; every offset here appears
//! there. All integers are little-endian, as written by an x86-64 process.

/// The first eight bytes of every ring file.
pub const MAGIC: [u8; 8] = *b"RIPRING\0";
/// The layout version this crate writes and the newest it reads.
pub const LAYOUT_VERSION: u32 = 1;
/// Written as a native u32: reads back as this value on a same-endian host.
pub const ENDIAN_MARK: u32 = 0x0102_0304;
/// Bytes in a machine word of the writer.
pub const WORD_SIZE: u32 = 8;
/// Bytes in one ring entry.
pub const ENTRY_SIZE: u32 = 8;
/// Bytes before the first slot region: fixed fields, module table, strings.
pub const HEADER_SIZE: u32 = 65536;
/// Regions start on page boundaries so that slots never share a page with the header.
pub const PAGE: u64 = 4096;
/// Ring depth when none is asked for.
pub const DEFAULT_DEPTH: u32 = 32;
/// The largest depth (the sink in `csrc/rip.c` has this many entries).
pub const MAX_DEPTH: u32 = 4096;
/// The largest slot count of either kind.
pub const MAX_SLOTS: u32 = 1 << 24;
/// Bytes of a thread slot before its entries.
pub const THREAD_META_SIZE: u32 = 64;
/// Bytes of a coroutine slot before its entries.
pub const COROUTINE_META_SIZE: u32 = 128;
/// Bytes of a slot's NUL-padded name.
pub const NAME_LEN: usize = 32;
/// Bits of an entry that hold the address; the rest hold the sequence tag.
pub const ADDR_BITS: u32 = 48;
/// Mask of an entry's address bits.
pub const ADDR_MASK: u64 = (1 << ADDR_BITS) - 1;
/// Bytes of the fixed part of the header.
pub const FIXED_HEADER_SIZE: u32 = 256;
/// Bytes of one module table entry.
pub const MODULE_ENTRY_SIZE: u32 = 96;
/// Module table entries the header has room for.
pub const MODULE_CAPACITY: u32 = 256;
/// Where the module table starts.
pub const MODULE_TABLE_OFFSET: u32 = FIXED_HEADER_SIZE;
/// Where the string area (module and executable paths) starts.
pub const STRINGS_OFFSET: u32 = MODULE_TABLE_OFFSET + MODULE_CAPACITY * MODULE_ENTRY_SIZE;
/// Bytes of the string area.
pub const STRINGS_SIZE: u32 = HEADER_SIZE - STRINGS_OFFSET;
/// Bytes reserved for a build-id (GNU build-ids are 20 bytes; some are 16 or 32).
pub const BUILD_ID_MAX: usize = 40;

/// Byte offsets of the fixed header fields.
pub mod hdr {
    /// `[u8; 8]`: [`super::MAGIC`].
    pub const MAGIC: usize = 0;
    /// u32: layout version.
    pub const VERSION: usize = 8;
    /// u32: [`super::ENDIAN_MARK`] in the writer's byte order.
    pub const ENDIAN: usize = 12;
    /// u32: bytes per word (8).
    pub const WORD_SIZE: usize = 16;
    /// u32: bytes of the header area (fixed fields, module table, strings).
    pub const HEADER_SIZE: usize = 20;
    /// u32: bytes per entry (8).
    pub const ENTRY_SIZE: usize = 24;
    /// u32: entries per slot, a power of two.
    pub const DEPTH: usize = 28;
    /// u32: bytes of a thread slot's metadata (the sequence word is its last 8 bytes).
    pub const THREAD_META_SIZE: usize = 32;
    /// u32: bytes of a coroutine slot's metadata.
    pub const COROUTINE_META_SIZE: usize = 36;
    /// u32: bytes per thread slot (meta + depth entries).
    pub const THREAD_SLOT_SIZE: usize = 40;
    /// u32: bytes per coroutine slot.
    pub const COROUTINE_SLOT_SIZE: usize = 44;
    /// u32: thread slots in the file.
    pub const THREAD_SLOTS: usize = 48;
    /// u32: coroutine slots in the file.
    pub const COROUTINE_SLOTS: usize = 52;
    /// u64: file offset of the thread slot region.
    pub const THREAD_REGION: usize = 56;
    /// u64: file offset of the coroutine slot region.
    pub const COROUTINE_REGION: usize = 64;
    /// u64: the file's size.
    pub const FILE_SIZE: usize = 72;
    /// u32, updated live: thread slots ever taken (slots at or above are free).
    pub const THREAD_HIGH_WATER: usize = 80;
    /// u32, updated live: coroutine slots ever taken.
    pub const COROUTINE_HIGH_WATER: usize = 84;
    /// u32: the writer's pid.
    pub const PID: usize = 88;
    /// u32, updated live: [`super::flags`].
    pub const FLAGS: usize = 92;
    /// u64: the writer's start time in clock ticks after boot (/proc/PID/stat field 22).
    pub const PROCESS_START_TICKS: usize = 96;
    /// u64: CLOCK_REALTIME at creation, ns.
    pub const CREATED_REALTIME_NS: usize = 104;
    /// u64: CLOCK_MONOTONIC at creation, ns.
    pub const CREATED_MONOTONIC_NS: usize = 112;
    /// u64, updated live: snaps that went to the sink, as last published.
    pub const DROPPED_SNAPS: usize = 120;
    /// u64: the writer's in-process address of the sink's counter.
    pub const SINK_ADDR: usize = 128;
    /// u32: clock ticks per second (sysconf(_SC_CLK_TCK)).
    pub const CLOCK_TICKS: usize = 136;
    /// u32: file offset of the module table.
    pub const MODULE_TABLE: usize = 140;
    /// u32: module table capacity.
    pub const MODULE_CAPACITY: usize = 144;
    /// u32: bytes per module entry.
    pub const MODULE_ENTRY_SIZE: usize = 148;
    /// u32, updated live: module entries written (published after the entry).
    pub const MODULE_COUNT: usize = 152;
    /// u32: file offset of the string area.
    pub const STRINGS: usize = 156;
    /// u32: bytes of the string area.
    pub const STRINGS_SIZE: usize = 160;
    /// u32: file offset of the executable's path.
    pub const EXE_PATH: usize = 164;
    /// u32: bytes of the executable's path.
    pub const EXE_PATH_LEN: usize = 168;
    /// u32: bytes of the executable's build-id (0: none).
    pub const EXE_BUILD_ID_LEN: usize = 172;
    /// `[u8; 40]`: the executable's build-id.
    pub const EXE_BUILD_ID: usize = 176;
    /// u64: inode of the writer's pid namespace (`/proc/self/ns/pid`);
    /// 0 in files written before it was recorded.
    pub const PID_NS: usize = 216;
    /// u64: inode of the writer's mount namespace (`/proc/self/ns/mnt`); 0: unknown.
    pub const MNT_NS: usize = 224;
    /// u64: file offset of the allocation table's region ([`super::alloc`]);
    /// 0: the ring has none (no sampler, or a writer older than it).
    pub const ALLOC_REGION: usize = 232;
    /// u64: bytes of that region.
    pub const ALLOC_REGION_SIZE: usize = 240;
}

/// The allocation table: the sampled live allocations of the writer, a
/// region of its own after the slots (see `docs/FORMAT.md`, "The
/// allocation table"). The same layout is in `csrc/alloc.h`.
pub mod alloc {
    /// The region's first eight bytes.
    pub const MAGIC: [u8; 8] = *b"RIPALLOC";
    /// The table's own layout version.
    pub const VERSION: u32 = 1;
    /// Bytes of the region header; entry 0 follows it.
    pub const HEADER_SIZE: u32 = 4096;
    /// Bytes per entry.
    pub const ENTRY_SIZE: u32 = 256;
    /// Return addresses an entry holds.
    pub const FRAMES: u32 = 24;
    /// Entries an address may be placed in, from its hash on.
    pub const PROBE: u32 = 64;
    /// Entries of a table when none are asked for.
    pub const DEFAULT_CAPACITY: u32 = 16384;
    /// The most entries a table may have (a power of two).
    pub const MAX_CAPACITY: u32 = 1 << 16;
    /// The sampling mean when none is asked for: 512 KiB, like jemalloc's.
    pub const DEFAULT_MEAN: u64 = 512 * 1024;

    /// Byte offsets of the region header's fields.
    pub mod hdr {
        /// `[u8; 8]`: [`super::MAGIC`], written last.
        pub const MAGIC: usize = 0;
        /// u32: [`super::VERSION`].
        pub const VERSION: usize = 8;
        /// u32: bytes per entry.
        pub const ENTRY_SIZE: usize = 12;
        /// u32: entries (a power of two).
        pub const CAPACITY: usize = 16;
        /// u32: return addresses per entry.
        pub const FRAMES: usize = 20;
        /// u64: the sampling mean in bytes (1: every allocation).
        pub const MEAN: usize = 24;
        /// u32: entries probed from an address's hash.
        pub const PROBE: usize = 32;
        /// u64, live: allocations sampled and recorded.
        pub const SAMPLED: usize = 40;
        /// u64, live: sampled allocations dropped because their entries were taken.
        pub const DROPPED: usize = 48;
        /// u64, live: recorded allocations freed (removed).
        pub const FREED: usize = 56;
        /// u64, live: nonzero once the writer could not reserve the pages
        /// of a zone it was moving to (the file system holding the ring was
        /// full): the samples it then dropped found no room in the file,
        /// not in the table.
        pub const FILE_FULL: usize = 64;
    }

    /// Byte offsets inside an entry.
    pub mod entry {
        /// u64: generation << 2 | [`super::state`].
        pub const STATE: usize = 0;
        /// u64: the address malloc returned.
        pub const ADDR: usize = 8;
        /// u64: usable bytes (`malloc_usable_size`).
        pub const SIZE: usize = 16;
        /// u64: bytes asked for.
        pub const REQUESTED: usize = 24;
        /// u32: the allocating thread's id.
        pub const TID: usize = 32;
        /// u32: return addresses recorded.
        pub const FRAME_COUNT: usize = 36;
        /// u64: CLOCK_MONOTONIC ns of the allocation.
        pub const TIME_NS: usize = 40;
        /// u64: the check word ([`super::check`]).
        pub const CHECK: usize = 48;
        /// `[u64; FRAMES]`: return addresses, innermost (malloc's caller) first.
        pub const FRAMES: usize = 64;
    }

    /// Entry states (the low two bits of the state word).
    pub mod state {
        /// Never used, or freed.
        pub const FREE: u64 = 0;
        /// Being written: a writer stopped here left it torn.
        pub const WRITING: u64 = 1;
        /// A live sampled allocation.
        pub const LIVE: u64 = 2;
    }

    fn mix(mut x: u64) -> u64 {
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        x ^= x >> 33;
        x
    }

    /// The check word of an entry's words (`words[0]` is the live state
    /// word): over words 1 to 7 (the check word itself, word 6, skipped)
    /// and the `frame_count` frames, at most [`FRAMES`]. A torn or reused
    /// entry fails it. `words` holds at least [`ENTRY_SIZE`] / 8 words.
    pub fn check(words: &[u64]) -> u64 {
        let check_word = entry::CHECK / 8;
        let n =
            (words.get(entry::FRAME_COUNT / 8).copied().unwrap_or(0) >> 32).min(u64::from(FRAMES));
        let end = (entry::FRAMES / 8 + n as usize).min(words.len());
        let mut h = words.first().copied().unwrap_or(0) ^ 0x5249_5041;
        for (i, w) in words.iter().enumerate().take(end).skip(1) {
            if i != check_word {
                h = (h ^ w).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                h ^= h >> 32;
            }
        }
        mix(h)
    }

    /// Bytes of a region with `capacity` entries.
    pub const fn region_size(capacity: u32) -> u64 {
        HEADER_SIZE as u64 + capacity as u64 * ENTRY_SIZE as u64
    }
}

/// Bits of the header's flags word.
pub mod flags {
    /// The module table or the string area was full: some modules are missing.
    pub const MODULES_TRUNCATED: u32 = 1;
}

/// Byte offsets inside a slot (both kinds share the first 56 bytes).
pub mod slot {
    /// u32: [`super::state`].
    pub const STATE: usize = 0;
    /// u32: incremented each time the slot is taken again.
    pub const GENERATION: usize = 4;
    /// u64: thread id, or coroutine id.
    pub const ID: usize = 8;
    /// `[u8; 32]`: name, NUL-padded.
    pub const NAME: usize = 16;
    /// u64: CLOCK_MONOTONIC ns when the slot was taken.
    pub const REGISTERED_NS: usize = 48;
    /// Coroutine slots: u64 polls.
    pub const POLLS: usize = 56;
    /// Coroutine slots: u64 CLOCK_MONOTONIC ns when the last poll started.
    pub const LAST_POLL_START_NS: usize = 64;
    /// Coroutine slots: u64 CLOCK_MONOTONIC ns when the last poll ended.
    pub const LAST_POLL_END_NS: usize = 72;
    /// Coroutine slots: u32 tid polling it now (0: idle).
    pub const POLLING_TID: usize = 80;
    /// Coroutine slots: u32 flags: [`super::task_flags`].
    pub const TASK_FLAGS: usize = 84;
    /// Coroutine slots: u64 CLOCK_MONOTONIC ns when the task was created.
    pub const CREATED_NS: usize = 88;
}

/// Bits of a coroutine slot's `TASK_FLAGS`: which API made the coroutine,
/// so a reader can say where it comes from. 0: librip's coroutine API
/// (Rust or C), or a writer older than these bits.
pub mod task_flags {
    /// An async task wrapped by `librip::tokio` (`Traced`, `spawn_traced`).
    pub const TOKIO: u32 = 1;
}

/// Slot states.
pub mod state {
    /// Never taken, or being (re)initialised.
    pub const FREE: u32 = 0;
    /// Owned by a running thread or coroutine.
    pub const LIVE: u32 = 1;
    /// Its owner exited; entries kept for post-mortem reading.
    pub const EXITED: u32 = 2;
}

/// Byte offsets inside a module table entry.
pub mod module {
    /// u64: first address of the executable mapping.
    pub const START: usize = 0;
    /// u64: first address past it.
    pub const END: usize = 8;
    /// u64: file offset mapped at `START`.
    pub const FILE_OFFSET: usize = 16;
    /// u64: load bias (an address minus this is the ELF virtual address).
    pub const LOAD_BIAS: usize = 24;
    /// u32: file offset of the path in the string area.
    pub const PATH: usize = 32;
    /// u32: bytes of the path.
    pub const PATH_LEN: usize = 36;
    /// u32: bytes of the build-id (0: none).
    pub const BUILD_ID_LEN: usize = 40;
    /// u32: [`MAIN_EXE`] and friends.
    pub const FLAGS: usize = 44;
    /// `[u8; 40]`: the build-id.
    pub const BUILD_ID: usize = 48;
    /// Flag: the main executable.
    pub const MAIN_EXE: u32 = 1;
    /// Flag: the vDSO (no file behind it).
    pub const VDSO: u32 = 2;
}

/// The two kinds of slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SlotKind {
    /// An OS thread; its id is the tid.
    Thread,
    /// A coroutine (task); its id is the program's own.
    Coroutine,
}

impl SlotKind {
    /// Bytes of this kind's metadata.
    pub const fn meta_size(self) -> u32 {
        match self {
            SlotKind::Thread => THREAD_META_SIZE,
            SlotKind::Coroutine => COROUTINE_META_SIZE,
        }
    }
}

/// Packs one entry: the low 16 bits of the sequence number above a 48-bit address.
pub const fn encode_entry(seq: u64, addr: u64) -> u64 {
    (seq << ADDR_BITS) | (addr & ADDR_MASK)
}

/// One decoded entry: its full sequence number and the recorded address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The sequence number (0 for a slot's first snap).
    pub seq: u64,
    /// The recorded instruction address.
    pub addr: u64,
}

/// Rebuilds a slot's history from its sequence word and raw entries,
/// oldest first. `raw.len()` is the depth (a power of two). An entry whose
/// tag does not match the sequence number its position implies is stale or
/// never written and is dropped; the entry at `seq` itself (stored just
/// before the writer stopped, without its increment) is kept.
pub fn decode_entries(seq: u64, raw: &[u64]) -> Vec<Entry> {
    const TAG: u64 = (1 << (64 - ADDR_BITS)) - 1;
    let depth = raw.len() as u64;
    if depth == 0 || !depth.is_power_of_two() {
        return Vec::new();
    }
    let entry = |s: u64| -> Option<Entry> {
        let e = raw[(s % depth) as usize];
        (e != 0 && e >> ADDR_BITS == s & TAG).then_some(Entry {
            seq: s,
            addr: e & ADDR_MASK,
        })
    };
    // At most `depth` entries, and no more than were ever snapped (a
    // thread that snapped once is one entry, not room for `depth`).
    let mut out = Vec::with_capacity(
        usize::try_from(seq.saturating_add(1)).map_or(raw.len(), |n| n.min(raw.len())),
    );
    // Position seq % depth holds either seq - depth (the oldest) or, when
    // the writer stopped between its two stores, seq itself (the newest);
    // the other positions hold seq - depth + 1 ..= seq - 1.
    let oldest = seq.checked_sub(depth).and_then(entry);
    out.extend(oldest);
    let first = seq.saturating_sub(depth - 1);
    out.extend((first..seq).filter_map(entry));
    if oldest.is_none() {
        out.extend(entry(seq));
    }
    out
}

/// Sizes and offsets of a ring's slot regions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Entries per slot.
    pub depth: u32,
    /// Thread slots.
    pub thread_slots: u32,
    /// Coroutine slots.
    pub coroutine_slots: u32,
    /// Bytes per thread slot.
    pub thread_slot_size: u32,
    /// Bytes per coroutine slot.
    pub coroutine_slot_size: u32,
    /// File offset of the thread region.
    pub thread_region: u64,
    /// File offset of the coroutine region.
    pub coroutine_region: u64,
    /// The file's size.
    pub file_size: u64,
    /// File offset of the allocation table's region (0: none).
    pub alloc_region: u64,
    /// Entries of the allocation table.
    pub alloc_capacity: u32,
}

impl Layout {
    /// The layout for these counts and depth, or why they are unusable.
    pub fn new(thread_slots: u32, coroutine_slots: u32, depth: u32) -> Result<Layout, String> {
        if !depth.is_power_of_two() || depth > MAX_DEPTH {
            return Err(format!(
                "depth {depth} is not a power of two between 1 and {MAX_DEPTH}"
            ));
        }
        if thread_slots > MAX_SLOTS || coroutine_slots > MAX_SLOTS {
            return Err(format!(
                "at most {MAX_SLOTS} slots of each kind are supported"
            ));
        }
        let thread_slot_size = THREAD_META_SIZE + depth * ENTRY_SIZE;
        let coroutine_slot_size = COROUTINE_META_SIZE + depth * ENTRY_SIZE;
        let thread_region = u64::from(HEADER_SIZE);
        let coroutine_region = (thread_region
            + u64::from(thread_slots) * u64::from(thread_slot_size))
        .next_multiple_of(PAGE);
        let file_size = (coroutine_region
            + u64::from(coroutine_slots) * u64::from(coroutine_slot_size))
        .next_multiple_of(PAGE);
        Ok(Layout {
            depth,
            thread_slots,
            coroutine_slots,
            thread_slot_size,
            coroutine_slot_size,
            thread_region,
            coroutine_region,
            file_size,
            alloc_region: 0,
            alloc_capacity: 0,
        })
    }

    /// This layout with an allocation table of `capacity` entries (a power
    /// of two up to [`alloc::MAX_CAPACITY`]) after the slots.
    pub fn with_alloc_table(mut self, capacity: u32) -> Result<Layout, String> {
        if !capacity.is_power_of_two() || capacity > alloc::MAX_CAPACITY {
            return Err(format!(
                "an allocation table of {capacity} entries: a power of two up to {} is needed",
                alloc::MAX_CAPACITY
            ));
        }
        self.alloc_region = self.file_size;
        self.alloc_capacity = capacity;
        self.file_size = (self.alloc_region + alloc::region_size(capacity)).next_multiple_of(PAGE);
        Ok(self)
    }

    /// Bytes per slot of `kind`.
    pub fn slot_size(&self, kind: SlotKind) -> u32 {
        match kind {
            SlotKind::Thread => self.thread_slot_size,
            SlotKind::Coroutine => self.coroutine_slot_size,
        }
    }

    /// Slots of `kind`.
    pub fn slots(&self, kind: SlotKind) -> u32 {
        match kind {
            SlotKind::Thread => self.thread_slots,
            SlotKind::Coroutine => self.coroutine_slots,
        }
    }

    /// File offset of slot `index` of `kind` (`index` below the count).
    pub fn slot_offset(&self, kind: SlotKind, index: u32) -> u64 {
        let region = match kind {
            SlotKind::Thread => self.thread_region,
            SlotKind::Coroutine => self.coroutine_region,
        };
        region + u64::from(index) * u64::from(self.slot_size(kind))
    }

    /// File offset of slot `index`'s sequence word (the snap cursor's target).
    pub fn seq_offset(&self, kind: SlotKind, index: u32) -> u64 {
        self.slot_offset(kind, index) + u64::from(kind.meta_size()) - 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(depth: usize, snaps: u64) -> Vec<u64> {
        let mut raw = vec![0; depth];
        for s in 0..snaps {
            raw[(s % depth as u64) as usize] = encode_entry(s, 0x1000 + s);
        }
        raw
    }

    #[test]
    fn decodes_partial_and_wrapped_rings_in_order() {
        let got = decode_entries(5, &ring(8, 5));
        assert_eq!(
            got.iter().map(|e| e.seq).collect::<Vec<_>>(),
            [0, 1, 2, 3, 4]
        );
        let got = decode_entries(21, &ring(8, 21));
        assert_eq!(
            got.iter().map(|e| e.seq).collect::<Vec<_>>(),
            (13..21).collect::<Vec<_>>()
        );
        assert!(got.iter().all(|e| e.addr == 0x1000 + e.seq));
    }

    #[test]
    fn keeps_the_entry_stored_before_its_increment() {
        // The writer stored entry 21 and died before seq became 22.
        let got = decode_entries(21, &ring(8, 22));
        assert_eq!(
            got.iter().map(|e| e.seq).collect::<Vec<_>>(),
            (14..22).collect::<Vec<_>>()
        );
    }

    #[test]
    fn drops_entries_whose_tag_does_not_fit() {
        let mut raw = ring(8, 21);
        raw[3] = encode_entry(1234, 0x42);
        let got = decode_entries(21, &raw);
        assert_eq!(got.len(), 7);
        assert!(got.iter().all(|e| e.addr != 0x42));
        // Tags wrap at 2^16: sequence numbers past it still decode.
        let big = (1 << 16) * 3 + 5;
        let mut raw = vec![0; 4];
        for s in big - 4..big {
            raw[(s % 4) as usize] = encode_entry(s, s);
        }
        let got = decode_entries(big, &raw);
        assert_eq!(
            got.iter().map(|e| e.seq).collect::<Vec<_>>(),
            (big - 4..big).collect::<Vec<_>>()
        );
    }

    #[test]
    fn hostile_sequence_words_do_not_panic() {
        for seq in [0, 1, u64::MAX, u64::MAX - 3, 1 << 63] {
            decode_entries(seq, &[u64::MAX; 8]);
            decode_entries(seq, &[1; 3]);
        }
    }

    #[test]
    fn layout_matches_the_documented_sizes() {
        let l = Layout::new(1000, 10, 32).unwrap();
        assert_eq!(l.thread_slot_size, 320);
        assert_eq!(l.coroutine_slot_size, 384);
        assert_eq!(l.thread_region, 65536);
        assert_eq!(l.coroutine_region % PAGE, 0);
        assert_eq!(l.seq_offset(SlotKind::Thread, 1), 65536 + 320 + 56);
        assert_eq!(
            l.seq_offset(SlotKind::Coroutine, 0),
            l.coroutine_region + 120
        );
        assert!(Layout::new(1, 1, 48).is_err());
        assert!(Layout::new(1, 1, MAX_DEPTH * 2).is_err());
        assert_eq!(STRINGS_OFFSET as usize % 8, 0);
        assert!(hdr::EXE_BUILD_ID + BUILD_ID_MAX <= FIXED_HEADER_SIZE as usize);
    }
}
