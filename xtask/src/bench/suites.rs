//! The rows of the two timing tables: ways of recording that `f` ran, and
//! what a tracer costs the process it watches.

use super::{
    peers::Peers,
    rows::{Calls, Row, Tracer},
    workloads::{Exe, Workloads},
};

/// The row every per-call ratio is relative to.
pub const REFERENCE: &str = "snap-c";

/// Calls of in-process rows (a few ns each).
const IN_PROCESS: Calls = Calls {
    start: 20_000_000,
    min: 1_000_000,
    max: 500_000_000,
};
/// Calls of rows that trap into the kernel (tens of µs each).
const TRAPPING: Calls = Calls {
    start: 20_000,
    min: 10_000,
    max: 200_000,
};

fn need(peers: &Peers, pkgs: &[&str], exe: &Result<Exe, String>) -> Result<Exe, String> {
    peers.need(pkgs)?;
    exe.clone()
}

/// The per-call rows: the loop of `tests/bench/loop.c` under each way of
/// recording that `f` ran.
pub fn per_call(w: &Workloads, peers: &Peers) -> Vec<Row> {
    let plain = Ok(w.loop_plain.clone());
    let row = |id, label, exe, tracer, calls, callgrind| Row {
        id,
        label,
        exe,
        mode: None,
        tracer,
        calls,
        same_calls_as: None,
        callgrind,
    };
    vec![
        row(
            "none",
            "no tracing",
            plain.clone(),
            Tracer::None,
            IN_PROCESS,
            true,
        ),
        row(
            "snap-rust",
            "librip snap, Rust `snap!()`",
            Ok(w.loop_rust.clone()),
            Tracer::None,
            IN_PROCESS,
            true,
        ),
        row(
            REFERENCE,
            "librip snap, C `RIP_SNAP()` (librip.h)",
            Ok(w.loop_librip.clone()),
            Tracer::None,
            IN_PROCESS,
            true,
        ),
        row(
            "usdt",
            "USDT marker, dormant",
            w.loop_usdt.clone(),
            Tracer::None,
            IN_PROCESS,
            true,
        ),
        row(
            "usdt-bpftrace",
            "USDT marker, bpftrace attached",
            need(peers, &["bpftrace"], &w.loop_usdt),
            Tracer::Bpftrace("usdt:{exe}:rip_bench:f_ran { @hits = count(); }"),
            TRAPPING,
            false,
        ),
        row(
            "lttng",
            "LTTng-UST tracepoint, dormant",
            w.loop_lttng.clone(),
            Tracer::None,
            IN_PROCESS,
            true,
        ),
        row(
            "lttng-session",
            "LTTng-UST tracepoint, snapshot session",
            need(peers, &["lttng-tools"], &w.loop_lttng),
            Tracer::Lttng,
            Calls {
                start: 1_000_000,
                min: 100_000,
                max: 50_000_000,
            },
            false,
        ),
        row(
            "uprobe-rip-probe-lib",
            "uprobe, rip-probe's aya loader (library)",
            plain.clone(),
            Tracer::RipProbeLibrary("f"),
            TRAPPING,
            false,
        ),
        row(
            "uprobe-rip-probe",
            "uprobe, rip-probe CLI (`--pid --uprobe f`)",
            plain.clone(),
            Tracer::RipProbe(Some("f")),
            TRAPPING,
            false,
        ),
        row(
            "uprobe-bpftrace",
            "uprobe, bpftrace",
            need(peers, &["bpftrace"], &plain),
            Tracer::Bpftrace("uprobe:{exe}:f { @hits = count(); }"),
            TRAPPING,
            false,
        ),
        row(
            "gdb",
            "gdb breakpoint with commands",
            need(peers, &["gdb"], &plain),
            Tracer::Gdb,
            Calls {
                start: 1_000,
                min: 2_000,
                max: 10_000,
            },
            false,
        ),
    ]
}

/// What `rip-probe locks` counts, written for bpftrace: per futex word,
/// a histogram of the waits' durations (FUTEX_WAIT, WAIT_BITSET, LOCK_PI,
/// LOCK_PI2, WAIT_REQUEUE_PI, flags masked off) and the threads woken
/// (FUTEX_WAKE, WAKE_OP, WAKE_BITSET, REQUEUE, CMP_REQUEUE), filtered on
/// the pid in the kernel. `@hits` counts the waits.
pub const FUTEX_BPFTRACE: &str = "\
tracepoint:syscalls:sys_enter_futex /pid == {pid}/ { $c = args->op & 127; \
if ($c == 0 || $c == 9 || $c == 6 || $c == 13 || $c == 11) { \
@start[tid] = nsecs; @addr[tid] = (uint64)args->uaddr; } \
if ($c == 1 || $c == 5 || $c == 10 || $c == 3 || $c == 4) { @waking[tid] = (uint64)args->uaddr; } } \
tracepoint:syscalls:sys_exit_futex /pid == {pid}/ { \
if (@start[tid]) { @wait_ns[@addr[tid]] = hist(nsecs - @start[tid]); @hits = count(); \
delete(@start[tid]); delete(@addr[tid]); } \
if (@waking[tid]) { if (args->ret > 0) { @woken[@waking[tid]] = sum(args->ret); } \
delete(@waking[tid]); } }";

