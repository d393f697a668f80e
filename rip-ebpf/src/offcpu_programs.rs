//! `rip-probe offcpu`: a sched_switch program summing each thread's time
//! off the CPU by user stack, kernel stack and last snap, in the kernel.
//!
//! When a thread of the target leaves the CPU the program notes the time
//! and names where it is (see `rip_ebpf::offcpu` for how a user stack is
//! named without unwinding it here); when the thread gets a CPU again it
//! adds the time off to that name's total in `OFF_TIME`. Nothing goes to
//! user space per switch: user space reads the totals at the end, and the
//! few stack copies of places seen for the first time as it goes.
//!
//! Two builds, as for the other register-reading programs: one with
//! `bpf_task_pt_regs` (5.15 on), one reading the register frame at the top
//! of the kernel stack.

use aya_ebpf::{
    Global,
    bindings::BPF_NOEXIST,
    helpers::{
        bpf_get_current_pid_tgid, bpf_ktime_get_ns, bpf_probe_read_kernel, bpf_probe_read_user,
        generated::{bpf_probe_read_user as probe_read_user_raw, bpf_task_pt_regs},
    },
    macros::{btf_tracepoint, map, raw_tracepoint},
    maps::{HashMap, PerCpuArray, StackTrace},
    programs::{BtfTracePointContext, RawTracePointContext, tracing::StackIdContext},
};
use rip_ebpf::{
    Config,
    offcpu::{
        FIRST_MARK, HASH_SEED, MAX_SLOTS, OffCpuConfig, OffKey, OffStart, OffStats, OffTotal,
        PendingStack, Place, ReturnSlots, STACK_COPY, SnapSlot, finish, mix,
    },
    task_state,
};

use crate::programs::{CONFIG, btf_switch, config, current_task, pt_regs_of};

/// Set by the loader (`EbpfLoader::override_global`).
#[unsafe(no_mangle)]
static OFFCPU: Global<OffCpuConfig> = Global::new(OffCpuConfig {
    min_block_ns: 0,
    kernel_stacks: 0,
    snaps: 0,
});

// Every loader of the object creates every map, so the compiled-in sizes
// are the smallest; `rip-probe offcpu` sizes them for its target. Hash maps
// are preallocated (see `programs::PREALLOC`).

/// Where the return addresses are, by place; written by user space.
#[map]
static OFF_SLOTS: HashMap<Place, ReturnSlots> = HashMap::with_max_entries(1, 0);

/// Stack hashes user space has unwound: no copy is sent for them.
#[map]
static OFF_KNOWN: HashMap<u64, u8> = HashMap::with_max_entries(1, 0);

/// Stack copies waiting for user space, by hash.
#[map]
static OFF_PENDING: HashMap<u64, PendingStack> = HashMap::with_max_entries(1, 0);

/// Switches off not yet ended, by thread id.
#[map]
static OFF_START: HashMap<u32, OffStart> = HashMap::with_max_entries(1, 0);

/// Off-CPU time by key.
#[map]
static OFF_TIME: HashMap<OffKey, OffTotal> = HashMap::with_max_entries(1, 0);

/// Kernel stacks at switches off.
#[map]
static OFF_KSTACKS: StackTrace = StackTrace::with_max_entries(1, 0);

/// Each thread's librip ring slot in the target's memory; written by user
/// space.
#[map]
static OFF_SNAP_SLOTS: HashMap<u32, SnapSlot> = HashMap::with_max_entries(1, 0);

/// Counters.
#[map]
static OFF_STATS: PerCpuArray<OffStats> = PerCpuArray::with_max_entries(1, 0);

/// Room for a stack copy: far beyond the 512-byte BPF stack.
#[map]
static OFF_SCRATCH: PerCpuArray<PendingStack> = PerCpuArray::with_max_entries(1, 0);

/// sched_switch as a raw tracepoint (see the programs module), user
/// registers from `bpf_task_pt_regs`.
#[raw_tracepoint(tracepoint = "sched_switch")]
pub fn offcpu_switch(ctx: RawTracePointContext) -> i32 {
    on_switch::<true>(ctx)
}

