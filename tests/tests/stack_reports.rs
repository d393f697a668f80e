//! User stacks in `rip-probe --pid` reports, for real: text, `--json` and
//! `--folded` on `tests/c/user_stacks.c` (built `-O2 -fomit-frame-pointer`
//! and stripped, calling through a library of its own), with threads
//! blocked in read, futex, epoll_wait, nanosleep and a signal handler, and
//! one spinning; 1,000 threads read without pausing the process; and
//! Debian's own perl and python3, named by their exported symbols.

use std::{
    io::Read,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use rip_tests::{
    bpf_tests_enabled, rip_probe_json, rip_probe_ok,
    user_stacks::{Build, CHAIN, Target},
};
use serde_json::Value;

const CLI: &str = env!("CARGO_BIN_EXE_rip-probe-cli");

/// The function names of a JSON frames array (`?` for unnamed frames).
fn names(frames: &Value) -> Vec<String> {
    frames
        .as_array()
        .unwrap_or_else(|| panic!("frames: {frames}"))
        .iter()
        .map(|f| f["function"].as_str().unwrap_or("?").to_string())
        .collect()
}

fn thread(report: &Value, tid: u32) -> &Value {
    report["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tid"] == tid)
        .unwrap_or_else(|| panic!("tid {tid} not in the report"))
}

/// `names` has `innermost` then the chain of user_stacks.c, in order.
fn assert_chain(names: &[String], innermost: &str, what: &str) {
    let at = names
        .iter()
        .position(|n| n == innermost)
        .unwrap_or_else(|| panic!("{what}: no {innermost} in {names:?}"));
    let got: Vec<&str> = names[at..].iter().take(6).map(String::as_str).collect();
    let want: Vec<&str> = std::iter::once(innermost).chain(CHAIN).collect();
    assert_eq!(got, want, "{what}: {names:?}");
}

