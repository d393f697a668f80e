//! `rip-probe dump`: where every thread was last seen, from the ring alone —
//! live, after SIGKILL (symbolized from the ring's module table), for a C
//! program using librip.h, with build-id mismatches and missing binaries,
//! and the one-line errors.

use std::{path::Path, process::Command, time::Instant};

use rip_tests::{
    TempDir, Workload, build_librip_release, compile_librip_c, librip_static, marker_line,
    rip_probe, rip_probe_json, rip_probe_ok, run, run_cpu_timed, workspace_root,
};

const CLI: &str = env!("CARGO_BIN_EXE_rip-probe-cli");
const WORKLOAD: &str = env!("CARGO_BIN_EXE_rip-dump-workload");
const SOURCE: &str = "src/bin/rip-dump-workload.rs";

fn loc(label: &str) -> String {
    let f = match label {
        "parse_request" | "query_db" | "send_reply" | "await_frame" => label,
        _ => unreachable!(),
    };
    format!(
        "{SOURCE}:{} rip_dump_workload::{f}",
        marker_line(SOURCE, &format!("// SNAP: {label}"))
    )
}

fn json(args: &[&str]) -> serde_json::Value {
    rip_probe_json(CLI, args)
}

fn text(args: &[&str]) -> String {
    rip_probe_ok(CLI, args)
}

/// The grouped view, --threads and --json all name the known functions and
/// lines; live, then after SIGKILL.
#[test]
fn golden_views_live_and_post_mortem() {
    let dir = TempDir::new("/dev/shm", "dump-golden");
    let ring = dir.join("sites.ring");
    let ring_s = ring.to_str().unwrap();
    let mut cmd = Command::new(WORKLOAD);
    cmd.args(["sites", ring_s]);
    let mut w = Workload::start(cmd);
    let handlers: Vec<u32> = (0..3)
        .map(|i| w.tid(&format!("role handler-{i}")))
        .collect();
    let stuck = w.tid("role db-stuck");
    let finished = w.tid("role finished");

    let check = |post_mortem: bool| {
        // Grouped: most populated location first, with its tids.
        let out = text(&["dump", ring_s]);
        let lines: Vec<&str> = out.lines().collect();
        let first = lines
            .iter()
            .position(|l| l.trim_start().starts_with("3  "))
            .unwrap_or_else(|| panic!("no group of 3:\n{out}"));
        assert!(lines[first].ends_with(&loc("send_reply")), "{out}");
        let tids = lines[first + 1];
        for t in &handlers {
            assert!(tids.contains(&t.to_string()), "{tids}");
        }
        assert!(
            out.lines()
                .any(|l| l.trim_start().starts_with("1  ") && l.ends_with(&loc("query_db"))),
            "{out}"
        );
        // Never polled: idle since their creation (post-mortem, at least
        // until the last creation the ring recorded: maybe no time at all).
        assert!(
            out.lines().any(|l| l.starts_with("  3 tasks idle ")
                && l.ends_with(&format!(" — last snap {}", loc("await_frame")))),
            "{out}"
        );
        assert!(
            !out.contains(&finished.to_string()),
            "exited slots need --exited:\n{out}"
        );
        assert_eq!(out.contains("process not running"), post_mortem, "{out}");

        // Per-thread history, oldest to newest, with counters.
        let out = text(&[
            "dump",
            ring_s,
            "--threads",
            "--tid",
            &handlers[0].to_string(),
        ]);
        let want = [
            format!("#0  {}", loc("parse_request")),
            format!("#1  {}", loc("query_db")),
            format!("#2  {}", loc("send_reply")),
        ];
        let got: Vec<&str> = out
            .lines()
            .filter(|l| l.contains('#'))
            .map(str::trim)
            .collect();
        assert_eq!(got, want, "{out}");
        // Post-mortem, the threads are gone with their process.
        let state = if post_mortem {
            "gone (its process is not running)"
        } else {
            "live"
        };
        assert!(
            out.contains(&format!(
                "tid {} \"handler-0\" {state}, 3 snaps",
                handlers[0]
            )),
            "{out}"
        );

        // JSON: the same data.
        let v = json(&["dump", ring_s, "--json", "--exited"]);
        assert_eq!(v["mode"], "dump");
        assert_eq!(v["process"]["alive"], !post_mortem);
        let t = |tid: u32| {
            v["threads"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["tid"] == tid)
                .unwrap_or_else(|| panic!("{tid} missing"))
                .clone()
        };
        let s = t(stuck);
        assert_eq!(s["name"], "db-stuck");
        assert_eq!(
            s["location"]["frame"]["function"],
            "rip_dump_workload::query_db"
        );
        assert_eq!(
            s["location"]["frame"]["line"].as_u64(),
            Some(u64::from(marker_line(SOURCE, "// SNAP: query_db")))
        );
        assert_eq!(s["snaps"], 2);
        let f = t(finished);
        assert_eq!(
            (f["exited"].clone(), f["state"].clone()),
            (true.into(), "exited".into())
        );
        assert_eq!(v["tasks"].as_array().unwrap().len(), 3);
        assert_eq!(v["tasks"][0]["name"], "conn-0");
        assert_eq!(
            v["tasks"][0]["location"]["frame"]["function"],
            "rip_dump_workload::await_frame"
        );
        if post_mortem {
            assert!(
                s["location"]["frame"]["module_offset"].is_u64(),
                "post-mortem symbolization goes through the module table: {s}"
            );
        }

        // Filters.
        let v = json(&["dump", ring_s, "--json", "--name", "handler-*"]);
        assert_eq!(v["threads"].as_array().unwrap().len(), 3);
        assert!(v["tasks"].as_array().unwrap().is_empty());
        let v = json(&["dump", ring_s, "--json", "--name", "conn-1"]);
        assert_eq!(v["threads"].as_array().unwrap().len(), 0);
        assert_eq!(v["tasks"].as_array().unwrap().len(), 1);
    };

    check(false);
    // Found through /proc/PID/maps.
    let pid = w.pid().to_string();
    let v = json(&["dump", "--pid", &pid, "--json"]);
    assert_eq!(v["rings"][0]["path"], ring_s);

    // SIGKILL: the ring survives, and is read post-mortem.
    w.child.kill().unwrap();
    w.child.wait().unwrap();
    check(true);
    let (code, _, err) = rip_probe(CLI, &["dump", "--pid", &pid]);
    assert_eq!(code, 1);
    assert!(err.contains(&format!("no process with pid {pid}")), "{err}");
}