/// sched_switch for kernels before 5.15.
#[raw_tracepoint(tracepoint = "sched_switch")]
pub fn offcpu_kstack(ctx: RawTracePointContext) -> i32 {
    on_switch::<false>(ctx)
}

/// sched_switch as a BTF-typed tracepoint (see the programs module's
/// `switch_btf`): the tasks' ids, state and saved user registers by plain
/// loads. Tried first; the raw builds above are the fallback.
#[btf_tracepoint(function = "sched_switch")]
pub fn offcpu_btf(ctx: BtfTracePointContext) -> i32 {
    let opts = OFFCPU.load();
    btf_switch(
        &ctx,
        |tid, state, now| switch_off(&ctx, &opts, tid, state, now, btf_user_frame),
        |tid, now| switch_on(&opts, tid, now),
    );
    0
}

#[inline(always)]
fn on_switch<const HELPER: bool>(ctx: RawTracePointContext) -> i32 {
    let cfg = CONFIG.load();
    let opts = OFFCPU.load();
    // The current task is `prev`: its registers and stack are readable.
    let id = bpf_get_current_pid_tgid();
    let prev_is_target = (id >> 32) as u32 == cfg.target_tgid;
    // Another process's thread gets the CPU: no lookup.
    let next = crate::programs::target_thread(&cfg, ctx.arg(2));
    // Other processes' switches leave without reading the clock.
    if !prev_is_target && next.is_none() {
        return 0;
    }
    // SAFETY: no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    if prev_is_target {
        let state = crate::programs::switch_state(&cfg, &ctx);
        switch_off(&ctx, &opts, id as u32, state, now, || {
            user_frame::<HELPER>(&cfg)
        });
    }
    if let Some(next) = next {
        switch_on(&opts, next, now);
    }
    0
}

#[inline(always)]
fn stats() -> Option<*mut OffStats> {
    OFF_STATS.get_ptr_mut(0)
}

/// A switch off of thread `tid`; `frame` reads the current task's user
/// `ip`, `sp` and `bp` (see [`user_frame`]).
#[inline(always)]
fn switch_off(
    ctx: &impl StackIdContext,
    opts: &OffCpuConfig,
    tid: u32,
    state: u64,
    now: u64,
    frame: impl FnOnce() -> (u64, u64, u64),
) {
    let st = stats();
    if let Some(st) = st {
        // SAFETY: this CPU's value, valid for the program's run.
        unsafe { (*st).switches += 1 };
    }
    // A thread's last switch, as it exits (`X` or `Z`): nothing will wait
    // for it to come back, so no period starts. Left pending, it would be
    // charged from its exit to the window's end. Its entry goes, making
    // room for the threads after it (only its own switches used it).
    if state & (task_state::DEAD | task_state::ZOMBIE) != 0 {
        let _ = OFF_START.remove(tid);
        return;
    }

    let (ip, sp, bp) = frame();
    let hash = if ip == 0 || sp == 0 {
        if let Some(st) = st {
            // SAFETY: as above.
            unsafe { (*st).no_regs += 1 };
        }
        0
    } else {
        stack_hash(ip, sp, bp, tid, st)
    };
    let kstack_id = if opts.kernel_stacks != 0 {
        ctx.get_stackid(&OFF_KSTACKS, 0).unwrap_or(-1) as i32
    } else {
        -1
    };
    let snap = if opts.snaps != 0 { last_snap(tid) } else { 0 };
    let start = OffStart {
        start_ns: now,
        key: OffKey {
            tid,
            kstack_id,
            hash,
            ip,
            snap,
            // `R` (0) or `R+` (the tracepoint's preempted mark, 0x100):
            // runnable, waiting for a CPU rather than for an event.
            preempted: u32::from(state & 0xff == 0),
            _pad: 0,
        },
    };
    match OFF_START.get_ptr_mut(tid) {
        // SAFETY: a map value pointer stays valid for the program's run.
        Some(p) => unsafe { *p = start },
        None => {
            let _ = OFF_START.insert(tid, start, 0);
        }
    }
}

