//! `rip-probe offcpu`: off-CPU time by stack on `tests/c/offcpu.c` (no
//! librip, -O2 without frame pointers: the stacks come from the CFI) with
//! known sleep ratios and known preemption, by last snap on
//! `tests/c/offcpu_snaps.c`, as JSON, folded stacks and an SVG flame
//! graph; and the command's one-line errors.

use std::{os::unix::fs::FileTypeExt, path::PathBuf, process::Command, time::Duration};

use rip_tests::{
    Background, TempDir, Workload, assert_one_line_error, assert_unprivileged_error,
    bpf_tests_enabled, build_c, build_librip_release, compile_librip_c, librip_static, marker_line,
    monotonic_ns, rip_probe_json, rip_probe_ok, target_dir,
};
use serde_json::Value;

const CLI: &str = env!("CARGO_BIN_EXE_rip-probe-cli");

fn workload(mode: &str) -> Workload {
    let mut cmd = Command::new(build_c("offcpu", &["-fomit-frame-pointer"]));
    cmd.arg(mode);
    Workload::start(cmd)
}

/// `rip-probe offcpu --pid PID --duration D --json`.
fn offcpu_json(pid: u32, duration: &str) -> Value {
    rip_probe_json(
        CLI,
        &[
            "offcpu",
            "--pid",
            &pid.to_string(),
            "--duration",
            duration,
            "--json",
        ],
    )
}

fn functions(stack: &Value) -> Vec<String> {
    stack["frames"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["function"].as_str().map(String::from))
        .collect()
}

