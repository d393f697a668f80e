//! Futex contention of one process (`rip-probe locks`): the syscalls
//! tracepoints of futex(2) and futex_waitv(2), filtered in the kernel to
//! the target's thread group. A wait's entry is remembered per thread; its
//! exit adds the wait's duration to the lock's totals, log2 histogram and
//! the waiting thread's totals. A wake that woke someone counts the woken
//! threads under the lock and the waker's user stack. Everything stays in
//! hash maps that user space reads once, at the end of the window.
//!
//! Only tracepoints, hash and array maps, `bpf_get_stackid`,
//! `bpf_probe_read_user` (5.5) and, in the build for kernels that have it,
//! `bpf_task_pt_regs` (5.15): the older build finds the user registers at
//! the top of the kernel stack, as the sched_switch program does.

use aya_ebpf::{
    Global,
    bindings::{BPF_F_USER_STACK, BPF_NOEXIST},
    helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns, bpf_probe_read_user},
    macros::{map, tracepoint},
    maps::{HashMap, PerCpuArray, StackTrace},
    programs::{TracePointContext, tracing::StackIdContext},
};
use rip_ebpf::{
    contention::{
        HIST_BUCKETS, LockConfig, LockStat, PendingFutex, WAKER_STACK_WORDS, WaiterKey, WaiterStat,
        WakerKey, WakerStat, log2_bucket,
    },
    futex_ops::{self, FUTEX_PRIVATE_FLAG, FUTEX_UNLOCK_PI, FUTEX_WAIT, is_wait, is_wake},
};

use crate::programs::{CONFIG, current_task, user_regs};

/// Set by the loader (`EbpfLoader::override_global`).
#[unsafe(no_mangle)]
static LOCK_CONFIG: Global<LockConfig> = Global::new(LockConfig {
    target_tgid: 0,
    uaddr_off: 0,
    op_off: 0,
    val_off: 0,
    ret_off: 0,
    waiters_off: 0,
});

/// The maps are preallocated (see `programs::PREALLOC`) and sized by the
/// loader; one entry here keeps the object cheap for loaders that do not
/// count contention.
const UNSIZED: u32 = 1;

/// The futex call each thread is in.
#[map]
static FUTEX_PENDING: HashMap<u32, PendingFutex> = HashMap::with_max_entries(UNSIZED, 0);

/// Per futex word.
#[map]
static LOCK_STATS: HashMap<u64, LockStat> = HashMap::with_max_entries(UNSIZED, 0);

/// Per (futex word, waiting thread).
#[map]
static LOCK_WAITERS: HashMap<WaiterKey, WaiterStat> = HashMap::with_max_entries(UNSIZED, 0);

/// Per (futex word, waker's user stack).
#[map]
static LOCK_WAKERS: HashMap<WakerKey, WakerStat> = HashMap::with_max_entries(UNSIZED, 0);

/// Wakers' user stacks.
#[map]
static USER_STACKS: StackTrace = StackTrace::with_max_entries(UNSIZED, 0);

/// A zeroed [`LockStat`] to insert from: it does not fit on the BPF stack.
#[map]
static LOCK_SCRATCH: PerCpuArray<LockStat> = PerCpuArray::with_max_entries(1, 0);

/// What futex_waitv waits are recorded as: a private FUTEX_WAIT.
const WAITV_AS_OP: u32 = FUTEX_WAIT | FUTEX_PRIVATE_FLAG;
/// `-EAGAIN`: the word changed before the waiter could sleep.
const EAGAIN: i64 = -11;

/// The calling thread's id, when it belongs to the target.
#[inline(always)]
fn target_tid(cfg: &LockConfig) -> Option<u32> {
    let id = bpf_get_current_pid_tgid();
    ((id >> 32) as u32 == cfg.target_tgid).then_some(id as u32)
}

