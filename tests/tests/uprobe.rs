//! `--uprobe`: a C program built without librip; rip-probe attaches uprobes
//! to its `worker_*` functions and reports each worker's last function
//! entered, with the kernel state beside it.

use rip_tests::{Workload, assert_uprobe_in_worker_wait, bpf_tests_enabled, rip_probe};

const CLI: &str = env!("CARGO_BIN_EXE_rip-probe-cli");

#[test]
fn last_function_entered_per_thread() {
    if !bpf_tests_enabled("last_function_entered_per_thread") {
        return;
    }
    let w = Workload::uninstrumented(3);
    let workers = w.tids("worker ");
    assert_eq!(workers.len(), 3);
    let pid = w.pid().to_string();
    let (code, out, err) = rip_probe(
        CLI,
        &[
            "--pid",
            &pid,
            "--duration",
            "700ms",
            "--uprobe",
            "worker_*",
            "--json",
        ],
    );
    assert_eq!(code, 0, "stderr: {err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON report");
    for tid in &workers {
        let t = v["threads"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["tid"] == *tid)
            .unwrap_or_else(|| panic!("tid {tid} missing"));
        assert_eq!(t["state"], "sleeping", "{t}");
        assert_eq!(t["syscall"]["name"], "poll", "{t}");
        assert!(
            t["syscall"]["text"].as_str().unwrap().contains("pipe:["),
            "poll's fd resolved to the pipe: {t}"
        );
        assert_uprobe_in_worker_wait(t);
        let loc = &t["location"];
        assert!(loc["ago_ns"].as_u64().unwrap() < 1_000_000_000, "{t}");
    }
    // The main thread has no uprobe hit: its user pc is shown instead.
    let main = v["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tid"] == w.pid())
        .unwrap();
    assert_eq!(main["location"]["source"], "user_pc");
    assert_eq!(main["syscall"]["name"], "clock_nanosleep");
    assert!(
        main["syscall"]["text"].as_str().unwrap().contains("1h00m"),
        "{main}"
    );
    eprintln!(
        "uprobe report: {} threads, workers in worker_wait",
        v["threads"].as_array().unwrap().len()
    );

    // The text view says where the location came from.
    let (code, text, err) = rip_probe(
        CLI,
        &[
            "--pid",
            &pid,
            "--duration",
            "500ms",
            "--uprobe",
            "worker_wait",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        text.contains("3 threads blocked in poll") && text.contains("last entered"),
        "{text}"
    );
}

#[test]
fn bad_uprobe_patterns_are_one_line_errors() {
    if !bpf_tests_enabled("bad_uprobe_patterns_are_one_line_errors") {
        return;
    }
    let w = Workload::uninstrumented(1);
    let pid = w.pid().to_string();
    for (pattern, expect) in [
        ("no_such_function_*", "no function"),
        ("nolib:worker_*", "no library"),
        ("[", "bad pattern"),
    ] {
        let (code, out, err) = rip_probe(CLI, &["--pid", &pid, "--uprobe", pattern]);
        assert_eq!(code, 2, "{pattern}: {err}");
        assert!(out.is_empty());
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(err.contains(expect), "{pattern}: {err}");
    }
}
