//! `rip-probe --pid`'s blocked times are true: an exact time or a lower
//! bound never exceeds what the workload (`tests/c/blocked_bounds.c`)
//! knows from the inside — fresh threads are not blocked longer than they
//! have existed, a thread passing a hot mutex around a 2 ms sleep is not
//! blocked longer than its longest wait — on a quiet machine and on one
//! loaded by CPU burners the test starts.

use std::{
    process::Command,
    time::{Duration, Instant},
};

use rip_tests::{
    TempDir, Workload, bpf_tests_enabled, build_c, json_thread, monotonic_ns, rip_probe_json,
};
use serde_json::Value;

const CLI: &str = env!("CARGO_BIN_EXE_rip-probe-cli");

fn workload(args: &[&str]) -> Workload {
    let mut cmd = Command::new(build_c("blocked_bounds", &[]));
    cmd.args(args);
    Workload::start(cmd)
}

/// One report of `pid` as JSON, after a window of `window` (`0`: a
/// snapshot alone, with no switch recorded).
fn snapshot(pid: u32, window: &str) -> Value {
    rip_probe_json(
        CLI,
        &["--pid", &pid.to_string(), "--duration", window, "--json"],
    )
}

/// A blocked time's `ns`, after checking that it says how it was
/// obtained.
fn blocked_ns(t: &Value) -> u64 {
    let b = &t["blocked"];
    let source = b["source"].as_str().unwrap_or_else(|| panic!("{t}"));
    assert!(
        ["switch", "window", "task_clock", "none"].contains(&source),
        "{t}"
    );
    assert_eq!(b["exact"], source == "switch", "{t}");
    b["ns"].as_u64().unwrap()
}

/// Four threads asleep for good in a process `age` old: none is reported
/// blocked longer than since it last ran (which is less than its age).
fn fresh_threads_bounded(age: Duration) {
    let w = workload(&["fresh", "4"]);
    std::thread::sleep(age);
    let r = snapshot(w.pid(), "0");
    let after = monotonic_ns();
    let sleepers: Vec<(u32, u64)> = w
        .lines
        .iter()
        .filter_map(|l| {
            let mut f = l.strip_prefix("sleeper ")?.split_whitespace();
            Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?))
        })
        .collect();
    assert_eq!(sleepers.len(), 4, "{:?}", w.lines);
    for (tid, asleep_since) in sleepers {
        let t = json_thread(&r, tid);
        let ns = blocked_ns(t);
        assert!(
            ns <= after - asleep_since,
            "thread {tid} asleep for at most {} ns is reported blocked {ns} ns: {t}",
            after - asleep_since
        );
    }
}

/// Each contender's (waits done, longest wait ns), from the workload's
/// counters file.
fn counters(path: &std::path::Path) -> Vec<(u64, u64)> {
    let b = std::fs::read(path).unwrap();
    b.chunks_exact(16)
        .map(|c| {
            let w = |i: usize| u64::from_le_bytes(c[i..i + 8].try_into().unwrap());
            (w(0), w(8))
        })
        .collect()
}

/// Four threads pass a mutex, each holding it across a 2 ms
/// clock_nanosleep; `snapshots` reports (each after a short window) give
/// every contender a blocked time no longer than its longest wait timed
/// from the inside, read once the wait that was under way at the report
/// has ended.
fn hot_mutex_bounded(snapshots: usize) {
    let dir = TempDir::new("/tmp", "blocked-bounds");
    let file = dir.join("counters");
    let w = workload(&["hot", file.to_str().unwrap()]);
    let contenders: Vec<(u32, usize)> = w
        .lines
        .iter()
        .filter_map(|l| {
            let mut f = l.strip_prefix("contender ")?.split_whitespace();
            Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?))
        })
        .collect();
    assert_eq!(contenders.len(), 4, "{:?}", w.lines);
    let mut exact = 0;
    for _ in 0..snapshots {
        // A short window: switches seen in it give exact times.
        let r = snapshot(w.pid(), "100ms");
        // Every wait under way at the report ends: each thread's count
        // moves past where it is now.
        let at = counters(&file);
        let deadline = Instant::now() + Duration::from_secs(120);
        let done = loop {
            let now = counters(&file);
            if now.iter().zip(&at).all(|(n, a)| n.0 > a.0) {
                break now;
            }
            assert!(Instant::now() < deadline, "the contenders stopped: {now:?}");
            std::thread::sleep(Duration::from_millis(1));
        };
        for &(tid, i) in &contenders {
            let t = json_thread(&r, tid);
            if t["blocked"].is_null() {
                continue;
            }
            let ns = blocked_ns(t);
            exact += usize::from(t["blocked"]["exact"] == true);
            let longest = done[i].1;
            assert!(
                ns <= longest,
                "contender {tid} never waited more than {longest} ns, reported blocked {ns} ns: {t}"
            );
        }
    }
    // The switches of threads seen leaving the CPU give exact times.
    assert!(exact > 0, "no exact blocked time in {snapshots} reports");
}

#[test]
fn fresh_threads_are_not_blocked_longer_than_they_have_lived() {
    if !bpf_tests_enabled("fresh_threads_are_not_blocked_longer_than_they_have_lived") {
        return;
    }
    fresh_threads_bounded(Duration::ZERO);
    fresh_threads_bounded(Duration::from_secs(1));
}

#[test]
fn a_thread_in_a_2ms_sleep_beside_a_hot_mutex_is_not_blocked_all_window() {
    if !bpf_tests_enabled("a_thread_in_a_2ms_sleep_beside_a_hot_mutex_is_not_blocked_all_window") {
        return;
    }
    hot_mutex_bounded(10);
}

#[test]
fn blocked_times_stay_bounds_on_a_loaded_machine() {
    if !bpf_tests_enabled("blocked_times_stay_bounds_on_a_loaded_machine") {
        return;
    }
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    let _burners = workload(&["burn", &(2 * cpus).to_string()]);
    fresh_threads_bounded(Duration::from_secs(1));
    hot_mutex_bounded(5);
}
