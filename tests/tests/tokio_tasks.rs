//! Tokio tasks stuck the ways async code gets stuck (`rip-tokio-workload`):
//! `rip-probe dump` (live and after SIGKILL) and `rip-probe --pid` name each
//! task with its state, polls, idle (or polling) time and await location —
//! function and line — in text and `--json`; `--min-idle` keeps the tasks
//! idle that long; and 100,000 tasks idle at one await are one sentence,
//! in bounded tmpfs.

use std::{
    os::unix::fs::MetadataExt,
    process::Command,
    time::{Duration, Instant},
};

use rip_tests::{TempDir, Workload, bpf_tests_enabled, marker_line, rip_probe_json, rip_probe_ok};

const CLI: &str = env!("CARGO_BIN_EXE_rip-probe-cli");
const WORKLOAD: &str = env!("CARGO_BIN_EXE_rip-tokio-workload");
const SOURCE: &str = "src/bin/rip-tokio-workload.rs";

/// A task of the `stuck` workload and where it awaits.
struct Expect {
    name: &'static str,
    /// The async fn whose body snapped (its `// SNAP:` label too).
    function: &'static str,
    polling: bool,
}

const STUCK: &[Expect] = &[
    Expect {
        name: "channel-waiter",
        function: "wait_for_message",
        polling: false,
    },
    Expect {
        name: "lock-holder",
        function: "hold_lock",
        polling: false,
    },
    Expect {
        name: "lock-waiter",
        function: "wait_for_lock",
        polling: false,
    },
    Expect {
        name: "sleeper",
        function: "nap",
        polling: false,
    },
    Expect {
        name: "blocker",
        function: "block_thread",
        polling: true,
    },
];

fn line(function: &str) -> u64 {
    u64::from(marker_line(SOURCE, &format!("// SNAP: {function}")))
}

/// `file:line function` as the text views print an await location.
fn described(function: &str) -> String {
    format!(
        "{SOURCE}:{} rip_tokio_workload::{function}::{{{{closure}}}}",
        line(function)
    )
}

fn json(args: &[&str]) -> serde_json::Value {
    rip_probe_json(CLI, args)
}

fn text(args: &[&str]) -> String {
    rip_probe_ok(CLI, args)
}

