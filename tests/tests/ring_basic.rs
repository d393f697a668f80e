//! A writer with threads, an unregistered thread and coroutines: the
//! reader sees every slot as it was left, the header describes the process,
//! and every recorded address symbolizes to the line of its `snap!()`.

use std::{os::unix::fs::MetadataExt, process::Command};

use librip::reader::{SlotKind, SlotState};
use rip_tests::{TempDir, check_whole, facts, read_ring, run};

const WRITER: &str = env!("CARGO_BIN_EXE_ring-writer");

#[test]
fn threads_coroutines_and_the_sink() {
    let dir = TempDir::new("/dev/shm", "basic");
    let path = dir.join("basic.%p.ring");
    let out = run(Command::new(WRITER).arg("basic").arg(&path));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "writer failed: {stderr}");
    assert!(stderr.is_empty(), "no warning on tmpfs: {stderr}");
    assert_eq!(facts(&stdout, "tmpfs"), ["true"]);
    let second = facts(&stdout, "second-create");
    assert!(second[0].contains("one ring per process"), "{second:?}");

    // %p expanded to the writer's pid.
    let rings: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(rings.len(), 1, "{rings:?}");
    let path = &rings[0];
    let meta = std::fs::metadata(path).unwrap();
    assert_eq!(meta.mode() & 0o7777, 0o600);
    assert_eq!(meta.nlink(), 1);
    // SAFETY: geteuid has no preconditions.
    assert_eq!(meta.uid(), unsafe { libc::geteuid() });

    let ring = read_ring(path);
    let h = ring.header();
    assert_eq!(
        path.file_name().unwrap().to_str().unwrap(),
        format!("basic.{}.ring", h.pid)
    );
    assert_eq!((h.depth, h.thread_slots, h.coroutine_slots), (32, 16, 8));
    assert_eq!(h.exe, std::fs::canonicalize(WRITER).unwrap());
    assert!(
        h.build_id.as_ref().is_some_and(|b| b.len() >= 16),
        "the exe's build-id"
    );
    assert!(h.created_realtime_ns > 1_700_000_000 * 1_000_000_000);
    assert!(h.process_start_ticks > 0 && h.clock_ticks_per_sec > 0);
    // 50 from the unregistered thread and 1 after exit_thread, at least.
    assert!(h.dropped_snaps >= 51, "dropped {}", h.dropped_snaps);
    assert!(!h.modules_truncated);
    // libresolv was loaded after creation, before the first registration.
    assert_eq!(
        facts(&stdout, "dlopen"),
        ["true true"],
        "not loaded before, loaded then"
    );
    let resolv = ring
        .modules()
        .iter()
        .find(|m| m.path.to_string_lossy().contains("libresolv"));
    let resolv = resolv.expect("a library loaded later joins the module table");
    assert!(resolv.build_id.is_some() && resolv.start < resolv.end && !resolv.is_main);
    assert!(ring.modules().iter().any(|m| m.is_main && m.path == h.exe));

    let slots: Vec<_> = ring.slots().collect();
    let mut threads: Vec<_> = slots
        .iter()
        .filter(|s| s.kind == SlotKind::Thread)
        .collect();
    assert_eq!(threads[0].index, 0, "main registered first");
    threads.sort_by_key(|s| (s.index != 0, s.name.clone()));
    let names: Vec<_> = threads.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["main", "w0", "w1", "w2"]);
    assert_eq!(h.thread_high_water, 4);
    let main = threads[0];
    assert_eq!(
        main.id,
        u64::from(h.pid),
        "the main thread's tid is the pid"
    );
    // The process ended normally: even the main thread's slot says exited
    // (a crash would leave it live).
    assert_eq!((main.state, main.snaps), (SlotState::Exited, 6));
    for (i, w) in threads[1..].iter().enumerate() {
        assert_eq!(w.snaps, 10 + i as u64, "{}", w.name);
        // w0 exited explicitly, the others when their thread ended.
        assert_eq!(w.state, SlotState::Exited, "{}", w.name);
        let tid = facts(&stdout, "tid")
            .into_iter()
            .find_map(|t| t.strip_prefix(&format!("{} ", w.name)));
        assert_eq!(w.id.to_string(), tid.unwrap());
        assert_eq!(w.generation, 1);
    }
    for s in &slots {
        check_whole(s, 32).unwrap();
    }

    let coroutines: Vec<_> = slots
        .iter()
        .filter(|s| s.kind == SlotKind::Coroutine)
        .collect();
    assert_eq!(coroutines.len(), 2, "{coroutines:?}");
    let co = coroutines.iter().find(|s| s.name == "co-a").unwrap();
    let (id, index) = facts(&stdout, "coroutine")[0].split_once(' ').unwrap();
    assert_eq!(
        (co.id.to_string().as_str(), co.index.to_string().as_str()),
        (id, index)
    );
    assert_eq!((co.state, co.snaps), (SlotState::Live, 7));
    let task = co.task.unwrap();
    assert_eq!((task.polls, task.polling_tid), (1, 0));
    assert!(task.last_poll_start_ns <= task.last_poll_end_ns);
    assert!(task.created_ns >= h.created_monotonic_ns);
    let gone = coroutines.iter().find(|s| s.name == "co-gone").unwrap();
    assert_eq!(
        (gone.id, gone.state, gone.snaps),
        (99, SlotState::Exited, 1)
    );

    symbolizes_to_call_sites(&ring, &stdout);
}

/// Every entry of the main, worker and coroutine slots names, through the
/// module table and addr2line, the line of the `snap!()` that recorded it.
fn symbolizes_to_call_sites(ring: &librip::reader::RingFile, stdout: &str) {
    let site = |name: &str| -> Vec<String> {
        facts(stdout, "site")
            .into_iter()
            .filter_map(|s| s.strip_prefix(&format!("{name} ")).map(str::to_owned))
            .collect()
    };
    let check = |slot_name: &str, want: Vec<String>| {
        let slot = ring.slots().find(|s| s.name == slot_name).unwrap();
        let mut lines = Vec::new();
        for e in &slot.entries {
            let m = ring
                .module_of(e.addr)
                .unwrap_or_else(|| panic!("{:#x} in no module", e.addr));
            assert!(m.is_main, "{:#x} is in {}", e.addr, m.path.display());
            let out = run(Command::new("addr2line")
                .arg("-e")
                .arg(&m.path)
                .arg(format!("{:#x}", e.addr - m.load_bias)));
            let loc = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            assert!(
                loc.contains("ring-writer.rs:"),
                "{:#x} symbolizes to {loc}, not the caller",
                e.addr
            );
            lines.push(
                loc.rsplit_once(':')
                    .unwrap()
                    .1
                    .split(' ')
                    .next()
                    .unwrap()
                    .to_owned(),
            );
        }
        lines.dedup();
        let mut want = want;
        want.dedup();
        assert_eq!(lines, want, "{slot_name}: lines of its snaps");
    };
    let mut main = site("main");
    main.extend(site("main-after"));
    check("main", main);
    check("w1", site("worker"));
    check("co-a", site("coroutine"));
}
