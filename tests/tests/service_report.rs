//! Several processes in one report (`--comm NAME`, `--pid A,B`, `--pid A
//! --pid B`, `--cgroup PATH`): observed over one window, their threads
//! grouped across them (the same lock, stack and state in three
//! processes is one group with each process's count), each process named
//! by its title (/proc/PID/cmdline) and reported below.

use std::process::Command;

use rip_tests::{Workload, bpf_tests_enabled, build_c, rip_probe, rip_probe_json};

const CLI: &str = env!("CARGO_BIN_EXE_rip-probe-cli");

/// `tests/c/service.c`: `children` processes named `tag`, titled `svc:
/// worker I`, each with `threads` pool threads blocked on `g_pool_lock`.
fn service(tag: &str, children: usize, threads: usize) -> (Workload, Vec<u32>) {
    let mut cmd = Command::new(build_c("service", &[]));
    cmd.args([tag, &children.to_string(), &threads.to_string()]);
    cmd.arg("x".repeat(64));
    let w = Workload::start(cmd);
    let mut pids = w.tids("child");
    pids.sort_unstable();
    assert_eq!(pids.len(), children, "{:?}", w.lines);
    (w, pids)
}

/// The pool group across the processes of `report`, once every pool
/// thread of each is seen waiting on `g_pool_lock`.
fn pool_group(report: &serde_json::Value) -> Option<&serde_json::Value> {
    report["groups"]
        .as_array()?
        .iter()
        .find(|g| g["lock"] == "g_pool_lock")
}

#[test]
fn several_processes_are_one_report_grouped_across_them() {
    if !bpf_tests_enabled("several_processes_are_one_report_grouped_across_them") {
        return;
    }
    let tag = format!("svcrep{}", std::process::id() % 100_000);
    let (_w, pids) = service(&tag, 3, 4);
    // The pool threads are on their way to the lock when `ready` is
    // printed: polled until every one waits on it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let report = loop {
        let r = rip_probe_json(CLI, &["--comm", &tag, "--duration", "0", "--json"]);
        if pool_group(&r).is_some_and(|g| g["count"] == 12) {
            break r;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the pools never all waited on g_pool_lock: {:#}",
            r["groups"]
        );
    };
    assert_eq!(
        report["targets"],
        serde_json::json!([format!("--comm {tag}")])
    );
    assert_eq!(report["cgroup"], serde_json::Value::Null);
    let processes = report["processes"].as_array().unwrap();
    let seen: Vec<u64> = processes
        .iter()
        .map(|p| p["process"]["pid"].as_u64().unwrap())
        .collect();
    assert_eq!(seen, pids.iter().map(|&p| u64::from(p)).collect::<Vec<_>>());
    for (i, p) in processes.iter().enumerate() {
        assert_eq!(p["process"]["title"], format!("svc: worker {i}"));
        assert_eq!(p["process"]["comm"], tag.as_str());
    }
    // One group for the three pools, four threads in each process.
    let g = pool_group(&report).unwrap();
    assert_eq!(g["state"], "sleeping");
    assert_eq!(g["wait"], "futex_wait");
    let shares: Vec<(u64, u64)> = g["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["pid"].as_u64().unwrap(), s["count"].as_u64().unwrap()))
        .collect();
    let mut want: Vec<(u64, u64)> = pids.iter().map(|&p| (u64::from(p), 4)).collect();
    want.sort();
    let mut got = shares.clone();
    got.sort();
    assert_eq!(got, want);
    assert!(
        g["frames"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["function"] == "pool_thread"),
        "{g:#}"
    );

    // The same processes by pid, as a comma list and repeated, in text:
    // one header naming each by its title, the group across them, then
    // each process's own report.
    let list = format!("{},{}", pids[0], pids[1]);
    let (code, text, err) = rip_probe(CLI, &["--pid", &list, "--duration", "0"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        text.starts_with(&format!("2 processes (--pid {list})")),
        "{text}"
    );
    // Snapshots: no "observed" time, which would be each attach's.
    assert!(
        text.lines()
            .next()
            .unwrap()
            .ends_with(", snapshots (no window)"),
        "{text}"
    );
    assert!(
        text.contains(&format!("pid {} \"svc: worker 0\"", pids[0])),
        "{text}"
    );
    assert!(text.contains("ACROSS PROCESSES"), "{text}");
    assert!(text.contains("waiting for lock g_pool_lock"), "{text}");
    assert_eq!(text.matches("=== pid ").count(), 2, "{text}");
    let (a, b) = (pids[0].to_string(), pids[2].to_string());
    let r = rip_probe_json(
        CLI,
        &["--pid", &a, "--pid", &b, "--duration", "0", "--json"],
    );
    assert_eq!(r["processes"].as_array().map(Vec::len), Some(2), "{r:#}");

    // One process named twice is one process; --watch takes one.
    let r = rip_probe_json(
        CLI,
        &["--pid", &a, "--comm", &tag, "--duration", "0", "--json"],
    );
    assert_eq!(r["processes"].as_array().map(Vec::len), Some(3));
    let (code, _, err) = rip_probe(CLI, &["--pid", &list, "--watch"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--watch takes one process"), "{err}");
    let (code, _, err) = rip_probe(CLI, &["--comm", "no-such-program-x"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no process to observe"), "{err}");
}
