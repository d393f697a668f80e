//! What rip-probe says about processes that are not ordinary is what they
//! are, never invented data: a kernel thread has no user system call, a
//! zombie is a zombie, a process whose leader exited is read through its
//! live threads, an unreadable maps file makes a report that says it is
//! partial, and uprobe hits a ring hides are said to be hidden. Errors
//! about such processes name the true reason, on one line.

use std::{
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use rip_tests::{
    TempDir, Workload, assert_one_line_error, bpf_tests_enabled, build_c, json_thread, rip_probe,
    rip_probe_json,
};

const CLI: &str = env!("CARGO_BIN_EXE_rip-probe-cli");
const TICKER: &str = env!("CARGO_BIN_EXE_rip-ticker");

/// The fields of /proc/PID/stat after the command name, from the state on.
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// Waits (on the process's own state changes, as /proc shows them) until
/// `pred` holds for the state letter of `pid`, for at most 10 s.
fn wait_state(pid: u32, pred: impl Fn(char) -> bool, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let state = stat_fields(pid).and_then(|f| f[0].chars().next());
        if state.is_some_and(&pred) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "pid {pid} never {what}: {state:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Kernel threads (PF_KTHREAD in /proc/PID/stat's flags): kthreadd and the
/// first ksoftirqd, as this machine numbers them.
fn kernel_threads() -> Vec<(u32, String)> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let comm = stat[stat.find('(').unwrap() + 1..stat.rfind(')').unwrap()].to_string();
        let flags: u64 = stat_fields(pid).map_or(0, |f| f[6].parse().unwrap_or(0));
        if flags & 0x0020_0000 != 0 && (comm == "kthreadd" || comm.starts_with("ksoftirqd/")) {
            found.push((pid, comm));
        }
    }
    found.sort();
    found.dedup_by(|a, b| a.1.starts_with("ksoftirqd/") && b.1.starts_with("ksoftirqd/"));
    found
}

/// kthreadd and ksoftirqd are shown as kernel threads: no system call
/// (their registers are the kernel's, not a `read(0, 0x0, 0)`), no user
/// location; `calls` and `dump --pid` say they are kernel threads.
#[test]
fn kernel_threads_have_no_user_syscall() {
    if !bpf_tests_enabled("kernel_threads_have_no_user_syscall") {
        return;
    }
    let kthreads = kernel_threads();
    assert_eq!(kthreads.len(), 2, "kthreadd and a ksoftirqd: {kthreads:?}");
    for (pid, comm) in kthreads {
        let pid_s = pid.to_string();
        let r = rip_probe_json(CLI, &["--pid", &pid_s, "--duration", "0", "--json"]);
        let t = json_thread(&r, pid);
        assert!(t["syscall"].is_null(), "{comm}: {t}");
        assert!(t["location"].is_null(), "{comm}: {t}");
        let warnings = r["warnings"].to_string();
        assert!(
            warnings.contains("is a kernel thread"),
            "{comm}: {warnings}"
        );

        let (code, out, _) = rip_probe(CLI, &["--pid", &pid_s, "--duration", "0"]);
        assert_eq!(code, 0);
        assert!(!out.contains("read(0, 0x0, 0)"), "{out}");

        let expect = format!("process {pid} ({comm}) is a kernel thread");
        assert_one_line_error(
            CLI,
            &[
                "calls",
                "--pid",
                &pid_s,
                "--uprobe",
                "main",
                "--duration",
                "1s",
            ],
            &expect,
        );
        assert_one_line_error(CLI, &["dump", "--pid", &pid_s], &expect);
        assert_one_line_error(
            CLI,
            &["--pid", &pid_s, "--uprobe", "main", "--duration", "0"],
            &expect,
        );
    }
}

