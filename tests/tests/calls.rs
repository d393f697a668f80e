//! `rip-probe calls`: exact call counts, latency histograms, outliers and
//! recursion, on `tests/c/calls.c` (no librip, -O2, no frame pointers),
//! whose main thread runs the commands the test writes to its stdin; and
//! the command's one-line errors.

use std::{io::Write, process::Command, time::Duration};

use rip_tests::{
    Background, TempDir, Workload, assert_one_line_error, assert_unprivileged_error,
    bpf_tests_enabled, build_c, rip_probe, rip_probe_json,
};
use serde_json::Value;

const CLI: &str = env!("CARGO_BIN_EXE_rip-probe-cli");

fn workload() -> Workload {
    Workload::start(Command::new(build_c("calls", &["-fomit-frame-pointer"])))
}

/// The workload, writing the durations of its sleeps as it measures them
/// to `spans`.
fn workload_with_spans(spans: &std::path::Path) -> Workload {
    let mut cmd = Command::new(build_c("calls", &["-fomit-frame-pointer"]));
    cmd.arg(spans);
    Workload::start(cmd)
}

/// `rip-probe calls --pid PID ARGS --json`, running in the background,
/// once its probes are attached: the window starts then.
fn start_calls(w: &Workload, args: &[&str]) -> Background {
    let mut run = Background::spawn(
        Command::new(CLI)
            .args(["calls", "--pid", &w.pid().to_string(), "--json"])
            .args(args),
    );
    run.wait_phase("attach uprobes");
    run
}

/// Writes commands to the workload (see tests/c/calls.c).
fn send(w: &mut Workload, commands: &str) {
    let stdin = w.child.stdin.as_mut().expect("piped stdin");
    stdin.write_all(commands.as_bytes()).unwrap();
    stdin.flush().unwrap();
}

/// Waits for the background run; its JSON report.
fn report(run: Background) -> Value {
    let out = run.finish();
    assert!(
        out.status.success(),
        "rip-probe calls failed: {}",
        out.stderr
    );
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", out.stderr))
}

fn function<'a>(r: &'a Value, name: &str) -> &'a Value {
    r["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["function"] == name)
        .unwrap_or_else(|| panic!("{name} not in {r}"))
}

/// The histogram's counts, by bucket lower bound.
fn histogram(f: &Value) -> Vec<(u64, u64)> {
    f["histogram"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["count"].as_u64() != Some(0))
        .map(|b| (b["lo_ns"].as_u64().unwrap(), b["count"].as_u64().unwrap()))
        .collect()
}

const MS: u64 = 1_000_000;

/// `f`'s histogram holds its calls where they belong: none below the
/// bucket `lo` of the sleep's own length (a sleep never ends early), and
/// no more at or above any bound than the caller measured there itself
/// (the probes time a part of what the caller measures). On a quiet
/// machine, where the caller measured every call in `[lo, 2 lo)`, that is
/// every count in that bucket.
fn in_bucket(f: &Value, lo: u64, measured: &[u64]) {
    let h = histogram(f);
    assert!(h.iter().all(|&(l, _)| l >= lo), "none below {lo}: {f}");
    assert_eq!(
        h.iter().map(|b| b.1).sum::<u64>(),
        measured.len() as u64,
        "{f}"
    );
    for &(bound, _) in &h {
        let probed: u64 = h.iter().filter(|b| b.0 >= bound).map(|b| b.1).sum();
        let caller = measured.iter().filter(|&&ns| ns >= bound).count() as u64;
        assert!(
            probed <= caller,
            "{probed} calls at or above {bound} ns, the caller measured {caller}: {measured:?} {f}"
        );
    }
    if measured.iter().all(|&ns| ns < 2 * lo) {
        assert_eq!(h, [(lo, measured.len() as u64)], "{f}");
    }
}

/// The durations the workload measured for `function`'s calls.
fn spans(path: &std::path::Path, function: &str) -> Vec<u64> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix(function)?.trim().parse().ok())
        .collect()
}

