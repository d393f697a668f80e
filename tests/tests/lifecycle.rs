//! The target's life during observation, and the one-line errors with
//! their fixes: pid not found, not privileged, tracefs unmounted (mounted
//! for the user when root), kernel without BTF.

use std::{
    io::{BufRead, BufReader, Read},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use rip_tests::{Background, Workload, bpf_tests_enabled, rip_probe};

const CLI: &str = env!("CARGO_BIN_EXE_rip-probe-cli");

/// `cat`, which exits when its stdin closes: a target that ends when the
/// test says so.
fn obedient_target() -> std::process::Child {
    Command::new("cat")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

#[test]
fn target_exit_during_window_is_reported() {
    if !bpf_tests_enabled("target_exit_during_window_is_reported") {
        return;
    }
    let mut child = obedient_target();
    let pid = child.id().to_string();
    let t = Instant::now();
    let mut run = Background::spawn(Command::new(CLI).args(["--pid", &pid, "--duration", "60s"]));
    // The window has started: the target exits in it.
    run.wait_phase("load and attach");
    drop(child.stdin.take());
    let out = run.finish();
    let took = t.elapsed();
    child.wait().unwrap();
    assert!(out.status.success(), "{}", out.stderr);
    assert!(
        out.stdout
            .contains(&format!("process {pid} exited during observation")),
        "{}",
        out.stdout
    );
    // It did not wait out the window.
    assert!(took < Duration::from_secs(60), "stopped early ({took:?})");
    let (code, out, _) = rip_probe(CLI, &["--pid", &pid, "--duration", "10ms"]);
    assert_eq!(code, 1);
    assert!(out.is_empty());
}

#[test]
fn watch_reports_until_the_target_exits() {
    if !bpf_tests_enabled("watch_reports_until_the_target_exits") {
        return;
    }
    let mut child = obedient_target();
    let pid = child.id().to_string();
    let mut run = Background::spawn(Command::new(CLI).args([
        "--pid",
        &pid,
        "--duration",
        "300ms",
        "--watch",
    ]));
    // The target exits once two reports are out, whatever they took.
    let header = format!("pid {pid} (cat)");
    let mut out = String::new();
    let mut lines = BufReader::new(run.child.stdout.take().unwrap());
    while out.matches(&header).count() < 2 {
        let mut l = String::new();
        if lines.read_line(&mut l).unwrap() == 0 {
            panic!("rip-probe --watch ended before two reports:\n{out}");
        }
        out.push_str(&l);
    }
    drop(child.stdin.take());
    lines.read_to_string(&mut out).unwrap();
    let end = run.finish();
    child.wait().unwrap();
    assert!(end.status.success(), "{}", end.stderr);
    let reports = out.matches(&header).count();
    assert!(reports >= 2, "several reports before the exit:\n{out}");
    assert!(out.contains("exited during observation"), "{out}");
    eprintln!("--watch printed {reports} reports, then the exit");
}

fn one_line_error(args: &[&str], wrap: Option<(&str, &[&str])>, expect: &str) {
    let (code, out, err) = match wrap {
        None => rip_probe(CLI, args),
        Some((prog, pre)) => {
            let o = Command::new(prog)
                .args(pre)
                .arg(CLI)
                .args(args)
                .output()
                .expect("wrapper runs");
            (
                o.status.code().unwrap_or(-1),
                String::from_utf8_lossy(&o.stdout).into_owned(),
                String::from_utf8_lossy(&o.stderr).into_owned(),
            )
        }
    };
    assert_ne!(code, 0, "{args:?} should fail");
    assert!(out.is_empty(), "nothing on stdout: {out}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.contains(expect), "{args:?}: {err}");
    eprintln!("{args:?} -> {}", err.trim());
}

#[test]
fn errors_are_one_line_with_the_fix() {
    one_line_error(
        &["--pid", "2000000000"],
        None,
        "no process with pid 2000000000",
    );
    one_line_error(&["--pid", "0"], None, "no process with pid 0");
    if !bpf_tests_enabled("errors_are_one_line_with_the_fix (privileged part)") {
        return;
    }
    let w = Workload::uninstrumented(1);
    let pid = w.pid().to_string();
    // An unprivileged user: no CAP_BPF/CAP_PERFMON.
    one_line_error(
        &["--pid", &pid],
        Some((
            "setpriv",
            &[
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--inh-caps=-all",
            ],
        )),
        "CAP_BPF",
    );
    // No BTF: hide /sys/kernel/btf in a private mount namespace.
    one_line_error(
        &["--pid", &pid],
        Some((
            "unshare",
            &[
                "-m",
                "--propagation",
                "private",
                "sh",
                "-c",
                "mount -t tmpfs none /sys/kernel/btf && exec \"$0\" \"$@\"",
            ],
        )),
        "no BTF",
    );
}

#[test]
fn unmounted_tracefs_is_mounted_when_root() {
    if !bpf_tests_enabled("unmounted_tracefs_is_mounted_when_root") {
        return;
    }
    let w = Workload::uninstrumented(1);
    let pid = w.pid().to_string();
    // In a private mount namespace, so the machine's tracefs stays mounted.
    // `locks` needs it (the futex system calls' tracepoints are classic
    // ones); `--pid` needs none (sched_switch is a raw tracepoint).
    let run = |args: &[&str]| {
        Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c"])
            .arg("umount /sys/kernel/tracing && ! grep -q tracefs /proc/self/mounts && exec \"$0\" \"$@\"")
            .arg(CLI)
            .args(args)
            .output()
            .unwrap()
    };
    let o = run(&["locks", "--pid", &pid, "--duration", "200ms"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("mounted tracefs at /sys/kernel/tracing"),
        "{err}"
    );
    let o = run(&["--pid", &pid, "--duration", "200ms"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(!err.contains("mounted tracefs"), "{err}");
    assert!(String::from_utf8_lossy(&o.stdout).contains("threads"));
}