/// syscalls:sys_enter_futex: remembers the thread's wait or wake.
#[tracepoint(category = "syscalls", name = "sys_enter_futex")]
pub fn futex_enter(ctx: TracePointContext) -> u32 {
    let cfg = LOCK_CONFIG.load();
    let Some(tid) = target_tid(&cfg) else {
        return 0;
    };
    // SAFETY: offsets come from the tracepoint's format file.
    let (uaddr, op, val) = unsafe {
        (
            ctx.read_at::<u64>(cfg.uaddr_off as usize).unwrap_or(0),
            ctx.read_at::<u64>(cfg.op_off as usize).unwrap_or(0) as u32,
            ctx.read_at::<u64>(cfg.val_off as usize).unwrap_or(0) as u32,
        )
    };
    let cmd = futex_ops::cmd(op);
    if is_wait(cmd) || is_wake(cmd) {
        pend(tid, uaddr, op, val);
    }
    0
}

/// syscalls:sys_enter_futex_waitv: a wait on the first futex of the
/// vector (`struct futex_waitv { u64 val; u64 uaddr; u32 flags; u32
/// reserved; }`).
#[tracepoint(category = "syscalls", name = "sys_enter_futex_waitv")]
pub fn futex_waitv_enter(ctx: TracePointContext) -> u32 {
    let cfg = LOCK_CONFIG.load();
    let Some(tid) = target_tid(&cfg) else {
        return 0;
    };
    // SAFETY: the offset comes from the tracepoint's format file; the
    // vector is read with a fault-tolerant user read.
    let first = unsafe {
        let waiters = ctx.read_at::<u64>(cfg.waiters_off as usize).unwrap_or(0);
        bpf_probe_read_user(waiters as *const [u64; 2])
    };
    if let Ok([val, uaddr]) = first {
        pend(tid, uaddr, WAITV_AS_OP, val as u32);
    }
    0
}

#[inline(always)]
fn pend(tid: u32, uaddr: u64, op: u32, val: u32) {
    let p = PendingFutex {
        uaddr,
        // SAFETY: no preconditions.
        start_ns: unsafe { bpf_ktime_get_ns() },
        op,
        val,
    };
    let _ = FUTEX_PENDING.insert(tid, p, 0);
}

/// syscalls:sys_exit_futex and sys_exit_futex_waitv.
#[tracepoint(category = "syscalls", name = "sys_exit_futex")]
pub fn futex_exit(ctx: TracePointContext) -> u32 {
    on_exit::<true>(ctx)
}

/// The same for kernels without `bpf_task_pt_regs` (before 5.15).
#[tracepoint(category = "syscalls", name = "sys_exit_futex")]
pub fn futex_exit_ks(ctx: TracePointContext) -> u32 {
    on_exit::<false>(ctx)
}

#[inline(always)]
fn on_exit<const HELPER: bool>(ctx: TracePointContext) -> u32 {
    let cfg = LOCK_CONFIG.load();
    let Some(tid) = target_tid(&cfg) else {
        return 0;
    };
    // SAFETY: a map value pointer stays valid for the program's run.
    let Some(p) = FUTEX_PENDING.get_ptr(tid).map(|p| unsafe { *p }) else {
        return 0;
    };
    let _ = FUTEX_PENDING.remove(tid);
    // SAFETY: the offset comes from the tracepoint's format file.
    let ret = unsafe { ctx.read_at::<i64>(cfg.ret_off as usize) }.unwrap_or(0);
    let cmd = futex_ops::cmd(p.op);
    if is_wait(cmd) {
        if ret != EAGAIN {
            // SAFETY: no preconditions.
            let ns = unsafe { bpf_ktime_get_ns() }.saturating_sub(p.start_ns);
            waited(tid, &p, ns);
        }
    } else {
        // UNLOCK_PI returns 0 and wakes the top waiter: user space calls
        // it only when the word says there are waiters.
        let woken = if cmd == FUTEX_UNLOCK_PI && ret == 0 {
            1
        } else {
            ret
        };
        if woken > 0 {
            woke::<HELPER>(&ctx, tid, p.uaddr, woken as u64);
        }
    }
    0
}

