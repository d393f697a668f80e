//! Uprobes in bulk: 1,000 functions attached with one `uprobe_multi` link
//! (Linux 6.6+), so attaching and detaching them is one system call each
//! whatever their number; every call still counted, exactly; nothing left
//! once rip-probe is done. Bounded time is shown by the kernel's own
//! account of the links (one link, so one detach), not by a clock.
//!
//! The workload is `tests/c/many_functions.c`: `call N` calls its 1,000
//! functions `fn_000` … `fn_999` in order, N rounds, and says `done`.

use std::{
    io::{BufRead, BufReader, Write},
    process::Command,
    time::{Duration, Instant},
};

use rip_tests::{Background, Workload, bpf_tests_enabled, build_c};
use serde_json::Value;

const CLI: &str = env!("CARGO_BIN_EXE_rip-probe-cli");

fn workload() -> Workload {
    let mut cmd = Command::new(build_c("many_functions", &[]));
    cmd.stderr(std::process::Stdio::piped());
    Workload::start(cmd)
}

/// Has the workload call its functions `rounds` times; waits for its
/// `done`.
fn call(w: &mut Workload, rounds: u32, out: &mut impl BufRead) {
    let stdin = w.child.stdin.as_mut().expect("piped stdin");
    writeln!(stdin, "call {rounds}").unwrap();
    stdin.flush().unwrap();
    let mut l = String::new();
    out.read_line(&mut l).expect("read the workload");
    assert_eq!(l.trim(), "done", "the workload's reply");
}

/// The workload's replies (on its stderr).
fn replies(w: &mut Workload) -> BufReader<std::process::ChildStderr> {
    BufReader::new(w.child.stderr.take().expect("piped stderr"))
}

/// One BPF link held by a process, as its fdinfo describes it.
#[derive(Debug)]
struct Link {
    /// `uprobe_multi`, `perf`, …
    kind: String,
    /// For a perf link: `tracepoint`, `uprobe`, `uretprobe`, …
    event: String,
    /// For a uprobe_multi link: how many offsets it holds.
    count: u64,
    pid: u64,
    prog_id: u64,
}

/// The BPF links process `pid` holds, from its descriptors' fdinfo.
fn links_held_by(pid: u32) -> Vec<Link> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return Vec::new();
    };
    dir.filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
        .filter_map(|info| {
            let field = |k: &str| {
                info.lines()
                    .find_map(|l| l.strip_prefix(k)?.strip_prefix(':').map(str::trim))
                    .map(str::to_string)
            };
            let num = |k: &str| field(k).and_then(|v| v.parse().ok()).unwrap_or(0);
            Some(Link {
                kind: field("link_type")?,
                event: field("event_type").unwrap_or_default(),
                count: num("uprobe_cnt"),
                pid: num("pid"),
                prog_id: num("prog_id"),
            })
        })
        .collect()
}

/// Whether this kernel has uprobe_multi links (Linux 6.6).
fn kernel_has_uprobe_multi() -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut v = release
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse::<u32>().unwrap_or(0));
    (v.next().unwrap_or(0), v.next().unwrap_or(0)) >= (6, 6)
}

