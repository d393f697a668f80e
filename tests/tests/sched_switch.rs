//! The sched_switch program, loaded for real, sees a thread of this process
//! block in read(2) on an empty pipe and come back when the pipe is written:
//! the thread is learned from the switch itself (no list is seeded), its
//! state is the tracepoint's `S`.

use std::{
    collections::HashMap,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    sync::mpsc,
    time::{Duration, Instant},
};

use rip_ebpf::{SWITCH_OFF, SWITCH_ON, ThreadRecord, task_state};
use rip_probe::collect::kernel::{
    KernelProbe,
    features::RegsSource,
    offcpu::{OffCpuOptions, OffCpuProbe},
    switch::SwitchProgram,
};
use rip_tests::{bpf_tests_enabled, gettid, monotonic_ns};

fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: valid array of two ints.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: pipe2 returned two fresh descriptors we now own.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

#[test]
fn observes_blocked_read_and_wakeup() {
    if !bpf_tests_enabled("observes_blocked_read_and_wakeup") {
        return;
    }
    blocked_read_and_wakeup(None);
}

/// The build for kernels without `bpf_task_pt_regs` (before 5.15), run on
/// this one: the registers it finds at the top of the kernel stack are the
/// read's.
#[test]
fn observes_blocked_read_and_wakeup_without_task_pt_regs() {
    if !bpf_tests_enabled("observes_blocked_read_and_wakeup_without_task_pt_regs") {
        return;
    }
    blocked_read_and_wakeup(Some(RegsSource::KernelStack));
}

fn blocked_read_and_wakeup(regs: Option<RegsSource>) {
    let pid = std::process::id();
    let mut probe =
        KernelProbe::attach_with(pid, true, regs).unwrap_or_else(|e| panic!("cannot attach: {e}"));
    let mut events = probe.take_events().expect("event stream");
    eprintln!(
        "loaded and attached {:?} to sched_switch (raw) for pid {pid} (task_struct pid@{} tgid@{} state@{})",
        probe.program_names(),
        probe.config().task.pid,
        probe.config().task.tgid,
        probe.config().task.state
    );

    let (rd, wr) = pipe();
    let rd_fd = rd.as_raw_fd();
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        tx.send((gettid(), monotonic_ns())).unwrap();
        let mut b = [0u8; 1];
        // SAFETY: valid fd and buffer.
        let n = unsafe { libc::read(rd.as_raw_fd(), b.as_mut_ptr().cast(), 1) };
        assert_eq!(n, 1);
    });
    let (tid, before_read) = rx.recv().unwrap();

    // Wait until the kernel reports the thread asleep in read(2).
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    let off = loop {
        assert!(
            Instant::now() < deadline,
            "no switch-off seen for tid {tid}: {seen:?}"
        );
        let batch = events.poll(Duration::from_millis(100)).unwrap();
        seen.extend(batch.iter().filter(|e| e.tid == tid).copied());
        if let Some(e) = seen.iter().find(|e| {
            e.kind == SWITCH_OFF
                && e.state & task_state::INTERRUPTIBLE != 0
                && e.regs.syscall_nr == libc::SYS_read
        }) {
            break *e;
        }
    };
    let off_seen = monotonic_ns();
    assert_eq!(off.regs.args[0], rd_fd as u64, "read(2)'s fd argument");
    assert_eq!(off.regs.args[2], 1, "read(2)'s count argument");
    let rec = probe.threads().unwrap()[&tid];
    assert_eq!(rec.on_cpu, 0, "thread table says tid {tid} is off CPU");
    assert!(rec.state & task_state::INTERRUPTIBLE != 0);
    // The stamp is on CLOCK_MONOTONIC (the BTF-typed program's is the
    // scheduler's clock placed on it): never before the thread's last
    // clock read before read(2) (an early stamp would overstate how long
    // it blocked), and before the write that wakes it.
    let off_ns = off.ts_ns;
    assert_eq!(rec.off_cpu_ns, off.ts_ns, "the table's time is the event's");
    eprintln!(
        "tid {tid} went off-CPU at {} in state S, syscall read(fd={}, count={})",
        off.ts_ns, off.regs.args[0], off.regs.args[2]
    );

    std::thread::sleep(Duration::from_millis(50));
    let written_at = monotonic_ns();
    assert!(
        (before_read..written_at).contains(&off_ns),
        "switch-off stamped {off_ns} ns, outside [{before_read}, {written_at}) \
         (seen at {off_seen})"
    );
    // SAFETY: valid fd and buffer.
    let n = unsafe { libc::write(wr.as_raw_fd(), b"x".as_ptr().cast(), 1) };
    assert_eq!(n, 1);
    reader.join().unwrap();

    let deadline = Instant::now() + Duration::from_secs(10);
    let on = loop {
        assert!(
            Instant::now() < deadline,
            "no switch-on after the write for tid {tid}"
        );
        let batch = events.poll(Duration::from_millis(100)).unwrap();
        if let Some(e) = batch
            .iter()
            .find(|e| e.tid == tid && e.kind == SWITCH_ON && e.ts_ns >= written_at)
        {
            break *e;
        }
    };
    let on_seen = monotonic_ns();
    assert!(
        on.ts_ns <= on_seen,
        "switch-on stamped {} ns, after it was seen at {on_seen}",
        on.ts_ns
    );
    eprintln!(
        "tid {tid} came back on-CPU {} µs after the pipe was written",
        (on.ts_ns - written_at) / 1000
    );
    assert!(on.ts_ns > off.ts_ns);
}

