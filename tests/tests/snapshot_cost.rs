//! A snapshot costs the target nothing: `rip-probe --pid N --duration 0`
//! and `rip-probe serve` hold no program that runs at the target's
//! context switches (no sched_switch, raw or classic; no uprobe), only
//! the task iterator, which runs when rip-probe reads it; and the report
//! still gives every thread its state, its system call and a blocked time
//! that is a lower bound (`tests/c/blocked_bounds.c`'s sleepers know
//! theirs from the inside).
//!
//! What rip-probe holds is read from its descriptors
//! (`rip_tests::bpf_programs_held_by`) while it is sure to hold its
//! programs: `--duration 0` writes its report into a pipe of one page that
//! the test does not read until it has looked, so rip-probe waits in that
//! write with its session open; serve is looked at until it has been seen
//! in the middle of its snapshots many times.

use std::{
    io::Read,
    os::fd::{FromRawFd, OwnedFd},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use rip_tests::{
    BpfProgram, Workload, bpf_programs_described, bpf_programs_held_by, bpf_tests_enabled, build_c,
    json_thread, monotonic_ns,
};
use serde_json::Value;

const CLI: &str = env!("CARGO_BIN_EXE_rip-probe-cli");

/// Program types that run at kernel events while the target runs (a
/// uprobe is a `kprobe` program; a classic tracepoint's is `tracepoint`).
const RUN_AT_EVENTS: &[&str] = &[
    "raw_tracepoint",
    "raw_tracepoint_writable",
    "tracepoint",
    "kprobe",
    "perf_event",
];

/// `blocked_bounds fresh N`, once every sleeper is in pause(2) (read from
/// /proc, as the kernel says it: nothing is timed); its sleepers' (tid,
/// CLOCK_MONOTONIC ns just before they blocked).
fn sleepers(n: usize) -> (Workload, Vec<(u32, u64)>) {
    let mut cmd = Command::new(build_c("blocked_bounds", &[]));
    cmd.args(["fresh", &n.to_string()]);
    let w = Workload::start(cmd);
    let s: Vec<(u32, u64)> = w
        .lines
        .iter()
        .filter_map(|l| {
            let mut f = l.strip_prefix("sleeper ")?.split_whitespace();
            Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?))
        })
        .collect();
    assert_eq!(s.len(), n, "{:?}", w.lines);
    let deadline = Instant::now() + Duration::from_secs(120);
    // The main thread too: it pauses once it has said `ready`.
    for tid in s.iter().map(|&(tid, _)| tid).chain([w.pid()]) {
        let path = format!("/proc/{}/task/{tid}/syscall", w.pid());
        // x86-64's pause(2) is system call 34.
        while std::fs::read_to_string(&path)
            .unwrap_or_default()
            .split_whitespace()
            .next()
            != Some("34")
        {
            assert!(Instant::now() < deadline, "thread {tid} never paused");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    (w, s)
}

/// The programs of `progs` that run at kernel events while the target
/// runs.
fn run_at_events(progs: &[BpfProgram]) -> Vec<&BpfProgram> {
    progs
        .iter()
        .filter(|p| RUN_AT_EVENTS.contains(&p.kind.as_str()))
        .collect()
}

/// A pipe whose buffer is one page: (read end, write end, its size).
fn small_pipe() -> (OwnedFd, OwnedFd, usize) {
    let mut fds = [0; 2];
    // SAFETY: fds has room for the two descriptors.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both were just opened and are owned here alone.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: fcntl on a descriptor we own.
    let size = unsafe { libc::fcntl(fds[1], libc::F_SETPIPE_SZ, 4096) };
    assert!(
        size > 0,
        "F_SETPIPE_SZ: {}",
        std::io::Error::last_os_error()
    );
    (r, w, size as usize)
}

/// Waits until `fd` has data to read (or its writer closed it).
fn until_readable(fd: &OwnedFd, child: &mut std::process::Child) {
    use std::os::fd::AsRawFd;
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let mut p = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd, ours.
        let n = unsafe { libc::poll(&mut p, 1, 100) };
        if n > 0 {
            return;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "rip-probe ended without writing its report"
        );
        assert!(Instant::now() < deadline, "rip-probe wrote nothing");
    }
}

