//! User stacks of blocked threads, unwound from the task iterator's saved
//! registers with the binaries' CFI while the target runs
//! (`rip_probe::collect::stacks`), against `tests/c/user_stacks.c`: a
//! program built `-O2 -fomit-frame-pointer` (so frame pointers cannot be
//! what works), calling through a shared library of its own, and stripped.

use std::time::{Duration, Instant};

use rip_ebpf::TaskRecord;
use rip_probe::{
    StackSymbolizer,
    collect::{
        kernel::{KernelProbe, features::RegsSource},
        stacks::Stacks,
    },
    model::Frame,
};
use rip_tests::{
    bpf_tests_enabled,
    user_stacks::{Build, CHAIN, Target},
};

/// The task iterator's records of `pid`, with the registers build asked.
fn tasks(pid: u32, regs: Option<RegsSource>) -> Vec<TaskRecord> {
    let mut probe = KernelProbe::attach_with(pid, false, regs).expect("attach");
    probe.tasks().expect("task iterator")
}

fn task(tasks: &[TaskRecord], tid: u32) -> &TaskRecord {
    tasks
        .iter()
        .find(|t| t.tid == tid)
        .unwrap_or_else(|| panic!("tid {tid} not reported"))
}

/// What a frame is called: its function, else module+offset, else the
/// address.
fn name(f: &Frame) -> String {
    match (&f.function, &f.module, f.module_offset) {
        (Some(func), _, _) => func.clone(),
        (None, Some(m), Some(off)) => format!("{m}+{off:#x}"),
        _ => format!("{:#x}", f.addr),
    }
}

/// Which mapped file an address is in (the mapping's name, from the
/// unwinder's view of /proc/PID/maps).
fn file_of(stacks: &Stacks, addr: u64) -> String {
    stacks
        .file_of(addr.saturating_sub(1))
        .unwrap_or_default()
        .to_string()
}

fn show(frames: &[Frame], stacks: &Stacks) -> String {
    frames
        .iter()
        .map(|f| {
            format!(
                "\n  {:#x} {} [{}]",
                f.addr,
                f.describe(),
                file_of(stacks, f.addr)
            )
        })
        .collect()
}

/// Checks that `frames[at..]` is `innermost` then [`CHAIN`], and that
/// the frames after the chain (thread start) are libc's.
fn assert_chain(frames: &[Frame], at: usize, innermost: &str, stacks: &Stacks, what: &str) {
    let got: Vec<String> = frames.iter().skip(at).take(6).map(name).collect();
    let want: Vec<&str> = std::iter::once(innermost).chain(CHAIN).collect();
    assert_eq!(got, want, "{what}: {}", show(frames, stacks));
    let rest = &frames[at + 6..];
    assert!(
        !rest.is_empty() && rest.len() <= 3,
        "{what}: the walk ends in libc's thread start: {}",
        show(frames, stacks)
    );
    for f in rest {
        assert!(
            file_of(stacks, f.addr).contains("libc.so"),
            "{what}: {}",
            show(frames, stacks)
        );
    }
}

/// One thread of each kind blocked in the program built `how`: the exact
/// chain of functions, across the library (named from .dynsym when
/// stripped).
fn known_stacks(how: Build) {
    let target = Target::start(how, 0, false);
    let pid = target.pid();
    let records = tasks(pid, None);
    let mut stacks = Stacks::new(pid).expect("stacks");
    let mut names = StackSymbolizer::new(pid);
    for (kind, tid) in target.threads("role ") {
        if kind == "signal" {
            continue;
        }
        let t = task(&records, tid);
        assert_eq!(t.state & 0xff, 1, "{kind}: tid {tid} sleeps");
        let addrs = stacks.unwind(&t.regs);
        let frames = names.frames(&addrs);
        let what = format!("{kind} (tid {tid}, {how:?})");
        if how == Build::FramePointersOnly && kind == "read" {
            // The walk through our code rests on the saved bp alone: libc's
            // read wrapper leaves rbp alone, so without it the walk stops.
            // (pthread_cond_wait's internals save rbp on the stack, and
            // their CFI restores it: there the saved bp is not needed.)
            let mut no_bp = t.regs;
            no_bp.bp = 0;
            let short = stacks.unwind(&no_bp);
            assert!(short.len() < addrs.len(), "{what}: {short:x?}");
        }
        eprintln!("{what}:{}", show(&frames, &stacks));
        let innermost = format!("stk_block_{kind}");
        let at = frames
            .iter()
            .position(|f| f.function.as_deref() == Some(&innermost))
            .unwrap_or_else(|| panic!("{what}: no {innermost}: {}", show(&frames, &stacks)));
        // Above the blocking function: libc only (the syscall wrapper and,
        // for futex, the condition variable's internals).
        assert!(at >= 1, "{what}");
        for f in &frames[..at] {
            assert!(
                file_of(&stacks, f.addr).contains("libc.so"),
                "{what}: {}",
                show(&frames, &stacks)
            );
        }
        assert_chain(&frames, at, &innermost, &stacks, &what);
        if how == Build::Full {
            // DWARF: the call's line in the executable, not the next one.
            let f = &frames[at];
            assert!(
                f.file
                    .as_deref()
                    .is_some_and(|p| p.ends_with("user_stacks.c")),
                "{what}: {f:?}"
            );
            let b = frames.iter().find(|f| name(f) == "stk_chain_b").unwrap();
            let line = rip_tests::marker_line("c/user_stacks.c", "stk_lib_outer(blockers");
            assert_eq!(b.line, Some(line), "{what}: {b:?}");
        }
    }
    assert!(stacks.binaries_loaded() >= 3, "exe, library, libc");
}

