//! `rip-probe --pid` on the demo server, for real: each stuck thread is
//! reported with the right state, syscall, decoded arguments, a blocked
//! time of at least what the test knows, and its last snap at the known
//! function and line — in the text view and in `--json`.

use std::{
    process::Command,
    time::{Duration, Instant},
};

use rip_tests::{TempDir, Workload, bpf_tests_enabled, marker_line, rip_probe};

const CLI: &str = env!("CARGO_BIN_EXE_rip-probe-cli");
const SERVER: &str = env!("CARGO_BIN_EXE_rip-demo-server");
const SOURCE: &str = "src/bin/rip-demo-server.rs";

/// What the test expects of one role.
struct Expect {
    role: &'static str,
    state: &'static str,
    syscall: &'static str,
    /// Text the decoded syscall must contain.
    args: &'static str,
    /// Function (suffix) and `// SNAP:` marker of the last snap.
    function: &'static str,
    marker: &'static str,
    blocked: bool,
}

const EXPECT: &[Expect] = &[
    Expect {
        role: "locker-a",
        state: "sleeping",
        syscall: "futex",
        args: "FUTEX_WAIT",
        function: "transfer",
        marker: "// SNAP: transfer",
        blocked: true,
    },
    Expect {
        role: "locker-b",
        state: "sleeping",
        syscall: "futex",
        args: "FUTEX_WAIT",
        function: "transfer",
        marker: "// SNAP: transfer",
        blocked: true,
    },
    Expect {
        role: "pool-0",
        state: "sleeping",
        syscall: "futex",
        args: "FUTEX_WAIT",
        function: "Pool::take",
        marker: "// SNAP: Pool::take",
        blocked: true,
    },
    Expect {
        role: "pool-1",
        state: "sleeping",
        syscall: "futex",
        args: "FUTEX_WAIT",
        function: "Pool::take",
        marker: "// SNAP: Pool::take",
        blocked: true,
    },
    Expect {
        role: "pipe-reader",
        state: "sleeping",
        syscall: "read",
        args: "(pipe:[",
        function: "wait_for_message",
        marker: "// SNAP: wait_for_message",
        blocked: true,
    },
    Expect {
        role: "sleeper",
        state: "sleeping",
        syscall: "clock_nanosleep",
        args: "1h00m",
        function: "nap",
        marker: "// SNAP: nap",
        blocked: true,
    },
    Expect {
        role: "acceptor",
        state: "sleeping",
        syscall: "accept4",
        args: "TCP 127.0.0.1:",
        function: "serve",
        marker: "// SNAP: serve",
        blocked: true,
    },
    Expect {
        role: "spinner-0",
        state: "",
        syscall: "",
        args: "",
        function: "spin",
        marker: "// SNAP: spin",
        blocked: false,
    },
];

