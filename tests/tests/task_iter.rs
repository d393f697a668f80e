//! The BPF task iterator, loaded for real, reports threads that blocked
//! *before* the probe attached: state, syscall with arguments, kernel stack.

use std::{
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    sync::mpsc,
    time::Duration,
};

use rip_probe::collect::kernel::{KernelProbe, features::RegsSource};
use rip_tests::{bpf_tests_enabled, gettid};

/// With `bpf_task_pt_regs` (5.15 on), the kernel's choice here.
#[test]
fn reports_threads_blocked_before_attach() {
    if !bpf_tests_enabled("reports_threads_blocked_before_attach") {
        return;
    }
    blocked_before_attach(None);
}

/// The build for kernels without `bpf_task_pt_regs` (5.10 to 5.14), which
/// finds user registers at the top of each kernel stack, run on this
/// kernel: it must see exactly what the helper sees.
#[test]
fn reports_threads_blocked_before_attach_without_task_pt_regs() {
    if !bpf_tests_enabled("reports_threads_blocked_before_attach_without_task_pt_regs") {
        return;
    }
    blocked_before_attach(Some(RegsSource::KernelStack));
}

fn blocked_before_attach(regs: Option<RegsSource>) {
    let mut fds = [0; 2];
    // SAFETY: valid array of two ints.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: pipe2 returned two fresh descriptors we now own.
    let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let rd_fd = rd.as_raw_fd();
    let (tx, rx) = mpsc::channel();
    let readers: Vec<_> = (0..4)
        .map(|_| {
            let tx = tx.clone();
            std::thread::spawn(move || {
                tx.send(gettid()).unwrap();
                let mut b = [0u8; 1];
                // SAFETY: valid fd and buffer.
                unsafe { libc::read(rd_fd, b.as_mut_ptr().cast(), 1) };
            })
        })
        .collect();
    let tids: Vec<u32> = (0..4).map(|_| rx.recv().unwrap()).collect();
    std::thread::sleep(Duration::from_millis(200));

    let mut probe = KernelProbe::attach_with(std::process::id(), false, regs).expect("attach");
    if let Some(r) = regs {
        assert_eq!(probe.features().regs_source(), r, "the build asked for");
    }
    let tasks = probe.tasks().expect("task iterator");
    eprintln!(
        "task iterator returned {} threads of pid {}",
        tasks.len(),
        std::process::id()
    );
    assert!(
        tasks.iter().any(|t| t.tid == gettid()),
        "the calling thread is listed"
    );
    for tid in &tids {
        let t = tasks
            .iter()
            .find(|t| t.tid == *tid)
            .unwrap_or_else(|| panic!("tid {tid} missing"));
        assert_eq!(t.state & 0xff, 1, "tid {tid} in interruptible sleep");
        assert_eq!(t.on_cpu, 0);
        assert_eq!(t.regs.syscall_nr, libc::SYS_read);
        assert_eq!(t.regs.args[0], rd_fd as u64);
        assert!(t.kstack_len > 2, "kernel stack of tid {tid}");
        assert!(t.exec_start > 0);
        // The user pc and stack pointer at the syscall: in libc, on this
        // thread's stack (a 2 MiB Rust thread stack, nowhere near 0).
        assert!(t.regs.ip > 0x1000 && t.regs.sp > 0x1000, "{:?}", t.regs);
        eprintln!(
            "tid {tid}: state {:#x} read(fd={}) {} kernel frames, comm {:?}",
            t.state,
            t.regs.args[0],
            t.kstack_len,
            String::from_utf8_lossy(&t.comm)
        );
    }
    // The lean iterator (the lock evidence's look between two reads) sees
    // the same threads in the same calls, and only this process's.
    let waits = probe.waits().expect("lean task iterator");
    assert!(waits.iter().all(|w| w.tgid == std::process::id()));
    assert!(waits.iter().any(|w| w.tid == gettid()));
    for tid in &tids {
        let w = waits
            .iter()
            .find(|w| w.tid == *tid)
            .unwrap_or_else(|| panic!("tid {tid} missing from the lean pass"));
        let t = tasks.iter().find(|t| t.tid == *tid).expect("seen above");
        assert_eq!(
            (w.state, w.on_cpu, w.syscall_nr, w.arg0),
            (t.state, t.on_cpu, t.regs.syscall_nr, t.regs.args[0]),
            "tid {tid}"
        );
    }
    // SAFETY: valid fd and buffer.
    let n = unsafe { libc::write(wr.as_raw_fd(), b"xxxx".as_ptr().cast(), 4) };
    assert_eq!(n, 4);
    for r in readers {
        r.join().unwrap();
    }
    drop(rd);
}