/// A wait of `ns` on `p.uaddr` by `tid` ended.
#[inline(always)]
fn waited(tid: u32, p: &PendingFutex, ns: u64) {
    let mut stat = LOCK_STATS.get_ptr_mut(p.uaddr);
    if stat.is_none() {
        if let Some(zero) = LOCK_SCRATCH.get_ptr(0) {
            // SAFETY: a per-CPU array value, valid for the program's run.
            // Passed by reference: the value is too large for the BPF stack.
            #[allow(clippy::needless_borrows_for_generic_args)]
            let _ = LOCK_STATS.insert(p.uaddr, unsafe { &*zero }, BPF_NOEXIST as u64);
        }
        stat = LOCK_STATS.get_ptr_mut(p.uaddr);
    }
    if let Some(s) = stat {
        let b = log2_bucket(ns);
        // SAFETY: a map value pointer stays valid for the program's run;
        // concurrent updates from other CPUs may lose a count, never
        // corrupt memory.
        unsafe {
            (*s).waits += 1;
            (*s).total_ns += ns;
            if ns > (*s).max_ns {
                (*s).max_ns = ns;
            }
            (*s).op = p.op;
            (*s).val = p.val;
            if b < HIST_BUCKETS {
                (*s).hist[b] += 1;
            }
        }
    }
    let key = WaiterKey {
        uaddr: p.uaddr,
        tid,
        _pad: 0,
    };
    match LOCK_WAITERS.get_ptr_mut(key) {
        // SAFETY: as above.
        Some(w) => unsafe {
            (*w).waits += 1;
            (*w).total_ns += ns;
            if ns > (*w).max_ns {
                (*w).max_ns = ns;
            }
        },
        None => {
            let w = WaiterStat {
                waits: 1,
                total_ns: ns,
                max_ns: ns,
            };
            let _ = LOCK_WAITERS.insert(key, w, 0);
        }
    }
}

/// `tid` woke `woken` threads waiting on `uaddr`: counted under the lock
/// and under the waker's user stack.
#[inline(always)]
fn woke<const HELPER: bool>(ctx: &TracePointContext, tid: u32, uaddr: u64, woken: u64) {
    if let Some(s) = LOCK_STATS.get_ptr_mut(uaddr) {
        // SAFETY: a map value pointer stays valid for the program's run.
        unsafe { (*s).wakes += woken };
    } else if let Some(zero) = LOCK_SCRATCH.get_ptr_mut(0) {
        // SAFETY: this CPU's scratch value: set, inserted (copied), reset.
        unsafe {
            (*zero).wakes = woken;
            // By reference: the value is too large for the BPF stack.
            #[allow(clippy::needless_borrows_for_generic_args)]
            let _ = LOCK_STATS.insert(uaddr, &*zero, BPF_NOEXIST as u64);
            (*zero).wakes = 0;
        }
    }
    let stack_id = ctx
        .get_stackid(&USER_STACKS, BPF_F_USER_STACK as u64)
        .unwrap_or(-1);
    let key = WakerKey { uaddr, stack_id };
    if let Some(w) = LOCK_WAKERS.get_ptr_mut(key) {
        // SAFETY: as above.
        unsafe {
            (*w).wakes += woken;
            (*w).calls += 1;
            (*w).tid = tid;
        }
        return;
    }
    // A new waking stack: keep the words at the top of its user stack,
    // once, for user space to find the return addresses a frame-pointer
    // walk misses.
    let cfg = CONFIG.load();
    // SAFETY: the current task is valid for the program's run.
    let regs = unsafe { user_regs::<HELPER>(current_task::<HELPER>(), &cfg) };
    // SAFETY: a fault-tolerant read of user memory.
    let top = unsafe { bpf_probe_read_user(regs.sp as *const [u64; WAKER_STACK_WORDS]) }
        .unwrap_or([0; WAKER_STACK_WORDS]);
    let w = WakerStat {
        wakes: woken,
        calls: 1,
        tid,
        _pad: 0,
        sp: regs.sp,
        top,
    };
    let _ = LOCK_WAKERS.insert(key, w, 0);
}