#[test]
fn stuck_threads_reported_with_state_syscall_time_and_snap() {
    if !bpf_tests_enabled("stuck_threads_reported_with_state_syscall_time_and_snap") {
        return;
    }
    let dir = TempDir::new("/dev/shm", "pid-report");
    let ring = dir.join("demo.ring");
    let mut cmd = Command::new(SERVER);
    cmd.args(["--workers", "2", "--spinners", "1", "--ring"])
        .arg(&ring);
    // Taken before the spawn: no thread can have blocked earlier.
    let started = Instant::now();
    let w = Workload::start(cmd);
    // Everybody is blocked by now ("ready" comes after the last role).
    let known = Duration::from_millis(1500);
    std::thread::sleep(known);
    let pid = w.pid().to_string();

    let t = Instant::now();
    let (code, out, err) = rip_probe(CLI, &["--pid", &pid, "--duration", "500ms", "--json"]);
    let upper = started.elapsed();
    assert_eq!(code, 0, "{err}");
    eprintln!("rip-probe --json took {:?} (window 500ms)", t.elapsed());
    let v = rip_tests::inline_stacks(serde_json::from_str(&out).expect("JSON"));
    assert_eq!(v["mode"], "pid");
    assert_eq!(v["rings"][0]["path"], ring.display().to_string());
    let threads = v["threads"].as_array().unwrap();
    assert_eq!(
        threads.len(),
        1 + 2 + 2 + 1 + 1 + 1 + 1,
        "every thread listed"
    );

    for e in EXPECT {
        let tid = w.tid(&format!("role {}", e.role));
        let t = threads
            .iter()
            .find(|t| t["tid"] == tid)
            .unwrap_or_else(|| panic!("{} ({tid}) missing", e.role));
        assert_eq!(t["name"], e.role, "ring name: {t}");
        assert_eq!(t["name_source"], "ring");
        let loc = &t["location"];
        assert_eq!(loc["source"], "ring", "{}: {t}", e.role);
        let func = loc["frame"]["function"].as_str().unwrap_or_default();
        assert!(func.ends_with(e.function), "{}: function {func}", e.role);
        assert_eq!(
            loc["frame"]["line"].as_u64(),
            Some(u64::from(marker_line(SOURCE, e.marker))),
            "{}: line of {}",
            e.role,
            e.marker
        );
        assert!(loc["frame"]["file"].as_str().unwrap().ends_with(SOURCE));
        if !e.blocked {
            assert!(
                ["running", "runnable"].contains(&t["state"].as_str().unwrap()),
                "{}: {t}",
                e.role
            );
            assert!(t["blocked"].is_null());
            continue;
        }
        assert_eq!(t["state"], e.state, "{}: {t}", e.role);
        assert_eq!(t["syscall"]["name"], e.syscall, "{}: {t}", e.role);
        let text = t["syscall"]["text"].as_str().unwrap();
        assert!(text.contains(e.args), "{}: {text}", e.role);
        let ns = t["blocked"]["ns"].as_u64().unwrap();
        assert!(
            ns >= known.as_nanos() as u64,
            "{}: blocked {ns} ns < known {known:?}",
            e.role
        );
        // And a *lower* bound: never more than the thread can have waited.
        assert!(
            ns <= upper.as_nanos() as u64,
            "{}: {ns} ns > {upper:?}",
            e.role
        );
        assert_eq!(t["blocked"]["exact"], false, "blocked before attach");
        assert!(
            !t["kernel_stack"].as_array().unwrap().is_empty(),
            "{}",
            e.role
        );
        assert!(
            t["kernel_stack"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f["function"].as_str().is_some_and(|f| f.contains("sys_"))),
            "{}: kernel stack symbolized: {}",
            e.role,
            t["kernel_stack"]
        );
    }
    // The grouped summary: the pool behind the deadlock comes first.
    let g = &v["groups"][0];
    assert_eq!(g["wait"], "futex_wait");
    assert!(
        g["location"].as_str().unwrap().contains("Pool::take")
            || g["location"].as_str().unwrap().contains("transfer")
    );

    // The same facts in the text view.
    let (code, text, err) = rip_probe(CLI, &["--pid", &pid, "--duration", "300ms"]);
    assert_eq!(code, 0, "{err}");
    let take = format!("{SOURCE}:{}", marker_line(SOURCE, "// SNAP: Pool::take"));
    assert!(
        text.lines()
            .any(|l| l.contains("2 threads blocked in futex_wait for ≥")
                && l.contains(&take)
                && l.contains("Pool::take")),
        "summary line for the pool:\n{text}"
    );
    assert!(text.contains("1 thread blocked in read for ≥"), "{text}");
    assert!(text.contains("1 thread blocked in accept4 for ≥"), "{text}");
    assert!(
        text.contains("1 thread blocked in clock_nanosleep for ≥"),
        "{text}"
    );
    for l in text.lines().filter(|l| l.contains("pipe-reader")) {
        assert!(l.contains("read(") && l.contains("pipe:["), "{l}");
    }
    // --min-blocked keeps only threads blocked that long.
    let (code, text, _) = rip_probe(
        CLI,
        &["--pid", &pid, "--duration", "100ms", "--min-blocked", "1h"],
    );
    assert_eq!(code, 0);
    assert!(!text.contains("pipe-reader"), "{text}");
}

/// The text's THREADS table is cut at `--max-threads` with a line that
/// counts the rest, while the summary still counts every thread; `--all`
/// lists them all.
#[test]
fn the_thread_table_is_cut_where_asked_and_says_so() {
    if !bpf_tests_enabled("the_thread_table_is_cut_where_asked_and_says_so") {
        return;
    }
    let dir = TempDir::new("/dev/shm", "pid-cut");
    let ring = dir.join("demo.ring");
    let mut cmd = Command::new(SERVER);
    cmd.args(["--workers", "2", "--spinners", "1", "--ring"])
        .arg(&ring);
    let w = Workload::start(cmd);
    let pid = w.pid().to_string();
    let all = 1 + 2 + 2 + 1 + 1 + 1 + 1;
    // Rows of the table: lines of the THREADS section that start with a tid.
    let rows = |out: &str| -> Vec<String> {
        let table = out.split_once("\nTHREADS\n").expect("a THREADS table").1;
        table
            .lines()
            .skip(1)
            .filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
            .map(str::to_string)
            .collect()
    };
    let summary_count = |out: &str| -> usize {
        let summary = out.split_once("\nSUMMARY\n").unwrap().1;
        let summary = summary.split_once("\nTHREADS\n").unwrap().0;
        summary
            .lines()
            .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
            .filter_map(|l| l.trim_start().split(' ').next()?.parse::<usize>().ok())
            .sum()
    };

    let (code, out, err) = rip_probe(
        CLI,
        &["--pid", &pid, "--duration", "0", "--max-threads", "3"],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(rows(&out).len(), 3, "{out}");
    let last = format!(
        "  … {} more threads not shown (the summary above counts them): --all lists every thread, --json has them all",
        all - 3
    );
    assert!(out.lines().any(|l| l == last), "no line {last:?} in\n{out}");
    assert!(
        summary_count(&out) >= all,
        "the summary counts every thread:\n{out}"
    );

    let (code, out, err) = rip_probe(CLI, &["--pid", &pid, "--duration", "0", "--all"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(rows(&out).len(), all, "{out}");
    assert!(!out.contains("not shown"), "{out}");

    let (code, _, err) = rip_probe(CLI, &["--pid", &pid, "--max-threads", "3", "--all"]);
    assert_eq!(code, 2, "--all and --max-threads conflict: {err}");
}
