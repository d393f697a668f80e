//! The lean task iterator: one small [`TaskWait`] per thread of the
//! target (its state and the system call it is in, with that call's first
//! argument), for the lock evidence's look at every waiter between a
//! lock's two reads. The full iterator (`task_iter`) walks each thread's
//! kernel stack and reads its clocks and name; this one reads what a
//! futex wait is known by and nothing else, so that a second look at
//! 100,000 waiters costs a fraction of a full pass.
//!
//! Two builds, as for every register-reading program: one calls
//! `bpf_task_pt_regs` (5.15 on), the other finds the register frame at the
//! top of the kernel stack.

use aya_ebpf::{
    bindings::task_struct,
    helpers::{bpf_probe_read_kernel, bpf_probe_read_kernel_buf, generated::bpf_seq_write},
};
use rip_ebpf::{Config, TASK_STACK_DEPTH, TaskWait, UserRegs, pid_ns};

use crate::programs::{CONFIG, IterTaskCtx, bpf_iter_meta, ns_ids, pt_regs_of, user_regs};

/// `sizeof(struct pt_regs)` on x86-64 (21 words), on every kernel.
const PT_REGS_WORDS: usize = 21;

/// Writes [`user_regs`] to `out` from one read of the whole register
/// frame into `scratch` instead of one read per register (each probe read
/// is a helper call: ten of them were a tenth of a task iterator pass at
/// 100,000 threads). The frame goes through `scratch` (the record's
/// kernel-stack words, written after this) because the BPF stack has no
/// room for it. A frame of another size than x86-64's reads the
/// registers one by one.
///
/// # Safety
/// As [`user_regs`]; `out` and `scratch` point to writable memory (the
/// iterator's per-CPU record).
#[inline(always)]
pub(crate) unsafe fn user_regs_at_once<const HELPER: bool>(
    task: *mut task_struct,
    cfg: &Config,
    scratch: *mut [u64; TASK_STACK_DEPTH],
    out: *mut UserRegs,
) {
    let off = &cfg.regs;
    // SAFETY: the caller's contract.
    unsafe {
        if off.size as usize != PT_REGS_WORDS * 8 {
            *out = user_regs::<HELPER>(task, cfg);
            return;
        }
        *out = UserRegs {
            syscall_nr: -1,
            ..UserRegs::default()
        };
        if off.valid == 0 {
            return;
        }
        // The frame pointer comes from the helper or a checked guess (or
        // is null); the read goes through bpf_probe_read_kernel.
        let regs = pt_regs_of::<HELPER>(task, cfg);
        if regs.is_null() {
            return;
        }
        let words = &mut *scratch;
        let bytes =
            core::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), PT_REGS_WORDS * 8);
        if bpf_probe_read_kernel_buf(regs, bytes).is_err() {
            return;
        }
        let rd = |o: u32| {
            let i = (o / 8) as usize;
            if o.is_multiple_of(8) && i < PT_REGS_WORDS {
                words[i]
            } else {
                0
            }
        };
        (*out).syscall_nr = rd(off.orig_ax) as i64;
        (*out).args = [
            rd(off.args[0]),
            rd(off.args[1]),
            rd(off.args[2]),
            rd(off.args[3]),
            rd(off.args[4]),
            rd(off.args[5]),
        ];
        (*out).ip = rd(off.ip);
        (*out).sp = rd(off.sp);
        (*out).bp = rd(off.bp);
    }
}

/// The lean iterator (see the module's documentation).
#[unsafe(no_mangle)]
#[unsafe(link_section = "iter/task")]
pub fn task_waits(ctx: *mut core::ffi::c_void) -> i32 {
    each_wait::<true>(ctx)
}

/// The lean iterator for kernels without `bpf_task_pt_regs`.
#[unsafe(no_mangle)]
#[unsafe(link_section = "iter/task")]
pub fn waits_kstack(ctx: *mut core::ffi::c_void) -> i32 {
    each_wait::<false>(ctx)
}

/// A task an iterator is handed, when it is one of the target's: its
/// `task_struct`, the iterator's output, and its ids (the kernel's and in
/// rip-probe's pid namespace). What both task iterators start with.
pub(crate) struct Visit {
    /// `bpf_iter_meta`: where records are written.
    pub(crate) meta: *mut bpf_iter_meta,
    /// The task (non-null, trusted).
    pub(crate) task: *mut task_struct,
    /// Thread id.
    pub(crate) tid: u32,
    /// Process id.
    pub(crate) tgid: u32,
    /// Thread id in rip-probe's pid namespace.
    pub(crate) ns_tid: u32,
    /// Process id in rip-probe's pid namespace.
    pub(crate) ns_tgid: u32,
}

