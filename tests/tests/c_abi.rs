//! A C program using only librip.h, compiled with the system `cc` against
//! the static library and against the shared one: its ring holds what it
//! did, and its `rip_snap()` and `RIP_SNAP()` addresses lie in the C
//! program's own code and symbolize to ring_user.c, not to librip.

use std::{path::Path, process::Command};

use librip::reader::{SlotKind, SlotState};
use rip_tests::{
    TempDir, build_librip_release, check_whole, compile_librip_c, facts, librip_static, read_ring,
    run,
};

fn check(program: &Path, shared: bool) {
    let dir = TempDir::new("/dev/shm", "c-abi");
    let path = dir.join("c.ring");
    let out = run(Command::new(program).arg(&path));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let ring = read_ring(&path);
    let h = ring.header();
    // max_procs = 0: pid_max thread slots, yet only the used pages exist.
    let pid_max: u32 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(
        (h.thread_slots, h.coroutine_slots, h.depth),
        (pid_max, 65536, 32)
    );
    assert_eq!(h.exe, std::fs::canonicalize(program).unwrap());
    let blocks = std::fs::metadata(&path)
        .map(|m| std::os::unix::fs::MetadataExt::blocks(&m))
        .unwrap();
    assert!(
        blocks * 512 < 1 << 20,
        "a sparse file: {} bytes used",
        blocks * 512
    );
    // One snap before the ring and one after a worker's exit, at least.
    assert!(h.dropped_snaps >= 3, "{}", h.dropped_snaps);

    let slots: Vec<_> = ring.slots().collect();
    let by_name = |n: &str| {
        slots
            .iter()
            .find(|s| s.name == n)
            .unwrap_or_else(|| panic!("no slot {n}: {slots:?}"))
    };
    let main = by_name("c-main");
    assert_eq!(
        (main.kind, main.snaps, main.id),
        (SlotKind::Thread, 3 + 4 + 1 + 1 + 1, u64::from(h.pid))
    );
    for w in ["c-worker-0", "c-worker-1"] {
        let s = by_name(w);
        assert_eq!(
            (s.kind, s.state, s.snaps),
            (SlotKind::Thread, SlotState::Exited, 15)
        );
    }
    let c42 = by_name("coro-42");
    assert_eq!(
        (c42.kind, c42.id, c42.state, c42.snaps),
        (SlotKind::Coroutine, 42, SlotState::Exited, 8)
    );
    let c7 = by_name("coro-7");
    assert_eq!(
        (c7.id, c7.state, c7.snaps),
        (7, SlotState::Exited, 256 + 5 + 3)
    );
    assert_eq!(
        c7.entries.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [261, 262, 263]
    );
    let sched = by_name("sched-co");
    let (id, index) = facts(&stdout, "sched-co")[0].split_once(' ').unwrap();
    assert_eq!(
        (
            sched.id.to_string().as_str(),
            sched.index.to_string().as_str()
        ),
        (id, index)
    );
    assert_eq!((sched.state, sched.snaps), (SlotState::Live, 4));
    let task = sched.task.unwrap();
    assert_eq!((task.polls, task.polling_tid), (1, 0));
    for s in &slots {
        if s.name != "coro-7" {
            check_whole(s, 32).unwrap();
        }
    }

    // Every address is in the C program's code and names ring_user.c.
    for s in &slots {
        for e in &s.entries {
            let m = ring
                .module_of(e.addr)
                .unwrap_or_else(|| panic!("{:#x} in no module", e.addr));
            assert!(
                m.is_main,
                "{:#x} of {} lies in {}, not the program",
                e.addr,
                s.name,
                m.path.display()
            );
            let out = run(Command::new("addr2line")
                .arg("-e")
                .arg(&m.path)
                .arg(format!("{:#x}", e.addr - m.load_bias)));
            let loc = String::from_utf8_lossy(&out.stdout);
            assert!(
                loc.contains("ring_user.c:"),
                "{:#x} of {} symbolizes to {loc}",
                e.addr,
                s.name
            );
        }
    }
    if shared {
        let lib = ring
            .modules()
            .iter()
            .find(|m| m.path.ends_with("liblibrip.so"));
        assert!(
            lib.is_some_and(|m| m.build_id.is_some()),
            "the shared library is in the module table"
        );
    }
}

#[test]
fn a_c_program_using_only_the_header() {
    let lib = build_librip_release();
    let dir = TempDir::new("/tmp", "c-build");
    let static_prog = dir.join("ring_user_static");
    compile_librip_c("ring_user", &static_prog, &librip_static(&lib));
    check(&static_prog, false);

    let shared_prog = dir.join("ring_user_shared");
    let rpath = format!("-Wl,-rpath,{}", lib.display());
    compile_librip_c(
        "ring_user",
        &shared_prog,
        &["-L", lib.to_str().unwrap(), "-llibrip", &rpath],
    );
    check(&shared_prog, true);
}
