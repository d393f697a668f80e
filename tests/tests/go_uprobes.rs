//! Uprobes on the Go functions of a stripped Go binary (`-ldflags='-s
//! -w'`: no symbol table), named as Go names them from its `.gopclntab`:
//! `--pid --uprobe` shows the function each thread last entered; `calls`
//! refuses them (its return probes would make Go's runtime end the
//! program), attaching nothing. `tests/go/calls.go` calls `main.work` as
//! many times as the test asks, each call growing a stack and some forcing
//! a garbage collection: the program must live through the probes.

use std::{path::Path, process::Command, time::Duration};

use rip_tests::{
    Background, TempDir, Workload, assert_one_line_error, bpf_tests_enabled, go_build,
    go_toolchains,
};
use serde_json::Value;

const CLI: &str = env!("CARGO_BIN_EXE_rip-probe-cli");

/// Starts the stripped program of toolchain `go`, logging to `log`.
fn start(go: &Path, log: &Path) -> Workload {
    let v = rip_tests::go_version(go);
    let exe = go_build(go, "calls", &["-ldflags=-s -w"], &format!("{v}-stripped"));
    let mut cmd = Command::new(exe);
    cmd.arg(log);
    Workload::start(cmd)
}

/// Asks the program for `n` calls of main.work and waits until it says
/// they are done (in its log, line `done N`): its own event, however long
/// the machine takes.
fn calls(w: &mut Workload, log: &Path, n: u32) {
    use std::io::Write;
    let stdin = w.child.stdin.as_mut().expect("piped stdin");
    writeln!(stdin, "{n}").unwrap();
    stdin.flush().unwrap();
    let want = format!("done {n}");
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.lines().any(|l| l == want) {
            return;
        }
        assert!(
            w.child.try_wait().unwrap().is_none(),
            "the program ended: {text}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn uprobes_on_go_functions_of_stripped_binaries() {
    if !bpf_tests_enabled("uprobes_on_go_functions_of_stripped_binaries") {
        return;
    }
    for go in go_toolchains() {
        let v = rip_tests::go_version(&go);
        let dir = TempDir::new("/tmp", "go-uprobes");
        let log = dir.join("log");
        let mut w = start(&go, &log);
        let pid = w.pid().to_string();
        // calls: refused in one line, before anything is attached (the
        // kernel maps `[uprobes]` into the process at its first probe hit).
        assert_one_line_error(
            CLI,
            &[
                "calls",
                "--pid",
                &pid,
                "--uprobe",
                "main.work",
                "--duration",
                "1s",
            ],
            "main.work: a Go function",
        );
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
        assert!(!maps.contains("[uprobes]"), "{v}: nothing attached");
        calls(&mut w, &log, 2);
        // A window long enough for the calls on any machine: it ends after
        // them (the test waits for them, then for the report).
        let mut run = Background::spawn(Command::new(CLI).args([
            "--pid",
            &pid,
            "--uprobe",
            "main.work",
            "--duration",
            "10s",
            "--json",
        ]));
        run.wait_phase("attach uprobes");
        calls(&mut w, &log, 300);
        let out = run.finish();
        assert!(out.status.success(), "{v}: {}", out.stderr);
        let r: Value = serde_json::from_str(&out.stdout).unwrap();
        let entered: Vec<&Value> = r["threads"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| {
                t["location"]["source"] == "uprobe"
                    && t["location"]["frame"]["function"] == "main.work"
            })
            .collect();
        assert!(!entered.is_empty(), "{v}: no thread entered main.work: {r}");
        // It lived through the probes, and works on.
        calls(&mut w, &log, 1);
    }
}
