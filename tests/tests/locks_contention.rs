//! `rip-probe locks` on threads contending on one global mutex with a known
//! hold time (tests/c/lock_contention.c: 4 threads, 5 ms each): counts,
//! wait times and histogram within the bounds the workload implies, the
//! lock named by its symbol, the waiters, and the holders' release
//! location; in JSON and text. Then the process exiting mid-window, and
//! the errors.

use std::{
    collections::BTreeSet,
    process::{Command, Stdio},
    time::Duration,
};

use rip_tests::{
    Background, Workload, bpf_tests_enabled, build_c, rip_probe, rip_probe_json, rip_probe_ok,
};

const EXE: &str = env!("CARGO_BIN_EXE_rip-probe-cli");
const THREADS: usize = 4;
const HOLD_MS: u64 = 5;
const MS: u64 = 1_000_000;

/// The contending workload: its worker tids and the mutex's address.
fn contention() -> (Workload, Vec<u32>, u64) {
    let mut cmd = Command::new(build_c("lock_contention", &["-fno-omit-frame-pointer"]));
    cmd.args([THREADS.to_string(), HOLD_MS.to_string()]);
    let w = Workload::start(cmd);
    let workers = w.tids("worker");
    assert_eq!(workers.len(), THREADS, "{:?}", w.lines);
    let lock = w
        .lines
        .iter()
        .find_map(|l| l.strip_prefix("lock 0x"))
        .and_then(|a| u64::from_str_radix(a, 16).ok())
        .expect("a `lock ADDR` line");
    (w, workers, lock)
}

fn lock_named<'a>(v: &'a serde_json::Value, symbol: &str) -> &'a serde_json::Value {
    v["locks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["symbol"] == symbol)
        .unwrap_or_else(|| panic!("no lock {symbol} in {v}"))
}

fn u(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not an integer: {v}"))
}

#[test]
fn contention_on_a_global_mutex_within_known_bounds() {
    if !bpf_tests_enabled("contention_on_a_global_mutex_within_known_bounds") {
        return;
    }
    let (w, workers, addr) = contention();
    let pid = w.pid().to_string();
    let v = rip_probe_json(EXE, &["locks", "--pid", &pid, "--duration", "2s", "--json"]);
    let window = u(&v["window_ns"]);
    assert!((2000 * MS..2500 * MS).contains(&window), "window {window}");
    assert_eq!(v["process"]["alive"], true);
    let l = lock_named(&v, "g_contended");
    eprintln!("{l:#}");
    assert_eq!(u(&l["lock"]), addr);
    assert_eq!(u(&l["futex"]), addr);
    assert_eq!(l["kind"], "mutex");
    assert_eq!(l["mutex"]["kind"], "normal");

    // The lock is held 5 ms at a time, back to back: at most window / 5 ms
    // releases (each wakes at most one waiter), plus the waits already
    // under way when the window opened. Four threads keep it contended:
    // most releases wake someone, on this loaded 2-CPU machine at least a
    // quarter of the most.
    let most = window / (HOLD_MS * MS);
    let (waits, wakes) = (u(&l["waits"]), u(&l["wakes"]));
    assert!(
        (most / 4..=most + THREADS as u64).contains(&waits),
        "{waits} waits, most {most}"
    );
    assert!(
        (most / 4..=most + THREADS as u64).contains(&wakes),
        "{wakes} wakes, most {most}"
    );
    // About three threads wait at any time: between one and four.
    let (total, max, p99) = (
        u(&l["total_wait_ns"]),
        u(&l["max_wait_ns"]),
        u(&l["p99_wait_ns"]),
    );
    assert!(
        (window / 2..=THREADS as u64 * window).contains(&total),
        "total {total}"
    );
    assert!((HOLD_MS * MS..window).contains(&max), "max {max}");
    assert!(p99 <= max && p99 >= MS, "p99 {p99}, max {max}");

    // The histogram: contiguous log2 buckets holding every wait, most of
    // them of at least 1 ms (a waiter sleeps until a release, and
    // releases are 5 ms apart).
    let hist = l["histogram"].as_array().unwrap();
    let mut sum = 0;
    let mut long = 0;
    for (i, b) in hist.iter().enumerate() {
        let (low, high, n) = (u(&b["lo_ns"]), u(&b["hi_ns"]), u(&b["count"]));
        assert!(low == 0 && high == 1 || high == 2 * low, "{b}");
        if i > 0 {
            assert_eq!(low, u(&hist[i - 1]["hi_ns"]), "contiguous");
        }
        sum += n;
        if low >= MS {
            long += n;
        }
    }
    assert_eq!(sum, waits);
    assert!(long * 2 >= waits, "{long} of {waits} waits ≥ 1 ms");
    assert!(u(&hist.last().unwrap()["hi_ns"]) > max);

    // Every waiter is one of the contending threads, and all four waited.
    let waiters = l["top_waiters"].as_array().unwrap();
    let tids: BTreeSet<u32> = waiters.iter().map(|t| u(&t["tid"]) as u32).collect();
    assert_eq!(tids, workers.iter().copied().collect(), "{waiters:?}");
    assert_eq!(waiters.iter().map(|t| u(&t["waits"])).sum::<u64>(), waits);
    let totals: Vec<u64> = waiters.iter().map(|t| u(&t["total_wait_ns"])).collect();
    assert!(
        totals.windows(2).all(|p| p[0] >= p[1]),
        "longest first: {totals:?}"
    );

    // The holders released it in hold_lock, called from worker.
    let wakers = l["wakers"].as_array().unwrap();
    assert_eq!(wakers.iter().map(|k| u(&k["wakes"])).sum::<u64>(), wakes);
    let top = &wakers[0];
    assert!(workers.contains(&(u(&top["tid"]) as u32)), "{top}");
    assert_eq!(top["location"]["function"], "hold_lock", "{top}");
    let functions: Vec<&str> = top["stack"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["function"].as_str())
        .collect();
    let at = |f: &str| functions.iter().position(|g| *g == f);
    assert!(
        at("hold_lock") < at("worker") && at("worker").is_some(),
        "{functions:?}"
    );

    // The text view: the lock by name, a bpftrace-style histogram, the
    // waiters and the release location.
    let text = rip_probe_ok(EXE, &["locks", "--pid", &pid, "--duration", "1s"]);
    eprintln!("{text}");
    assert!(
        text.contains(&format!("mutex g_contended (normal) at {addr:#x}")),
        "{text}"
    );
    assert!(text.contains("  wait (ns)\n"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("  [") && l.contains("|@")),
        "{text}"
    );
    for tid in &workers {
        assert!(text.contains(&format!("    {tid} ")), "tid {tid}: {text}");
    }
    assert!(text.contains(" at tests/c/lock_contention.c:"), "{text}");
    assert!(text.contains(" hold_lock ← "), "{text}");
}

