//! `rip-probe record`'s trace read back with Perfetto's own messages (the
//! `perfetto` package's `perfetto_trace_pb2`, installed by `cargo xtask
//! setup` under [`PERFETTO_PROTOS`]) by `tests/perfetto/read_trace.py`,
//! on `tests/c/trace_roles.c`, whose threads each do one known thing:
//! what ui.perfetto.dev shows of it is checked against what they did,
//! the snapper's snaps against the times it logged for each.

use std::{collections::BTreeMap, path::Path, process::Command};

use rip_tests::{
    PERFETTO_PROTOS, TempDir, Workload, bpf_tests_enabled, build_librip_release, compile_librip_c,
    librip_static, marker_line, rip_probe_ok, run, target_dir,
};
use serde_json::Value;

const CLI: &str = env!("CARGO_BIN_EXE_rip-probe-cli");

/// The slice of a thread that went off the CPU, then ran, the switch onto
/// a CPU in between not seen (its event was lost).
const UNSEEN: &str = "off CPU, then ran (switch onto a CPU not seen)";

/// The trace at `file` as `read_trace.py` reads it with Perfetto's
/// messages (it fails on a field they do not know, an interned id not
/// defined, an event on a track not described, slices that do not nest).
fn read_trace(file: &Path) -> Value {
    let module =
        Path::new(PERFETTO_PROTOS).join("perfetto/protos/perfetto/trace/perfetto_trace_pb2.py");
    assert!(
        module.is_file(),
        "Perfetto's protos are missing ({} does not exist): run `cargo xtask setup` \
         (pip install --target {PERFETTO_PROTOS} perfetto protobuf)",
        module.display()
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("perfetto/read_trace.py");
    let out = run(Command::new("python3")
        .arg(&script)
        .arg(file)
        .env("PYTHONPATH", PERFETTO_PROTOS)
        // Its own check of the file: a deprecation note is not a failure.
        .env("PYTHONWARNINGS", "ignore"));
    assert!(
        out.status.success(),
        "Perfetto's messages reject the trace: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("read_trace.py prints JSON")
}

/// A thread's slices: (name, begin, end, the begin's arguments).
type Slices = Vec<(String, u64, u64, BTreeMap<String, Value>)>;

fn slices(track: &Value) -> Slices {
    let mut open: Option<(String, u64, BTreeMap<String, Value>)> = None;
    let mut out = Vec::new();
    for e in track["events"].as_array().unwrap() {
        let ts = e["ts"].as_u64().unwrap();
        match e["type"].as_str().unwrap() {
            "begin" => {
                assert_eq!(e["categories"], serde_json::json!(["state"]), "{e}");
                let args = serde_json::from_value(e["args"].clone()).unwrap();
                let name = e["name"].as_str().expect("a slice has a name").to_string();
                assert!(
                    open.replace((name, ts, args)).is_none(),
                    "a thread's slices do not nest"
                );
            }
            "end" => {
                let (name, begin, args) = open.take().expect("read_trace.py checked nesting");
                out.push((name, begin, ts, args));
            }
            "instant" => {}
            t => panic!("unexpected event type {t}: {e}"),
        }
    }
    out
}

/// The instants of a track in category `category`: (name, time, arguments).
fn instants(track: &Value, category: &str) -> Vec<(String, u64, BTreeMap<String, Value>)> {
    track["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "instant" && e["categories"] == serde_json::json!([category]))
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_string(),
                e["ts"].as_u64().unwrap(),
                serde_json::from_value(e["args"].clone()).unwrap(),
            )
        })
        .collect()
}

/// The snapper's log (`<seq> <before> <after>` per snap): when each snap
/// was taken, by sequence number.
fn snap_log(file: &Path) -> BTreeMap<u64, (u64, u64)> {
    std::fs::read_to_string(file)
        .unwrap()
        .lines()
        // The last line may be half-written: the workload still runs.
        .filter_map(|l| {
            let v: Vec<u64> = l
                .split(' ')
                .map(|w| w.parse().ok())
                .collect::<Option<_>>()?;
            (v.len() == 3).then(|| (v[0], (v[1], v[2])))
        })
        .collect()
}