/// A process that exited and was not reaped is a zombie, for every
/// command, in one line that names its parent: not "no process", nor a
/// report of "0 threads".
#[test]
fn a_zombie_is_a_zombie() {
    if !bpf_tests_enabled("a_zombie_is_a_zombie") {
        return;
    }
    let mut cmd = Command::new(build_c("odd_targets", &[]));
    cmd.arg("zombie");
    let w = Workload::start(cmd);
    let zombie = w.tid("zombie");
    let z = zombie.to_string();
    let expect = format!(
        "process {zombie} is a zombie: it has exited and its parent (pid {}) has not reaped it",
        w.pid()
    );
    for args in [
        &["--pid", &z, "--duration", "0"][..],
        &["--pid", &z, "--duration", "0", "--json"],
        &["calls", "--pid", &z, "--uprobe", "main", "--duration", "1s"],
        &["offcpu", "--pid", &z, "--duration", "1s"],
        &["locks", "--pid", &z, "--duration", "1s"],
        &["dump", "--pid", &z],
    ] {
        assert_one_line_error(CLI, args, &expect);
    }
}

/// A process whose leader thread exited while another runs on: the leader
/// is shown exited, the live thread is symbolized through its own maps
/// (the leader's are empty), and `calls` probes it (the leader's pid
/// names no live thread to the kernel).
#[test]
fn a_zombie_leader_is_read_through_its_live_threads() {
    if !bpf_tests_enabled("a_zombie_leader_is_read_through_its_live_threads") {
        return;
    }
    let mut cmd = Command::new(build_c("odd_targets", &[]));
    cmd.arg("zombie-leader");
    let w = Workload::start(cmd);
    let (pid, worker) = (w.pid(), w.tid("worker"));
    wait_state(pid, |s| s == 'Z', "left a zombie leader");
    wait_state(worker, |s| s == 'S', "slept");
    let p = pid.to_string();
    let r = rip_probe_json(CLI, &["--pid", &p, "--duration", "0", "--json"]);
    assert_eq!(json_thread(&r, pid)["state"], "exited", "{r}");
    let t = json_thread(&r, worker);
    assert_eq!(t["syscall"]["name"], "pause", "{t}");
    let frames = t["frames"].to_string();
    assert!(frames.contains("worker_wait"), "symbolized: {t}");
    assert!(r["warnings"].to_string().contains("leader thread"), "{r}");

    let r = rip_probe_json(
        CLI,
        &[
            "calls",
            "--pid",
            &p,
            "--uprobe",
            "worker_wait",
            "--duration",
            "100ms",
            "--json",
        ],
    );
    assert_eq!(r["functions"][0]["function"], "worker_wait", "{r}");
}

