//! Types shared by the off-CPU program (`offcpu_switch`) and
//! `rip-probe offcpu`.
//!
//! Off-CPU time is summed in the kernel by (thread, user stack, kernel
//! stack, last snap): no event crosses to user space per switch. The
//! difficulty is the user stack: programs built without frame pointers
//! can only be unwound with their CFI, which the kernel does not have. So
//! the program does not unwind; it names a stack by a hash of the words
//! that unwinding would read as return addresses, and user space, which
//! has the CFI, teaches it where those words are:
//!
//! 1. A thread leaves the CPU with user registers `ip`, `sp`. If user
//!    space has not yet said where the return addresses lie for this
//!    (`ip`, `sp`) ([`OFF_SLOTS`](names::OFF_SLOTS)), or the stack's hash
//!    is one it has not yet unwound ([`OFF_KNOWN`](names::OFF_KNOWN)), the
//!    program copies the top of the stack ([`PendingStack`]) into
//!    [`OFF_PENDING`](names::OFF_PENDING), once per hash.
//! 2. User space drains that map every tenth of a second, unwinds each copy
//!    with framehop, and writes back the return-address positions it found
//!    for the (`ip`, `sp`) ([`ReturnSlots`]) and the hash it unwound.
//! 3. From then on the hash of that place is [`hash_words`] of `ip`, `sp`
//!    and the words at those positions: two calls of `sleep` from different
//!    callers differ in a return address at a known position, so they
//!    never share a hash, and a loop counter in a local variable (which
//!    changes at every pass) does not make every switch a new stack.
//!
//! Until user space has answered, a place's time is kept under the hash of
//! (`ip`, `sp`) alone ([`first_hash`]), attributed to the stack of the copy
//! that was sent for it.

/// Return-address positions hashed per stack: deeper frames do not tell
/// stacks apart.
pub const MAX_SLOTS: usize = 64;

/// Bytes of user stack copied for a stack seen for the first time (and
/// the most the hash reads): frames beyond are not unwound.
pub const STACK_COPY: usize = 16 << 10;

/// Copies waiting for user space at once; more are retried at the next
/// switch at the same place.
pub const MAX_PENDING: u32 = 64;

/// Seed of [`hash_words`].
pub const HASH_SEED: u64 = 0xcbf2_9ce4_8422_2325;

/// Mixed into [`first_hash`] so that it never equals a [`hash_words`].
pub const FIRST_MARK: u64 = 0x9e37_79b9_7f4a_7c15;

/// One step of the stack hash (FNV-1a over 64-bit words, written without
/// loops so the BPF program and user space share it).
#[inline(always)]
pub fn mix(h: u64, word: u64) -> u64 {
    (h ^ word).wrapping_mul(0x0000_0100_0000_01b3)
}

/// The final avalanche (`splitmix64`'s), so that hashes differing in their
/// last word differ in every bit.
#[inline(always)]
pub fn finish(mut h: u64) -> u64 {
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// The hash of a stack whose return addresses are `words` (in the order of
/// the [`ReturnSlots`] that located them), entered at `ip` with `sp`.
pub fn hash_words(ip: u64, sp: u64, words: impl IntoIterator<Item = u64>) -> u64 {
    let mut h = mix(mix(HASH_SEED, ip), sp);
    for w in words {
        h = mix(h, w);
    }
    finish(h)
}

/// The hash a place has before user space has located its return
/// addresses.
pub fn first_hash(ip: u64, sp: u64) -> u64 {
    finish(mix(mix(mix(HASH_SEED, ip), sp), FIRST_MARK))
}

/// Options of one `offcpu` run, written into the `OFFCPU` global.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OffCpuConfig {
    /// Off-CPU periods shorter than this (ns) are counted, not summed.
    pub min_block_ns: u64,
    /// 1: take each switch's kernel stack (`bpf_get_stackid`), 0: not.
    pub kernel_stacks: u32,
    /// 1: read each thread's last librip snap (see
    /// [`OFF_SNAP_SLOTS`](names::OFF_SNAP_SLOTS)), 0: not.
    pub snaps: u32,
}

/// Key of [`OFF_SLOTS`](names::OFF_SLOTS): where a thread entered the
/// kernel.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "user", derive(zerocopy::FromBytes))]
pub struct Place {
    /// User instruction pointer.
    pub ip: u64,
    /// User stack pointer.
    pub sp: u64,
}

/// Where the return addresses of the stack at a [`Place`] are, as byte
/// offsets from its `sp`, innermost first: the words the hash reads.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReturnSlots {
    /// Offsets used in `offsets`.
    pub count: u32,
    /// Bytes from `sp` to read to cover them all (the last offset + 8).
    pub span: u32,
    /// Byte offsets from `sp`, each a multiple of 8 below [`STACK_COPY`].
    pub offsets: [u32; MAX_SLOTS],
}

impl Default for ReturnSlots {
    fn default() -> Self {
        ReturnSlots {
            count: 0,
            span: 0,
            offsets: [0; MAX_SLOTS],
        }
    }
}

/// A copy of the top of a user stack, for user space to unwind: the
/// registers at the switch and `len` bytes from `sp` up.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(zerocopy::FromBytes))]
pub struct PendingStack {
    /// User instruction pointer.
    pub ip: u64,
    /// User stack pointer.
    pub sp: u64,
    /// User `rbp` (a frame pointer walk's start where there is no CFI).
    pub bp: u64,
    /// The hash the program gave this stack: the time it spent off CPU is
    /// summed under it.
    pub hash: u64,
    /// Bytes of `bytes` copied (0: the stack could not be read).
    pub len: u32,
    /// The thread it was copied from.
    pub tid: u32,
    /// The stack, from `sp` up.
    pub bytes: [u8; STACK_COPY],
}