fn bpftool_ids(what: &str) -> Vec<(u64, u64)> {
    let out = Command::new("bpftool")
        .args([what, "show", "--json"])
        .output()
        .expect("bpftool runs (cargo xtask setup installs it)");
    assert!(out.status.success(), "bpftool {what} show failed");
    let v: Value = serde_json::from_slice(&out.stdout).expect("bpftool JSON");
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| {
            (
                x["id"].as_u64().unwrap(),
                x["prog_id"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

/// Waits until none of `progs` is loaded and no link runs one of them
/// (the kernel frees a program after a grace period once its last
/// descriptor is closed).
fn assert_gone(progs: &[u64]) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let loaded: Vec<u64> = bpftool_ids("prog")
            .into_iter()
            .map(|(id, _)| id)
            .filter(|id| progs.contains(id))
            .collect();
        let linked: Vec<u64> = bpftool_ids("link")
            .into_iter()
            .filter(|(_, p)| progs.contains(p))
            .map(|(id, _)| id)
            .collect();
        if loaded.is_empty() && linked.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "left behind: programs {loaded:?}, links {linked:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The workload's main thread's `--uprobe` location in a report: the
/// function last entered and the hit count.
fn last_entered(report: &Value, tid: u32) -> Option<(String, u64)> {
    let t = report["threads"]
        .as_array()?
        .iter()
        .find(|t| t["tid"].as_u64() == Some(u64::from(tid)))?;
    let loc = &t["location"];
    (loc["source"] == "uprobe").then(|| {
        (
            loc["frame"]["function"].as_str().unwrap_or("?").to_string(),
            loc["seq"].as_u64().unwrap_or(0),
        )
    })
}

#[test]
fn a_thousand_functions_take_one_link_and_every_call_counts() {
    if !bpf_tests_enabled("a_thousand_functions_take_one_link_and_every_call_counts") {
        return;
    }
    let mut w = workload();
    let mut from_w = replies(&mut w);
    let pid = w.pid();
    let mut run = Background::spawn(
        Command::new(CLI)
            .args(["--pid", &pid.to_string(), "--uprobe", "fn_*"])
            .args(["--watch", "--duration", "500ms", "--json"])
            .env_remove("RIP_PROBE_UPROBE_MULTI"),
    );
    run.wait_phase("attach uprobes");

    // The kernel's account: one link for the 1,000 functions (or, on a
    // kernel without them, one perf event each).
    let links = links_held_by(run.child.id());
    let progs: Vec<u64> = links.iter().map(|l| l.prog_id).collect();
    let multi: Vec<&Link> = links
        .iter()
        .filter(|l| l.kind.ends_with("probe_multi"))
        .collect();
    let single = links
        .iter()
        .filter(|l| l.kind == "perf" && l.event == "uprobe")
        .count();
    if kernel_has_uprobe_multi() {
        assert_eq!(multi.len(), 1, "one uprobe_multi link: {links:?}");
        assert_eq!(multi[0].count, 1000, "holding every function: {links:?}");
        assert_eq!(u64::from(pid), multi[0].pid, "for the workload only");
        assert_eq!(single, 0, "and no uprobe one by one: {links:?}");
    } else {
        assert_eq!((multi.len(), single), (0, 1000), "{links:?}");
    }

    call(&mut w, 3, &mut from_w);
    // Reports come every 500 ms: each shows the hits so far, never more
    // than were made; one taken after `done` shows all 3,000.
    let mut reports = BufReader::new(run.child.stdout.take().expect("piped stdout"));
    let mut seen = Vec::new();
    loop {
        let mut l = String::new();
        let n = reports.read_line(&mut l).expect("read rip-probe");
        assert!(n > 0, "rip-probe ended early; saw {seen:?}");
        let report: Value = serde_json::from_str(&l).expect("a JSON line");
        let Some((function, hits)) = last_entered(&report, pid) else {
            continue;
        };
        seen.push(hits);
        assert!(hits <= 3000, "more hits than calls: {seen:?}");
        if hits == 3000 {
            assert_eq!(function, "fn_999", "the last function called");
            break;
        }
    }

    // The target's exit ends the watch; the links go with rip-probe.
    drop(from_w);
    drop(w);
    let out = run.finish();
    assert!(out.status.success(), "rip-probe: {}", out.stderr);
    assert_gone(&progs);
}

#[test]
fn calls_counts_exactly_through_two_links() {
    if !bpf_tests_enabled("calls_counts_exactly_through_two_links") {
        return;
    }
    let mut w = workload();
    let mut from_w = replies(&mut w);
    let mut run = Background::spawn(
        Command::new(CLI)
            .args(["calls", "--pid", &w.pid().to_string(), "--json"])
            // fn_000 … fn_059: 60 functions.
            .args(["--uprobe", "fn_0[0-5]?", "--duration", "10m"])
            .env_remove("RIP_PROBE_UPROBE_MULTI"),
    );
    run.wait_phase("attach uprobes");
    let links = links_held_by(run.child.id());
    let progs: Vec<u64> = links.iter().map(|l| l.prog_id).collect();
    if kernel_has_uprobe_multi() {
        let mut multi: Vec<(&str, u64)> = links
            .iter()
            .filter(|l| l.kind.ends_with("probe_multi"))
            .map(|l| (l.kind.as_str(), l.count))
            .collect();
        multi.sort_unstable();
        // The entry probes and the return probes (fdinfo names the
        // latter `uretprobe_multi`).
        assert_eq!(
            multi,
            [("uprobe_multi", 60), ("uretprobe_multi", 60)],
            "{links:?}"
        );
    }
    call(&mut w, 7, &mut from_w);
    // The workload's exit ends the window with what was counted.
    writeln!(w.child.stdin.as_mut().unwrap(), "exit").unwrap();
    let out = run.finish();
    assert!(out.status.success(), "rip-probe calls: {}", out.stderr);
    let report: Value = serde_json::from_str(&out.stdout).expect("JSON");
    let functions = report["functions"].as_array().unwrap();
    assert_eq!(functions.len(), 60, "{report}");
    for f in functions {
        assert_eq!(f["calls"].as_u64(), Some(7), "{f}");
    }
    assert_gone(&progs);
}

#[test]
fn without_uprobe_multi_each_function_gets_its_own_uprobe() {
    if !bpf_tests_enabled("without_uprobe_multi_each_function_gets_its_own_uprobe") {
        return;
    }
    let mut w = workload();
    let mut from_w = replies(&mut w);
    let mut run = Background::spawn(
        Command::new(CLI)
            .args(["calls", "--pid", &w.pid().to_string(), "--json"])
            .args(["--uprobe", "fn_00?", "--duration", "10m"])
            .env("RIP_PROBE_UPROBE_MULTI", "0")
            // 20 uprobes one by one: more than are attached without
            // measuring the kernel's detach; allowed here whatever a
            // loaded machine's grace periods cost.
            .env("RIP_PROBE_ONE_BY_ONE_MAX", "20"),
    );
    run.wait_phase("attach uprobes");
    let links = links_held_by(run.child.id());
    let progs: Vec<u64> = links.iter().map(|l| l.prog_id).collect();
    let kinds: Vec<(&str, &str)> = links
        .iter()
        .filter(|l| l.kind != "perf" || l.event != "tracepoint")
        .map(|l| (l.kind.as_str(), l.event.as_str()))
        .collect();
    // 10 entries and 10 returns, one perf event each.
    assert_eq!(kinds.len(), 20, "{links:?}");
    assert!(
        kinds
            .iter()
            .all(|(k, e)| *k == "perf" && matches!(*e, "uprobe" | "uretprobe")),
        "{links:?}"
    );
    call(&mut w, 2, &mut from_w);
    writeln!(w.child.stdin.as_mut().unwrap(), "exit").unwrap();
    let out = run.finish();
    assert!(out.status.success(), "rip-probe calls: {}", out.stderr);
    let report: Value = serde_json::from_str(&out.stdout).expect("JSON");
    let functions = report["functions"].as_array().unwrap();
    assert_eq!(functions.len(), 10, "{report}");
    for f in functions {
        assert_eq!(f["calls"].as_u64(), Some(2), "{f}");
    }
    assert_gone(&progs);
}

/// One uprobe at a time, 1,000 functions are more than detach in the
/// bound (each detach waits for a grace period of the kernel, about
/// 100 ms here and longer under load): refused before any is attached,
/// with one line giving the measured cost, the most allowed, and what
/// to do.
#[test]
fn one_by_one_more_than_detach_in_time_are_refused() {
    if !bpf_tests_enabled("one_by_one_more_than_detach_in_time_are_refused") {
        return;
    }
    let w = workload();
    let out = Command::new(CLI)
        .args(["--pid", &w.pid().to_string(), "--uprobe", "fn_*"])
        .args(["--duration", "0"])
        .env("RIP_PROBE_UPROBE_MULTI", "0")
        .env_remove("RIP_PROBE_ONE_BY_ONE_MAX")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(out.stdout.is_empty(), "no report");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    for part in [
        "1000 uprobes one by one would take about ",
        "each, measured; at most ",
        "so none was attached (RIP_PROBE_UPROBE_MULTI=0 turns uprobe_multi links off)",
        "narrow the pattern, use Linux 6.6 or later",
        "RIP_PROBE_ONE_BY_ONE_MAX=1000",
    ] {
        assert!(err.contains(part), "{part:?} in {err}");
    }
    let most: usize = err
        .split("at most ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .expect("the most allowed");
    assert!((16..1000).contains(&most), "{err}");
}

/// Makes the calling thread real-time (SCHED_FIFO) until dropped: a test
/// that must see a phase of rip-probe before it ends then wakes on time
/// whatever else loads the CPUs.
struct RealTime;

impl RealTime {
    fn new() -> RealTime {
        let p = libc::sched_param { sched_priority: 1 };
        // SAFETY: valid parameters for the calling thread.
        let r = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) };
        assert_eq!(r, 0, "SCHED_FIFO (the test runs as root)");
        RealTime
    }
}

impl Drop for RealTime {
    fn drop(&mut self) {
        let p = libc::sched_param { sched_priority: 0 };
        // SAFETY: as above.
        unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &p) };
    }
}

/// Ctrl-C while 1,000 uprobes are being attached one by one: the first
/// SIGINT stops attaching, what was attached is detached, and rip-probe
/// ends with one line saying how far it got (status 130, no report); no
/// program or link of it is left. The SIGINT is sent once rip-probe holds
/// uprobes (seen in its descriptors, by a real-time thread so that a
/// loaded machine cannot hide the attaching from it).
#[test]
fn ctrl_c_while_attaching_one_by_one_stops_and_detaches() {
    if !bpf_tests_enabled("ctrl_c_while_attaching_one_by_one_stops_and_detaches") {
        return;
    }
    let w = workload();
    let run = Background::spawn(
        Command::new(CLI)
            .args(["--pid", &w.pid().to_string(), "--uprobe", "fn_*"])
            .args(["--duration", "10m"])
            .env("RIP_PROBE_UPROBE_MULTI", "0")
            .env("RIP_PROBE_ONE_BY_ONE_MAX", "1000"),
    );
    let pid = run.child.id();
    let mut progs = Vec::new();
    {
        let _rt = RealTime::new();
        loop {
            let links = links_held_by(pid);
            progs.extend(links.iter().map(|l| l.prog_id));
            let uprobes = links
                .iter()
                .filter(|l| l.kind == "perf" && l.event == "uprobe")
                .count();
            if uprobes > 0 {
                assert!(uprobes < 1000, "all attached before the test saw one");
                break;
            }
            assert!(
                std::fs::metadata(format!("/proc/{pid}/fdinfo")).is_ok(),
                "rip-probe ended before attaching"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    // SAFETY: a signal to our own child.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGINT) }, 0);
    progs.sort_unstable();
    progs.dedup();
    let out = run.finish();
    assert_eq!(out.status.code(), Some(130), "{}", out.stderr);
    assert!(out.stdout.is_empty(), "no report: {}", out.stdout);
    let err = out.stderr.trim();
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    let done = err
        .split("SIGINT while attaching uprobes one by one: stopped after ")
        .nth(1)
        .unwrap_or_else(|| panic!("{err}"));
    let attached: usize = done.split(' ').next().unwrap().parse().unwrap();
    assert!(
        (1..1000).contains(&attached) && done.contains("of 1000, and detached them"),
        "{err}"
    );
    assert_gone(&progs);
}