/// Time off CPU of `tid` under stacks holding `function`, ns.
fn time_under(r: &Value, tid: u64, function: &str) -> u64 {
    r["stacks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["tids"].as_array().unwrap().iter().any(|t| t == tid))
        .filter(|s| functions(s).iter().any(|f| f == function))
        .map(|s| s["off_cpu_ns"].as_u64().unwrap())
        .sum()
}

/// Time and periods blocked (not preempted) of `tid` under stacks holding
/// `function`: (ns, periods).
fn blocked_under(r: &Value, tid: u64, function: &str) -> (u64, u64) {
    r["stacks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["preempted"] == false)
        .filter(|s| s["tids"].as_array().unwrap().iter().any(|t| t == tid))
        .filter(|s| functions(s).iter().any(|f| f == function))
        .fold((0, 0), |(ns, n), s| {
            (
                ns + s["off_cpu_ns"].as_u64().unwrap(),
                n + s["count"].as_u64().unwrap(),
            )
        })
}

/// The 30 ms and 10 ms sleeps' time is split between their own stacks or
/// snaps: (ns, periods) of each. On a quiet machine that is 75 % under the
/// long one; a busy machine wakes each sleep late by about as much, which
/// lowers that share but not the 20 ms between the two means (at least
/// 10 ms is asked). A sleep never ends early: each stack's periods add up
/// to at least its sleep times their number, less the two a window's edges
/// may cut (the one it began in, charged from its start, and the one it
/// ended in).
fn assert_split(long: (u64, u64), short: (u64, u64), what: &str) {
    const MS: f64 = 1e6;
    assert!(long.1 > 2 && short.1 > 2, "{what}");
    assert!(long.0 >= 30_000_000 * (long.1 - 2), "{long:?}: {what}");
    assert!(short.0 >= 10_000_000 * (short.1 - 2), "{short:?}: {what}");
    let (mean_long, mean_short) = (
        long.0 as f64 / long.1 as f64 / MS,
        short.0 as f64 / short.1 as f64 / MS,
    );
    let share = long.0 as f64 / (long.0 + short.0) as f64;
    eprintln!(
        "long {mean_long:.1} ms × {}, short {mean_short:.1} ms × {}: {share:.3} under the long one",
        long.1, short.1
    );
    // Only a lower bound: one wakeup delayed by seconds on a busy machine
    // moves a mean that far.
    assert!(
        mean_long >= mean_short + 10.0,
        "means {mean_long:.1} and {mean_short:.1} ms: {what}"
    );
}

fn thread(r: &Value, tid: u64) -> &Value {
    r["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tid"] == tid)
        .unwrap_or_else(|| panic!("thread {tid} not in {}", r["threads"]))
}

/// The worker sleeps 30 ms, then 10 ms, in a loop: 75 % of its time off
/// the CPU is under sleep_long, 25 % under sleep_short, each unwound
/// through the CFI (no frame pointers) to the thread's start; the main
/// thread, blocked in pthread_join since before the window, is off the CPU
/// for all of it, under main.
#[test]
fn off_cpu_shares_match_known_sleep_ratios_without_frame_pointers() {
    if !bpf_tests_enabled("off_cpu_shares_match_known_sleep_ratios_without_frame_pointers") {
        return;
    }
    let w = workload("ratio");
    let tid = u64::from(w.tid("sleeper"));
    let r = offcpu_json(w.pid(), "3s");
    let window = r["window_ns"].as_u64().unwrap();
    assert!((2_900_000_000..4_000_000_000).contains(&window), "{r}");
    let long = time_under(&r, tid, "sleep_long");
    let short = time_under(&r, tid, "sleep_short");
    assert_split(
        blocked_under(&r, tid, "sleep_long"),
        blocked_under(&r, tid, "sleep_short"),
        &r["stacks"].to_string(),
    );
    // The worker is off the CPU nearly all the time, all of it attributed.
    let t = thread(&r, tid);
    let off = t["blocked_ns"].as_u64().unwrap() + t["preempted_ns"].as_u64().unwrap();
    assert!(off >= window * 9 / 10, "{off} of {window}: {t}");
    assert!(long + short >= off * 95 / 100, "{long} + {short} of {off}");
    // Each stack goes from the libc sleep through both of our frames to
    // the thread's start.
    for s in r["stacks"].as_array().unwrap() {
        let f = functions(s);
        if f.iter().any(|f| f == "sleep_long") {
            let pos = |n: &str| f.iter().position(|f| f == n);
            assert!(pos("nap") < pos("sleep_long"), "{f:?}");
            assert!(pos("sleep_long") < pos("sleeper"), "{f:?}");
            assert!(f.iter().any(|f| f.contains("start_thread")), "{f:?}");
            assert_eq!(s["unwound"], true);
        }
    }
    // The main thread never ran during the window.
    let main = thread(&r, u64::from(w.pid()));
    assert_eq!(main["whole_window"], true, "{main}");
    assert_eq!(main["blocked_ns"].as_u64().unwrap(), window, "{main}");
    assert!(time_under(&r, u64::from(w.pid()), "main") == window, "{r}");
}

/// Two threads spinning on one CPU: each is preempted, runnable but off
/// the CPU, about half the time, under spin(); none of it is blocked time.
#[test]
fn preempted_time_is_told_from_blocked_time() {
    if !bpf_tests_enabled("preempted_time_is_told_from_blocked_time") {
        return;
    }
    let w = workload("spin");
    let r = offcpu_json(w.pid(), "2s");
    let window = r["window_ns"].as_u64().unwrap();
    for tid in w.tids("spinner") {
        let t = thread(&r, u64::from(tid));
        let pre = t["preempted_ns"].as_u64().unwrap();
        // Half the window on a quiet machine; more when other work shares
        // CPU 0 (nearly all of it on a busy machine), never none, never
        // more than the window.
        assert!(
            (window / 5..=window).contains(&pre),
            "{tid} preempted {pre} of {window}: {t}"
        );
        assert!(t["blocked_ns"].as_u64().unwrap() < window / 10, "{t}");
        let spinning: u64 = r["stacks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| {
                s["preempted"] == true && s["tids"].as_array().unwrap().iter().any(|x| x == tid)
            })
            .filter(|s| functions(s).iter().any(|f| f == "spin"))
            .map(|s| s["off_cpu_ns"].as_u64().unwrap())
            .sum();
        assert!(spinning >= pre * 9 / 10, "{spinning} of {pre} under spin");
    }
}

