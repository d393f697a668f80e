//! Following a ring that changes under the reader: the input is a ring
//! file (its length in the first 4 bytes), then 16-byte writes (offset,
//! value) made to the file one at a time, a poll after each. Every poll
//! is snaps or a typed error, never a panic; what it returns holds at
//! most the depth per slot, oldest first.
#![no_main]

use std::{io::Write, os::unix::fs::FileExt};

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let n = u32::from_le_bytes(data[..4].try_into().unwrap()) as usize;
    let n = n.min(data.len() - 4);
    let (image, writes) = data[4..].split_at(n);
    let path = std::path::PathBuf::from(format!(
        "/dev/shm/rip-fuzz-poll-{}.ring",
        std::process::id()
    ));
    let mut f = std::fs::File::create(&path).expect("create a scratch file in /dev/shm");
    f.write_all(image).expect("write it");
    let file = librip::reader::RegularFile::open(&path, librip::reader::Follow::No);
    if let Ok(Ok((mut poller, ring))) = file.map(|file| librip::reader::Poller::new(file, &path)) {
        let depth = ring.header().depth as usize;
        for w in writes.chunks_exact(16) {
            let off = u64::from_le_bytes(w[..8].try_into().unwrap()) % (n.max(1) as u64 + 64);
            let _ = f.write_at(&w[8..], off);
            let Ok(fresh) = poller.poll() else { continue };
            for s in fresh {
                assert!(s.snaps.len() <= depth);
                assert!(s.snaps.windows(2).all(|p| p[0].seq < p[1].seq));
            }
        }
    }
    let _ = std::fs::remove_file(&path);
});