/// Every task of the `stuck` workload, as a report (`dump` or `--pid`,
/// `--json`) shows it: state, polls, time in that state at least `known`
/// (at most `upper`, unless a lower bound), await location.
fn check_tasks(v: &serde_json::Value, w: &Workload, known: Duration, upper: Option<Duration>) {
    let tasks = v["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), STUCK.len(), "{v}");
    for e in STUCK {
        let t = tasks
            .iter()
            .find(|t| t["name"] == e.name)
            .unwrap_or_else(|| panic!("no task {}: {tasks:?}", e.name));
        let id = w.tid(&format!("task {}", e.name));
        assert_eq!(t["id"], id, "{}", e.name);
        assert_eq!(t["origin"], "tokio", "a tokio task says so: {t}");
        assert!(t["polls"].as_u64().unwrap() >= 1, "{t}");
        let (state, ns) = if e.polling {
            ("polling", &t["polling_ns"])
        } else {
            ("idle", &t["idle_ns"])
        };
        assert_eq!(t["state"], state, "{t}");
        assert_eq!(t["polling_tid"].is_u64(), e.polling, "{t}");
        let ns = ns.as_u64().unwrap_or_else(|| panic!("no time: {t}"));
        if let Some(upper) = upper {
            assert!(
                ns >= known.as_nanos() as u64,
                "{}: {ns} ns < {known:?}",
                e.name
            );
            // The coarse clock may lag by a tick: allow one (≤ 10 ms).
            let upper = upper + Duration::from_millis(10);
            assert!(
                ns <= upper.as_nanos() as u64,
                "{}: {ns} ns > {upper:?}",
                e.name
            );
        }
        assert!(t["since_unix_ns"].as_u64().unwrap() > 1_700_000_000_000_000_000);
        // Where the address really is: the innermost inlined function
        // (an async fn's body may be inlined into the wrapper's poll).
        let f = &t["location"]["frame"];
        let at = f["inlined"].as_array().unwrap().last().unwrap_or(f);
        let func = at["function"].as_str().unwrap_or_default();
        assert!(
            func.contains(&format!("::{}::", e.function)),
            "{}: function {func}: {f}",
            e.name
        );
        assert_eq!(
            at["line"].as_u64(),
            Some(line(e.function)),
            "{}: {f}",
            e.name
        );
        assert!(at["file"].as_str().unwrap().ends_with(SOURCE), "{f}");
    }
}

#[test]
fn dump_names_each_stuck_task_with_its_await() {
    let dir = TempDir::new("/dev/shm", "tokio-dump");
    let ring = dir.join("tokio.ring");
    let ring_s = ring.to_str().unwrap();
    let started = Instant::now();
    let mut cmd = Command::new(WORKLOAD);
    cmd.args(["stuck", ring_s]);
    let mut w = Workload::start(cmd);
    let known = Duration::from_millis(1200);
    std::thread::sleep(known);

    let t = Instant::now();
    let v = json(&["dump", ring_s, "--json"]);
    eprintln!("dump --json of the stuck workload: {:?}", t.elapsed());
    check_tasks(&v, &w, known, Some(started.elapsed()));
    assert!(
        v["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["lower_bound"] == false)
    );

    let out = text(&["dump", ring_s]);
    for e in STUCK {
        let state = if e.polling { "polling" } else { "idle" };
        assert!(
            out.lines()
                .any(|l| l.starts_with(&format!("  1 task {state} for "))
                    && l.ends_with(&format!(" — last snap {}", described(e.function)))),
            "{}: no sentence in\n{out}",
            e.name
        );
        let row = out
            .lines()
            .find(|l| l.contains(&format!(" {} ", e.name)))
            .unwrap_or_else(|| panic!("no row for {}:\n{out}", e.name));
        assert!(row.ends_with(&described(e.function)), "{row}");
        let want = if e.polling {
            "polling on thread "
        } else {
            "idle since 20"
        };
        assert!(row.contains(want), "{row}");
    }

    // --min-idle: the idle ones, not the one polling; none idle for an hour.
    let v = json(&["dump", ring_s, "--json", "--min-idle", "1s"]);
    let names: Vec<&str> = v["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["channel-waiter", "lock-holder", "sleeper", "lock-waiter"]
    );
    assert_eq!(v["task_groups"].as_array().unwrap().len(), 4);
    let out = text(&["dump", ring_s, "--min-idle", "1h"]);
    assert!(!out.contains("TASKS"), "{out}");

    // After SIGKILL: the same tasks, times as lower bounds up to the last
    // thing the ring recorded.
    w.child.kill().unwrap();
    w.child.wait().unwrap();
    let v = json(&["dump", ring_s, "--json"]);
    check_tasks(&v, &w, Duration::ZERO, None);
    for t in v["tasks"].as_array().unwrap() {
        assert_eq!(t["lower_bound"], true, "{t}");
    }
    assert!(
        v["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().contains("lower bounds")),
        "{v}"
    );
    let out = text(&["dump", ring_s]);
    assert!(out.contains("process not running"), "{out}");
    assert!(
        out.contains(&format!("— last snap {}", described("wait_for_message"))),
        "{out}"
    );
}

#[test]
fn pid_report_names_each_stuck_task_with_its_await() {
    if !bpf_tests_enabled("pid_report_names_each_stuck_task_with_its_await") {
        return;
    }
    let dir = TempDir::new("/dev/shm", "tokio-pid");
    let ring = dir.join("tokio.ring");
    let started = Instant::now();
    let mut cmd = Command::new(WORKLOAD);
    cmd.args(["stuck", ring.to_str().unwrap()]);
    let w = Workload::start(cmd);
    let known = Duration::from_millis(1200);
    std::thread::sleep(known);
    let pid = w.pid().to_string();

    let t = Instant::now();
    let v = json(&["--pid", &pid, "--duration", "300ms", "--json"]);
    eprintln!("--pid --json of the stuck workload: {:?}", t.elapsed());
    check_tasks(&v, &w, known, Some(started.elapsed()));
    // The blocker's poll holds a worker thread, asleep in the kernel.
    let blocker = v["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "blocker")
        .unwrap();
    let tid = blocker["polling_tid"].as_u64().unwrap();
    let thread = v["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tid"] == tid)
        .unwrap_or_else(|| panic!("thread {tid} polling the blocker is listed"));
    assert_eq!(thread["name"], "tokio-worker");
    assert_eq!(thread["syscall"]["name"], "clock_nanosleep", "{thread}");
    // ...and that thread's location is the task's last snap.
    assert_eq!(thread["polling_task"], blocker["id"], "{thread}");
    assert_eq!(thread["location"], blocker["location"], "{thread}");

    let out = text(&["--pid", &pid, "--duration", "200ms"]);
    for e in STUCK {
        assert!(
            out.contains(&format!("— last snap {}", described(e.function))),
            "{}:\n{out}",
            e.name
        );
    }
    assert!(
        out.contains(&format!("polling on thread {tid} (in clock_nanosleep)")),
        "{out}"
    );
    // --min-idle: the idle ones; none idle for an hour.
    let idle_for = |min: &str| {
        let args = [
            "--pid",
            &pid,
            "--duration",
            "100ms",
            "--json",
            "--min-idle",
            min,
        ];
        json(&args)["tasks"].as_array().unwrap().len()
    };
    assert_eq!((idle_for("1s"), idle_for("1h")), (4, 0));
}

/// 100,000 tasks idle at one await: one group of them all, in `dump` and
/// `--pid`, text and JSON; each task costs the ring one coroutine slot of
/// tmpfs.
#[test]
fn many_idle_tasks_are_one_sentence() {
    const N: usize = 100_000;
    let dir = TempDir::new("/dev/shm", "tokio-many");
    let ring = dir.join("many.ring");
    let ring_s = ring.to_str().unwrap();
    let t = Instant::now();
    let mut cmd = Command::new(WORKLOAD);
    cmd.args(["many", ring_s, &N.to_string()]);
    let w = Workload::start(cmd);
    eprintln!("{N} tasks spawned and parked in {:?}", t.elapsed());
    let known = Duration::from_millis(500);
    std::thread::sleep(known);

    let bytes = std::fs::metadata(&ring).unwrap().blocks() * 512;
    let per_task = bytes as f64 / N as f64;
    let slot = librip::format::Layout::new(64, N as u32 + 16, 32)
        .unwrap()
        .coroutine_slot_size;
    eprintln!(
        "tmpfs: {bytes} bytes for {N} live tasks: {per_task:.1} bytes per task (a slot is {slot})"
    );
    assert!(
        per_task <= f64::from(slot) * 1.05,
        "{per_task} bytes per task"
    );

    let group_of_all = |v: &serde_json::Value| {
        assert_eq!(v["tasks"].as_array().unwrap().len(), N);
        let g = &v["task_groups"][0];
        assert_eq!(g["count"], N);
        assert_eq!(g["state"], "idle");
        assert_eq!(g["origin"], "tokio", "{g}");
        assert_eq!(v["task_groups"].as_array().unwrap().len(), 1);
        assert!(g["min_ns"].as_u64().unwrap() >= known.as_nanos() as u64);
        assert!(
            g["location"]
                .as_str()
                .unwrap()
                .ends_with(&described("read_frame")),
            "{g}"
        );
    };
    let t = Instant::now();
    group_of_all(&json(&["dump", ring_s, "--json"]));
    let dump_json = t.elapsed();
    let out = text(&["dump", ring_s, "--min-idle", "500ms"]);
    let line = out
        .lines()
        .find(|l| l.starts_with(&format!("  {N} tasks idle ≥")))
        .unwrap_or_else(|| panic!("no group sentence:\n{}", &out[..out.len().min(2000)]));
    assert!(line.ends_with(&described("read_frame")), "{line}");
    assert!(out.contains(&format!("  … {} more tasks", N - 100)));
    eprintln!("dump --json of {N} tasks: {dump_json:?}; {line}");

    if !bpf_tests_enabled("many_idle_tasks_are_one_sentence (--pid)") {
        return;
    }
    let pid = w.pid().to_string();
    let t = Instant::now();
    group_of_all(&json(&["--pid", &pid, "--duration", "200ms", "--json"]));
    let pid_json = t.elapsed();
    let out = text(&["--pid", &pid, "--duration", "200ms", "--min-idle", "500ms"]);
    assert!(
        out.lines()
            .any(|l| l.starts_with(&format!("  {N} tasks idle ≥"))
                && l.ends_with(&described("read_frame"))),
        "{}",
        &out[..out.len().min(2000)]
    );
    eprintln!("--pid --json of {N} tasks: {pid_json:?}");
}