/// `--folded` gives flame graph input in microseconds, outermost frame
/// first; `--svg` writes a flame graph that parses as XML and names the
/// functions, and `--kernel-stacks` adds the kernel's side of the sleep.
#[test]
fn folded_stacks_and_an_svg_flame_graph() {
    if !bpf_tests_enabled("folded_stacks_and_an_svg_flame_graph") {
        return;
    }
    let w = workload("ratio");
    let pid = w.pid().to_string();
    let folded = rip_probe_ok(
        CLI,
        &["offcpu", "--pid", &pid, "--duration", "1s", "--folded"],
    );
    let line = folded
        .lines()
        .find(|l| l.contains(";sleep_long;"))
        .unwrap_or_else(|| panic!("no sleep_long line:\n{folded}"));
    assert!(line.starts_with("c-offcpu-"), "{line}");
    assert!(line.contains(";sleeper;sleep_long;nap;"), "{line}");
    let us: u64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    // About 750 ms of 1 s, in microseconds.
    assert!((400_000..=1_000_000).contains(&us), "{line}");

    let dir = TempDir::new("/tmp", "offcpu-svg");
    let svg = dir.join("off.svg");
    let out = rip_probe_ok(
        CLI,
        &[
            "offcpu",
            "--pid",
            &pid,
            "--duration",
            "1s",
            "--kernel-stacks",
            "--svg",
            svg.to_str().unwrap(),
        ],
    );
    assert!(
        out.trim_end()
            .ends_with(&format!("flame graph: {}", svg.display())),
        "{out}"
    );
    // The text report names the kernel's side of the sleep.
    assert!(out.contains("kernel: "), "{out}");
    assert!(out.contains("nanosleep"), "{out}");
    let text = std::fs::read_to_string(&svg).unwrap();
    let mut reader = quick_xml::Reader::from_str(&text);
    let mut elements = 0;
    loop {
        match reader.read_event() {
            Ok(quick_xml::events::Event::Eof) => break,
            Ok(quick_xml::events::Event::Start(_)) => elements += 1,
            Ok(_) => {}
            Err(e) => panic!("the SVG is not XML at {}: {e}", reader.buffer_position()),
        }
    }
    assert!(elements > 10, "{elements} elements");
    // inferno colours the `_[k]` frames as kernel ones and drops the mark.
    for name in ["sleep_long", "sleep_short", "Off-CPU time", "schedule"] {
        assert!(text.contains(name), "{name} not in the SVG");
    }
    // Written whole, then renamed: nothing else is left in the directory.
    let files: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files, vec![svg.clone()]);
}

