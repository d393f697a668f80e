//! `rip-probe offcpu` on a CPython program, for real: one thread asleep
//! in `time.sleep` called from `sleeper_fn`, one in `Lock.acquire` from
//! `locker_fn`. Each off-CPU stack must show the Python frames it ran in
//! place of the `_PyEval_EvalFrameDefault` frames that ran them, as
//! `--pid` does (the frame chain is read while the period runs, and kept
//! only when the same period still runs after the read): in the folded
//! output (`sleeper_fn (pyoff.py:LINE)`, as py-spy names Python frames)
//! and in JSON, on Debian's 3.11, a shared 3.12 and Debian's 3.13.

use std::{
    collections::HashMap,
    io::{BufRead, BufReader},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use rip_tests::{TempDir, bpf_tests_enabled, rip_probe_json, rip_probe_ok};
use serde_json::Value;

const CLI: &str = env!("CARGO_BIN_EXE_rip-probe-cli");

/// `sleeper_fn` sleeps at line 6, `locker_fn` waits at line 8.
const PROGRAM: &str = r#"
import threading, time
lock = threading.Lock(); lock.acquire()
tids = {}
def sleeper_fn():
    time.sleep(100000)
def locker_fn():
    lock.acquire()
def run(name, f):
    tids[name] = threading.get_native_id()
    f()
for name, f in [("sleeper", sleeper_fn), ("locker", locker_fn)]:
    threading.Thread(target=run, args=(name, f), name=name, daemon=True).start()
while len(tids) < 2:
    time.sleep(0.01)
for name, tid in tids.items():
    print(name, tid, flush=True)
print("ready", flush=True)
time.sleep(100000)
"#;

struct Program(Child);

impl Drop for Program {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(python: &str, dir: &TempDir) -> (Program, HashMap<String, u64>) {
    assert!(
        std::path::Path::new(python).exists(),
        "{python} is missing: run `cargo xtask setup`"
    );
    let script = dir.join("pyoff.py");
    std::fs::write(&script, PROGRAM).unwrap();
    let mut child = Program(
        Command::new(python)
            .arg(&script)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{python}: {e}")),
    );
    let mut tids = HashMap::new();
    for line in BufReader::new(child.0.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if line == "ready" {
            return (child, tids);
        }
        let (name, tid) = line.split_once(' ').unwrap();
        tids.insert(name.to_string(), tid.parse().unwrap());
    }
    panic!("{python} ended before it was ready");
}

/// The folded line of the stack that has `frame`.
fn line_with<'a>(folded: &'a str, frame: &str) -> Option<&'a str> {
    folded.lines().find(|l| l.split(';').any(|f| f == frame))
}

fn check(python: &str) {
    let dir = TempDir::new("/tmp", "rip-python-offcpu");
    let (program, tids) = start(python, &dir);
    let pid = program.0.id().to_string();
    // The threads printed their tids before they reached their waits: a
    // window that began before one of them parked may hold its earlier
    // stack too; the parked ones are there once they are parked.
    let deadline = Instant::now() + Duration::from_secs(120);
    let folded = loop {
        let folded = rip_probe_ok(
            CLI,
            &["offcpu", "--pid", &pid, "--duration", "1s", "--folded"],
        );
        if line_with(&folded, "sleeper_fn (pyoff.py:6)").is_some()
            && line_with(&folded, "locker_fn (pyoff.py:8)").is_some()
        {
            break folded;
        }
        assert!(
            Instant::now() < deadline,
            "no Python frames in the off-CPU stacks: {folded}"
        );
    };
    for (function, inner) in [
        ("sleeper_fn (pyoff.py:6)", "clock_nanosleep"),
        ("locker_fn (pyoff.py:8)", ""),
    ] {
        let line = line_with(&folded, function).unwrap();
        let frames: Vec<&str> = line.rsplit_once(' ').unwrap().0.split(';').collect();
        let at = frames.iter().position(|f| *f == function).unwrap();
        // Called from `run`, from threading's bootstrap; no evaluation
        // frame left; native frames around (the thread starts in libc,
        // and waits in it).
        assert!(frames[at - 1].starts_with("run (pyoff.py:"), "{line}");
        assert!(
            frames
                .iter()
                .any(|f| f.starts_with("Thread._bootstrap (threading.py:")),
            "{line}"
        );
        assert!(!line.contains("_PyEval_EvalFrameDefault"), "{line}");
        assert!(!frames[at + 1..].is_empty(), "{line}");
        assert!(
            frames[at + 1..].iter().all(|f| !f.contains(".py:")),
            "{line}"
        );
        if !inner.is_empty() {
            assert!(frames[at + 1..].iter().any(|f| f.contains(inner)), "{line}");
        }
    }
    // JSON: the same frames, marked Python, with no note.
    let report: Value = rip_probe_json(
        CLI,
        &["offcpu", "--pid", &pid, "--duration", "1s", "--json"],
    );
    let sleeper = report["stacks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| {
            s["tids"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t == tids["sleeper"])
                && s["frames"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|f| f["function"] == "sleeper_fn")
        })
        .unwrap_or_else(|| panic!("no stack of the sleeper with sleeper_fn: {report}"));
    assert!(sleeper["python_note"].is_null(), "{sleeper}");
    let f = sleeper["frames"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["function"] == "sleeper_fn")
        .unwrap();
    assert_eq!(f["python"], true, "{f}");
    assert_eq!(f["line"], 6, "{f}");
}

#[test]
fn offcpu_python_frames_3_11() {
    if !bpf_tests_enabled("offcpu_python_frames_3_11") {
        return;
    }
    check("/usr/bin/python3.11");
}

#[test]
fn offcpu_python_frames_3_12() {
    if !bpf_tests_enabled("offcpu_python_frames_3_12") {
        return;
    }
    check("/root/.pyenv/versions/3.12.1/bin/python3.12");
}

#[test]
fn offcpu_python_frames_3_13() {
    if !bpf_tests_enabled("offcpu_python_frames_3_13") {
        return;
    }
    check(rip_tests::PYTHON_3_13);
}