#[test]
fn stripped_omit_frame_pointer_binaries_unwind_through_a_library() {
    if !bpf_tests_enabled("stripped_omit_frame_pointer_binaries_unwind_through_a_library") {
        return;
    }
    known_stacks(Build::Stripped);
}

#[test]
fn unstripped_binaries_also_give_call_lines() {
    if !bpf_tests_enabled("unstripped_binaries_also_give_call_lines") {
        return;
    }
    known_stacks(Build::Full);
}

#[test]
fn a_non_pie_executable() {
    if !bpf_tests_enabled("a_non_pie_executable") {
        return;
    }
    known_stacks(Build::NonPie);
}

/// Without CFI for the program's own code, framehop walks its frame
/// pointers, from the `bp` the task iterator saved.
#[test]
fn frame_pointers_where_there_is_no_cfi() {
    if !bpf_tests_enabled("frame_pointers_where_there_is_no_cfi") {
        return;
    }
    known_stacks(Build::FramePointersOnly);
}

/// `bp` is read by both iterator builds, and they agree on every register.
#[test]
fn both_iterator_builds_read_the_same_registers_with_bp() {
    if !bpf_tests_enabled("both_iterator_builds_read_the_same_registers_with_bp") {
        return;
    }
    let target = Target::start(Build::Stripped, 0, false);
    let pid = target.pid();
    let helper = tasks(pid, Some(RegsSource::Helper));
    let kstack = tasks(pid, Some(RegsSource::KernelStack));
    for (kind, tid) in target.threads("role ") {
        let (a, b) = (task(&helper, tid), task(&kstack, tid));
        assert_eq!(a.regs, b.regs, "{kind} tid {tid}");
        assert!(a.regs.ip > 0x1000 && a.regs.sp > 0x1000, "{:?}", a.regs);
    }
}

/// A thread blocked inside a signal handler: the handler's frames, glibc's
/// `__restore_rt` trampoline, then the interrupted frames.
#[test]
fn a_thread_blocked_in_a_signal_handler() {
    if !bpf_tests_enabled("a_thread_blocked_in_a_signal_handler") {
        return;
    }
    let target = Target::start(Build::Stripped, 0, false);
    let pid = target.pid();
    let tid = target
        .threads("role ")
        .into_iter()
        .find(|(k, _)| k == "signal")
        .unwrap()
        .1;
    let records = tasks(pid, None);
    let t = task(&records, tid);
    let mut stacks = Stacks::new(pid).expect("stacks");
    let addrs = stacks.unwind(&t.regs);
    let frames = StackSymbolizer::new(pid).frames(&addrs);
    eprintln!("signal (tid {tid}):{}", show(&frames, &stacks));
    let names: Vec<String> = frames.iter().map(name).collect();
    let at = names.iter().position(|n| n == "stk_signal_wait").unwrap();
    assert_eq!(names[at + 1], "stk_on_signal", "{names:?}");
    // The trampoline the handler returns to.
    assert!(
        file_of(&stacks, frames[at + 2].addr).contains("libc.so"),
        "{}",
        show(&frames, &stacks)
    );
    let pause = names
        .iter()
        .position(|n| n == "stk_block_pause")
        .unwrap_or_else(|| panic!("no interrupted frames: {}", show(&frames, &stacks)));
    assert_chain(&frames, pause, "stk_block_pause", &stacks, "signal");
}