/// A C program that uses librip.h: `rip_snap()` and `RIP_SNAP()` resolve
/// to the C caller's lines (post-mortem: the program has exited).
#[test]
fn c_program_snaps_resolve_to_the_callers_lines() {
    let lib = build_librip_release();
    let dir = TempDir::new("/dev/shm", "dump-c");
    let prog = dir.join("ring_user");
    compile_librip_c("ring_user", &prog, &librip_static(&lib));
    let src = workspace_root().join("tests/c/ring_user.c");
    let ring = dir.join("c.ring");
    let out = run(Command::new(&prog).arg(&ring));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let v = json(&[
        "dump",
        ring.to_str().unwrap(),
        "--json",
        "--exited",
        "--threads",
    ]);
    let source = std::fs::read_to_string(&src).unwrap();
    // Lines of the snap calls inside worker().
    let start = source
        .lines()
        .position(|l| l.starts_with("static void *worker"))
        .unwrap();
    let snap_lines: Vec<u64> = source
        .lines()
        .enumerate()
        .skip(start)
        .take_while(|(_, l)| !l.starts_with('}'))
        .filter(|(_, l)| l.contains("rip_snap();") || l.contains("RIP_SNAP();"))
        .map(|(i, _)| i as u64 + 1)
        .collect();
    let workers: Vec<&serde_json::Value> = v["threads"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["name"].as_str().unwrap().starts_with("c-worker"))
        .collect();
    assert_eq!(workers.len(), 2, "{v}");
    for w in workers {
        let mut all = w["history"].as_array().unwrap().clone();
        all.push(w["location"].clone());
        assert_eq!(all.len(), 15, "10 rip_snap() + 5 RIP_SNAP(): {w}");
        for l in &all {
            let f = &l["frame"];
            assert!(f["file"].as_str().unwrap().ends_with("ring_user.c"), "{f}");
            let (func, line) = (f["function"].as_str().unwrap(), f["line"].as_u64().unwrap());
            assert_eq!(func, "worker", "{f}");
            assert!(
                snap_lines.contains(&line),
                "line {line} not a snap call {snap_lines:?}"
            );
        }
        // Both kinds of snap were seen: the calls and the inline macro.
        let lines: std::collections::BTreeSet<u64> = all
            .iter()
            .map(|l| l["frame"]["line"].as_u64().unwrap())
            .collect();
        assert_eq!(lines.len(), 2, "{lines:?}");
    }
}

/// A binary rebuilt (different build-id) or removed after the crash: a
/// warning, and module+offset instead of wrong names.
#[test]
fn build_id_mismatch_and_missing_binary_warn() {
    let dir = TempDir::new("/tmp", "dump-buildid");
    let exe = dir.join("workload-copy");
    std::fs::copy(WORKLOAD, &exe).unwrap();
    let shm = TempDir::new("/dev/shm", "dump-buildid");
    let ring = shm.join("b.ring");
    let ring_s = ring.to_str().unwrap();
    let mut cmd = Command::new(&exe);
    cmd.args(["sites", ring_s]);
    let mut w = Workload::start(cmd);
    w.child.kill().unwrap();
    w.child.wait().unwrap();

    // Another binary at the same path.
    std::fs::remove_file(&exe).unwrap();
    std::fs::copy(CLI, &exe).unwrap();
    let (code, out, err) = rip_probe(CLI, &["dump", ring_s]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("build-id mismatch"), "{out}");
    assert!(out.contains("workload-copy+0x"), "module+offset: {out}");
    assert!(
        !out.contains("send_reply"),
        "no names from the wrong binary: {out}"
    );

    std::fs::remove_file(&exe).unwrap();
    let (code, out, _) = rip_probe(CLI, &["dump", ring_s]);
    assert_eq!(code, 0);
    assert!(out.contains("binary not found"), "{out}");
    assert!(out.contains("workload-copy+0x"), "{out}");
}

