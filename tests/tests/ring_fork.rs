//! After fork the child never writes into the parent's slots: not through
//! its own cursor, a restored cursor, a forged one, or a coroutine handle.
//! It may create a ring of its own.

use std::process::Command;

use librip::reader::{SlotKind, SlotState};
use rip_tests::{TempDir, check_whole, facts, read_ring, run};

const WRITER: &str = env!("CARGO_BIN_EXE_ring-writer");

#[test]
fn the_child_never_writes_into_the_parents_slots() {
    let dir = TempDir::new("/dev/shm", "fork");
    let (parent, child) = (dir.join("parent.ring"), dir.join("child.ring"));
    let out = run(Command::new(WRITER).arg("fork").arg(&parent).arg(&child));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(facts(&stdout, "child-status"), ["0"]);
    assert_eq!(
        facts(&stdout, "child"),
        ["registered-in-parent-ring-refused true"]
    );

    let ring = read_ring(&parent);
    let slots: Vec<_> = ring.slots().collect();
    assert_eq!(slots.len(), 2, "{slots:?}");
    let t = slots.iter().find(|s| s.kind == SlotKind::Thread).unwrap();
    // 10 before the fork; the parent's later snaps went to its coroutine.
    assert_eq!((t.name.as_str(), t.snaps), ("parent", 10));
    let c = slots
        .iter()
        .find(|s| s.kind == SlotKind::Coroutine)
        .unwrap();
    assert_eq!(
        (c.name.as_str(), c.snaps, c.state),
        ("parent-co", 25, SlotState::Exited)
    );
    for s in &slots {
        check_whole(s, 32).unwrap();
    }

    let theirs = read_ring(&child);
    assert_ne!(theirs.header().pid, ring.header().pid);
    let slots: Vec<_> = theirs.slots().collect();
    assert_eq!(slots.len(), 1);
    assert_eq!((slots[0].name.as_str(), slots[0].snaps), ("child", 3));
    assert_eq!(slots[0].id, u64::from(theirs.header().pid));
}
