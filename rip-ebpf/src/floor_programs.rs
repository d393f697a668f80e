//! The floor under any sched_switch program's cost, measured by the
//! benchmark alone (`rip-bench-uprobe --switch-floor`, rows of
//! `cargo xtask bench --overhead-only`): what the kernel's dispatch of a
//! BTF-typed program costs a switch with nothing in it, and with nothing
//! but the clock read every stamped switch pays. rip-probe never loads
//! these.

use aya_ebpf::{helpers::bpf_ktime_get_ns, macros::btf_tracepoint, programs::BtfTracePointContext};

/// An empty program: the tracepoint's dispatch alone.
#[btf_tracepoint(function = "sched_switch")]
pub fn floor_nothing(_ctx: BtfTracePointContext) -> i32 {
    0
}

/// `bpf_ktime_get_ns` alone, at every switch.
#[btf_tracepoint(function = "sched_switch")]
pub fn floor_clock(_ctx: BtfTracePointContext) -> i32 {
    // SAFETY: no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    // The value is used, so the call stays.
    i32::from(now == 0)
}