/// Text, JSON and folded reports of every kind of thread, from the CLI.
#[test]
fn stacks_in_text_json_and_folded_reports() {
    if !bpf_tests_enabled("stacks_in_text_json_and_folded_reports") {
        return;
    }
    let target = Target::start(Build::Stripped, 0, true);
    let pid = target.pid().to_string();
    let roles = target.threads("role ");
    let spinner = target.threads("spinner ")[0].1;

    let report = rip_probe_json(CLI, &["--pid", &pid, "--duration", "1s", "--json"]);
    for (kind, tid) in &roles {
        let t = thread(&report, *tid);
        let n = names(&t["frames"]);
        let what = format!("{kind} (tid {tid})");
        if kind == "signal" {
            assert_chain(&n, "stk_block_pause", &what);
            let h = n.iter().position(|f| f == "stk_on_signal").unwrap();
            assert_eq!(n[h - 1], "stk_signal_wait", "{what}: {n:?}");
        } else {
            assert_chain(&n, &format!("stk_block_{kind}"), &what);
        }
        // Innermost: libc's wrapper, where the thread entered the kernel.
        let first = &t["frames"][0];
        assert!(
            first["module"]
                .as_str()
                .is_some_and(|m| m.contains("libc.so")),
            "{what}: {first}"
        );
        assert!(t["stack_samples"].is_null(), "{what}: unwound, not sampled");
        // Its group has its stack.
        let g = report["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["ids"].as_array().unwrap().contains(&(*tid).into()))
            .unwrap();
        assert_eq!(g["frames"], t["frames"], "{what}");
    }
    // The spinning thread: its hottest stack in the window, sampled.
    let t = thread(&report, spinner);
    // On a CPU, or waiting for one on a busy machine.
    assert!(t["state"] == "running" || t["state"] == "runnable", "{t}");
    assert_chain(&names(&t["frames"]), "stk_block_spin", "spinner");
    let (count, total) = (
        t["stack_samples"]["count"].as_u64().unwrap(),
        t["stack_samples"]["total"].as_u64().unwrap(),
    );
    assert!(count >= 1 && count <= total, "{t}");
    assert_eq!(t["frames"][0]["function"], "stk_spin_step", "hottest: {t}");

    // Text: each group with its stack, frames named with their modules.
    let text = rip_probe_ok(CLI, &["--pid", &pid, "--duration", "1s"]);
    let read_tid = roles.iter().find(|r| r.0 == "read").unwrap().1;
    let lines: Vec<&str> = text.lines().collect();
    let at = lines
        .iter()
        .position(|l| *l == format!("      tids: {read_tid}"))
        .unwrap_or_else(|| panic!("no group of tid {read_tid}:\n{text}"));
    assert!(
        lines[at - 1].starts_with("  1 thread blocked in read"),
        "{}",
        lines[at - 1]
    );
    let stack: Vec<&str> = lines[at + 1..]
        .iter()
        .take_while(|l| l.starts_with("      #"))
        .copied()
        .collect();
    assert!(stack[0].starts_with("      #0  "), "{stack:#?}");
    for want in [" stk_block_read+0x", " stk_lib_inner+0x", " stk_thread+0x"] {
        assert!(
            stack.iter().any(|l| l.contains(want)),
            "{want:?} in {stack:#?}"
        );
    }
    assert!(
        stack.iter().any(|l| l.ends_with(" (libstkchain.so)")),
        "{stack:#?}"
    );
    assert!(
        text.contains("hottest stack in the window, "),
        "the spinner's samples:\n{text}"
    );

    // Folded: one line per stack, outermost first, kernel frames last.
    let folded = rip_probe_ok(CLI, &["--pid", &pid, "--duration", "1s", "--folded"]);
    let chain = "stk_thread;stk_chain_a;stk_chain_b;stk_lib_outer;stk_lib_inner;";
    for kind in ["read", "futex", "epoll", "sleep", "spin"] {
        let line = folded
            .lines()
            .find(|l| l.contains(&format!("{chain}stk_block_{kind}")))
            .unwrap_or_else(|| panic!("no {kind} stack in\n{folded}"));
        assert!(line.starts_with("user_stacks;"), "{line}");
        assert!(line.ends_with(" 1"), "one thread: {line}");
        if kind != "spin" {
            assert!(line.contains("_[k];"), "kernel frames: {line}");
        }
    }
    let lines: Vec<&str> = folded.lines().collect();
    let mut sorted = lines.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(lines, sorted, "one line per stack");
}

/// `--no-stacks`: no frames anywhere.
#[test]
fn no_stacks_takes_none() {
    if !bpf_tests_enabled("no_stacks_takes_none") {
        return;
    }
    let target = Target::start(Build::Stripped, 0, false);
    let pid = target.pid().to_string();
    let report = rip_probe_json(
        CLI,
        &["--pid", &pid, "--duration", "0", "--no-stacks", "--json"],
    );
    for t in report["threads"].as_array().unwrap() {
        assert_eq!(t["frames"], serde_json::json!([]), "{t}");
    }
    let text = rip_probe_ok(CLI, &["--pid", &pid, "--duration", "0", "--no-stacks"]);
    assert!(!text.contains("#0 "), "{text}");
}

/// 1,000 threads reported with full stacks while a ticker thread in the
/// target measures how long it is held between 1 ms sleeps: rip-probe never
/// stops the process (gdb holds all of it for seconds; eu-stack stops each
/// thread in turn, and ends their epoll_waits).
#[test]
fn a_thousand_stacks_reported_without_pausing_the_process() {
    if !bpf_tests_enabled("a_thousand_stacks_reported_without_pausing_the_process") {
        return;
    }
    const N: usize = 1000;
    let mut target = Target::start(Build::Stripped, N, false);
    let pid = target.pid().to_string();
    let workers = target.threads("worker ");
    assert_eq!(workers.len(), N);
    // The ticker on this machine while nothing is done to it.
    assert_eq!(target.command("reset"), "ok");
    std::thread::sleep(Duration::from_millis(300));
    let idle = target.gap();

    assert_eq!(target.command("reset"), "ok");
    let t0 = Instant::now();
    let report = rip_probe_json(CLI, &["--pid", &pid, "--duration", "0", "--json"]);
    let took = t0.elapsed();
    let ticks = target.gap();
    eprintln!("{N} threads: rip-probe {took:?}; ticker {ticks:?} (idle: {idle:?})");
    for (kind, tid) in &workers {
        let n = names(&thread(&report, *tid)["frames"]);
        assert_chain(&n, &format!("stk_block_{kind}"), &format!("worker {tid}"));
    }
    // Held: the ticker's gap less its time running or waiting for a CPU,
    // which a busy machine lengthens. A stop of the process (gdb's
    // seconds) would be held time.
    assert!(
        ticks.held < Duration::from_millis(50),
        "the ticker was held up {:?} (idle: {idle:?})",
        ticks.held
    );
}

/// A program of Debian's, started as a user would, killed on drop.
struct Foreign(Child);

impl Drop for Foreign {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `cmd` and waits until its main thread sleeps in `syscall` (by
/// number, /proc's view).
fn start_blocked(cmd: &mut Command, syscalls: &[i64]) -> Foreign {
    let child = Foreign(
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{cmd:?}: {e}")),
    );
    let path = format!("/proc/{}/syscall", child.0.id());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut s = String::new();
        if let Ok(mut f) = std::fs::File::open(&path) {
            let _ = f.read_to_string(&mut s);
        }
        let nr: Option<i64> = s.split_whitespace().next().and_then(|n| n.parse().ok());
        if nr.is_some_and(|n| syscalls.contains(&n)) {
            return child;
        }
        assert!(Instant::now() < deadline, "{cmd:?} never blocked: {s:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The main thread's frames of a foreign program blocked in sleep.
fn foreign_main_stack(cmd: &mut Command) -> (Vec<String>, String) {
    // nanosleep, clock_nanosleep, select (python's sleep on old versions).
    let child = start_blocked(cmd, &[35, 230, 23, 270]);
    let pid = child.0.id();
    let report = rip_probe_json(
        CLI,
        &["--pid", &pid.to_string(), "--duration", "0", "--json"],
    );
    let n = names(&thread(&report, pid)["frames"]);
    let text = rip_probe_ok(CLI, &["--pid", &pid.to_string(), "--duration", "0"]);
    (n, text)
}

/// `names` has each of `want` in this order (innermost first), not
/// necessarily adjacent.
fn assert_in_order(names: &[String], want: &[&str], what: &str) {
    let mut at = 0;
    for w in want {
        let i = names[at..]
            .iter()
            .position(|n| n == w)
            .unwrap_or_else(|| panic!("{what}: no {w} after frame {at}: {names:?}"));
        at += i + 1;
    }
}

/// Debian's perl (Essential: on every Debian system), stripped, built
/// without frame pointers: its interpreter's frames are named from the
/// symbols libperl exports.
#[test]
fn debians_perl_sleeping() {
    if !bpf_tests_enabled("debians_perl_sleeping") {
        return;
    }
    let (n, text) = foreign_main_stack(Command::new("perl").args(["-e", "sleep 100000"]));
    assert_in_order(
        &n,
        &["Perl_pp_sleep", "Perl_runops_standard", "perl_run"],
        "perl",
    );
    assert!(text.contains(" Perl_pp_sleep+0x"), "{text}");
}

/// Debian's python3 (installed by `cargo xtask setup`): the eval loop's
/// native frames, named from the symbols the interpreter exports.
#[test]
fn debians_python_sleeping() {
    if !bpf_tests_enabled("debians_python_sleeping") {
        return;
    }
    let (n, _) = foreign_main_stack(Command::new("python3").args([
        "-c",
        "import time\ndef napping():\n    time.sleep(100000)\nnapping()",
    ]));
    // The interpreter's eval frame is replaced by the Python frames it
    // runs, read from the interpreter: the function, then the module.
    assert_in_order(
        &n,
        &[
            "time_sleep",
            "napping",
            "<module>",
            "PyEval_EvalCode",
            "Py_RunMain",
        ],
        "python3",
    );
    assert!(!n.iter().any(|f| f == "_PyEval_EvalFrameDefault"), "{n:?}");
}