#[inline(always)]
fn switch_on(opts: &OffCpuConfig, tid: u32, now: u64) {
    let Some(p) = OFF_START.get_ptr_mut(tid) else {
        return;
    };
    // SAFETY: a map value pointer stays valid for the program's run; only
    // this thread's switches write its entry, and a thread switches on one
    // CPU at a time.
    let (t0, key) = unsafe { ((*p).start_ns, (*p).key) };
    if t0 == 0 || now < t0 {
        return;
    }
    // SAFETY: as above.
    unsafe { (*p).start_ns = 0 };
    let ns = now - t0;
    let st = stats();
    if ns < opts.min_block_ns {
        if let Some(st) = st {
            // SAFETY: this CPU's value.
            unsafe {
                (*st).short += 1;
                (*st).short_ns += ns;
            }
        }
        return;
    }
    // The key holds the thread id: only this thread's switches touch it,
    // one CPU at a time, so plain adds are exact.
    let summed = match OFF_TIME.get_ptr_mut(key) {
        Some(t) => {
            // SAFETY: as above.
            unsafe {
                (*t).ns += ns;
                (*t).count += 1;
            }
            true
        }
        None => OFF_TIME
            .insert(key, OffTotal { ns, count: 1 }, BPF_NOEXIST as u64)
            .is_ok(),
    };
    if let Some(st) = st {
        // SAFETY: this CPU's value.
        unsafe {
            if summed {
                (*st).summed += 1;
            } else {
                (*st).time_full += 1;
                (*st).time_full_ns += ns;
            }
        }
    }
}

/// The user `ip`, `sp` and `bp` of the current task at its last kernel
/// entry (zeros for a kernel thread or unreadable registers).
#[inline(always)]
pub(crate) fn user_frame<const HELPER: bool>(cfg: &Config) -> (u64, u64, u64) {
    let off = &cfg.regs;
    if off.valid == 0 {
        return (0, 0, 0);
    }
    // SAFETY: the current task is valid for the program's run; the frame
    // comes from the helper or a checked guess, and every read goes
    // through bpf_probe_read_kernel.
    unsafe {
        let regs = pt_regs_of::<HELPER>(current_task::<HELPER>(), cfg);
        if regs.is_null() {
            return (0, 0, 0);
        }
        let rd = |o: u32| bpf_probe_read_kernel(regs.add(o as usize) as *const u64).unwrap_or(0);
        (rd(off.ip), rd(off.sp), rd(off.bp))
    }
}

/// [`user_frame`] in a `tp_btf` program: `bpf_task_pt_regs` returns a
/// BTF-typed pointer, so the three registers are plain loads at offsets
/// the verifier knows (see the programs module's `config!`).
#[inline(always)]
fn btf_user_frame() -> (u64, u64, u64) {
    if config!(regs.valid) == 0 {
        return (0, 0, 0);
    }
    // SAFETY: the current task, as a trusted BTF pointer, is valid for the
    // program's run; the helper returns its saved user registers, typed
    // by BTF, and the verifier checks each load against that type.
    unsafe {
        let regs = bpf_task_pt_regs(current_task::<true>()) as *const u8;
        let rd = |o: u32| core::ptr::read_volatile(regs.add(o as usize).cast::<u64>());
        (
            rd(config!(regs.ip)),
            rd(config!(regs.sp)),
            rd(config!(regs.bp)),
        )
    }
}

/// The name of the current user stack (see `rip_ebpf::offcpu`), sending a
/// copy of it to user space when user space has not seen that name.
#[inline(always)]
fn stack_hash(ip: u64, sp: u64, bp: u64, tid: u32, st: Option<*mut OffStats>) -> u64 {
    let Some(buf) = OFF_SCRATCH.get_ptr_mut(0) else {
        return 0;
    };
    let place = Place { ip, sp };
    // SAFETY: the value is only read during this run.
    let hash = match unsafe { OFF_SLOTS.get(place) } {
        None => finish(mix(mix(mix(HASH_SEED, ip), sp), FIRST_MARK)),
        Some(slots) => {
            let span = if slots.span as usize > STACK_COPY {
                STACK_COPY as u32
            } else {
                slots.span
            };
            let count = slots.count as usize;
            // SAFETY: `buf` is this CPU's scratch value, `span` bytes fit
            // in its `bytes`; the helper checks the user address.
            let ok = unsafe {
                probe_read_user_raw(
                    (&raw mut (*buf).bytes).cast(),
                    span,
                    sp as *const core::ffi::c_void,
                )
            } == 0;
            let mut h = mix(mix(HASH_SEED, ip), sp);
            if ok {
                // SAFETY: a field address, no read.
                let words = unsafe { &raw const (*buf).bytes } as *const u64;
                for i in 0..MAX_SLOTS {
                    if i >= count {
                        break;
                    }
                    let idx = (slots.offsets[i] as usize >> 3) & (STACK_COPY / 8 - 1);
                    // SAFETY: `idx` is masked inside the copy's words.
                    h = mix(h, unsafe { *words.add(idx) });
                }
            }
            let h = finish(h);
            // SAFETY: presence only.
            if unsafe { OFF_KNOWN.get(h) }.is_some() {
                return h;
            }
            h
        }
    };
    send_copy(hash, ip, sp, bp, tid, buf, st);
    hash
}