/// The ticker's held time is what the no-pause checks rely on: a stop of
/// the process is counted in it, whatever the machine's load.
#[test]
fn the_ticker_counts_a_stop_as_held() {
    let mut target = Target::start(Build::Stripped, 0, false);
    let pid = target.pid() as i32;
    assert_eq!(target.command("reset"), "ok");
    // SAFETY: signals to the target, a child of this test.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    // The stop is only in effect once a thread of the target has taken the
    // signal: wait for that (a SIGCONT sent before it would discard the
    // pending SIGSTOP), then keep it stopped 300 ms.
    wait_child(pid, libc::WUNTRACED, "stopped");
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    wait_child(pid, libc::WCONTINUED, "continued");
    // Every thread was stopped for those 300 ms, so the ticker's first
    // tick after them spans at least that; it may come after the main
    // thread answers, on a busy machine.
    let t = Instant::now();
    let ticks = loop {
        let ticks = target.gap();
        if ticks.gap >= Duration::from_millis(300) {
            break ticks;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "no tick after the stop: {ticks:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    eprintln!("stopped 300 ms: ticker {ticks:?}");
    // The ticker neither ran nor waited for a CPU while stopped.
    assert!(ticks.held >= Duration::from_millis(300), "{ticks:?}");
    assert!(ticks.gap >= ticks.held, "{ticks:?}");
}

/// Waits until the child `pid` reports the change `flag` (WUNTRACED for a
/// stop, WCONTINUED for a continue) and checks that it did.
fn wait_child(pid: i32, flag: i32, what: &str) {
    let mut status = 0;
    // SAFETY: waits for a child of this test without reaping it (only a
    // stop or a continue is asked for).
    let r = unsafe { libc::waitpid(pid, &mut status, flag) };
    assert_eq!(r, pid, "waitpid: {}", std::io::Error::last_os_error());
    let ok = if flag == libc::WUNTRACED {
        libc::WIFSTOPPED(status)
    } else {
        libc::WIFCONTINUED(status)
    };
    assert!(ok, "target not {what}: status {status:#x}");
}

/// 1,000 blocked threads unwound while a ticker thread in the target
/// measures how long it is held between 1 ms sleeps: nothing stops the
/// process.
#[test]
fn a_thousand_threads_unwound_without_pausing_the_process() {
    if !bpf_tests_enabled("a_thousand_threads_unwound_without_pausing_the_process") {
        return;
    }
    const N: usize = 1000;
    let mut target = Target::start(Build::Stripped, N, false);
    let pid = target.pid();
    let workers = target.threads("worker ");
    assert_eq!(workers.len(), N);
    let mut probe = KernelProbe::attach(pid, false).expect("attach");

    // The ticker's gaps on this machine while nothing is done to it.
    assert_eq!(target.command("reset"), "ok");
    std::thread::sleep(Duration::from_millis(500));
    let idle = target.gap();

    assert_eq!(target.command("reset"), "ok");
    let t0 = Instant::now();
    let records = probe.tasks().expect("task iterator");
    let t_iter = t0.elapsed();
    let t1 = Instant::now();
    let mut stacks = Stacks::new(pid).expect("stacks");
    let all: Vec<Vec<u64>> = workers
        .iter()
        .map(|&(_, tid)| stacks.unwind(&task(&records, tid).regs))
        .collect();
    let t_unwind = t1.elapsed();
    let t2 = Instant::now();
    let refs: Vec<&[u64]> = all.iter().map(Vec::as_slice).collect();
    let frames = StackSymbolizer::new(pid).frames_of_many(&refs);
    let t_sym = t2.elapsed();
    let ticks = target.gap();
    let depth: usize = all.iter().map(Vec::len).sum();
    eprintln!(
        "{N} threads: task iterator {t_iter:?}, unwinding {t_unwind:?} ({depth} frames, {} \
         process_vm_readv, {} binaries), symbolizing {t_sym:?}; ticker {ticks:?} \
         (idle: {idle:?})",
        stacks.memory_reads(),
        stacks.binaries_loaded(),
    );
    for ((kind, tid), frames) in workers.iter().zip(&frames) {
        let innermost = format!("stk_block_{kind}");
        let what = format!("worker {kind} tid {tid}");
        let at = frames
            .iter()
            .position(|f| f.function.as_deref() == Some(&innermost))
            .unwrap_or_else(|| panic!("{what}: {}", show(frames, &stacks)));
        assert_chain(frames, at, &innermost, &stacks, &what);
    }
    // Held: the ticker's gap less its time running or waiting for a CPU,
    // which a busy machine lengthens. A stop of the process would be held
    // time.
    assert!(
        ticks.held < Duration::from_millis(50),
        "the ticker was held up {:?} (idle: {idle:?})",
        ticks.held
    );
}