/// The overhead rows: a getppid loop, a ping-pong between two threads on
/// one CPU, and a turn passed between four threads through a mutex and
/// condition variables, untraced and traced; traced rows make as many
/// calls as their untraced row.
pub fn overhead(w: &Workloads, peers: &Peers) -> Vec<Row> {
    let exe = Ok(w.overhead.clone());
    let syscalls = Calls {
        start: 1_000_000,
        min: 100_000,
        max: 50_000_000,
    };
    let switches = Calls {
        start: 50_000,
        min: 10_000,
        max: 5_000_000,
    };
    let passes = Calls {
        start: 20_000,
        min: 10_000,
        max: 2_000_000,
    };
    let row = |id, label, mode, exe, tracer, calls, same| Row {
        id,
        label,
        exe,
        mode: Some(mode),
        tracer,
        calls,
        same_calls_as: same,
        callgrind: false,
    };
    vec![
        row(
            "getppid",
            "untraced",
            "getppid",
            exe.clone(),
            Tracer::None,
            syscalls,
            None,
        ),
        row(
            "getppid-rip-probe",
            "rip-probe --pid attached",
            "getppid",
            exe.clone(),
            Tracer::RipProbe(None),
            syscalls,
            Some("getppid"),
        ),
        row(
            "getppid-bpftrace",
            "bpftrace on raw_syscalls:sys_enter and sys_exit",
            "getppid",
            need(peers, &["bpftrace"], &exe),
            Tracer::Bpftrace(
                "tracepoint:raw_syscalls:sys_enter /pid == {pid}/ { @hits = count(); } \
                 tracepoint:raw_syscalls:sys_exit /pid == {pid}/ { @exits = count(); }",
            ),
            syscalls,
            Some("getppid"),
        ),
        row(
            "pingpong",
            "untraced",
            "pingpong",
            exe.clone(),
            Tracer::None,
            switches,
            None,
        ),
        row(
            "pingpong-floor-nothing",
            "an empty BTF-typed program on sched_switch: the dispatch alone (`floor_nothing`)",
            "pingpong",
            exe.clone(),
            Tracer::SwitchFloor("floor_nothing"),
            switches,
            Some("pingpong"),
        ),
        row(
            "pingpong-floor-clock",
            "a BTF-typed program on sched_switch reading the clock alone (`floor_clock`: `bpf_ktime_get_ns`)",
            "pingpong",
            exe.clone(),
            Tracer::SwitchFloor("floor_clock"),
            switches,
            Some("pingpong"),
        ),
        row(
            "pingpong-bpftrace",
            "bpftrace: each switch of a target thread's time and state, per thread",
            "pingpong",
            need(peers, &["bpftrace"], &exe),
            Tracer::Bpftrace(
                "tracepoint:sched:sched_switch /pid == {pid}/ { @off[tid] = nsecs; \
                 @state[tid] = args->prev_state; @hits = count(); } \
                 tracepoint:sched:sched_switch /@off[args->next_pid]/ { @on[args->next_pid] = nsecs; }",
            ),
            switches,
            Some("pingpong"),
        ),
        row(
            "pingpong-rip-probe",
            "rip-probe --pid attached",
            "pingpong",
            exe.clone(),
            Tracer::RipProbe(None),
            switches,
            Some("pingpong"),
        ),
        row(
            "pingpong-rip-probe-rawtp",
            "rip-probe --pid attached, raw tracepoint (`RIP_PROBE_TP_BTF=0`: 5.10's program)",
            "pingpong",
            exe.clone(),
            Tracer::RipProbeRawTp(false),
            switches,
            Some("pingpong"),
        ),
        row(
            "pingpong-rip-probe-snapshots",
            "`rip-probe --pid --duration 0` snapshots, one after the other (last CPU)",
            "pingpong",
            exe.clone(),
            Tracer::RipProbeSnapshots,
            switches,
            Some("pingpong"),
        ),
        row(
            "pingpong-rip-probe-offcpu",
            "`rip-probe offcpu` summing off-CPU time by user stack",
            "pingpong",
            exe.clone(),
            Tracer::RipProbeOffcpu(false),
            switches,
            Some("pingpong"),
        ),
        row(
            "pingpong-rip-probe-offcpu-rawtp",
            "`rip-probe offcpu` by user stack, raw tracepoint (`RIP_PROBE_TP_BTF=0`)",
            "pingpong",
            exe.clone(),
            Tracer::RipProbeRawTp(true),
            switches,
            Some("pingpong"),
        ),
        row(
            "pingpong-rip-probe-offcpu-kernel",
            "`rip-probe offcpu --kernel-stacks`: by user and kernel stack",
            "pingpong",
            exe.clone(),
            Tracer::RipProbeOffcpu(true),
            switches,
            Some("pingpong"),
        ),
        row(
            "pingpong-offcputime",
            "BCC's offcputime (libbpf-tools): by user (frame pointers) and kernel stack",
            "pingpong",
            need(peers, &["libbpf-tools"], &exe),
            Tracer::Offcputime,
            switches,
            Some("pingpong"),
        ),
        row(
            "mutex",
            "untraced",
            "mutex",
            exe.clone(),
            Tracer::None,
            passes,
            None,
        ),
        row(
            "mutex-rip-probe-locks",
            "`rip-probe locks` counting",
            "mutex",
            exe.clone(),
            Tracer::RipProbeLocks,
            passes,
            Some("mutex"),
        ),
        row(
            "mutex-bpftrace",
            "bpftrace: futex waits per lock, hist() of their times",
            "mutex",
            need(peers, &["bpftrace"], &exe),
            Tracer::Bpftrace(FUTEX_BPFTRACE),
            passes,
            Some("mutex"),
        ),
    ]
}