#[test]
fn a_duration_0_report_holds_no_switch_program_and_bounds_every_thread() {
    if !bpf_tests_enabled("a_duration_0_report_holds_no_switch_program_and_bounds_every_thread") {
        return;
    }
    let (w, sleepers) = sleepers(8);
    let pid = w.pid().to_string();

    // --json into a one-page pipe: rip-probe blocks writing its report,
    // its session (and so its programs) still open, until it is read.
    let (r, wr, pipe_size) = small_pipe();
    let mut child = Command::new(CLI)
        .args(["--pid", &pid, "--duration", "0", "--json"])
        .stdout(Stdio::from(wr))
        .stderr(Stdio::piped())
        .spawn()
        .expect("start rip-probe");
    until_readable(&r, &mut child);
    let held = bpf_programs_held_by(child.id());
    let progs = bpf_programs_described(&held);
    let mut json = Vec::new();
    std::fs::File::from(r).read_to_end(&mut json).unwrap();
    let out = child.wait_with_output().unwrap();
    let after = monotonic_ns();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The census was taken while rip-probe waited to write the rest.
    assert!(
        json.len() > pipe_size,
        "a report of {} bytes fits the pipe ({pipe_size}): rip-probe may have closed its \
         session before it was looked at",
        json.len()
    );
    assert!(
        progs.iter().any(|p| p.kind == "tracing"),
        "rip-probe holds no task iterator while it writes its report: {progs:?} (ids {held:?})"
    );
    assert_eq!(
        run_at_events(&progs),
        Vec::<&BpfProgram>::new(),
        "a --duration 0 report holds programs that run while the target does"
    );

    // Every thread with its state and system call; every sleeper's blocked
    // time a lower bound from its own clock, never more than the truth.
    let v: Value = serde_json::from_slice(&json).expect("the report is JSON");
    assert_eq!(v["window_ns"], 0, "a snapshot has no window");
    let threads = v["threads"].as_array().unwrap();
    assert_eq!(threads.len(), sleepers.len() + 1, "{v}");
    for t in threads {
        assert_eq!(t["state"], "sleeping", "{t}");
        assert_eq!(t["syscall"]["name"], "pause", "{t}");
        assert!(t["blocked"].is_object(), "{t}");
    }
    for &(tid, asleep_since) in &sleepers {
        let t = json_thread(&v, tid);
        let b = &t["blocked"];
        assert_eq!(b["exact"], false, "no switch was recorded: {t}");
        assert!(
            ["task_clock", "none"].contains(&b["source"].as_str().unwrap()),
            "{t}"
        );
        let ns = b["ns"].as_u64().unwrap();
        assert!(
            ns <= after - asleep_since,
            "thread {tid} asleep for at most {} ns is reported blocked {ns} ns: {t}",
            after - asleep_since
        );
    }

    // The text says it is a snapshot, not how long it "observed".
    let text = Command::new(CLI)
        .args(["--pid", &pid, "--duration", "0"])
        .output()
        .unwrap();
    assert!(text.status.success());
    let text = String::from_utf8_lossy(&text.stdout);
    let head = text.lines().next().unwrap_or_default();
    assert!(head.starts_with(&format!("pid {pid} ")), "{text}");
    assert!(head.ends_with(", snapshot (no window)"), "{head}");
}

#[test]
fn serve_snapshots_hold_no_switch_program() {
    if !bpf_tests_enabled("serve_snapshots_hold_no_switch_program") {
        return;
    }
    let (w, _) = sleepers(2);
    let mut serve = Command::new(CLI)
        .args(["serve", "--listen", "127.0.0.1:0", "--interval", "10ms"])
        .args(["--pid", &w.pid().to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start rip-probe serve");
    // Serve is looked at until it has been caught holding a snapshot's
    // programs this many times (each a snapshot under way): none runs at
    // the target's switches.
    const CAUGHT: usize = 20;
    let mut caught = 0;
    // The loader probes the kernel's features once per process, before
    // its first load, with throwaway unnamed programs it never attaches:
    // serve is judged from the first time it holds one of its own.
    let mut loaded = false;
    let deadline = Instant::now() + Duration::from_secs(300);
    while caught < CAUGHT {
        assert!(
            serve.try_wait().unwrap().is_none(),
            "serve ended on its own"
        );
        assert!(
            Instant::now() < deadline,
            "serve was seen holding programs {caught} times, not {CAUGHT}"
        );
        let progs = bpf_programs_described(&bpf_programs_held_by(serve.id()));
        if progs.is_empty() {
            // Between two snapshots: looked at again shortly.
            std::thread::sleep(Duration::from_millis(2));
            continue;
        }
        loaded |= progs.iter().any(|p| !p.name.is_empty());
        if !loaded {
            std::thread::sleep(Duration::from_millis(2));
            continue;
        }
        caught += 1;
        assert_eq!(
            run_at_events(&progs),
            Vec::<&BpfProgram>::new(),
            "serve's snapshot holds programs that run while the target does"
        );
    }
    serve.kill().unwrap();
    serve.wait().unwrap();
}