fn one_line(args: &[&str], expect: &str) {
    let (code, out, err) = rip_probe(CLI, args);
    assert_eq!(code, 1, "{args:?}: {out}{err}");
    assert!(out.is_empty());
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(expect), "{args:?}: {err}");
    eprintln!("{args:?} -> {}", err.trim());
}

#[test]
fn errors_are_one_line() {
    let dir = TempDir::new("/dev/shm", "dump-errors");
    let real = dir.join("real.ring");
    let mut cmd = Command::new(WORKLOAD);
    cmd.args(["sites", real.to_str().unwrap()]);
    let mut w = Workload::start(cmd);
    w.child.kill().unwrap();
    w.child.wait().unwrap();
    let bytes = std::fs::read(&real).unwrap();

    one_line(&["dump", "/nonexistent/x.ring"], "no such file");
    let junk = dir.join("junk");
    std::fs::write(&junk, vec![0x5a; 8192]).unwrap();
    one_line(&["dump", junk.to_str().unwrap()], "not a librip ring");
    let short = dir.join("short.ring");
    std::fs::write(&short, &bytes[..bytes.len().min(4096) / 2]).unwrap();
    one_line(&["dump", short.to_str().unwrap()], "truncated");
    // The layout version is the u32 after the 8-byte magic (docs/FORMAT.md).
    let newer = dir.join("newer.ring");
    let mut b = bytes.clone();
    b[8..12].copy_from_slice(&999u32.to_le_bytes());
    std::fs::write(&newer, &b).unwrap();
    one_line(&["dump", newer.to_str().unwrap()], "newer");
    one_line(
        &["dump", "--pid", "2000000000"],
        "no process with pid 2000000000",
    );
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    one_line(
        &["dump", "--pid", &sleeper.id().to_string()],
        "maps no librip ring",
    );
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();

    // Permission denied: a 0600 root-owned ring read by nobody.
    let o = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            CLI,
            "dump",
        ])
        .arg(&real)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("permission denied"), "{err}");
    // Usage mistakes exit 2, with clap's message naming what is missing.
    let (code, _, err) = rip_probe(CLI, &["dump"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("  <FILE>"), "{err}");
}

/// 100,000 live slots (threads and tasks), symbolized, in under a second
/// of CPU time (optimized build; unoptimized test builds get five times as
/// long): CPU time, which a busy machine does not lengthen. The wall-clock
/// figure is `cargo xtask bench`'s.
#[test]
fn dump_of_100k_live_slots_is_fast() {
    let dir = TempDir::new("/dev/shm", "dump-speed");
    let ring = dir.join("many.ring");
    let ring_s = ring.to_str().unwrap();
    let (threads, tasks) = (10_000, 90_000);
    let mut cmd = Command::new(WORKLOAD);
    cmd.args(["many", ring_s, &threads.to_string(), &tasks.to_string()]);
    let w = Workload::start(cmd);
    let (mut best, mut wall) = (f64::MAX, f64::MAX);
    let mut v = serde_json::Value::Null;
    for _ in 0..3 {
        let t = Instant::now();
        let (out, cpu) = run_cpu_timed(Command::new(CLI).args(["dump", ring_s, "--json"]));
        wall = wall.min(t.elapsed().as_secs_f64());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        v = serde_json::from_slice(&out.stdout).unwrap();
        best = best.min(cpu.as_secs_f64());
    }
    drop(w);
    let n_threads = v["threads"].as_array().unwrap().len();
    let n_tasks = v["tasks"].as_array().unwrap().len();
    assert_eq!(n_threads + n_tasks, threads + tasks + 1, "every live slot");
    assert!(
        v["threads"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| !t["location"].is_null())
            .all(|t| t["location"]["frame"]["function"].is_string()),
        "every location symbolized"
    );
    let budget = if cfg!(debug_assertions) { 5.0 } else { 1.0 };
    eprintln!(
        "dump --json of {} live slots: {best:.3}s of CPU, {wall:.3}s (rip-probe {} build)",
        n_threads + n_tasks,
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    );
    assert!(best < budget, "{best:.3}s");
    let _ = Path::new(ring_s);
}