/// The task of iterator context `ctx`, if it is one of the target's that
/// `cfg` names. Every task of the host is visited (unless the link names
/// the target): the others leave after one read (all of them in FIND
/// mode, whose target is known by its id in our namespace: after the
/// leader's id there).
#[inline(always)]
pub(crate) fn visit(ctx: *mut core::ffi::c_void, cfg: &Config) -> Option<Visit> {
    let ctx = ctx as *const IterTaskCtx;
    // SAFETY: the kernel passes a `bpf_iter__task`; loads of its members
    // are checked by the verifier against the kernel's BTF.
    let (meta, task) = unsafe { ((*ctx).meta, (*ctx).task) };
    let t = &cfg.task;
    if task.is_null() || t.valid == 0 {
        return None;
    }
    let base = task as *const u8;
    // SAFETY: reads go through bpf_probe_read_kernel at BTF offsets.
    let rd32 =
        |o: u32| unsafe { bpf_probe_read_kernel(base.add(o as usize) as *const u32) }.unwrap_or(0);
    // `pid` and `tgid` are neighbours in task_struct: one read for both.
    let (tid, tgid) = if t.tgid == t.pid.wrapping_add(4) {
        // SAFETY: as above.
        let ids = unsafe { bpf_probe_read_kernel(base.add(t.pid as usize) as *const [u32; 2]) }
            .unwrap_or([0, 0]);
        (ids[0], ids[1])
    } else {
        (rd32(t.pid), rd32(t.tgid))
    };
    if cfg.pid_ns != pid_ns::FIND && tgid != cfg.target_tgid {
        return None;
    }
    let (ns_tid, ns_tgid) = match cfg.pid_ns {
        pid_ns::HOST => (tid, tgid),
        pid_ns::RECORD => ns_ids(base, cfg, None),
        pid_ns::FIND => match ns_ids(base, cfg, Some(cfg.target_tgid)) {
            (tid, tgid) if tgid != 0 => (tid, tgid),
            _ => return None,
        },
        _ => return None,
    };
    Some(Visit {
        meta,
        task,
        tid,
        tgid,
        ns_tid,
        ns_tgid,
    })
}

/// Both builds (`HELPER` as in `programs::each_task`).
#[inline(always)]
fn each_wait<const HELPER: bool>(ctx: *mut core::ffi::c_void) -> i32 {
    let cfg = CONFIG.load();
    let Some(Visit {
        meta,
        task,
        tid,
        tgid,
        ns_tid,
        ns_tgid,
    }) = visit(ctx, &cfg)
    else {
        return 0;
    };
    let t = &cfg.task;
    let base = task as *const u8;
    // SAFETY: all reads go through bpf_probe_read_kernel at BTF offsets.
    let rd32 =
        |o: u32| unsafe { bpf_probe_read_kernel(base.add(o as usize) as *const u32) }.unwrap_or(0);
    // SAFETY: as above.
    let rd8 = |o: u32| unsafe { bpf_probe_read_kernel(base.add(o as usize)) }.unwrap_or(0);
    let mut rec = TaskWait {
        tid,
        tgid,
        ns_tid,
        ns_tgid,
        state: rd32(t.state),
        // A byte, as in the full iterator (an int before 7.x).
        on_cpu: u32::from(rd8(t.on_cpu)),
        syscall_nr: -1,
        arg0: 0,
    };
    let off = &cfg.regs;
    if off.valid != 0 {
        // SAFETY: `task` is non-null and trusted (iterator context); the
        // frame pointer comes from the helper or a checked guess, and is
        // only probe-read.
        unsafe {
            let regs = pt_regs_of::<HELPER>(task, &cfg);
            if !regs.is_null() {
                let rd =
                    |o: u32| bpf_probe_read_kernel(regs.add(o as usize) as *const u64).unwrap_or(0);
                // The first argument (di) and the syscall number
                // (orig_ax) are neighbours in x86-64's pt_regs.
                if off.orig_ax == off.args[0].wrapping_add(8) {
                    let two =
                        bpf_probe_read_kernel(regs.add(off.args[0] as usize) as *const [u64; 2])
                            .unwrap_or([0, u64::MAX]);
                    rec.arg0 = two[0];
                    rec.syscall_nr = two[1] as i64;
                } else {
                    rec.syscall_nr = rd(off.orig_ax) as i64;
                    rec.arg0 = rd(off.args[0]);
                }
            }
        }
    }
    // SAFETY: `meta` is the iterator's metadata; `rec` is on the stack and
    // as long as the size given.
    unsafe {
        bpf_seq_write(
            (*meta).seq,
            (&raw const rec).cast(),
            core::mem::size_of::<TaskWait>() as u32,
        );
    }
    0
}