#[test]
fn perfettos_own_messages_read_every_threads_timeline_and_snaps() {
    if !bpf_tests_enabled("perfettos_own_messages_read_every_threads_timeline_and_snaps") {
        return;
    }
    let lib = build_librip_release();
    let dir = target_dir().join(format!("trace-roles-build/{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("trace_roles");
    compile_librip_c("trace_roles", &exe, &librip_static(&lib));
    let shm = TempDir::new("/dev/shm", "trace-roles");
    let log = shm.join("snaps.log");
    let mut cmd = Command::new(&exe);
    cmd.arg(shm.join("ring")).arg(&log);
    let w = Workload::start(cmd);
    let pid = w.pid();
    let tmp = TempDir::new("/tmp", "perfetto");
    let file = tmp.join("roles.perfetto-trace");
    rip_probe_ok(
        CLI,
        &[
            "record",
            "--pid",
            &pid.to_string(),
            "--duration",
            "2s",
            "-o",
            file.to_str().unwrap(),
        ],
    );
    let trace = read_trace(&file);

    // One writer sequence; CLOCK_MONOTONIC (3), the events' clock, read
    // with CLOCK_BOOTTIME (6, the viewer's) after the window: no event is
    // later.
    assert_eq!(
        trace["sequences"].as_object().unwrap().len(),
        1,
        "{}",
        trace["sequences"]
    );
    let monotonic_at_end = trace["clocks"]["3"]
        .as_u64()
        .expect("CLOCK_MONOTONIC in a snapshot");
    assert!(
        trace["clocks"]["6"].as_u64().is_some(),
        "CLOCK_BOOTTIME in the snapshot"
    );

    let tracks = trace["tracks"].as_array().unwrap();
    let processes: Vec<&Value> = tracks
        .iter()
        .filter(|t| t.get("process").is_some())
        .collect();
    assert_eq!(processes.len(), 1, "{processes:?}");
    let process = processes[0];
    assert_eq!(process["process"]["pid"], pid);
    assert_eq!(process["process"]["name"], "trace_roles");
    let thread = |tid: u32| -> &Value {
        tracks
            .iter()
            .find(|t| t["thread"]["tid"] == tid)
            .unwrap_or_else(|| panic!("no track for thread {tid}"))
    };
    let mut window = None;
    for (name, tid) in [
        ("trace_roles", pid),
        ("sleeper", w.tid("sleeper")),
        ("spinner", w.tid("spinner")),
        ("reader", w.tid("reader")),
        ("snapper", w.tid("snapper")),
    ] {
        let t = thread(tid);
        assert_eq!(t["thread"]["pid"], pid, "{t}");
        assert_eq!(t["thread"]["name"], name, "{t}");
        assert_eq!(t["parent"], process["uuid"], "{t}");
        // Every thread's slices cover the same window, one after the
        // other, each a change from the one before; each `blocked in X`
        // says its syscall X and the state it blocked in.
        let s = slices(t);
        assert!(!s.is_empty(), "{name}: no slice");
        let w = (s[0].1, s.last().unwrap().2);
        assert!(w.0 < w.1 && w.1 <= monotonic_at_end, "{name}: {w:?}");
        assert_eq!(
            *window.get_or_insert(w),
            w,
            "{name}: the window of every thread"
        );
        for pair in s.windows(2) {
            assert_eq!(pair[0].2, pair[1].1, "{name}: contiguous {pair:?}");
            // A change each time, but for two spans whose switch onto a
            // CPU was not seen in a row (off, ran, off, ran: each begins
            // at a switch off the CPU that was seen).
            assert!(
                pair[0].0 != pair[1].0 || pair[0].0 == UNSEEN,
                "{name}: a change each time {pair:?}"
            );
        }
        for (slice, _, _, args) in &s {
            if let Some(sys) = slice.strip_prefix("blocked in ") {
                assert_eq!(
                    args.get("syscall"),
                    Some(&Value::from(sys)),
                    "{name}: {slice}"
                );
                assert!(args.contains_key("state"), "{name}: {slice} {args:?}");
            }
        }
    }
    // Blocked all along: main in pthread_join (a futex), the reader in
    // read on its empty pipe.
    let whole = |tid: u32| -> String {
        let s = slices(thread(tid));
        assert_eq!(s.len(), 1, "{s:?}");
        s[0].0.clone()
    };
    assert_eq!(whole(pid), "blocked in futex");
    assert_eq!(whole(w.tid("reader")), "blocked in read");
    // The sleeper sleeps in clock_nanosleep (glibc's nanosleep) and runs
    // between its sleeps; a whole sleep lasts the 10 ms asked, at least
    // (less the moment from its call to its switch off the CPU).
    let s = slices(thread(w.tid("sleeper")));
    let inner = &s[1..s.len().saturating_sub(1).max(1)];
    let sleeps: Vec<_> = inner
        .iter()
        .filter(|x| x.0 == "blocked in clock_nanosleep")
        .collect();
    assert!(!sleeps.is_empty(), "{s:?}");
    assert!(sleeps.iter().all(|x| x.2 - x.1 >= 9_000_000), "{sleeps:?}");
    assert!(s.iter().any(|x| x.0 == "running"), "{s:?}");
    // The spinner never leaves the CPU of its own accord: never blocked
    // (running, runnable while another thread has its CPU, or off the CPU
    // where a switch was not seen, which says so).
    let s = slices(thread(w.tid("spinner")));
    assert!(s.iter().all(|x| !x.0.starts_with("blocked")), "{s:?}");
    assert!(s.iter().any(|x| x.0 == "running"), "{s:?}");
    // The snapper (a librip ring) is a thread like the others: named, its
    // sleeps in clock_nanosleep.
    let snapper = thread(w.tid("snapper"));
    let s = slices(snapper);
    assert!(
        s.iter().any(|x| x.0 == "blocked in clock_nanosleep"),
        "{s:?}"
    );
    // Its snaps are instants on its track, and only there: each placed at
    // the poll of the ring that first saw it, with the interval since the
    // poll before, inside which the snapper's own clock reads around the
    // snap fall. None is missing between the first and the last drawn,
    // and each names the line that snaps.
    let (begin, end) = window.unwrap();
    let log = snap_log(&log);
    let snaps = instants(snapper, "snap");
    assert!(snaps.len() >= 10, "{} snaps drawn: {snaps:?}", snaps.len());
    let line = marker_line("c/trace_roles.c", "SNAP: tick");
    let mut seqs = Vec::new();
    for (name, ts, args) in &snaps {
        assert!(
            name.contains(&format!("trace_roles.c:{line}")) && name.contains("snapper"),
            "{name}"
        );
        let seq = args["seq"].as_u64().expect("seq");
        let interval = args["interval_ns"].as_u64().expect("interval_ns");
        assert!(args["when"].as_str().is_some(), "{args:?}");
        let (before, after) = *log
            .get(&seq)
            .unwrap_or_else(|| panic!("snap {seq} drawn, not in the log"));
        // Taken after the poll before began and before this one ended.
        assert!(
            before <= *ts && after >= ts - interval,
            "snap {seq} taken in [{before}, {after}], drawn at {ts} with interval {interval}"
        );
        assert!(
            begin <= *ts && *ts <= end,
            "{ts} outside the window {begin}..{end}"
        );
        seqs.push(seq);
    }
    assert!(
        seqs.windows(2).all(|p| p[1] == p[0] + 1),
        "every snap from the first to the last drawn, in order: {seqs:?}"
    );
    // Every snap taken in the window up to the last drawn: none missed at
    // the start either (the ring's first look came before the window).
    let last = *seqs.last().unwrap();
    let in_window: Vec<u64> = log
        .iter()
        .filter(|&(&seq, &(before, _))| before >= begin && seq <= last)
        .map(|(&seq, _)| seq)
        .collect();
    assert!(
        in_window.iter().all(|q| seqs.contains(q)),
        "taken in the window, not drawn: {:?}",
        in_window
            .iter()
            .filter(|q| !seqs.contains(q))
            .collect::<Vec<_>>()
    );
    for t in tracks {
        if t["thread"]["tid"] != w.tid("snapper") {
            assert!(instants(t, "snap").is_empty(), "{t}");
        }
    }
    // The window ran its length: no signal cut it short, and its slices
    // span the 2 s asked (and the report after).
    for t in tracks {
        for (name, _, _) in instants(t, "warning") {
            assert!(!name.contains("window cut short"), "{name}");
        }
    }
    assert!(end - begin >= 2_000_000_000, "window {begin}..{end}");
    assert!(window.is_some());
}
