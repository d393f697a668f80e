//! Slot exhaustion: more threads than thread slots, and a tmpfs too small
//! for every slot. Neither may write outside the file or fault later.

use std::process::Command;

use librip::reader::SlotKind;
use rip_tests::{TempDir, Tmpfs, check_whole, facts, privileged_tests_enabled, read_ring, run};

const WRITER: &str = env!("CARGO_BIN_EXE_ring-writer");

/// Tids are far above 4, and 10 threads want slots: the 4 slots go to the
/// first four, the others' snaps are dropped and counted (a lower bound),
/// and the file stays its size.
#[test]
fn threads_beyond_the_slot_count_snap_into_the_sink() {
    let dir = TempDir::new("/dev/shm", "overflow");
    let path = dir.join("over.ring");
    let out = run(Command::new(WRITER)
        .args(["overflow"])
        .arg(&path)
        .args(["4", "10"]));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(facts(&stdout, "registered"), ["4 failed 6"]);
    let layout = librip::format::Layout::new(4, 0, 32).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), layout.file_size);
    let ring = read_ring(&path);
    // The six slotless threads snapped 600 times. Their shared counter is
    // incremented without atomics (a snap stays ten instructions), so
    // snaps made at the same moment on two CPUs may count once: the count
    // is a lower bound, and a busy machine interleaves them more.
    let dropped = ring.header().dropped_snaps;
    assert!((1..=600).contains(&dropped), "{dropped}");
    let slots: Vec<_> = ring.slots().collect();
    assert_eq!(slots.len(), 4);
    for s in &slots {
        assert_eq!((s.kind, s.snaps), (SlotKind::Thread, 100));
        assert!(s.id > 4, "a real tid, not an index");
        check_whole(s, 32).unwrap();
    }
}

/// Mounts a tmpfs with room for the header and a few hundred slots:
/// registration must fail with "no space" once it is full, and every thread
/// (registered or not) keeps snapping without SIGBUS.
#[test]
fn a_full_tmpfs_fails_registration_not_snaps() {
    if !privileged_tests_enabled("a_full_tmpfs_fails_registration_not_snaps", "a full tmpfs") {
        return;
    }
    let dir = TempDir::new("/tmp", "fulltmpfs");
    let mnt = dir.path();
    let _tmpfs = Tmpfs::mount(mnt, "128k");

    let path = mnt.join("full.ring");
    let out = run(Command::new(WRITER).arg("fill").arg(&path));
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "the writer died ({:?}): {stderr}",
        out.status
    );
    let registered: usize = facts(&stdout, "registered")[0].parse().unwrap();
    let error = facts(&stdout, "error")[0];
    assert!(
        error.contains("no space left") && error.contains("enlarge"),
        "{error}"
    );
    // 64 KiB of header and 64 KiB of slots at 320 bytes each.
    assert!(
        (150..=205).contains(&registered),
        "{registered} slots in 64 KiB"
    );
    let ring = read_ring(&path);
    let slots: Vec<_> = ring.slots().collect();
    assert_eq!(slots.len(), registered);
    for s in &slots {
        assert_eq!(s.snaps, 1000);
        check_whole(s, 32).unwrap();
    }
    assert!(
        ring.header().dropped_snaps >= 1000,
        "the refused thread's snaps were counted"
    );
    eprintln!("tmpfs of 128 KiB: {registered} slots registered, then: {error}");
}
