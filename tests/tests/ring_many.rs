//! 10,240 threads register and snap concurrently: every slot is consistent
//! while they live and after they exit, the live process's ring is found
//! through /proc/PID/maps, and tmpfs holds 320 bytes per slot (header aside).

use std::{
    collections::HashSet,
    io::{BufRead, BufReader, Write},
    os::unix::fs::MetadataExt,
    process::{Command, Stdio},
};

use librip::reader::{SlotKind, SlotState, find_rings};
use rip_tests::{TempDir, check_whole, read_ring};

const WRITER: &str = env!("CARGO_BIN_EXE_ring-writer");
/// A multiple of 64: 64 slots of 320 bytes fill 5 pages exactly.
const THREADS: usize = 10_240;

#[test]
fn ten_thousand_threads_snapping_concurrently() {
    let dir = TempDir::new("/dev/shm", "many");
    let path = dir.join("many.ring");
    let mut child = Command::new(WRITER)
        .args(["many"])
        .arg(&path)
        .arg(THREADS.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(
        line.trim(),
        "ready",
        "the writer did not get its threads going"
    );

    let found = find_rings(child.id()).unwrap();
    assert_eq!(found, std::slice::from_ref(&path));

    let ring = read_ring(&path);
    let live: Vec<_> = ring.slots().collect();
    assert_eq!(live.len(), THREADS);
    let mut names = HashSet::new();
    let mut tids = HashSet::new();
    for s in &live {
        assert_eq!(
            (s.kind, s.state, s.snaps, s.generation),
            (SlotKind::Thread, SlotState::Live, 100, 1)
        );
        check_whole(s, 32).unwrap();
        names.insert(s.name.clone());
        tids.insert(s.id);
    }
    assert_eq!(
        (names.len(), tids.len()),
        (THREADS, THREADS),
        "distinct names and tids"
    );

    let m = std::fs::metadata(&path).unwrap();
    let slot_bytes = m.blocks() * 512 - u64::from(librip::format::HEADER_SIZE);
    let per_slot = slot_bytes as f64 / THREADS as f64;
    eprintln!(
        "tmpfs use with {THREADS} live thread slots at depth 32: {} bytes, {per_slot:.1} per slot after the {}-byte header (file size {} bytes)",
        m.blocks() * 512,
        librip::format::HEADER_SIZE,
        m.len()
    );
    assert!(per_slot <= 320.0, "{per_slot} bytes of tmpfs per slot");

    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    line.clear();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "done");
    assert!(child.wait().unwrap().success());
    let ring = read_ring(&path);
    let exited: Vec<_> = ring.slots().collect();
    assert_eq!(exited.len(), THREADS);
    for s in &exited {
        assert_eq!((s.state, s.snaps), (SlotState::Exited, 100));
        check_whole(s, 32).unwrap();
    }
}
