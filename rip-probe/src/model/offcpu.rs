//! `rip-probe offcpu`: where the threads of a process spent their time off
//! the CPU, by stack. Documented in docs/JSON.md with the rest of the
//! model.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::Serialize;

use super::{Frame, ProcessInfo};

/// The report of `rip-probe offcpu`.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct OffCpuReport {
    /// [`super::SCHEMA_VERSION`].
    pub schema: u32,
    /// The process observed.
    pub process: ProcessInfo,
    /// How long it was observed, in ns (shorter than asked when the
    /// process exited).
    pub window_ns: u64,
    /// Off-CPU periods shorter than this (ns) are counted in `short`, not
    /// attributed to stacks.
    pub min_block_ns: u64,
    /// Whether kernel stacks were taken (`--kernel-stacks`).
    pub kernel_stacks: bool,
    /// Off-CPU time attributed to stacks, ns, over all threads: blocked
    /// plus preempted.
    pub total_ns: u64,
    /// Of which threads were runnable, waiting for a CPU (preempted), ns.
    pub preempted_ns: u64,
    /// Periods shorter than `min_block_ns`.
    pub short: Periods,
    /// Each distinct stack off the CPU, most time first.
    pub stacks: Vec<OffCpuStack>,
    /// Off-CPU time by thread, most first.
    pub threads: Vec<ThreadOffCpu>,
    /// Off-CPU time by the thread's last librip snap, most first (empty
    /// when the process maps no ring).
    pub snaps: Vec<SnapOffCpu>,
    /// Things to know: the process exited, tables were full, stacks that
    /// could not be unwound.
    pub warnings: Vec<String>,
}

/// A count of off-CPU periods and their time.
#[derive(Clone, Copy, Debug, Default, Serialize, JsonSchema)]
pub struct Periods {
    /// Periods.
    pub count: u64,
    /// Their time, ns.
    pub ns: u64,
}

/// Time off the CPU under one stack.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct OffCpuStack {
    /// Time off CPU, ns.
    pub off_cpu_ns: u64,
    /// Off-CPU periods.
    pub count: u64,
    /// True: the threads were preempted (runnable, waiting for a CPU);
    /// false: they blocked.
    pub preempted: bool,
    /// The threads (ids) whose time this is.
    pub tids: Vec<u32>,
    /// The user stack, innermost first. Empty when the registers could not
    /// be read. A CPython thread's Python frames are in it, in place of
    /// the `_PyEval_EvalFrameDefault` frames that ran them, when every
    /// period of the stack was read running them (see `python_note`).
    pub frames: Arc<[Frame]>,
    /// Why a stack that runs Python code shows its native frames only
    /// (its periods were not all read while they ran, or ran different
    /// Python frames, or the counts differ).
    pub python_note: Option<String>,
    /// False when the stack was never unwound (its copy was lost): `frames`
    /// then holds only where the thread entered the kernel.
    pub unwound: bool,
    /// The kernel stack, innermost first (with `--kernel-stacks`).
    pub kernel_stack: Arc<[Frame]>,
    /// Where the thread last snapped (instrumented programs).
    pub snap: Option<Frame>,
}

/// One thread's time off the CPU.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct ThreadOffCpu {
    /// Thread id.
    pub tid: u32,
    /// Thread name, when it is still alive.
    pub name: Option<String>,
    /// Time blocked, ns.
    pub blocked_ns: u64,
    /// Time preempted (runnable, waiting for a CPU), ns.
    pub preempted_ns: u64,
    /// Off-CPU periods.
    pub count: u64,
    /// Off the CPU for the whole window: asleep when it began, it never ran
    /// during it; its stack was read from its saved registers at the
    /// start.
    pub whole_window: bool,
}

/// Time off the CPU after one snap location.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct SnapOffCpu {
    /// The snap.
    pub snap: Frame,
    /// Time off CPU, ns.
    pub off_cpu_ns: u64,
    /// Off-CPU periods.
    pub count: u64,
}
