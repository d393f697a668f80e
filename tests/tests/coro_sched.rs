//! A C coroutine scheduler (ucontext, `tests/c/coro_sched.c`) using
//! librip's scheduler calls: snaps made while a coroutine runs land in its
//! slot and nowhere else, the scheduler thread's slot holds only the
//! scheduler's own snaps, polls are counted per run, and a coroutine that
//! exits hands its slot to the next one as a new generation — as the reader
//! and `rip-probe dump --json` both see it.

use std::{collections::BTreeMap, process::Command};

use librip::reader::{SlotKind, SlotState};
use rip_tests::{
    TempDir, build_librip_release, compile_librip_c, facts, librip_static, marker_line, read_ring,
    rip_probe, run, source_line,
};

const CLI: &str = env!("CARGO_BIN_EXE_rip-probe-cli");
const SOURCE: &str = "c/coro_sched.c";

/// The line of `/* SNAP: <label> */`.
fn line(label: &str) -> u32 {
    marker_line(SOURCE, &format!("SNAP: {label} "))
}

/// What each coroutine must have snapped, oldest first, and its polls.
fn expected() -> BTreeMap<&'static str, (Vec<u32>, u64)> {
    let rounds = 3;
    // fetch: two runs a round, then one more that returns (and exits).
    let fetch_runs = 2 * rounds + 1;
    let mut m = BTreeMap::new();
    m.insert(
        "parse",
        (vec![line("parse-header"); fetch_runs], fetch_runs as u64),
    );
    let compress = (0..fetch_runs)
        .map(|i| {
            line(if i % 2 == 0 {
                "compress-block"
            } else {
                "compress-flush"
            })
        })
        .collect();
    m.insert("compress", (compress, fetch_runs as u64));
    m.insert("store", (vec![line("store-write")], 1));
    m
}

#[test]
fn a_c_scheduler_snaps_into_each_coroutines_slot() {
    let build = TempDir::new("/tmp", "coro-sched");
    let prog = build.join("coro_sched");
    compile_librip_c("coro_sched", &prog, &librip_static(&build_librip_release()));
    let dir = TempDir::new("/dev/shm", "coro-sched");
    let ring_path = dir.join("sched.ring");
    let out = run(Command::new(&prog).arg(&ring_path));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(facts(&stdout, "cursor-restored"), ["1"]);
    // name -> (id, index, generation), as the program saw them.
    let coros: BTreeMap<&str, (u64, u32, u32)> = facts(&stdout, "coro")
        .iter()
        .map(|l| {
            let v: Vec<&str> = l.split(' ').collect();
            (
                v[0],
                (
                    v[1].parse().unwrap(),
                    v[2].parse().unwrap(),
                    v[3].parse().unwrap(),
                ),
            )
        })
        .collect();
    assert_eq!(coros.len(), 4, "{stdout}");
    let (fetch, store) = (coros["fetch"], coros["store"]);
    assert_eq!(
        (store.1, store.2),
        (fetch.1, fetch.2 + 1),
        "store took fetch's slot, as its next generation"
    );

    let want = expected();
    let ring = read_ring(&ring_path);
    let lines = |s: &librip::reader::Slot| -> Vec<u32> {
        s.entries
            .iter()
            .map(|e| {
                let (file, line) = source_line(&ring, e.addr);
                assert!(file.ends_with("coro_sched.c"), "{:#x} in {file}", e.addr);
                line
            })
            .collect()
    };
    let slots: Vec<_> = ring.slots().collect();
    let tasks: Vec<_> = slots
        .iter()
        .filter(|s| s.kind == SlotKind::Coroutine)
        .collect();
    assert_eq!(
        tasks.len(),
        3,
        "fetch's slot now belongs to store: {tasks:?}"
    );
    for s in &tasks {
        let (id, index, generation) = coros[s.name.as_str()];
        assert_eq!((s.id, s.index, s.generation), (id, index, generation));
        assert_eq!(s.state, SlotState::Live, "{} is parked", s.name);
        let (want_lines, polls) = &want[s.name.as_str()];
        assert_eq!(&lines(s), want_lines, "{}: only its own snaps", s.name);
        assert_eq!(s.snaps, want_lines.len() as u64);
        let st = s.task.unwrap();
        assert_eq!((st.polls, st.polling_tid), (*polls, 0), "{}", s.name);
        assert!(st.last_poll_end_ns >= st.last_poll_start_ns);
    }
    let sched = slots
        .iter()
        .find(|s| s.kind == SlotKind::Thread && s.name == "scheduler")
        .unwrap();
    // One snap after each run: 7 rounds of 3 coroutines, and store's run.
    let runs = 7 * 3 + 1;
    assert_eq!(sched.snaps, runs);
    let sched_lines = lines(sched);
    assert_eq!(sched_lines.len(), runs as usize);
    assert!(
        sched_lines.iter().all(|&l| l == line("sched-switch")),
        "the scheduler's slot holds its own snaps only: {sched_lines:?}"
    );

    // rip-probe sees the same, symbolized (--exited: the scheduler ran on
    // the main thread, whose slot is marked exited at a normal exit).
    let (code, json, err) = rip_probe(
        CLI,
        &[
            "dump",
            ring_path.to_str().unwrap(),
            "--json",
            "--threads",
            "--exited",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let frame_line = |l: &serde_json::Value| l["frame"]["line"].as_u64().unwrap() as u32;
    for t in v["tasks"].as_array().unwrap() {
        let name = t["name"].as_str().unwrap();
        let (want_lines, polls) = &want[name];
        let mut got: Vec<u32> = t["history"]
            .as_array()
            .unwrap()
            .iter()
            .map(frame_line)
            .collect();
        got.push(frame_line(&t["location"]));
        assert_eq!(&got, want_lines, "{name}: {t}");
        assert_eq!(t["polls"], *polls);
        assert_eq!(t["state"], "idle");
        assert_eq!(t["origin"], "librip", "a C coroutine is librip's: {t}");
        assert!(
            t["location"]["frame"]["file"]
                .as_str()
                .unwrap()
                .ends_with("coro_sched.c")
        );
    }
    let thread = &v["threads"][0];
    assert_eq!(thread["name"], "scheduler");
    assert_eq!(frame_line(&thread["location"]), line("sched-switch"));
    assert!(
        thread["history"]
            .as_array()
            .unwrap()
            .iter()
            .all(|l| frame_line(l) == line("sched-switch"))
    );
}
