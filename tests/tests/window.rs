//! The observation window and the output path every command shares: a
//! SIGINT during a long window (`offcpu`, `locks`, `calls`, `--pid`) ends
//! it, the report of what was gathered is printed with exit status 0, and
//! no program is left in the kernel; `-o FILE` writes the bytes stdout
//! would get, leaves nothing when the command fails, and refuses a FIFO or
//! a device with one line before any window.

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use rip_tests::{Background, TempDir, Workload, bpf_tests_enabled, rip_probe};

const CLI: &str = env!("CARGO_BIN_EXE_rip-probe-cli");
const WORKLOAD: &str = env!("CARGO_BIN_EXE_rip-dump-workload");

/// `rip-probe ARGS` with SIGINT's default action, whatever this test
/// inherited (a test run as a shell's background job ignores SIGINT, and
/// rip-probe leaves an ignored SIGINT ignored).
fn cli(args: &[&str]) -> Command {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(CLI);
    cmd.args(args);
    // SAFETY: signal(2) is async-signal-safe, as pre_exec requires.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            Ok(())
        });
    }
    cmd
}

/// Sends `sig` to process `pid`.
fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) with a pid this test started.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, sig) }, 0);
}

/// A SIGINT sent once rip-probe says its 60 s window started (its own
/// event, not a sleep) ends the window: the report of what was gathered
/// is printed, as JSON that parses, with exit status 0; it says the window
/// was cut short and its real length; the programs it held are unloaded.
#[test]
fn sigint_ends_the_window_with_the_report_and_leaves_no_probe() {
    if !bpf_tests_enabled("sigint_ends_the_window_with_the_report_and_leaves_no_probe") {
        return;
    }
    let w = Workload::uninstrumented(2);
    let pid = w.pid().to_string();
    for args in [
        vec!["offcpu", "--pid", &pid, "--duration", "60s", "--json"],
        vec!["locks", "--pid", &pid, "--duration", "60s", "--json"],
        vec![
            "calls",
            "--pid",
            &pid,
            "--uprobe",
            "worker_step",
            "--duration",
            "60s",
            "--json",
        ],
        vec!["--pid", &pid, "--duration", "60s", "--json"],
    ] {
        let mut run = Background::spawn(&mut cli(&args));
        run.wait_phase("window start");
        let progs = rip_tests::bpf_programs_held_by(run.child.id());
        assert!(!progs.is_empty(), "{args:?}: no program held in the window");
        signal(run.child.id(), libc::SIGINT);
        let done = run.finish();
        assert!(done.status.success(), "{args:?}: {}", done.stderr);
        let v: serde_json::Value = serde_json::from_str(&done.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", done.stdout));
        assert_eq!(v["process"]["pid"], w.pid(), "{args:?}");
        assert_eq!(v["process"]["alive"], true, "{args:?}");
        let first = v["warnings"][0].as_str().unwrap_or_default();
        assert!(
            first.starts_with("window cut short by SIGINT after ") && first.contains(" of 1m00s"),
            "{args:?}: {}",
            v["warnings"]
        );
        // It names who sent the signal: this test.
        assert!(
            first.contains(&format!(" (sent by pid {}, ", std::process::id())),
            "{args:?}: {first}"
        );
        let window_ns = v["window_ns"].as_u64().expect("window_ns");
        assert!(window_ns < 60_000_000_000, "{args:?}: {window_ns}");
        if args[0] == "calls" {
            assert_eq!(v["functions"][0]["function"], "worker_step", "{v}");
        }
        // The kernel frees a program once its last descriptor is closed,
        // after an RCU grace period: waited for, with a bound far beyond
        // one.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = rip_tests::bpf_programs_still_loaded(&progs);
            if left.is_empty() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{args:?}: programs left loaded: {left:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Without --duration `offcpu` observes until Ctrl-C, and so does `locks`
/// with `--duration forever`; their reports say the signal ended the
/// window.
#[test]
fn without_a_length_the_window_runs_until_sigint() {
    if !bpf_tests_enabled("without_a_length_the_window_runs_until_sigint") {
        return;
    }
    let w = Workload::uninstrumented(1);
    let pid = w.pid().to_string();
    for args in [
        vec!["offcpu", "--pid", &pid],
        vec!["locks", "--pid", &pid, "--duration", "forever"],
    ] {
        let mut run = Background::spawn(&mut cli(&args));
        run.wait_phase("window start");
        signal(run.child.id(), libc::SIGINT);
        let done = run.finish();
        assert!(done.status.success(), "{args:?}: {}", done.stderr);
        assert!(
            done.stdout.contains("window ended by SIGINT after "),
            "{args:?}: {}",
            done.stdout
        );
    }
}

/// A SIGINT that whoever started rip-probe ignores (as a shell ignores it
/// for its background jobs) stays ignored: the window runs its length.
#[test]
fn an_ignored_sigint_stays_ignored() {
    if !bpf_tests_enabled("an_ignored_sigint_stays_ignored") {
        return;
    }
    use std::os::unix::process::CommandExt;
    let w = Workload::uninstrumented(1);
    let pid = w.pid().to_string();
    let mut cmd = Command::new(CLI);
    cmd.args(["locks", "--pid", &pid, "--duration", "1s", "--json"]);
    // SAFETY: signal(2) is async-signal-safe, as pre_exec requires.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_IGN);
            Ok(())
        });
    }
    let mut run = Background::spawn(&mut cmd);
    run.wait_phase("window start");
    signal(run.child.id(), libc::SIGINT);
    let done = run.finish();
    assert!(done.status.success(), "{}", done.stderr);
    let v: serde_json::Value = serde_json::from_str(&done.stdout).unwrap();
    assert!(
        v["window_ns"].as_u64().unwrap() >= 1_000_000_000,
        "the whole window: {v}"
    );
    assert!(!done.stdout.contains("SIGINT"), "{v}");
}

/// `--watch -o FILE`: each report replaces the file whole, so it always
/// holds one report, the latest; SIGTERM ends the watch with a last one
/// that says the window was cut short.
#[test]
fn watch_replaces_the_output_file_with_each_report() {
    if !bpf_tests_enabled("watch_replaces_the_output_file_with_each_report") {
        return;
    }
    let dir = TempDir::new("/dev/shm", "window-o-watch");
    let out = dir.join("latest.json");
    let w = Workload::uninstrumented(1);
    let pid = w.pid().to_string();
    let mut run = Background::spawn(&mut cli(&[
        "--pid",
        &pid,
        "--watch",
        "--duration",
        "100ms",
        "--json",
        "-o",
        out.to_str().unwrap(),
    ]));
    for _ in 0..3 {
        run.wait_phase("render");
    }
    // The third report is written (or being written): the file holds
    // one whole report, never several.
    let text = std::fs::read_to_string(&out).unwrap();
    assert_eq!(text.lines().count(), 1, "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["process"]["pid"], w.pid());
    run.wait_phase("window start");
    signal(run.child.id(), libc::SIGTERM);
    let done = run.finish();
    assert!(done.status.success(), "{}", done.stderr);
    assert_eq!(done.stdout, "", "the reports went to the file");
    let text = std::fs::read_to_string(&out).unwrap();
    assert_eq!(text.lines().count(), 1, "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let first = v["warnings"][0].as_str().unwrap_or_default();
    assert!(
        first.starts_with("window cut short by SIGTERM after "),
        "{}",
        v["warnings"]
    );
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(names.len(), 1, "no temporary file left: {names:?}");
}

/// A process with a ring (the dump workload's `sites` mode) in `dir`.
fn ring_process(dir: &TempDir) -> Workload {
    let ring = dir.join("sites.ring");
    let mut cmd = Command::new(WORKLOAD);
    cmd.args(["sites", ring.to_str().unwrap()]);
    Workload::start(cmd)
}

/// `-o FILE` writes the bytes the same command prints on stdout: a
/// dead writer's ring (the same file each time) as text and JSON, and a
/// generated script; an existing file is replaced whole.
#[test]
fn output_file_gets_the_bytes_of_stdout() {
    let dir = TempDir::new("/dev/shm", "window-o-same");
    drop(ring_process(&dir));
    let ring = dir.join("sites.ring");
    let ring = ring.to_str().unwrap();
    let out = dir.join("out");
    let out_s = out.to_str().unwrap();
    std::fs::write(&out, b"an older, longer report that must go entirely").unwrap();
    for args in [
        vec!["dump", ring],
        vec!["dump", ring, "--json"],
        vec!["dump", ring, "--threads"],
        vec!["completions", "bash"],
    ] {
        let (code, stdout, err) = rip_probe(CLI, &args);
        assert_eq!(code, 0, "{args:?}: {err}");
        assert!(!stdout.is_empty(), "{args:?}");
        let mut with_o = args.clone();
        with_o.extend(["-o", out_s]);
        let (code, printed, err) = rip_probe(CLI, &with_o);
        assert_eq!(code, 0, "{with_o:?}: {err}");
        assert_eq!(printed, "", "{with_o:?}: nothing on stdout");
        assert_eq!(std::fs::read_to_string(&out).unwrap(), stdout, "{with_o:?}");
    }
    // Nothing else was left in the directory (no temporary file).
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["out", "sites.ring"]);
}

/// A command that fails leaves no file and no temporary one, and an
/// existing file untouched.
#[test]
fn output_file_is_not_written_when_the_command_fails() {
    let dir = TempDir::new("/dev/shm", "window-o-fail");
    let new = dir.join("new");
    let old = dir.join("old");
    std::fs::write(&old, b"kept").unwrap();
    let missing = dir.join("no-such.ring");
    for out in [&new, &old] {
        let (code, stdout, err) = rip_probe(
            CLI,
            &[
                "dump",
                missing.to_str().unwrap(),
                "-o",
                out.to_str().unwrap(),
            ],
        );
        assert_ne!(code, 0, "{stdout}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
    // The target gone before the window: the error, no file.
    let mut gone = Command::new("true").spawn().unwrap();
    let gone_pid = gone.id().to_string();
    gone.wait().unwrap();
    let (code, _, err) = rip_probe(
        CLI,
        &[
            "locks",
            "--pid",
            &gone_pid,
            "--duration",
            "1s",
            "-o",
            new.to_str().unwrap(),
        ],
    );
    assert_ne!(code, 0, "{err}");
    assert!(!new.exists(), "no file for a failed command");
    assert_eq!(std::fs::read(&old).unwrap(), b"kept");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

/// A FIFO or a device named by `-o` is refused with one line before
/// anything is attached or observed (no phase of the command ran).
#[test]
fn output_to_a_fifo_or_device_is_refused_before_the_window() {
    let dir = TempDir::new("/dev/shm", "window-o-fifo");
    let fifo = dir.join("fifo");
    let made = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo(3) with a valid C string.
    assert_eq!(unsafe { libc::mkfifo(made.as_ptr(), 0o644) }, 0);
    let w = Workload::uninstrumented(1);
    let pid = w.pid().to_string();
    for (file, kind) in [(fifo.to_str().unwrap(), "a FIFO"), ("/dev/null", "device")] {
        for args in [
            vec!["offcpu", "--pid", &pid, "--duration", "60s", "-o", file],
            vec!["--pid", &pid, "--duration", "60s", "-o", file],
            vec!["list", "-o", file],
        ] {
            let o = Command::new(CLI)
                .args(&args)
                .env("RIP_PROBE_TIMING", "1")
                .stdin(Stdio::null())
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(!o.status.success(), "{args:?}");
            assert!(o.stdout.is_empty(), "{args:?}");
            assert_eq!(
                err.lines().count(),
                1,
                "{args:?}: one line, no phase: {err}"
            );
            assert!(
                err.contains(&format!("--output {file}: is ")) && err.contains(kind),
                "{args:?}: {err}"
            );
        }
    }
}