#[test]
fn a_process_that_exits_mid_window_keeps_its_counts() {
    if !bpf_tests_enabled("a_process_that_exits_mid_window_keeps_its_counts") {
        return;
    }
    let (mut w, _, _) = contention();
    let pid = w.pid().to_string();
    let mut probe = Background::spawn(Command::new(EXE).args([
        "locks",
        "--pid",
        &pid,
        "--duration",
        "20s",
        "--json",
    ]));
    // Once the window has started, the contention goes on for a while
    // (the workload contends without pause) before the workload exits,
    // when its stdin closes.
    probe.wait_phase("load and attach");
    std::thread::sleep(Duration::from_millis(1500));
    drop(w.child.stdin.take());
    let out = probe.finish();
    assert!(out.status.success(), "{}", out.stderr);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["process"]["alive"], false, "{v}");
    assert!(
        v["process"]["lost"].as_str().unwrap().contains("exited"),
        "{v}"
    );
    let warnings = v["warnings"].to_string();
    assert!(warnings.contains("counted until then"), "{warnings}");
    assert!(u(&v["window_ns"]) < 10_000 * MS);
    // What was counted before the exit is there: the contended futex.
    let counted: u64 = v["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| u(&l["waits"]))
        .sum();
    assert!(counted >= 50, "{v}");

    // The text says so too, on a process that exits at once.
    let (mut w, _, _) = contention();
    let pid = w.pid().to_string();
    let probe = Command::new(EXE)
        .args(["locks", "--pid", &pid, "--duration", "20s"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    drop(w.child.stdin.take());
    let out = probe.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("warning: process ") && text.contains("exited"),
        "{text}"
    );
}

#[test]
fn bad_input_is_one_line_with_the_fix() {
    let one_line = |args: &[&str], code: i32, want: &str| {
        let (c, out, err) = rip_probe(EXE, args);
        assert_eq!(c, code, "{args:?}: {err}");
        assert!(out.is_empty(), "{out}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(want), "{args:?}: {err}");
    };
    one_line(
        &["locks", "--pid", "1", "--duration", "0"],
        2,
        "a window is needed",
    );
    one_line(
        &["locks", "--pid", "2000000000", "--duration", "1s"],
        1,
        "no process with pid 2000000000",
    );
    one_line(&["locks"], 2, "--pid");
    if !bpf_tests_enabled("bad_input_is_one_line_with_the_fix (privileged part)") {
        return;
    }
    let (w, _, _) = contention();
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ])
        .arg(EXE)
        .args(["locks", "--pid", &w.pid().to_string(), "--duration", "1s"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("CAP_BPF"), "{err}");
}

/// The build of the exit program for kernels before 5.15 (the waker's
/// registers found at the top of its kernel stack) counts the same, and
/// keeps the words at the top of each waker's user stack.
#[test]
fn the_build_for_older_kernels_counts_the_same() {
    if !bpf_tests_enabled("the_build_for_older_kernels_counts_the_same") {
        return;
    }
    use rip_probe::collect::kernel::{contention::LockProbe, features::RegsSource};
    let (w, workers, addr) = contention();
    let mut probe = LockProbe::attach_with(w.pid(), Some(RegsSource::KernelStack)).unwrap();
    let attached = std::time::Instant::now();
    std::thread::sleep(Duration::from_secs(1));
    probe.stop().unwrap();
    // The window lasted at most this long (a loaded machine stretches the
    // sleep, never shortens it).
    let window = attached.elapsed().as_nanos() as u64;
    let counted = probe.read().unwrap();
    let (_, stat) = counted
        .locks
        .iter()
        .find(|(a, _)| *a == addr)
        .expect("the contended mutex is counted");
    // Each release wakes at most one waiter, and releases are 5 ms apart:
    // at most window / 5 ms waits, plus those under way at the attach.
    let most = window / (HOLD_MS * MS) + THREADS as u64;
    assert!(
        (1..=most).contains(&stat.waits),
        "{} waits in {window} ns, most {most}",
        stat.waits
    );
    assert_eq!(stat.hist.iter().sum::<u64>(), stat.waits);
    assert!(
        counted
            .waiters
            .iter()
            .all(|(k, _)| workers.contains(&k.tid))
    );
    let (key, waker) = counted
        .wakers
        .iter()
        .find(|(k, _)| k.uaddr == addr)
        .expect("a waker of the mutex");
    assert!(workers.contains(&waker.tid));
    assert!(
        waker.sp != 0 && waker.top.iter().any(|&w| w != 0),
        "{waker:?}"
    );
    assert!(
        counted
            .stacks
            .get(&key.stack_id)
            .is_some_and(|s| s.len() >= 2)
    );
}