#[test]
fn exact_counts_and_histograms_of_known_sleeps() {
    if !bpf_tests_enabled("exact_counts_and_histograms_of_known_sleeps") {
        return;
    }
    let dir = TempDir::new("/tmp", "calls-spans");
    let spans_file = dir.join("spans");
    let mut w = workload_with_spans(&spans_file);
    let child = start_calls(
        &w,
        &[
            "--uprobe",
            "count_me",
            "--uprobe",
            "sleep_*",
            "--uprobe",
            "heartbeat",
            "--duration",
            "3s",
        ],
    );
    send(&mut w, "count 12345\nshort 10\nlong 5\n");
    let r = report(child);
    assert_eq!(r["functions"].as_array().unwrap().len(), 4, "{r}");
    let count = function(&r, "count_me");
    assert_eq!(count["calls"], 12345, "{count}");
    assert_eq!(count["timed"], 12345, "{count}");
    // The module is the binary as the process knows it, not the /proc
    // path rip-probe reached it through.
    let exe = std::fs::read_link(format!("/proc/{}/exe", w.pid())).unwrap();
    assert_eq!(count["module"], exe.to_str().unwrap(), "{count}");

    // 2.2 ms lies in [2M, 4M) ns, 17 ms in [16M, 32M) ns.
    let short = function(&r, "sleep_short");
    assert_eq!(short["calls"], 10, "{short}");
    in_bucket(short, 1 << 21, &spans(&spans_file, "sleep_short"));
    let long = function(&r, "sleep_long");
    assert_eq!(long["calls"], 5, "{long}");
    in_bucket(long, 1 << 24, &spans(&spans_file, "sleep_long"));
    let min = long["min_ns"].as_u64().unwrap();
    let max = long["max_ns"].as_u64().unwrap();
    let mean = long["mean_ns"].as_u64().unwrap();
    assert!(17 * MS <= min && min <= mean && mean <= max, "{long}");
    for p in ["p50", "p99"] {
        let (lo, hi) = (
            long[p]["lo_ns"].as_u64().unwrap(),
            long[p]["hi_ns"].as_u64().unwrap(),
        );
        assert!(min <= lo && lo < hi && hi <= max + 1, "{p}: {long}");
    }
    // No outliers were asked for.
    assert!(r["outlier_rule"].is_null());
    assert_eq!(r["outliers"].as_array().unwrap().len(), 0);
    eprintln!(
        "count_me {} calls; sleep_long mean {} ns",
        count["calls"], long["mean_ns"]
    );

    // The same run as text: the table and bpftrace-style histograms.
    let child = Command::new(CLI)
        .args(["calls", "--pid", &w.pid().to_string()])
        .args(["--uprobe", "sleep_short", "--uprobe", "heartbeat"])
        .args(["--duration", "1500ms"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&child.stdout);
    assert!(
        child.status.success(),
        "{}",
        String::from_utf8_lossy(&child.stderr)
    );
    assert!(
        text.contains("FUNCTION") && text.contains("heartbeat"),
        "{text}"
    );
    assert!(text.contains("heartbeat: latency of"), "{text}");
    assert!(text.contains(" |@"), "{text}");
}

#[test]
fn recursive_calls_are_timed_per_depth() {
    if !bpf_tests_enabled("recursive_calls_are_timed_per_depth") {
        return;
    }
    let mut w = workload();
    let child = start_calls(
        &w,
        &[
            "--uprobe",
            "recurse",
            "--uprobe",
            "heartbeat",
            "--duration",
            "2s",
        ],
    );
    // Four nested calls lasting about 12, 9, 6 and 3 ms.
    send(&mut w, "recurse 4\n");
    let r = report(child);
    let f = function(&r, "recurse");
    assert_eq!(f["calls"], 4, "{f}");
    assert_eq!(f["timed"], 4, "{f}");
    // Each level timed from its own entry: the innermost about 3 ms, the
    // outermost about 12, 30 ms in all. (Timed per thread only, every
    // level would start at the innermost entry.) Sleeps end late on a busy
    // machine, never early.
    let min = f["min_ns"].as_u64().unwrap();
    let max = f["max_ns"].as_u64().unwrap();
    let mean = f["mean_ns"].as_u64().unwrap();
    // The outermost call holds three more 3 ms sleeps than the innermost,
    // however late each ends: timed per thread, they would be one length.
    assert!(min >= 3 * MS, "{f}");
    assert!(max >= 12 * MS, "{f}");
    assert!(mean >= 30 * MS / 4, "{f}");
    assert!(max >= min + 9 * MS, "{f}");
    let h = histogram(f);
    assert_eq!(h.iter().map(|b| b.1).sum::<u64>(), 4, "{f}");
    assert!(h[0].0 >= 1 << 21, "the innermost call at 2M or above: {f}");
}

#[test]
fn slow_calls_are_outliers_and_fast_ones_are_not() {
    if !bpf_tests_enabled("slow_calls_are_outliers_and_fast_ones_are_not") {
        return;
    }
    let dir = TempDir::new("/tmp", "calls-outliers");
    let spans_file = dir.join("spans");
    let mut w = workload_with_spans(&spans_file);
    let child = start_calls(
        &w,
        &[
            "--uprobe",
            "sleep_*",
            "--uprobe",
            "count_me",
            "--uprobe",
            "heartbeat",
            "--duration",
            "2s",
            "--slower-than",
            "10ms",
        ],
    );
    send(&mut w, "count 100\nshort 5\nlong 3\nshort 5\n");
    let r = report(child);
    assert_eq!(r["outlier_rule"]["kind"], "slower_than", "{r}");
    assert_eq!(r["outlier_rule"]["threshold_ns"], 10 * MS, "{r}");
    let outliers = r["outliers"].as_array().unwrap();
    // The three sleep_long calls, and no call under the threshold. (On a
    // busy machine a short sleep may really end more than 10 ms late, as
    // its caller measures: it is then rightly an outlier too.)
    let pid = u64::from(w.pid());
    for o in outliers {
        assert!(o["duration_ns"].as_u64().unwrap() > 10 * MS, "{o}");
        assert_eq!(o["tid"], pid, "the main thread: {o}");
        assert!(o["start_unix_ns"].as_u64().unwrap() > 1_700_000_000 * 1_000_000_000);
        if o["function"] != "sleep_long" {
            continue;
        }
        assert!(o["duration_ns"].as_u64().unwrap() >= 17 * MS, "{o}");
        assert_eq!(o["caller"]["function"], "do_sleeps", "{o}");
    }
    assert_eq!(function(&r, "sleep_long")["outliers"], 3);
    let late = spans(&spans_file, "sleep_short")
        .iter()
        .filter(|&&ns| ns > 10 * MS)
        .count() as u64;
    let short = function(&r, "sleep_short")["outliers"].as_u64().unwrap();
    assert!(
        short <= late,
        "{short} short outliers, {late} measured late: {r}"
    );
    let listed = |name: &str| outliers.iter().filter(|o| o["function"] == name).count() as u64;
    for name in ["sleep_long", "sleep_short", "count_me"] {
        assert_eq!(
            function(&r, name)["outliers"].as_u64(),
            Some(listed(name)),
            "{r}"
        );
    }
}

#[test]
fn outliers_against_a_training_window() {
    if !bpf_tests_enabled("outliers_against_a_training_window") {
        return;
    }
    // The threshold is 250 % of the slowest training call: on a busy
    // machine a 2 ms training call delayed past 120 ms puts it above the
    // slow calls, and the run shows nothing about them. That run is
    // repeated (it is rare: a few in a thousand calls are delayed so).
    let (r, threshold) = (1..=3)
        .find_map(|attempt| {
            let r = trained_run();
            let op = function(&r, "op");
            assert_eq!(op["calls"], 48, "{op}");
            let threshold = op["threshold_ns"].as_u64().unwrap();
            assert!(threshold >= 5 * MS, "{op}");
            if threshold < SLOW_OP * MS {
                return Some((r, threshold));
            }
            eprintln!("run {attempt}: a training call was delayed past the slow calls: {op}");
            None
        })
        .expect("three runs whose training held a call delayed past 120 ms");
    let outliers = r["outliers"].as_array().unwrap();
    // The three slow calls are flagged, and no call faster than its
    // function's threshold is. (On a busy machine a 2 ms call, or a
    // heartbeat, may really take longer than its function's threshold,
    // even than the slow calls: it is then rightly an outlier too.)
    let slow = outliers
        .iter()
        .filter(|o| o["function"] == "op" && o["duration_ns"].as_u64().unwrap() >= SLOW_OP * MS)
        .count();
    assert!(slow >= 3, "{r}");
    assert!(threshold < SLOW_OP * MS);
    for o in outliers {
        let name = o["function"].as_str().unwrap();
        let threshold = function(&r, name)["threshold_ns"].as_u64().unwrap();
        assert!(o["duration_ns"].as_u64().unwrap() > threshold, "{o}");
        if name != "op" {
            assert_eq!(name, "heartbeat", "{o}");
            continue;
        }
        assert_eq!(o["caller"]["function"], "do_ops", "{o}");
        // The whole stack at entry, unwound through the CFI (the workload
        // has no frame pointers): the function, its caller, main.
        let names: Vec<&str> = o["stack"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["function"].as_str().unwrap_or("?"))
            .collect();
        assert_eq!(names.first(), Some(&"op"), "{names:?}");
        assert_eq!(names.get(1), Some(&"do_ops"), "{names:?}");
        assert!(names.contains(&"main"), "{names:?}");
    }
}

/// The slow calls of [`trained_run`], in ms.
const SLOW_OP: u64 = 300;

/// A `--outlier 250% --training 1s` run: 2 ms calls during the training,
/// then more of those and three slow ones. Its report.
fn trained_run() -> Value {
    let mut w = workload();
    let child = start_calls(
        &w,
        &[
            "--uprobe",
            "op",
            "--uprobe",
            "heartbeat",
            "--duration",
            "5s",
            "--outlier",
            "250%",
            "--training",
            "1s",
        ],
    );
    // The rest is sent 2 s after the window started, a second after the
    // training ended, so a late wakeup of rip-probe at the training's end
    // does not count it in the training.
    send(&mut w, "op 2 20\n");
    std::thread::sleep(Duration::from_secs(2));
    send(&mut w, &format!("op 2 20\nop {SLOW_OP} 3\nop 2 5\n"));
    let r = report(child);
    assert_eq!(r["outlier_rule"]["kind"], "trained", "{r}");
    assert_eq!(r["outlier_rule"]["percent"], 250, "{r}");
    r
}

#[test]
fn the_process_exiting_mid_window_ends_it_with_what_was_counted() {
    if !bpf_tests_enabled("the_process_exiting_mid_window_ends_it_with_what_was_counted") {
        return;
    }
    let mut w = workload();
    let child = start_calls(
        &w,
        &[
            "--uprobe",
            "count_me",
            "--uprobe",
            "heartbeat",
            "--duration",
            "30s",
        ],
    );
    send(&mut w, "count 777\nexit\n");
    let r = report(child);
    assert_eq!(function(&r, "count_me")["calls"], 777, "{r}");
    assert_eq!(r["process"]["alive"], false, "{r}");
    let warning = r["warnings"][0].as_str().unwrap();
    assert!(warning.contains("exited"), "{warning}");
    assert!(r["window_ns"].as_u64().unwrap() < 20_000_000_000);
}

/// A program whose threads come and go: 6,000 threads, more than the
/// kernel's table of threads in probed calls holds, each calling
/// count_me() 10 times and exiting. Each thread's entry goes at its exit,
/// so every call is timed; the process exits once all are joined, which
/// ends the window with no call in flight.
#[test]
fn calls_of_threads_that_come_and_go_are_all_timed() {
    if !bpf_tests_enabled("calls_of_threads_that_come_and_go_are_all_timed") {
        return;
    }
    let mut w = workload();
    let child = start_calls(
        &w,
        &[
            "--uprobe",
            "count_me",
            "--uprobe",
            "heartbeat",
            "--duration",
            "300s",
        ],
    );
    send(&mut w, "churn 6000 10\nexit\n");
    let r = report(child);
    let count = function(&r, "count_me");
    assert_eq!(count["calls"], 60_000, "{count}");
    assert_eq!(count["timed"], 60_000, "{count}");
    assert!(
        !r["warnings"].to_string().contains("not timed"),
        "{}",
        r["warnings"]
    );
}

/// Runs `rip-probe calls ARGS`, which must fail with a one-line error
/// containing `expect`.
fn one_line_error(args: &[&str], expect: &str) {
    assert_one_line_error(CLI, args, expect);
}

#[test]
fn errors_are_one_line() {
    if !bpf_tests_enabled("errors_are_one_line") {
        return;
    }
    let w = workload();
    let pid = w.pid().to_string();
    let calls = |more: &[&'static str]| {
        let mut a = vec!["calls", "--pid", pid.as_str()];
        a.extend_from_slice(more);
        a
    };
    one_line_error(
        &calls(&["--uprobe", "count_me", "--duration", "0"]),
        "calls needs a window",
    );
    one_line_error(
        &calls(&["--uprobe", "[", "--duration", "1s"]),
        "bad pattern",
    );
    one_line_error(
        &calls(&["--uprobe", "count_mee", "--duration", "1s"]),
        "no function",
    );
    // The error names near functions.
    let (_, _, err) = rip_probe(CLI, &calls(&["--uprobe", "count_mee", "--duration", "1s"]));
    assert!(err.contains("near: count_me"), "{err}");
    one_line_error(
        &calls(&["--uprobe", "libc:s*", "--duration", "1s"]),
        "narrow the pattern",
    );
    one_line_error(
        &[
            "calls",
            "--pid",
            "2000000000",
            "--uprobe",
            "f",
            "--duration",
            "1s",
        ],
        "no process with pid 2000000000",
    );
    assert_unprivileged_error(
        CLI,
        &[
            "calls",
            "--pid",
            &pid,
            "--uprobe",
            "count_me",
            "--duration",
            "1s",
        ],
        "CAP_BPF",
    );
    // Nothing stays attached after the errors: the workload never saw a
    // probe.
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    assert!(!maps.contains("[uprobes]"), "no probe was attached");
}

/// Debian's perl, stripped as shipped: its functions are probed by the
/// names it exports (`.dynsym`), and a loop of 10 ms `select` calls is
/// counted and timed.
#[test]
fn a_stripped_debian_program_is_probed_by_its_exported_names() {
    if !bpf_tests_enabled("a_stripped_debian_program_is_probed_by_its_exported_names") {
        return;
    }
    let w = Workload::start({
        let mut c = Command::new("perl");
        c.args([
            "-e",
            "$| = 1; print \"ready\\n\"; while (1) { select(undef, undef, undef, 0.01) }",
        ]);
        c
    });
    let r = rip_probe_json(
        CLI,
        &[
            "calls",
            "--pid",
            &w.pid().to_string(),
            "--uprobe",
            "Perl_pp_sselect",
            "--duration",
            "1s",
            "--json",
        ],
    );
    let f = &r["functions"][0];
    assert_eq!(f["function"], "Perl_pp_sselect", "{r}");
    let calls = f["calls"].as_u64().unwrap();
    // 100 a second at most; fewer on a loaded machine, never none.
    assert!((10..=101).contains(&calls), "{r}");
    assert!(f["min_ns"].as_u64().unwrap() >= 10_000_000, "{r}");
}