/// On a kernel that has `btf_trace_sched_switch` (this one), `--pid` and
/// `offcpu` run the BTF-typed sched_switch programs, with no fallback
/// reason; a forced build for older kernels runs the raw tracepoint and
/// says why. The choice is the kernel's answer at load, never a version.
#[test]
fn the_btf_typed_program_runs_where_the_kernel_takes_it_and_a_forced_build_runs_the_raw_one() {
    if !bpf_tests_enabled("the_btf_typed_program_runs_where_the_kernel_takes_it") {
        return;
    }
    let pid = std::process::id();
    let probe = KernelProbe::attach(pid, false).expect("attach");
    let choice = probe.switch_choice().expect("a window runs sched_switch");
    assert_eq!(choice.program, SwitchProgram::Btf, "{choice:?}");
    assert_eq!(choice.fallback, None);
    let names = probe.program_names();
    assert!(names.iter().any(|n| n == "switch_btf"), "{names:?}");
    assert!(!names.iter().any(|n| n == "sched_switch"), "{names:?}");
    assert!(
        probe.slot_stats().expect("slot stats").is_some(),
        "the BTF-typed program keeps its records in slots"
    );
    drop(probe);

    let forced =
        KernelProbe::attach_with(pid, false, Some(RegsSource::KernelStack)).expect("attach");
    let choice = forced.switch_choice().expect("a window runs sched_switch");
    assert_eq!(
        choice.program,
        SwitchProgram::Raw(RegsSource::KernelStack),
        "{choice:?}"
    );
    assert!(choice.fallback.is_some(), "{choice:?}");
    assert!(forced.program_names().iter().any(|n| n == "switch_kstack"));
    assert_eq!(forced.slot_stats().expect("slot stats"), None);
    drop(forced);

    let off = OffCpuProbe::attach(pid, 64, OffCpuOptions::default(), None).expect("offcpu");
    assert_eq!(off.switch_choice().program, SwitchProgram::Btf);
    assert_eq!(off.switch_choice().name, "offcpu_btf");
}

/// `tests/c/thread_slots.c`, started: its stdin, its stdout's lines.
struct Slots {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
}

