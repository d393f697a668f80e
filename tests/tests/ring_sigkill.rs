//! A writer SIGKILLed at random points, hundreds of times, leaves a file
//! the reader reads without error, every entry whole: each slot's entries
//! are exactly its last snaps, at addresses inside the writer's code.

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use librip::reader::{ReadError, RingFile};
use rip_tests::{Rng, TempDir, check_whole};

const WRITER: &str = env!("CARGO_BIN_EXE_ring-writer");
const KILLS: u32 = 400;

#[test]
fn killed_writers_leave_readable_rings() {
    let dir = TempDir::new("/dev/shm", "sigkill");
    let mut rng = Rng::new(u64::from(std::process::id()));
    let t = Instant::now();
    let (mut absent, mut slots, mut entries) = (0u32, 0usize, 0usize);
    for i in 0..KILLS {
        let path = dir.join(&format!("k{i}.ring"));
        let mut child = Command::new(WRITER)
            .arg("churn")
            .arg(&path)
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn the writer");
        // Mostly while threads and coroutines come and go; sometimes
        // before or during the ring's creation.
        std::thread::sleep(Duration::from_micros(rng.below(25_000)));
        child.kill().expect("SIGKILL");
        let status = child.wait().unwrap();
        assert!(!status.success(), "the writer was killed: {status:?}");
        let ring = match RingFile::open(&path) {
            Ok(r) => r,
            Err(ReadError::NotFound(_)) => {
                absent += 1;
                continue;
            }
            Err(e) => panic!("kill {i}: {e}"),
        };
        for s in ring.slots() {
            check_whole(&s, u64::from(ring.header().depth))
                .unwrap_or_else(|e| panic!("kill {i}: {e}"));
            for e in &s.entries {
                let m = ring.module_of(e.addr);
                assert!(
                    m.is_some_and(|m| m.is_main),
                    "kill {i}: {:#x} outside the writer's code",
                    e.addr
                );
            }
            assert!(
                s.name.starts_with("churn-") || s.name == "task",
                "kill {i}: name {:?}",
                s.name
            );
            slots += 1;
            entries += s.entries.len();
        }
        std::fs::remove_file(&path).unwrap();
    }
    eprintln!(
        "{KILLS} writers killed in {:.1}s: {} rings read ({absent} killed before creating one), {slots} slots, {entries} entries, all whole",
        t.elapsed().as_secs_f64(),
        KILLS - absent
    );
    assert!(absent < KILLS / 2, "most kills must hit a running writer");
}