/// A thread's switch off the CPU, kept until it returns
/// ([`OFF_START`](names::OFF_START), by thread id).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OffStart {
    /// CLOCK_MONOTONIC ns of the switch off (0: none pending).
    pub start_ns: u64,
    /// The rest of the key the time will be summed under.
    pub key: OffKey,
}

/// What off-CPU time is summed by ([`OFF_TIME`](names::OFF_TIME)).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "user", derive(zerocopy::FromBytes))]
pub struct OffKey {
    /// Thread id.
    pub tid: u32,
    /// Kernel stack id in `OFF_KSTACKS` (<0: not taken).
    pub kstack_id: i32,
    /// The user stack's hash (see the module's documentation).
    pub hash: u64,
    /// User instruction pointer at the switch: the innermost frame when the
    /// hash cannot be resolved.
    pub ip: u64,
    /// The address of the thread's last librip snap (0: none or not read).
    pub snap: u64,
    /// 1: the thread was preempted (runnable, waiting for a CPU);
    /// 0: it blocked (slept).
    pub preempted: u32,
    /// Explicit padding, always 0.
    pub _pad: u32,
}

/// Off-CPU time under one [`OffKey`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(zerocopy::FromBytes))]
pub struct OffTotal {
    /// Nanoseconds off CPU.
    pub ns: u64,
    /// Off-CPU periods.
    pub count: u64,
}

/// Where a thread's librip ring slot is in the target's memory
/// ([`OFF_SNAP_SLOTS`](names::OFF_SNAP_SLOTS), by thread id).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SnapSlot {
    /// Address of the slot's sequence word; its entries follow it.
    pub seq_addr: u64,
    /// Entries in the slot, minus one (the depth is a power of two).
    pub mask: u64,
}

/// Per-CPU counters of the program, summed by user space.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OffStats {
    /// Switches of the target's threads off a CPU.
    pub switches: u64,
    /// Off-CPU periods summed (at least the minimum).
    pub summed: u64,
    /// Off-CPU periods shorter than the minimum.
    pub short: u64,
    /// Their time, ns.
    pub short_ns: u64,
    /// Stack copies sent to user space.
    pub copies: u64,
    /// Stack copies that found the pending map full (retried later).
    pub copies_full: u64,
    /// Periods not summed because `OFF_TIME` was full.
    pub time_full: u64,
    /// Their time, ns.
    pub time_full_ns: u64,
    /// Switches whose user registers could not be read (0 regs).
    pub no_regs: u64,
}

impl OffStats {
    /// Adds `other` (another CPU's counters) to `self`.
    pub fn merge(&mut self, other: &OffStats) {
        self.switches += other.switches;
        self.summed += other.summed;
        self.short += other.short;
        self.short_ns += other.short_ns;
        self.copies += other.copies;
        self.copies_full += other.copies_full;
        self.time_full += other.time_full;
        self.time_full_ns += other.time_full_ns;
        self.no_regs += other.no_regs;
    }
}

// Padded by hand: no implicit padding.
const _: () = {
    assert!(core::mem::size_of::<OffKey>() == 40);
    assert!(core::mem::size_of::<OffStart>() == 48);
    assert!(core::mem::size_of::<ReturnSlots>() == 8 + 4 * MAX_SLOTS);
    assert!(core::mem::size_of::<PendingStack>() == 40 + STACK_COPY);
    assert!(STACK_COPY.is_power_of_two());
};

/// Names of the off-CPU program and its maps.
pub mod names {
    /// sched_switch, reading user registers with `bpf_task_pt_regs`.
    pub const OFFCPU_SWITCH: &str = "offcpu_switch";
    /// The same for kernels before 5.15 (registers from the top of the
    /// kernel stack).
    pub const OFFCPU_SWITCH_KSTACK: &str = "offcpu_kstack";
    /// The same as a BTF-typed tracepoint (`tp_btf`): tried first, the two
    /// above where the kernel refuses it.
    pub const OFFCPU_SWITCH_BTF: &str = "offcpu_btf";
    /// The options global, [`super::OffCpuConfig`].
    pub const OFFCPU: &str = "OFFCPU";
    /// `HashMap<Place, ReturnSlots>`, written by user space.
    pub const OFF_SLOTS: &str = "OFF_SLOTS";
    /// `HashMap<u64, u8>`: the hashes user space has unwound.
    pub const OFF_KNOWN: &str = "OFF_KNOWN";
    /// `HashMap<u64, PendingStack>`: copies for user space, by hash.
    pub const OFF_PENDING: &str = "OFF_PENDING";
    /// `HashMap<u32, OffStart>`: switches off not yet ended, by tid.
    pub const OFF_START: &str = "OFF_START";
    /// `HashMap<OffKey, OffTotal>`: the sums.
    pub const OFF_TIME: &str = "OFF_TIME";
    /// `StackTraceMap`: kernel stacks.
    pub const OFF_KSTACKS: &str = "OFF_KSTACKS";
    /// `HashMap<u32, SnapSlot>`, written by user space.
    pub const OFF_SNAP_SLOTS: &str = "OFF_SNAP_SLOTS";
    /// `PerCpuArray<OffStats>` of one entry.
    pub const OFF_STATS: &str = "OFF_STATS";
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: #[repr(C)] structs of integers with explicit padding: every
    // bit pattern is a valid value.
    unsafe impl aya::Pod for super::OffCpuConfig {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Place {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::ReturnSlots {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::PendingStack {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::OffKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::OffTotal {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::SnapSlot {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::OffStats {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::OffStart {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_first_hash_is_no_stack_hash() {
        assert_ne!(first_hash(1, 2), hash_words(1, 2, []));
        assert_ne!(hash_words(1, 2, [3, 4]), hash_words(1, 2, [4, 3]));
    }
}