/// Copies the top of the current stack under `hash` for user space,
/// unless a copy under that hash already waits. Stacks near their top end
/// are shorter than the copy: smaller sizes are tried in turn.
#[inline(always)]
fn send_copy(
    hash: u64,
    ip: u64,
    sp: u64,
    bp: u64,
    tid: u32,
    buf: *mut PendingStack,
    st: Option<*mut OffStats>,
) {
    // SAFETY: presence only.
    if unsafe { OFF_PENDING.get(hash) }.is_some() {
        return;
    }
    // SAFETY: `buf` is this CPU's scratch value; each size fits in
    // `bytes`; the helper checks the user address.
    unsafe {
        (*buf).ip = ip;
        (*buf).sp = sp;
        (*buf).bp = bp;
        (*buf).hash = hash;
        (*buf).tid = tid;
        let dst = (&raw mut (*buf).bytes).cast::<core::ffi::c_void>();
        let src = sp as *const core::ffi::c_void;
        (*buf).len = if probe_read_user_raw(dst, STACK_COPY as u32, src) == 0 {
            STACK_COPY as u32
        } else if probe_read_user_raw(dst, 8192, src) == 0 {
            8192
        } else if probe_read_user_raw(dst, 4096, src) == 0 {
            4096
        } else if probe_read_user_raw(dst, 2048, src) == 0 {
            2048
        } else if probe_read_user_raw(dst, 1024, src) == 0 {
            1024
        } else if probe_read_user_raw(dst, 256, src) == 0 {
            256
        } else {
            0
        };
    }
    // SAFETY: `buf` stays valid for the program's run. Passed by
    // reference: a 16 KiB value does not fit on the 512-byte BPF stack.
    #[allow(clippy::needless_borrows_for_generic_args)]
    let sent = OFF_PENDING
        .insert(hash, unsafe { &*buf }, BPF_NOEXIST as u64)
        .is_ok();
    if let Some(st) = st {
        // SAFETY: this CPU's value.
        unsafe {
            if sent {
                (*st).copies += 1;
            } else {
                (*st).copies_full += 1;
            }
        }
    }
}

/// The address of thread `tid`'s last librip snap, from its ring slot in
/// the target's memory (0: none known, or torn).
#[inline(always)]
fn last_snap(tid: u32) -> u64 {
    // SAFETY: the value is copied out at once.
    let Some(slot) = (unsafe { OFF_SNAP_SLOTS.get(tid) }).copied() else {
        return 0;
    };
    // SAFETY: probe reads check the user address.
    let Ok(seq) = (unsafe { bpf_probe_read_user(slot.seq_addr as *const u64) }) else {
        return 0;
    };
    if seq == 0 {
        return 0;
    }
    let last = seq - 1;
    let at = slot.seq_addr + 8 + (last & slot.mask) * 8;
    // SAFETY: as above.
    let Ok(entry) = (unsafe { bpf_probe_read_user(at as *const u64) }) else {
        return 0;
    };
    // An entry carries the low 16 bits of its sequence number above a
    // 48-bit address (librip's format): a mismatch is a torn or stale
    // entry.
    if entry >> 48 != last & 0xffff {
        return 0;
    }
    entry & ((1 << 48) - 1)
}
