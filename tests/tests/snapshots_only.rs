//! A snapshots-only session (what `rip-probe --pid N --duration 0` runs,
//! and what a tool that reports every interval keeps open): no program of
//! rip's is attached to anything that runs while the target does, so
//! looking costs the target nothing; and each of its snapshots, taken
//! again and again through the same session, still gives every thread its
//! state, its system call and a blocked time that is a lower bound
//! (`tests/c/blocked_bounds.c`'s sleepers know theirs from the inside).
//!
//! What is attached is read from this process's own file descriptors: a
//! tracepoint program is held by a perf event or a BPF link; the session
//! lives in this process. The file has one test, so no other test's
//! descriptors are among them.

use std::{
    process::Command,
    time::{Duration, Instant},
};

use rip_probe::{
    model::{BlockedSource, Report, ThreadState},
    session::{Session, SessionOptions},
};
use rip_tests::{Workload, bpf_tests_enabled, build_c, monotonic_ns};

/// The attachments this process holds that run a program at kernel events
/// (each described: the fd and what it is): perf events (a tracepoint's,
/// or sampling) and BPF links other than iterators'.
fn event_attachments() -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        let Ok(target) = std::fs::read_link(e.path()) else {
            continue; // closed since listed
        };
        let target = target.to_string_lossy().into_owned();
        let fd = e.file_name().to_string_lossy().into_owned();
        if target.contains("perf_event") {
            out.push(format!("fd {fd}: {target}"));
        } else if target.contains("bpf_link") || target.contains("bpf-link") {
            let info =
                std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).unwrap_or_default();
            let kind = info
                .lines()
                .find_map(|l| l.strip_prefix("link_type:"))
                .map(str::trim)
                .unwrap_or("?")
                .to_string();
            if kind != "iter" {
                out.push(format!("fd {fd}: {target} ({kind})"));
            }
        }
    }
    out
}

/// The sleepers' (tid, CLOCK_MONOTONIC ns just before they blocked).
fn sleepers(w: &Workload) -> Vec<(u32, u64)> {
    let s: Vec<(u32, u64)> = w
        .lines
        .iter()
        .filter_map(|l| {
            let mut f = l.strip_prefix("sleeper ")?.split_whitespace();
            Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?))
        })
        .collect();
    assert_eq!(s.len(), 4, "{:?}", w.lines);
    s
}

/// Every sleeper found in pause(2) by `r`.
fn all_paused(r: &Report, sleepers: &[(u32, u64)]) -> bool {
    sleepers.iter().all(|&(tid, _)| {
        r.threads.iter().any(|t| {
            t.tid == u64::from(tid)
                && t.state == ThreadState::Sleeping
                && t.syscall.as_ref().is_some_and(|s| s.name == "pause")
        })
    })
}

#[test]
fn a_snapshots_only_session_attaches_nothing_and_reports_every_thread() {
    if !bpf_tests_enabled("a_snapshots_only_session_attaches_nothing_and_reports_every_thread") {
        return;
    }
    let mut cmd = Command::new(build_c("blocked_bounds", &[]));
    cmd.args(["fresh", "4"]);
    let w = Workload::start(cmd);
    let sleepers = sleepers(&w);

    let mut opts = SessionOptions::new(w.pid());
    opts.switches = false;
    opts.stacks = false;
    let before = event_attachments();
    let mut session = Session::attach(&opts).expect("attach");
    // The sleepers reach pause(2) right after printing their line; the
    // snapshot that finds them all there is the one checked (a busy
    // machine may delay them). Each is a new pass of the same session.
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut taken = 0;
    let (report, after) = loop {
        let r = session.snapshot().expect("snapshot");
        let after = monotonic_ns();
        taken += 1;
        assert_eq!(
            event_attachments(),
            before,
            "a snapshots-only session attached something (snapshot {taken})"
        );
        if all_paused(&r, &sleepers) && taken >= 2 {
            break (r, after);
        }
        assert!(Instant::now() < deadline, "the sleepers never all paused");
    };
    // The main thread and the four sleepers, each with its state and
    // system call.
    assert_eq!(report.threads.len(), 5, "{:?}", report.threads);
    for t in &report.threads {
        assert_eq!(t.state, ThreadState::Sleeping, "{t:?}");
        assert_eq!(t.syscall.as_ref().map(|s| s.name.as_str()), Some("pause"));
    }
    // Blocked times: lower bounds from the task's own clock (no switch
    // was recorded, so none is exact), never longer than the truth.
    for &(tid, asleep_since) in &sleepers {
        let t = report
            .threads
            .iter()
            .find(|t| t.tid == u64::from(tid))
            .unwrap();
        let b = t.blocked.expect("a blocked thread has a blocked time");
        assert!(!b.exact, "{t:?}");
        assert!(
            matches!(b.source, BlockedSource::TaskClock | BlockedSource::None),
            "{t:?}"
        );
        assert!(
            b.ns <= after - asleep_since,
            "thread {tid} asleep for at most {} ns is reported blocked {} ns",
            after - asleep_since,
            b.ns
        );
    }
    drop(session);

    // The observation sees a session that records switches: it holds
    // sched_switch's attachment.
    let mut opts = SessionOptions::new(w.pid());
    opts.stacks = false;
    let session = Session::attach(&opts).expect("attach");
    let held = event_attachments();
    assert!(
        held.len() > before.len(),
        "sched_switch's attachment not seen: {held:?}"
    );
    drop(session);
}