impl Slots {
    fn start() -> Slots {
        use std::io::BufRead;
        let mut child = std::process::Command::new(rip_tests::build_c("thread_slots", &[]))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("thread_slots starts");
        let stdin = child.stdin.take().expect("piped");
        let mut lines = std::io::BufReader::new(child.stdout.take().expect("piped")).lines();
        assert_eq!(lines.next().expect("a line").expect("text"), "ready");
        Slots {
            child,
            stdin,
            lines,
        }
    }

    /// Sends `command` and returns its answer line.
    fn ask(&mut self, command: &str) -> String {
        use std::io::Write;
        writeln!(self.stdin, "{command}").expect("command sent");
        self.lines.next().expect("an answer").expect("text")
    }
}

impl Drop for Slots {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits (at most 30 s) until `done` holds of the probe's records.
fn until(probe: &KernelProbe, what: &str, done: impl Fn(&HashMap<u32, ThreadRecord>) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let records = probe.threads().expect("records");
        if done(&records) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: {records:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The BTF-typed program's per-thread slots with threads that come and
/// go, in an array of 4 (each thread may use any of them): the main
/// thread takes one; threads that start and exit one after the other take
/// the three free ones, then the slots of those that exited (each reuse
/// counted); of four threads that then stay blocked, three take the
/// exited threads' slots and the fourth finds none: its switches are
/// counted as not recorded, never written over another's, and the report
/// says so.
#[test]
fn threads_that_come_and_go_reuse_slots_and_a_full_table_is_counted() {
    if !bpf_tests_enabled("threads_that_come_and_go_reuse_slots_and_a_full_table_is_counted") {
        return;
    }
    let mut w = Slots::start();
    let pid = w.child.id();
    let probe = KernelProbe::attach_with_slots(pid, 4).expect("attach");
    let choice = probe.switch_choice().expect("sched_switch");
    assert_eq!(choice.program, SwitchProgram::Btf, "{choice:?}");

    assert_eq!(w.ask("churn 20"), "churned");
    // Every churned thread has made its last switch: only the main
    // thread's record is not of an exited thread.
    until(&probe, "the churned threads' last switches", |r| {
        r.len() == 4
            && r.contains_key(&pid)
            && r.iter()
                .filter(|&(&t, _)| t != pid)
                .all(|(_, rec)| rec.state & task_state::DEAD != 0)
    });
    let churned = probe.slot_stats().unwrap().expect("slots");
    assert_eq!(
        churned.claimed, 4,
        "main and three churned threads: {churned:?}"
    );
    assert!(churned.reused >= 1, "{churned:?}");
    assert!(
        churned.claimed + churned.reused <= 21,
        "a thread takes one slot: {churned:?}"
    );

    let answer = w.ask("block 4");
    let blocked: Vec<u32> = answer
        .strip_prefix("blocked ")
        .unwrap_or_else(|| panic!("{answer:?}"))
        .split(' ')
        .map(|t| t.parse().expect("a tid"))
        .collect();
    assert_eq!(blocked.len(), 4);
    until(&probe, "three blocked threads asleep in their slots", |r| {
        blocked
            .iter()
            .filter(|t| {
                r.get(t)
                    .is_some_and(|rec| rec.state & task_state::INTERRUPTIBLE != 0)
            })
            .count()
            == 3
    });
    let records = probe.threads().expect("records");
    assert!(records.contains_key(&pid), "main keeps its slot");
    assert_eq!(records.len(), 4, "{records:?}");
    let stats = probe.slot_stats().unwrap().expect("slots");
    assert_eq!(stats.claimed, 4, "no slot was free again: {stats:?}");
    assert_eq!(stats.reused, churned.reused + 3, "{stats:?}");
    assert!(
        stats.full > churned.full,
        "the fourth found none: {stats:?}"
    );
    let warnings = rip_probe::collect::kernel::switch::slot_warnings(&stats);
    assert!(
        warnings.iter().any(|w| w.contains("no slot left")),
        "{warnings:?}"
    );
}
