//! The sched_switch program, loaded for real, sees a thread of this process
//! block in read(2) on an empty pipe and come back when the pipe is written:
//! the thread is learned from the switch itself (no list is seeded), its
//! state is the tracepoint's `S`.

use std::{
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    sync::mpsc,
    time::{Duration, Instant},
};

use rip_ebpf::{SWITCH_OFF, SWITCH_ON, task_state};
use rip_probe::collect::kernel::{KernelProbe, features::RegsSource};
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
        tx.send(gettid()).unwrap();
        let mut b = [0u8; 1];
        // SAFETY: valid fd and buffer.
        let n = unsafe { libc::read(rd.as_raw_fd(), b.as_mut_ptr().cast(), 1) };
        assert_eq!(n, 1);
    });
    let tid = rx.recv().unwrap();

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
    assert_eq!(off.regs.args[0], rd_fd as u64, "read(2)'s fd argument");
    assert_eq!(off.regs.args[2], 1, "read(2)'s count argument");
    let rec = probe.threads().unwrap()[&tid];
    assert_eq!(rec.on_cpu, 0, "thread table says tid {tid} is off CPU");
    assert!(rec.state & task_state::INTERRUPTIBLE != 0);
    eprintln!(
        "tid {tid} went off-CPU at {} in state S, syscall read(fd={}, count={})",
        off.ts_ns, off.regs.args[0], off.regs.args[2]
    );

    std::thread::sleep(Duration::from_millis(50));
    let written_at = monotonic_ns();
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
    eprintln!(
        "tid {tid} came back on-CPU {} µs after the pipe was written",
        (on.ts_ns - written_at) / 1000
    );
    assert!(on.ts_ns > off.ts_ns);
}
