//! The files rip-probe makes for other tools, read back by those tools'
//! own readers: pprof profiles (`offcpu`, `--pid`, `calls`, `leaks`
//! `--pprof FILE`) by `go tool pprof -top` (Debian's Go), each figure
//! checked against the JSON report of the same run; the Perfetto trace of
//! `rip-probe record`, decoded with Perfetto's messages, on a thread that
//! sleeps in a known loop; and the session's events (`--events` and the
//! library's observer).

use std::{
    io::Write,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use prost::Message;
use rip_probe::{
    Observer, Session, SessionOptions,
    model::{ThreadState, events::Event},
    render::protos::perfetto::{TYPE_INSTANT, TYPE_SLICE_BEGIN, TYPE_SLICE_END, Trace},
};
use rip_tests::{
    Background, TempDir, Workload, assert_one_line_error, bpf_tests_enabled, build_c, go_build,
    go_toolchains,
    pprof::{pprof_top, pprof_top_of},
    rip_probe_ok,
};
use serde_json::Value;

const CLI: &str = env!("CARGO_BIN_EXE_rip-probe-cli");

/// `tests/c/offcpu.c ratio`: a thread sleeping 30 ms in sleep_long() then
/// 10 ms in sleep_short(), in a loop; the main thread in pthread_join.
fn sleeper() -> Workload {
    let mut cmd = Command::new(build_c("offcpu", &["-fomit-frame-pointer"]));
    cmd.arg("ratio");
    Workload::start(cmd)
}

/// The function names of a JSON frame list (with the functions inlined
/// in each).
fn names(frames: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for f in frames.as_array().into_iter().flatten() {
        if let Some(n) = f["function"].as_str() {
            out.push(n.to_string());
        }
        for i in f["inlined"].as_array().into_iter().flatten() {
            out.push(i["function"].as_str().unwrap().to_string());
        }
    }
    out
}

/// The value go tool pprof must show as `cum` for `function`: the sum of
/// `value` over the stacks holding it (each stack once).
fn cum_of(stacks: &[(Vec<String>, u64)], function: &str) -> u64 {
    stacks
        .iter()
        .filter(|(names, _)| names.iter().any(|n| n == function))
        .map(|(_, v)| v)
        .sum()
}

#[test]
fn offcpu_pprof_holds_the_reports_time_by_function() {
    if !bpf_tests_enabled("offcpu_pprof") {
        return;
    }
    let w = sleeper();
    let dir = TempDir::new("/tmp", "pprof-offcpu");
    let file = dir.join("offcpu.pb.gz");
    let out = rip_probe_ok(
        CLI,
        &[
            "offcpu",
            "--pid",
            &w.pid().to_string(),
            "--duration",
            "1s",
            "--json",
            "--pprof",
            file.to_str().unwrap(),
        ],
    );
    let r: Value = serde_json::from_str(&out).unwrap();
    let stacks: Vec<(Vec<String>, u64)> = r["stacks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let mut n = names(&s["frames"]);
            n.extend(names(&s["kernel_stack"]));
            (n, s["off_cpu_ns"].as_u64().unwrap())
        })
        .collect();
    let (rows, total) = pprof_top(&file, "offcpu", "ns");
    let all: u64 = stacks.iter().map(|(_, v)| v).sum();
    assert_eq!(total, all, "{rows:?}");
    for f in ["sleep_long", "sleep_short"] {
        let want = cum_of(&stacks, f);
        assert!(want > 0, "{f} has off-CPU time in the report: {r}");
        assert_eq!(rows.get(f).map(|r| r.1), Some(want), "{f}: {rows:?}");
    }
    // The periods, the other sample type.
    let (rows, total) = pprof_top(&file, "periods", "count");
    let periods: u64 = r["stacks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["count"].as_u64().unwrap())
        .sum();
    assert_eq!(total, periods, "{rows:?}");
}

#[test]
fn pid_pprof_is_a_profile_of_threads_by_stack() {
    if !bpf_tests_enabled("pid_pprof") {
        return;
    }
    let w = sleeper();
    let dir = TempDir::new("/tmp", "pprof-pid");
    let file = dir.join("threads.pb.gz");
    let out = rip_probe_ok(
        CLI,
        &[
            "--pid",
            &w.pid().to_string(),
            "--duration",
            "200ms",
            "--json",
            "--pprof",
            file.to_str().unwrap(),
        ],
    );
    let r = rip_tests::inline_stacks(serde_json::from_str(&out).unwrap());
    let threads = r["threads"].as_array().unwrap();
    let stacks: Vec<(Vec<String>, u64)> = threads
        .iter()
        .map(|t| {
            // Without a stack, its last location stands for it.
            let mut n = names(&t["frames"]);
            let location = t["location"]["frame"]["function"].as_str();
            n.extend(location.filter(|_| n.is_empty()).map(String::from));
            n.extend(names(&t["kernel_stack"]));
            (n, 1)
        })
        .collect();
    let (rows, total) = pprof_top(&file, "threads", "count");
    assert_eq!(total, threads.len() as u64, "{rows:?}");
    // The main thread waits in pthread_join under main all window long.
    let main = threads
        .iter()
        .find(|t| t["tid"] == w.pid())
        .expect("the main thread");
    assert!(names(&main["frames"]).iter().any(|n| n == "main"), "{main}");
    assert_eq!(
        rows.get("main").map(|r| r.1),
        Some(cum_of(&stacks, "main")),
        "{rows:?}"
    );
    // Blocked time: the report's, summed.
    let blocked: u64 = threads
        .iter()
        .filter_map(|t| t["blocked"]["ns"].as_u64())
        .sum();
    let (_, total) = pprof_top(&file, "blocked", "ns");
    assert_eq!(total, blocked);
    // Its labels: the main thread's state and system call.
    let go = &go_toolchains()[0];
    let tags = Command::new(go)
        .args(["tool", "pprof", "-tags"])
        .arg(&file)
        .env("HOME", std::env::temp_dir())
        .output()
        .expect("go tool pprof -tags");
    let tags = String::from_utf8_lossy(&tags.stdout);
    let syscall = main["syscall"]["name"]
        .as_str()
        .expect("main is in a syscall");
    for want in ["state", "sleeping", "syscall", syscall, "comm", "tid"] {
        assert!(tags.contains(want), "{want} not in:\n{tags}");
    }
}

/// A Go program's `--pid --pprof`: one sample per goroutine beside the
/// threads, with its stack, state, wait reason and pprof labels
/// (`tests/go/labels.go`, Debian's Go: labels in a map).
#[test]
fn pid_pprof_holds_every_goroutine_with_its_labels() {
    if !bpf_tests_enabled("pid_pprof_holds_every_goroutine_with_its_labels") {
        return;
    }
    let go = &go_toolchains()[0];
    let w = Workload::start(Command::new(go_build(go, "labels", &[], "pprof")));
    let pid = w.pid().to_string();
    let dir = TempDir::new("/tmp", "pprof-goroutines");
    let file = dir.join("goroutines.pb.gz");
    let program = |t: &&Value| {
        t["go"]["wait_reason"] == "chan receive"
            && names(&t["go"]["stack"])
                .iter()
                .any(|n| n.starts_with("main."))
    };
    // Started, not yet parked, when it said ready: reported until its 11
    // goroutines are parked, then that report's profile is read.
    let deadline = Instant::now() + Duration::from_secs(120);
    let r = loop {
        let out = rip_probe_ok(
            CLI,
            &[
                "--pid",
                &pid,
                "--duration",
                "0",
                "--json",
                "--pprof",
                file.to_str().unwrap(),
            ],
        );
        let r = rip_tests::inline_stacks(serde_json::from_str(&out).unwrap());
        let parked = r["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(program)
            .count();
        if parked == 11 {
            break r;
        }
        assert!(Instant::now() < deadline, "never parked: {parked} of 11");
        std::thread::sleep(Duration::from_millis(100));
    };
    let goroutines: Vec<&Value> = r["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["origin"] == "go")
        .collect();
    let (rows, total) = pprof_top(&file, "goroutines", "count");
    assert_eq!(total, goroutines.len() as u64, "{rows:?}");
    for (f, n) in [
        ("main.resize", 3),
        ("main.index", 4),
        ("main.inherited", 1),
        ("main.plain", 2),
        ("main.many", 1),
    ] {
        assert_eq!(rows.get(f).map(|r| r.1), Some(n), "{f}: {rows:?}");
    }
    // The threads are there as before, apart.
    let (_, threads) = pprof_top(&file, "threads", "count");
    assert_eq!(threads, r["threads"].as_array().unwrap().len() as u64);
    // How long they waited (at least): the report's, summed.
    let waited: u64 = goroutines
        .iter()
        .filter_map(|t| t["idle_ns"].as_u64().or(t["polling_ns"].as_u64()))
        .sum();
    assert_eq!(pprof_top(&file, "waiting", "ns").1, waited);
    // Labels: the program's own, and the state and wait reason.
    // Samples with a tag: the flat values of the rows shown (the total
    // printed stays the whole profile's).
    let with = |tag: &str| -> u64 {
        let focus = format!("-tagfocus={tag}");
        let (rows, _) = pprof_top_of(&file, "goroutines", "count", &[&focus]);
        rows.values().map(|r| r.0).sum()
    };
    assert_eq!(with("job=index"), 5);
    assert_eq!(with("job=resize"), 3);
    // A bare number would be read as a numeric range, not a string.
    assert_eq!(with("worker=[2]"), 1);
    assert_eq!(with("k19=v19"), 1);
    assert_eq!(
        with("wait_reason=chan receive"),
        goroutines
            .iter()
            .filter(|t| t["go"]["wait_reason"] == "chan receive")
            .count() as u64
    );
    assert_eq!(
        with("state=syscall"),
        goroutines
            .iter()
            .filter(|t| t["go"]["status"] == "syscall")
            .count() as u64
    );
}

#[test]
fn calls_pprof_counts_every_call() {
    if !bpf_tests_enabled("calls_pprof") {
        return;
    }
    let dir = TempDir::new("/tmp", "pprof-calls");
    let spans = dir.join("spans");
    let mut cmd = Command::new(build_c("calls", &["-fomit-frame-pointer"]));
    cmd.arg(&spans);
    let mut w = Workload::start(cmd);
    let file = dir.join("calls.pb.gz");
    let mut run = Background::spawn(Command::new(CLI).args([
        "calls",
        "--pid",
        &w.pid().to_string(),
        "--uprobe",
        "count_me",
        "--json",
        "--pprof",
        file.to_str().unwrap(),
    ]));
    run.wait_phase("attach uprobes");
    // The commands run one after the other: once the sleep after the
    // count has written its line, every count_me call was made.
    let stdin = w.child.stdin.as_mut().expect("piped stdin");
    stdin.write_all(b"count 12345\nshort 1\n").unwrap();
    stdin.flush().unwrap();
    while !std::fs::read_to_string(&spans)
        .unwrap_or_default()
        .contains("sleep_short")
    {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(run.child.id() as i32, libc::SIGINT) };
    let f = run.finish();
    assert!(f.status.success(), "{}", f.stderr);
    let r: Value = serde_json::from_str(&f.stdout).unwrap();
    let count = &r["functions"][0];
    assert_eq!(count["function"], "count_me", "{r}");
    assert_eq!(count["calls"], 12345, "{r}");
    let (rows, _) = pprof_top(&file, "calls", "count");
    assert_eq!(rows.get("count_me").map(|r| r.0), Some(12345), "{rows:?}");
    // The time: the mean of the timed calls times their number.
    let time = count["mean_ns"].as_u64().unwrap() * count["timed"].as_u64().unwrap();
    let (rows, _) = pprof_top(&file, "time", "ns");
    assert_eq!(rows.get("count_me").map(|r| r.0), Some(time), "{rows:?}");
}

#[test]
fn leaks_pprof_holds_what_is_still_held() {
    if !bpf_tests_enabled("leaks_pprof") {
        return;
    }
    let mut child = Command::new(build_c("leaks", &["-fomit-frame-pointer"]))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start tests/c/leaks.c");
    let mut stdin = child.stdin.take().unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let expect = |out: &mut std::io::BufReader<_>, what: &str| {
        let mut l = String::new();
        std::io::BufRead::read_line(out, &mut l).unwrap();
        assert_eq!(l.trim(), what);
    };
    expect(&mut out, "ready");
    let dir = TempDir::new("/tmp", "pprof-leaks");
    let file = dir.join("leaks.pb.gz");
    let mut bg = Background::spawn(Command::new(CLI).args([
        "leaks",
        "--pid",
        &child.id().to_string(),
        "--no-heap",
        "--json",
        "--pprof",
        file.to_str().unwrap(),
    ]));
    bg.wait_phase("attach leaks");
    writeln!(stdin, "go").unwrap();
    stdin.flush().unwrap();
    expect(&mut out, "done");
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(bg.child.id() as i32, libc::SIGINT) };
    let f = bg.finish();
    let _ = child.kill();
    let _ = child.wait();
    assert!(f.status.success(), "{}", f.stderr);
    let r: Value = serde_json::from_str(&f.stdout).unwrap();
    let stacks: Vec<(Vec<String>, u64, u64, String)> = r["stacks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                names(&s["frames"]),
                s["count"].as_u64().unwrap(),
                s["bytes"].as_u64().unwrap(),
                s["kind"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let objects: Vec<(Vec<String>, u64)> = stacks.iter().map(|s| (s.0.clone(), s.1)).collect();
    let space: Vec<(Vec<String>, u64)> = stacks
        .iter()
        .map(|s| (s.0.clone(), if s.3 == "fd" { 0 } else { s.2 }))
        .collect();
    let (rows, _) = pprof_top(&file, "inuse_objects", "count");
    // tests/c/leaks.c: 5 files and an eventfd from leak_fds(), 3 maps
    // from leak_map(), and nothing from the balanced functions.
    assert_eq!(cum_of(&objects, "leak_fds"), 6, "{r}");
    assert_eq!(rows.get("leak_fds").map(|r| r.1), Some(6), "{rows:?}");
    assert_eq!(rows.get("leak_map").map(|r| r.1), Some(3), "{rows:?}");
    assert!(!rows.contains_key("balanced_fds"), "{rows:?}");
    let (rows, _) = pprof_top(&file, "inuse_space", "B");
    assert_eq!(
        rows.get("leak_map").map(|r| r.1),
        Some(cum_of(&space, "leak_map")),
        "{rows:?}"
    );
    assert_eq!(cum_of(&space, "leak_map"), 3 * 64 * 1024, "{r}");
}

/// `leaks --pprof` with the heap traced: `alloc_objects`/`alloc_space`
/// count every block allocated in the window by stack, freed or not
/// (tests/c/heap_leaks.c's balanced path allocates 1200 blocks a round
/// and frees them all), beside `inuse_*`, which holds only the leaks.
#[test]
fn leaks_pprof_has_what_was_allocated_beside_what_is_held() {
    if !bpf_tests_enabled("leaks_pprof alloc") {
        return;
    }
    let mut child = Command::new(build_c("heap_leaks", &["-fomit-frame-pointer"]))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start tests/c/heap_leaks.c");
    let mut stdin = child.stdin.take().unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let expect = |out: &mut std::io::BufReader<_>, what: &str| {
        let mut l = String::new();
        std::io::BufRead::read_line(out, &mut l).unwrap();
        assert_eq!(l.trim(), what);
    };
    expect(&mut out, "ready");
    let dir = TempDir::new("/tmp", "pprof-alloc");
    let file = dir.join("heap.pb.gz");
    let mut bg = Background::spawn(Command::new(CLI).args([
        "leaks",
        "--pid",
        &child.id().to_string(),
        "--json",
        "--pprof",
        file.to_str().unwrap(),
    ]));
    bg.wait_phase("attach leaks");
    writeln!(stdin, "go").unwrap();
    stdin.flush().unwrap();
    expect(&mut out, "done");
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(bg.child.id() as i32, libc::SIGINT) };
    let f = bg.finish();
    let _ = child.kill();
    let _ = child.wait();
    assert!(f.status.success(), "{}", f.stderr);
    let r: Value = serde_json::from_str(&f.stdout).unwrap();
    // Every call followed: the counts are exact.
    assert_eq!(r["lost"]["events"], 0, "{}", r["lost"]);
    assert_eq!(r["lost"]["heap_calls"], 0, "{}", r["lost"]);
    let of = |list: &str, value: &str| -> Vec<(Vec<String>, u64)> {
        r[list]
            .as_array()
            .unwrap_or_else(|| panic!("no {list}: {r}"))
            .iter()
            .filter(|s| s["kind"] == "heap")
            .map(|s| (names(&s["frames"]), s[value].as_u64().unwrap()))
            .collect()
    };
    let (alloc_n, alloc_b) = (of("allocated", "count"), of("allocated", "bytes"));
    assert_eq!(
        cum_of(&alloc_n, "balanced_heap"),
        1200,
        "{:#}",
        r["allocated"]
    );
    assert_eq!(cum_of(&alloc_n, "leak_here"), 40);
    assert_eq!(cum_of(&alloc_b, "leak_here"), 40_000);
    assert_eq!(cum_of(&alloc_n, "leak_zeroed"), 10);
    // go tool pprof reads the same from the file.
    let (rows, _) = pprof_top(&file, "alloc_objects", "count");
    assert_eq!(
        rows.get("balanced_heap").map(|r| r.1),
        Some(1200),
        "{rows:?}"
    );
    assert_eq!(rows.get("leak_here").map(|r| r.1), Some(40), "{rows:?}");
    assert_eq!(rows.get("leak_zeroed").map(|r| r.1), Some(10), "{rows:?}");
    let (rows, _) = pprof_top(&file, "alloc_space", "B");
    assert_eq!(
        rows.get("balanced_heap").map(|r| r.1),
        Some(cum_of(&alloc_b, "balanced_heap")),
        "{rows:?}"
    );
    assert_eq!(rows.get("leak_here").map(|r| r.1), Some(40_000), "{rows:?}");
    // What is held: the leaks only.
    let (rows, _) = pprof_top(&file, "inuse_objects", "count");
    assert_eq!(rows.get("leak_here").map(|r| r.1), Some(40), "{rows:?}");
    assert!(!rows.contains_key("balanced_heap"), "{rows:?}");
    let (rows, _) = pprof_top(&file, "inuse_space", "B");
    assert_eq!(rows.get("leak_here").map(|r| r.1), Some(40_000), "{rows:?}");
    assert_eq!(
        rows.get("leak_zeroed").map(|r| r.1),
        Some(10_000),
        "{rows:?}"
    );
}

#[test]
fn pprof_files_are_checked_before_the_window() {
    for args in [
        &["offcpu", "--pid", "1", "--duration", "1s", "--pprof"][..],
        &["--pid", "1", "--pprof"][..],
    ] {
        let mut a = args.to_vec();
        a.push("/nonexistent-dir/p.pb.gz");
        assert_one_line_error(CLI, &a, "directory /nonexistent-dir does not exist");
    }
}

/// A thread's slices in the trace: (name, begin, end), in order.
fn slices(trace: &Trace, track: u64) -> Vec<(String, u64, u64)> {
    let mut open: Option<(String, u64)> = None;
    let mut out = Vec::new();
    for p in &trace.packet {
        let Some(e) = &p.track_event else { continue };
        if e.track_uuid != Some(track) {
            continue;
        }
        let ts = p.timestamp.expect("events have times");
        match e.r#type {
            Some(TYPE_SLICE_BEGIN) => {
                assert!(open.is_none(), "slices on a thread's track do not nest");
                open = Some((e.name.clone().unwrap(), ts));
            }
            Some(TYPE_SLICE_END) => {
                let (name, begin) = open.take().expect("an end closes a begun slice");
                assert!(ts >= begin);
                out.push((name, begin, ts));
            }
            Some(TYPE_INSTANT) => {}
            t => panic!("unexpected event type {t:?}"),
        }
    }
    assert!(open.is_none(), "every slice ends");
    out
}

#[test]
fn record_writes_each_threads_timeline_for_perfetto() {
    if !bpf_tests_enabled("record") {
        return;
    }
    let w = sleeper();
    let sleeper_tid = w.tid("sleeper");
    let dir = TempDir::new("/tmp", "record");
    let file = dir.join("trace.perfetto-trace");
    rip_probe_ok(
        CLI,
        &[
            "record",
            "--pid",
            &w.pid().to_string(),
            "--duration",
            "2s",
            "-o",
            file.to_str().unwrap(),
        ],
    );
    let bytes = std::fs::read(&file).unwrap();
    let trace = Trace::decode(bytes.as_slice()).expect("a Perfetto trace");
    // A track per thread of the process, the process's own.
    let tracks: Vec<_> = trace
        .packet
        .iter()
        .filter_map(|p| p.track_descriptor.as_ref())
        .collect();
    let process = tracks
        .iter()
        .find(|t| t.process.is_some())
        .expect("a process track");
    assert_eq!(process.process.as_ref().unwrap().pid, Some(w.pid() as i32));
    let track_of = |tid: u32| {
        tracks
            .iter()
            .find(|t| {
                t.thread
                    .as_ref()
                    .is_some_and(|th| th.tid == Some(tid as i32))
            })
            .unwrap_or_else(|| panic!("no track for thread {tid}: {tracks:?}"))
            .uuid
            .unwrap()
    };
    // The main thread waits in pthread_join (a futex) all along: one
    // slice, the whole window.
    let main = slices(&trace, track_of(w.pid()));
    // The window ran the 2 s asked: no signal cut it short (the report
    // would say so on the process's track, naming who sent it), and the
    // slices span it.
    let warnings: Vec<&str> = trace
        .packet
        .iter()
        .filter_map(|p| p.track_event.as_ref())
        .filter(|e| e.categories == ["warning"])
        .filter_map(|e| e.name.as_deref())
        .collect();
    assert!(
        !warnings.iter().any(|w| w.contains("window cut short")),
        "{warnings:?}"
    );
    assert!(
        main.last().unwrap().2 - main[0].1 >= 2_000_000_000,
        "a window shorter than asked: {main:?} {warnings:?}"
    );
    assert_eq!(main.len(), 1, "{main:?}");
    assert_eq!(main[0].0, "blocked in futex", "{main:?}");
    // The sleeper: slices one after the other, each from where the last
    // ended, over the same window; between two runs, each sleep in
    // clock_nanosleep lasts at least the 10 ms asked (less the moment
    // from its call to its switch off the CPU).
    let s = slices(&trace, track_of(sleeper_tid));
    assert_eq!(s.first().unwrap().1, main[0].1, "{s:?}");
    assert_eq!(s.last().unwrap().2, main[0].2, "{s:?}");
    for pair in s.windows(2) {
        assert_eq!(pair[0].2, pair[1].1, "contiguous: {pair:?}");
        // A change each time, but for two spans whose switch onto a CPU
        // was not seen in a row (off, ran, off, ran: each begins at a
        // switch off the CPU that was seen).
        assert!(
            pair[0].0 != pair[1].0 || pair[0].0 == "off CPU, then ran (switch onto a CPU not seen)",
            "a change each time: {pair:?}"
        );
    }
    let inner = &s[1..s.len().saturating_sub(1).max(1)];
    let sleeps: Vec<_> = inner
        .iter()
        .filter(|x| x.0 == "blocked in clock_nanosleep")
        .collect();
    assert!(!sleeps.is_empty(), "{s:?}");
    for x in &sleeps {
        assert!(x.2 - x.1 >= 9_000_000, "a sleep shorter than asked: {x:?}");
    }
    assert!(
        s.iter().any(|x| x.0 == "running"),
        "the sleeper runs between its sleeps: {s:?}"
    );
}

#[test]
fn record_wants_a_file() {
    assert_one_line_error(
        CLI,
        &["record", "--pid", "1", "--duration", "1s"],
        "give its file with -o",
    );
}

/// The `--events` lines of one run.
fn event_lines(out: &str) -> Vec<Value> {
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[test]
fn events_are_json_lines_from_attach_to_detach() {
    if !bpf_tests_enabled("events") {
        return;
    }
    let w = sleeper();
    let sleeper_tid = w.tid("sleeper");
    let out = rip_probe_ok(
        CLI,
        &[
            "--pid",
            &w.pid().to_string(),
            "--duration",
            "1s",
            "--events",
        ],
    );
    let lines = event_lines(&out);
    assert_eq!(lines.first().unwrap()["event"], "attach", "{out}");
    assert_eq!(lines.first().unwrap()["process"]["pid"], w.pid());
    let last = lines.last().unwrap();
    assert_eq!(last["event"], "detach", "{out}");
    let snapshots: Vec<_> = lines.iter().filter(|l| l["event"] == "snapshot").collect();
    assert_eq!(snapshots.len(), 1);
    assert!(
        snapshots[0]["report"]["threads"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["tid"] == sleeper_tid)
    );
    let states: Vec<_> = lines.iter().filter(|l| l["event"] == "state").collect();
    assert_eq!(last["state_changes"], states.len() as u64);
    // The sleeper's: it goes to sleep in clock_nanosleep and gets a CPU
    // again, in the order of their times.
    let mine: Vec<_> = states.iter().filter(|l| l["tid"] == sleeper_tid).collect();
    assert!(
        mine.iter()
            .any(|l| l["state"] == "sleeping" && l["syscall"] == "clock_nanosleep"),
        "{mine:?}"
    );
    assert!(mine.iter().any(|l| l["state"] == "running"), "{mine:?}");
    let times: Vec<u64> = mine.iter().map(|l| l["ts_ns"].as_u64().unwrap()).collect();
    assert!(times.windows(2).all(|p| p[0] <= p[1]), "{times:?}");
}

/// An observer keeping what it is told.
#[derive(Default)]
struct Kept {
    kinds: Vec<&'static str>,
    sleeps: Vec<(u32, Option<String>)>,
    switches: u64,
}

impl Observer for Kept {
    fn on_switch(&mut self, _: &rip_ebpf::SwitchEvent) {
        self.switches += 1;
    }

    fn on_event(&mut self, e: &Event<'_>) {
        self.kinds.push(match e {
            Event::Attach { .. } => "attach",
            Event::State(c) => {
                if c.state == ThreadState::Sleeping {
                    self.sleeps.push((c.tid, c.syscall.clone()));
                }
                "state"
            }
            Event::Snapshot { .. } => "snapshot",
            Event::Lost { .. } => "lost",
            Event::Detach { .. } => "detach",
        });
    }
}

#[test]
fn the_observer_api_gets_the_same_events() {
    if !bpf_tests_enabled("observer events") {
        return;
    }
    let w = sleeper();
    let sleeper_tid = w.tid("sleeper");
    let mut opts = SessionOptions::new(w.pid());
    opts.events = true;
    let mut kept = Kept::default();
    let mut s = Session::attach_with(&opts, &mut kept).expect("attach");
    s.observe(std::time::Duration::from_secs(1), &mut kept)
        .expect("observe");
    let report = s.snapshot_with(&mut kept).expect("snapshot");
    assert!(
        report
            .threads
            .iter()
            .any(|t| t.tid == u64::from(sleeper_tid))
    );
    s.detach(&mut kept).expect("detach");
    assert_eq!(kept.kinds.first(), Some(&"attach"));
    assert_eq!(kept.kinds.last(), Some(&"detach"));
    assert_eq!(kept.kinds.iter().filter(|k| **k == "snapshot").count(), 1);
    // Each switch handed over is also a state change.
    let states = kept.kinds.iter().filter(|k| **k == "state").count() as u64;
    assert_eq!(states, kept.switches);
    assert!(
        kept.sleeps
            .iter()
            .any(|(tid, sys)| *tid == sleeper_tid && sys.as_deref() == Some("clock_nanosleep")),
        "{:?}",
        kept.sleeps
    );
}
