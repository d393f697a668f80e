//! The reader's real path: the bytes written to a file on tmpfs, opened
//! (O_PATH, fstat, reopen), sized by its allocation, read with pread and
//! SEEK_DATA, as a librip ring and as an original one. Any input is a
//! ring or a typed error, never a panic or a signal.
#![no_main]

use std::io::Write;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = std::path::PathBuf::from(format!("/dev/shm/rip-fuzz-{}.ring", std::process::id()));
    let mut f = std::fs::File::create(&path).expect("create a scratch file in /dev/shm");
    f.write_all(data).expect("write it");
    // A sparse tail, as rings have: the reader must not read holes in.
    if let Some(&b) = data.first() {
        let _ = f.set_len(data.len() as u64 + u64::from(b) * 4096);
    }
    drop(f);
    if let Ok(ring) = librip::reader::RingFile::open(&path) {
        for slot in ring.slots() {
            assert!(slot.entries.len() <= ring.header().depth as usize);
        }
    }
    if let Ok(ring) = librip::reader::OriginalRing::open(&path) {
        for s in &ring.slots {
            assert!(s.entries.windows(2).all(|w| w[0].seq > w[1].seq));
        }
    }
    let _ = std::fs::remove_file(&path);
});
