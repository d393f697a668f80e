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
    helpers::{bpf_probe_read_kernel, generated::bpf_seq_write},
};
use rip_ebpf::{TaskWait, pid_ns};

use crate::programs::{CONFIG, IterTaskCtx, ns_ids, pt_regs_of};

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

/// Both builds (`HELPER` as in `programs::each_task`).
#[inline(always)]
fn each_wait<const HELPER: bool>(ctx: *mut core::ffi::c_void) -> i32 {
    let ctx = ctx as *const IterTaskCtx;
    // SAFETY: the kernel passes a `bpf_iter__task`; loads of its members
    // are checked by the verifier against the kernel's BTF.
    let (meta, task) = unsafe { ((*ctx).meta, (*ctx).task) };
    if task.is_null() {
        return 0;
    }
    let cfg = CONFIG.load();
    let t = &cfg.task;
    if t.valid == 0 {
        return 0;
    }
    let base = task as *const u8;
    // SAFETY: all reads go through bpf_probe_read_kernel at BTF offsets.
    let rd32 =
        |o: u32| unsafe { bpf_probe_read_kernel(base.add(o as usize) as *const u32) }.unwrap_or(0);
    // SAFETY: as above.
    let rd8 = |o: u32| unsafe { bpf_probe_read_kernel(base.add(o as usize)) }.unwrap_or(0);
    // Every task of the host is visited: the others leave after one read,
    // as in the full iterator.
    let tgid = rd32(t.tgid);
    if cfg.pid_ns != pid_ns::FIND && tgid != cfg.target_tgid {
        return 0;
    }
    let tid = rd32(t.pid);
    let (ns_tid, ns_tgid) = match cfg.pid_ns {
        pid_ns::HOST => (tid, tgid),
        pid_ns::RECORD => ns_ids(base, &cfg, None),
        pid_ns::FIND => match ns_ids(base, &cfg, Some(cfg.target_tgid)) {
            (tid, tgid) if tgid != 0 => (tid, tgid),
            _ => return 0,
        },
        _ => return 0,
    };
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
            let regs = pt_regs_of::<HELPER>(task as *mut task_struct, &cfg);
            if !regs.is_null() {
                let rd =
                    |o: u32| bpf_probe_read_kernel(regs.add(o as usize) as *const u64).unwrap_or(0);
                rec.syscall_nr = rd(off.orig_ax) as i64;
                rec.arg0 = rd(off.args[0]);
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