/// An instrumented program's time off the CPU by last snap: the worker
/// snaps before each sleep, so 75 % follows the snap before the 30 ms
/// sleep, at its exact line.
#[test]
fn instrumented_programs_split_off_cpu_time_by_last_snap() {
    if !bpf_tests_enabled("instrumented_programs_split_off_cpu_time_by_last_snap") {
        return;
    }
    let lib = build_librip_release();
    let dir = target_dir().join(format!("offcpu-build/{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("offcpu_snaps");
    compile_librip_c("offcpu_snaps", &exe, &librip_static(&lib));
    let tmp = TempDir::new("/dev/shm", "offcpu-snaps");
    let ring = tmp.join("ring");
    let mut cmd = Command::new(&exe);
    cmd.arg(&ring);
    let w = Workload::start(cmd);
    let r = offcpu_json(w.pid(), "2s");
    let long_line = marker_line("c/offcpu_snaps.c", "SNAP: long");
    let short_line = marker_line("c/offcpu_snaps.c", "SNAP: short");
    let by_line = |line: u32| -> (u64, u64) {
        r["snaps"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| {
                s["snap"]["line"] == line
                    && s["snap"]["file"]
                        .as_str()
                        .unwrap()
                        .ends_with("offcpu_snaps.c")
            })
            .fold((0, 0), |(ns, n), s| {
                (
                    ns + s["off_cpu_ns"].as_u64().unwrap(),
                    n + s["count"].as_u64().unwrap(),
                )
            })
    };
    assert_split(
        by_line(long_line),
        by_line(short_line),
        &r["snaps"].to_string(),
    );
    // The text view lists them.
    let text = rip_probe_ok(
        CLI,
        &["offcpu", "--pid", &w.pid().to_string(), "--duration", "1s"],
    );
    assert!(text.contains("By last snap:"), "{text}");
    assert!(
        text.contains(&format!("offcpu_snaps.c:{long_line}")),
        "{text}"
    );
}

fn one_line_error(args: &[&str], needle: &str) {
    assert_one_line_error(CLI, args, needle);
}

/// Bad input is one line that says what to do; the process exiting during
/// the window ends it early with the times up to then.
#[test]
fn errors_are_one_line_and_an_exit_ends_the_window() {
    if !bpf_tests_enabled("errors_are_one_line_and_an_exit_ends_the_window") {
        return;
    }
    let w = workload("ratio");
    let pid = w.pid().to_string();
    one_line_error(
        &["offcpu", "--pid", &pid, "--duration", "0"],
        "offcpu needs a window",
    );
    one_line_error(
        &["offcpu", "--pid", "2000000000", "--duration", "1s"],
        "no process with pid 2000000000",
    );
    one_line_error(
        &[
            "offcpu",
            "--pid",
            &pid,
            "--duration",
            "1s",
            "--svg",
            "/nonexistent/dir/off.svg",
        ],
        "does not exist",
    );
    // A usage mistake gets clap's whole message, naming the subcommand's
    // help, and status 2.
    let (code, _, err) = rip_tests::rip_probe(
        CLI,
        &[
            "offcpu",
            "--pid",
            &pid,
            "--duration",
            "1s",
            "--folded",
            "--json",
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("cannot be used with"), "{err}");
    assert!(err.contains("rip-probe offcpu --help"), "{err}");
    assert_unprivileged_error(
        CLI,
        &["offcpu", "--pid", &pid, "--duration", "1s"],
        "CAP_BPF",
    );

    // The workload is killed a second into a 10 s window (from the attach
    // on, whatever the attach took).
    let mut w = w;
    let mut run = Background::spawn(Command::new(CLI).args([
        "offcpu",
        "--pid",
        &pid,
        "--duration",
        "10s",
        "--json",
    ]));
    run.wait_phase("attach offcpu");
    std::thread::sleep(Duration::from_secs(1));
    w.child.kill().unwrap();
    w.child.wait().unwrap();
    let out = run.finish();
    assert!(out.status.success(), "{}", out.stderr);
    let r: Value = serde_json::from_str(&out.stdout).unwrap();
    let window = r["window_ns"].as_u64().unwrap();
    assert!(window < 5_000_000_000, "window {window}");
    let warnings = r["warnings"].to_string();
    assert!(warnings.contains("exited during observation"), "{warnings}");
    assert!(
        time_under(&r, u64::from(w.tid("sleeper")), "sleep_long") > 0,
        "{r}"
    );
}

/// rip-probe run inside the target's pid namespace (a debug container):
/// the pid it takes and the thread ids it reports are the namespace's,
/// though BPF sees the kernel's.
#[test]
fn inside_a_pid_namespace_ids_are_the_namespaces() {
    if !bpf_tests_enabled("inside_a_pid_namespace_ids_are_the_namespaces") {
        return;
    }
    let exe = build_c("offcpu", &["-fomit-frame-pointer"]);
    let dir = TempDir::new("/tmp", "offcpu-pidns");
    let lines = dir.join("lines");
    // The workload writes its tids (as the namespace numbers them) then
    // `ready`; rip-probe runs once it has.
    let script = format!(
        "{exe} ratio > {lines} & \
         while ! grep -q ready {lines}; do sleep 0.05; done; \
         {CLI} offcpu --pid $! --duration 2s --json; kill $!",
        exe = exe.display(),
        lines = lines.display(),
    );
    let out = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "sh", "-c", &script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let text = std::fs::read_to_string(&lines).unwrap();
    let sleeper: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("sleeper ")?.parse().ok())
        .unwrap();
    // The shell is 1; the workload, started by it, is a small number too.
    let pid = r["process"]["pid"].as_u64().unwrap();
    assert!(pid < 100, "{}", r["process"]);
    assert!(sleeper < 100, "{text}");
    assert_split(
        blocked_under(&r, sleeper, "sleep_long"),
        blocked_under(&r, sleeper, "sleep_short"),
        &r["stacks"].to_string(),
    );
    assert_eq!(thread(&r, pid)["whole_window"], true, "{r}");
}

/// `tests/c/offcpu_life.c` in `mode`, with its lifetimes file in `dir`.
fn life(mode: &str, dir: &TempDir) -> Workload {
    let mut cmd = Command::new(build_c("offcpu_life", &[]));
    cmd.arg(mode).arg(dir.join("lives"));
    Workload::start(cmd)
}

/// (threads ended, their lifetimes summed in ns) from `offcpu_life`'s file.
fn lives(dir: &TempDir) -> (u64, u64) {
    let b = std::fs::read(dir.join("lives")).unwrap();
    let w = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
    (w(0), w(8))
}

/// What every report must hold: no thread is charged more than the
/// window, the threads' times add up to the total, and the total is at
/// most threads × window.
fn assert_adds_up(r: &Value) {
    let window = r["window_ns"].as_u64().unwrap();
    let threads = r["threads"].as_array().unwrap();
    let mut sum = 0;
    for t in threads {
        let off = t["blocked_ns"].as_u64().unwrap() + t["preempted_ns"].as_u64().unwrap();
        assert!(
            off <= window,
            "charged {off} ns in a {window} ns window: {t}"
        );
        sum += off;
    }
    assert_eq!(sum, r["total_ns"].as_u64().unwrap(), "{r}");
    assert!(sum <= threads.len() as u64 * window, "{r}");
}

/// Threads that exited before the report (no name any more): their
/// blocked time, summed.
fn exited_blocked_ns(r: &Value) -> (u64, usize) {
    let gone: Vec<&Value> = r["threads"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["name"].is_null())
        .collect();
    let ns = gone.iter().map(|t| t["blocked_ns"].as_u64().unwrap()).sum();
    (ns, gone.len())
}

/// A thread in a loop of 3 s sleeps, observed 2 s: it was asleep when the
/// window began and is charged from there, so nearly all the window is
/// off the CPU (not only the time after its first wakeup).
#[test]
fn a_thread_asleep_at_the_start_is_charged_from_the_start() {
    if !bpf_tests_enabled("a_thread_asleep_at_the_start_is_charged_from_the_start") {
        return;
    }
    let w = Workload::start({
        let mut c = Command::new(build_c("offcpu_life", &[]));
        c.arg("loop");
        c
    });
    let tid = w.tid("sleeper");
    let r = offcpu_json(w.pid(), "2s");
    assert_adds_up(&r);
    let window = r["window_ns"].as_u64().unwrap();
    let t = thread(&r, u64::from(tid));
    let off = t["blocked_ns"].as_u64().unwrap() + t["preempted_ns"].as_u64().unwrap();
    // Off the CPU all but the moments it runs between two sleeps.
    assert!(off >= window * 9 / 10, "{off} of {window}: {t}");
    assert!(
        time_under(&r, u64::from(tid), "nap") >= window * 9 / 10,
        "{r}"
    );
}

/// `sleep 1.5` exits during a 10 s window: its one thread, asleep from
/// the window's start to its exit, is charged all of that.
#[test]
fn a_sleep_that_exits_in_the_window_is_charged_until_it_exits() {
    if !bpf_tests_enabled("a_sleep_that_exits_in_the_window_is_charged_until_it_exits") {
        return;
    }
    let born = monotonic_ns();
    let mut sleep = Command::new("sleep").arg("1.5").spawn().unwrap();
    // Once it sleeps (its own event: in nanosleep or clock_nanosleep).
    let in_sleep = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/syscall"))
            .is_ok_and(|s| matches!(s.split_whitespace().next(), Some("35" | "230")))
    };
    while !in_sleep(sleep.id()) {
        std::thread::sleep(Duration::from_millis(1));
    }
    let r = offcpu_json(sleep.id(), "10s");
    let done = monotonic_ns();
    sleep.wait().unwrap();
    assert_adds_up(&r);
    let window = r["window_ns"].as_u64().unwrap();
    assert!(r["warnings"].to_string().contains("exited"), "{r}");
    // It slept at least until `born` + 1.5 s, and the window began at
    // most `window` before `done`: from then to its exit it was off the
    // CPU.
    let asleep_in_window = (born + 1_500_000_000).saturating_sub(done.saturating_sub(window));
    let total = r["total_ns"].as_u64().unwrap();
    assert!(
        total >= asleep_in_window * 95 / 100,
        "{total} ns off the CPU, yet asleep {asleep_in_window} ns of the window: {r}"
    );
    assert!(total <= window, "{r}");
}

/// A thread every 200 ms living 50 ms, observed 2 s: each that exits is
/// charged until it exits, never after, so the exited threads' blocked
/// time stays within their lifetimes (timed by themselves).
#[test]
fn exited_threads_are_not_charged_after_their_exit() {
    if !bpf_tests_enabled("exited_threads_are_not_charged_after_their_exit") {
        return;
    }
    exits_are_charged_within_their_lives("short", 5);
}

/// Two threads start threads that end at once (after one 50 µs sleep,
/// so each has a period to charge whatever the load), without a pause:
/// the storm's exited threads are charged no more than they lived, and
/// the totals add up.
#[test]
fn a_thread_storm_adds_up() {
    if !bpf_tests_enabled("a_thread_storm_adds_up") {
        return;
    }
    exits_are_charged_within_their_lives("storm", 10);
}

/// `offcpu_life MODE` observed 2 s: the totals add up, at least
/// `min_gone` threads exited in the window, and their blocked time is no
/// more than they lived (as they timed it), with 20 ms a thread for the
/// end of an exit (after its join), which may wait a moment for a lock.
fn exits_are_charged_within_their_lives(mode: &str, min_gone: usize) {
    let dir = TempDir::new("/tmp", &format!("offcpu-{mode}"));
    let w = life(mode, &dir);
    let before = lives(&dir);
    let r = offcpu_json(w.pid(), "2s");
    let after = lives(&dir);
    assert_adds_up(&r);
    let (blocked, gone) = exited_blocked_ns(&r);
    assert!(gone >= min_gone, "only {gone} exited threads seen: {r}");
    let lived = after.1 - before.1;
    let slack = (after.0 - before.0) * 20_000_000;
    assert!(
        blocked <= lived + slack,
        "exited threads blocked {blocked} ns, yet lived {lived} ns: {r}"
    );
}

/// `--svg` writes regular files only: a device, a FIFO, or a symbolic link
/// where the output goes is refused with one line before the window, and
/// left as it was. `/dev/null` is the one of a private mount namespace
/// with a /dev of its own, so the host's is never at stake.
#[test]
fn svg_output_refuses_devices_fifos_and_links() {
    let pid = std::process::id().to_string();
    // Nothing is observed: the path is checked first.
    let refused = |svg: &str, needle: &str| {
        one_line_error(
            &["offcpu", "--pid", &pid, "--duration", "60s", "--svg", svg],
            needle,
        )
    };
    let dir = TempDir::new("/tmp", "offcpu-out");
    let fifo = dir.join("fifo");
    rip_tests::run(Command::new("mkfifo").arg(&fifo));
    refused(fifo.to_str().unwrap(), "is a FIFO");
    assert!(
        std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo()
    );

    let kept = dir.join("kept");
    std::fs::write(&kept, "kept").unwrap();
    let link = dir.join("link.svg");
    std::os::unix::fs::symlink(&kept, &link).unwrap();
    refused(link.to_str().unwrap(), "is a symbolic link");
    let stdout = dir.join("stdout.svg");
    std::os::unix::fs::symlink("/proc/self/fd/1", &stdout).unwrap();
    refused(stdout.to_str().unwrap(), "is a symbolic link");
    assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
    assert!(std::fs::symlink_metadata(&stdout).unwrap().is_symlink());
    assert_eq!(std::fs::read_to_string(&kept).unwrap(), "kept");
    refused(dir.path().to_str().unwrap(), "is a directory");
    refused("/proc/self/mem", "cannot create a file in /proc/self");

    if !rip_tests::privileged_tests_enabled(
        "svg_output_refuses_devices_fifos_and_links",
        "--svg /dev/null in a mount namespace",
    ) {
        return;
    }
    let script = format!(
        "mount -t tmpfs -o size=1m rip-test-dev /dev && mknod -m 666 /dev/null c 1 3 && \
         {CLI} offcpu --pid {pid} --duration 60s --svg /dev/null; echo \"exit $?\"; \
         stat -c '%F %a' /dev/null"
    );
    let out = rip_tests::run(
        Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(&script),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        ["exit 2", "character special file 666"],
        "{stdout}{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("--svg /dev/null: is a character device"),
        "{stderr}"
    );
}

/// Every character XML 1.0 cannot hold, in the name of the process (ESC
/// and BEL of a terminal escape, U+FFFE) and markup (`<&'">`): the SVG
/// still parses as XML and holds only XML characters, and the JSON gives
/// the name exactly.
#[test]
fn hostile_process_names_give_valid_svg_and_exact_json() {
    if !bpf_tests_enabled("hostile_process_names_give_valid_svg_and_exact_json") {
        return;
    }
    let dir = TempDir::new("/tmp", "offcpu-names");
    // The kernel names a process after the file it was started by.
    let name = "\u{1b}[7m<&'\"\u{7}>\u{fffe}";
    assert!(name.len() <= 15);
    let exe = dir.join(name);
    std::os::unix::fs::symlink(build_c("offcpu", &["-fomit-frame-pointer"]), &exe).unwrap();
    let mut cmd = Command::new(&exe);
    cmd.arg("ratio");
    let w = Workload::start(cmd);
    let pid = w.pid().to_string();
    let svg = dir.join("names.svg");
    rip_probe_ok(
        CLI,
        &[
            "offcpu",
            "--pid",
            &pid,
            "--duration",
            "1s",
            "--svg",
            svg.to_str().unwrap(),
        ],
    );
    let text = std::fs::read_to_string(&svg).unwrap();
    // XML 1.0's Char production.
    let xml_char = |c: char| {
        matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}')
            || c >= '\u{10000}'
    };
    if let Some((i, c)) = text.char_indices().find(|&(_, c)| !xml_char(c)) {
        panic!("not an XML character at byte {i}: {c:?}");
    }
    let mut reader = quick_xml::Reader::from_str(&text);
    loop {
        match reader.read_event() {
            Ok(quick_xml::events::Event::Eof) => break,
            Ok(_) => {}
            Err(e) => panic!("the SVG is not XML at {}: {e}", reader.buffer_position()),
        }
    }
    // The name, its markup escaped, its control characters written out.
    assert!(
        text.contains("\\x1b[7m&lt;&amp;"),
        "the name is not in the SVG"
    );
    assert!(
        text.contains("\\x07&gt;\\u{fffe}"),
        "the name is not in the SVG"
    );

    let r = offcpu_json(w.pid(), "1s");
    assert_eq!(r["process"]["comm"], name, "{}", r["process"]);
}