/// A maps file rip-probe may not read (here, in a private mount namespace,
/// a file root may not read is mounted over the target's /proc/PID/maps)
/// gives a report that says it is partial and why, with the threads the
/// kernel shows; `calls`, which needs the maps, fails saying permission
/// was denied, not that the process does not exist.
#[test]
fn an_unreadable_maps_file_is_said() {
    if !bpf_tests_enabled("an_unreadable_maps_file_is_said") {
        return;
    }
    let mut cmd = Command::new(build_c("odd_targets", &[]));
    cmd.arg("plain");
    let w = Workload::start(cmd);
    let (pid, worker) = (w.pid(), w.tid("worker"));
    // Write-only to everyone, root included (sysctl files check the mode).
    let unreadable = "/proc/sys/vm/drop_caches";
    assert!(
        std::fs::read(unreadable).is_err(),
        "{unreadable} must be unreadable"
    );
    let inside = |args: &str| -> (i32, String, String) {
        let script = format!("mount --bind {unreadable} /proc/{pid}/maps && exec {CLI} {args}");
        let out = Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c", &script])
            .output()
            .expect("unshare runs");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, err) = inside(&format!("--pid {pid} --duration 0 --json"));
    assert_eq!(code, 0, "{err}");
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    let tids: Vec<u64> = r["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["tid"].as_u64().unwrap())
        .collect();
    assert_eq!(tids, [u64::from(pid), u64::from(worker)], "{r}");
    let warnings = r["warnings"].to_string();
    assert!(
        warnings.contains(&format!("partial report: cannot read /proc/{pid}/maps")),
        "{warnings}"
    );
    assert!(warnings.contains("permission denied"), "{warnings}");
    assert!(!warnings.contains("is rip-probe root"), "{warnings}");

    let (code, out, err) = inside(&format!(
        "calls --pid {pid} --uprobe libc:pause --duration 1s"
    ));
    assert_ne!(code, 0, "{out}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!("cannot read /proc/{pid}/maps: permission denied")),
        "{err}"
    );
}

/// `--pid P --uprobe F` on a process with a ring: a thread's ring slot
/// names its location, and the report says how many threads' uprobe hits
/// that hides; `--no-ring` shows them.
#[test]
fn uprobe_hits_hidden_by_a_ring_are_said() {
    if !bpf_tests_enabled("uprobe_hits_hidden_by_a_ring_are_said") {
        return;
    }
    let dir = TempDir::new("/dev/shm", "ticker");
    let ring = dir.join("ticker.ring");
    let mut cmd = Command::new(TICKER);
    cmd.arg(&ring).arg("2");
    let w = Workload::start(cmd);
    let p = w.pid().to_string();
    let workers = w.tids("worker");
    let args = |extra: &[&'static str]| -> Vec<String> {
        let mut v: Vec<String> = ["--pid", &p, "--uprobe", "rip_ticker_tick", "--json"]
            .map(String::from)
            .to_vec();
        v.push("--duration".into());
        v.push("300ms".into());
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let run = |a: Vec<String>| {
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        rip_probe_json(CLI, &a)
    };
    let with_ring = run(args(&[]));
    for &tid in &workers {
        let t = json_thread(&with_ring, tid);
        assert_eq!(t["location"]["source"], "ring", "{t}");
    }
    let warnings = with_ring["warnings"].to_string();
    assert!(
        warnings.contains(
            "--uprobe: the last function entered is not shown for 2 threads with a ring slot"
        ),
        "{warnings}"
    );
    let no_ring = run(args(&["--no-ring"]));
    for &tid in &workers {
        let t = json_thread(&no_ring, tid);
        assert_eq!(t["location"]["source"], "uprobe", "{t}");
    }
    assert!(
        !no_ring["warnings"]
            .to_string()
            .contains("--uprobe: the last")
    );
    assert!(Path::new(&ring).exists());
}

/// A pasted page as `--uprobe` pattern is cut in the one-line error, not
/// echoed back whole, and no suggestion is looked for.
#[test]
fn a_long_uprobe_pattern_is_cut_in_the_error() {
    if !bpf_tests_enabled("a_long_uprobe_pattern_is_cut_in_the_error") {
        return;
    }
    let w = Workload::uninstrumented(1);
    let p = w.pid().to_string();
    let pattern = "worker_".repeat(1500);
    for args in [
        &["--pid", &p, "--uprobe", &pattern, "--duration", "0"][..],
        &[
            "calls",
            "--pid",
            &p,
            "--uprobe",
            &pattern,
            "--duration",
            "1s",
        ],
    ] {
        let (code, out, err) = rip_probe(CLI, args);
        assert_ne!(code, 0, "{out}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("no function in"), "{err}");
        assert!(err.contains("(10500 characters)"), "{err}");
        assert!(err.len() < 600, "{} bytes: {err}", err.len());
    }
}

/// A symbol table holding a name that is not UTF-8: the error names it
/// (escaped), instead of the symbol reader's unfilled `{bytes:?}`.
#[test]
fn an_invalid_symbol_name_is_named() {
    if !bpf_tests_enabled("an_invalid_symbol_name_is_named") {
        return;
    }
    let dir = TempDir::new("/tmp", "hostile-symbols");
    let hostile = dir.join("odd_targets");
    let elf = std::fs::read(build_c("odd_targets", &[])).unwrap();
    let (from, to) = (b"worker_wait".as_slice(), b"worker\xffwait".as_slice());
    let mut patched = Vec::with_capacity(elf.len());
    let mut i = 0;
    while i < elf.len() {
        if elf[i..].starts_with(from) {
            patched.extend_from_slice(to);
            i += from.len();
        } else {
            patched.push(elf[i]);
            i += 1;
        }
    }
    assert_ne!(patched, elf, "the name is in the binary");
    std::fs::write(&hostile, &patched).unwrap();
    std::fs::set_permissions(
        &hostile,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let mut cmd = Command::new(&hostile);
    cmd.arg("plain");
    let w = Workload::start(cmd);
    let p = w.pid().to_string();
    let (code, out, err) = rip_probe(CLI, &["--pid", &p, "--uprobe", "x*", "--duration", "0"]);
    assert_ne!(code, 0, "{out}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(!err.contains("{bytes"), "{err}");
    assert!(err.contains("`worker\\xffwait` (not UTF-8)"), "{err}");
}

/// Runs the CLI as nobody with the capabilities BPF needs (as a user
/// granted them with setcap would), with `args`; (exit code, stdout,
/// stderr).
fn as_nobody_with_caps(args: &[&str]) -> (i32, String, String) {
    let mut all = vec![
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--inh-caps=+bpf,+perfmon",
        "--ambient-caps=+bpf,+perfmon",
        CLI,
    ];
    all.extend_from_slice(args);
    rip_probe("setpriv", &all)
}

/// Another user's process, by a user with capabilities: `calls` and
/// `dump --pid` say that it is another user's (whose, and how to observe
/// it), not "no process with pid N" nor "maps no librip ring".
#[test]
fn another_users_process_is_permission_denied() {
    if !bpf_tests_enabled("another_users_process_is_permission_denied") {
        return;
    }
    let dir = TempDir::new("/dev/shm", "others-ring");
    let ring = dir.join("ticker.ring");
    let mut cmd = Command::new(TICKER);
    cmd.arg(&ring).arg("1");
    let w = Workload::start(cmd);
    let p = w.pid().to_string();
    for args in [
        &[
            "calls",
            "--pid",
            &p,
            "--uprobe",
            "rip_ticker_tick",
            "--duration",
            "1s",
        ][..],
        &["dump", "--pid", &p],
    ] {
        let (code, out, err) = as_nobody_with_caps(args);
        assert_ne!(code, 0, "{args:?}: {out}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains("runs as user 0"), "{args:?}: {err}");
        assert!(err.contains("run it as root"), "{args:?}: {err}");
        assert!(!err.contains("no process with pid"), "{args:?}: {err}");
        assert!(!err.contains("maps no librip ring"), "{args:?}: {err}");
    }
}

/// `calls --uprobe LIB:fn` on a library the process loads and unloads in a
/// loop attaches every time: a library gone between being found and being
/// attached to is looked up again, and the retry is said once.
#[test]
fn a_library_that_comes_and_goes_is_attached() {
    if !bpf_tests_enabled("a_library_that_comes_and_goes_is_attached") {
        return;
    }
    let plugin = build_c("dlopen_plugin", &["-shared", "-fPIC"]);
    let mut cmd = Command::new(build_c("dlopen_loop", &["-ldl"]));
    cmd.arg(&plugin);
    let w = Workload::start(cmd);
    let p = w.pid().to_string();
    let lib = plugin.file_name().unwrap().to_str().unwrap().to_string();
    let spec = format!("{lib}:plugin_fn");
    for _ in 0..4 {
        let (code, out, err) = rip_probe(
            CLI,
            &[
                "calls",
                "--pid",
                &p,
                "--uprobe",
                &spec,
                "--duration",
                "200ms",
            ],
        );
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("plugin_fn"), "{out}");
        assert!(
            err.is_empty()
                || err
                    == "rip-probe: a library --uprobe names was unmapped while attaching: retrying\n",
            "{err}"
        );
    }
}
