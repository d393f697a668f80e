//! The reader survives arbitrary bytes: real rings, each kind of corruption
//! (with its typed error), random bytes, random mutations of a real ring,
//! and the committed fuzz corpus. None may panic.
//!
//! `RIP_REGENERATE_FUZZ_SEEDS=1` rewrites the corpus seeds (`seed-*`) in
//! fuzz/corpus/reader from a real ring made by the ring-writer workload.

use std::{path::PathBuf, process::Command};

use librip::{
    format::{hdr, module},
    reader::{ReadError, RingFile},
};
use rip_tests::{Rng, TempDir, run, workspace_root};

const WRITER: &str = env!("CARGO_BIN_EXE_ring-writer");

fn corpus_dir() -> PathBuf {
    workspace_root().join("fuzz/corpus/reader")
}

fn real_ring() -> Vec<u8> {
    let dir = TempDir::new("/dev/shm", "bytes");
    let path = dir.join("real.ring");
    let out = run(Command::new(WRITER).arg("basic").arg(&path));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read(&path).unwrap()
}

fn get32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
}

fn put32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

fn put64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

/// The same ring squeezed into 2 KiB (a 1 KiB header with four modules, two
/// thread slots and one coroutine slot): small inputs fuzz faster.
fn compact(real: &[u8]) -> Vec<u8> {
    const HEADER: usize = 1024;
    const MODULES: usize = 4;
    let mut c = vec![0u8; 2048];
    c[..256].copy_from_slice(&real[..256]);
    put32(&mut c, hdr::HEADER_SIZE, HEADER as u32);
    put32(&mut c, hdr::MODULE_CAPACITY, MODULES as u32);
    let count = (get32(real, hdr::MODULE_COUNT) as usize).min(MODULES);
    put32(&mut c, hdr::MODULE_COUNT, count as u32);
    let mut strings = 256 + MODULES * 96;
    let mut string = |c: &mut Vec<u8>, off: usize, len: usize| -> (u32, u32) {
        let len = len.min(HEADER - strings).min(64);
        c[strings..strings + len].copy_from_slice(&real[off..off + len]);
        let at = strings;
        strings += len.next_multiple_of(8);
        (at as u32, len as u32)
    };
    let (at, len) = string(
        &mut c,
        get32(real, hdr::EXE_PATH) as usize,
        get32(real, hdr::EXE_PATH_LEN) as usize,
    );
    put32(&mut c, hdr::EXE_PATH, at);
    put32(&mut c, hdr::EXE_PATH_LEN, len);
    for i in 0..count {
        let e = 256 + i * 96;
        c[e..e + 96].copy_from_slice(&real[e..e + 96]);
        let (at, len) = string(
            &mut c,
            get32(real, e + module::PATH) as usize,
            get32(real, e + module::PATH_LEN) as usize,
        );
        put32(&mut c, e + module::PATH, at);
        put32(&mut c, e + module::PATH_LEN, len);
    }
    let real_thread =
        u64::from_le_bytes(real[hdr::THREAD_REGION..][..8].try_into().unwrap()) as usize;
    let real_co =
        u64::from_le_bytes(real[hdr::COROUTINE_REGION..][..8].try_into().unwrap()) as usize;
    put32(&mut c, hdr::THREAD_SLOTS, 2);
    put32(&mut c, hdr::THREAD_HIGH_WATER, 2);
    put64(&mut c, hdr::THREAD_REGION, HEADER as u64);
    c[HEADER..HEADER + 640].copy_from_slice(&real[real_thread..real_thread + 640]);
    put32(&mut c, hdr::COROUTINE_SLOTS, 1);
    put32(&mut c, hdr::COROUTINE_HIGH_WATER, 1);
    put64(&mut c, hdr::COROUTINE_REGION, (HEADER + 640) as u64);
    c[HEADER + 640..HEADER + 1024].copy_from_slice(&real[real_co..real_co + 384]);
    put64(&mut c, hdr::FILE_SIZE, 2048);
    c
}

/// A corruption of the compact ring, and the error it must give.
type Corruption = (&'static str, fn(&mut Vec<u8>), fn(&ReadError) -> bool);

#[rustfmt::skip]
const CORRUPTIONS: &[Corruption] = &[
    ("bad-magic", |b| b[0] = b'X', |e| matches!(e, ReadError::NotARing)),
    ("no-magic-yet", |b| b[..8].fill(0), |e| matches!(e, ReadError::Incomplete)),
    ("version-99", |b| put32(b, hdr::VERSION, 99), |e| matches!(e, ReadError::VersionTooNew { found: 99, .. })),
    ("big-endian", |b| put32(b, hdr::ENDIAN, 0x0403_0201), |e| matches!(e, ReadError::Inconsistent(_))),
    ("depth-3", |b| put32(b, hdr::DEPTH, 3), |e| matches!(e, ReadError::Inconsistent(_))),
    ("slot-size", |b| put32(b, hdr::THREAD_SLOT_SIZE, 328), |e| matches!(e, ReadError::Inconsistent(_))),
    ("high-water", |b| put32(b, hdr::THREAD_HIGH_WATER, 3), |e| matches!(e, ReadError::Inconsistent(_))),
    ("region-past-end", |b| put64(b, hdr::COROUTINE_REGION, 1 << 40), |e| matches!(e, ReadError::Inconsistent(_))),
    ("regions-overlap", |b| put64(b, hdr::COROUTINE_REGION, 1024), |e| matches!(e, ReadError::Inconsistent(_))),
    ("file-size", |b| put64(b, hdr::FILE_SIZE, 1 << 20), |e| matches!(e, ReadError::Truncated { needed, len: 2048 } if *needed == 1 << 20)),
    ("module-count", |b| put32(b, hdr::MODULE_COUNT, 5), |e| matches!(e, ReadError::Inconsistent(_))),
    ("module-path", |b| put32(b, 256 + module::PATH, 1020), |e| matches!(e, ReadError::Inconsistent(_))),
    ("build-id-len", |b| put32(b, 256 + module::BUILD_ID_LEN, 41), |e| matches!(e, ReadError::Inconsistent(_))),
    ("exe-path", |b| put32(b, hdr::EXE_PATH_LEN, u32::MAX), |e| matches!(e, ReadError::Inconsistent(_))),
    ("slot-state", |b| put32(b, 1024, 7), |e| matches!(e, ReadError::Inconsistent(_))),
];

fn walk(bytes: &[u8]) -> Result<usize, ReadError> {
    let ring = RingFile::from_bytes(bytes)?;
    let mut n = 0;
    for s in ring.slots() {
        assert!(s.entries.len() <= ring.header().depth as usize);
        assert!(s.entries.windows(2).all(|w| w[0].seq < w[1].seq));
        n += 1;
    }
    Ok(n)
}

#[test]
fn real_compact_truncated_and_corrupt_rings() {
    let real = real_ring();
    assert!(walk(&real).unwrap() >= 6);
    let small = compact(&real);
    assert_eq!(walk(&small).unwrap(), 3, "two threads and a coroutine");

    let mut seeds: Vec<(String, Vec<u8>)> = vec![
        ("real".into(), real.clone()),
        ("compact".into(), small.clone()),
    ];
    for (name, corrupt, expect) in CORRUPTIONS {
        let mut b = small.clone();
        corrupt(&mut b);
        let e = walk(&b).expect_err(name);
        assert!(expect(&e), "{name}: {e:?}");
        assert_eq!(e.to_string().lines().count(), 1, "{name}: one line");
        seeds.push((format!("corrupt-{name}"), b));
    }
    for len in [0, 3, 8, 100, 255, 256, 1023, 1500, 2047] {
        let e = walk(&small[..len]).expect_err("truncated");
        let ok = match len {
            0 => matches!(e, ReadError::Incomplete),
            3 => matches!(e, ReadError::NotARing),
            _ => matches!(e, ReadError::Truncated { .. }),
        };
        assert!(ok, "truncated to {len}: {e:?}");
        seeds.push((format!("truncated-{len}"), small[..len].to_vec()));
    }
    let half = real.len() / 2;
    assert!(matches!(
        walk(&real[..half]),
        Err(ReadError::Truncated { .. })
    ));

    if std::env::var("RIP_REGENERATE_FUZZ_SEEDS").is_ok_and(|v| v == "1") {
        for (name, bytes) in &seeds {
            std::fs::write(corpus_dir().join(format!("seed-{name}")), bytes).unwrap();
        }
        eprintln!("wrote {} seeds to {}", seeds.len(), corpus_dir().display());
    }
}

#[test]
fn random_bytes_and_mutations_never_panic() {
    let small = compact(&real_ring());
    let mut rng = Rng::new(0x5eed);
    let mut parsed = 0;
    for _ in 0..3000 {
        let len = rng.below(3000) as usize;
        let mut b: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
        if len >= 8 && rng.below(2) == 0 {
            b[..8].copy_from_slice(&librip::format::MAGIC);
        }
        let _ = walk(&b);
    }
    for _ in 0..20_000 {
        let mut b = small.clone();
        for _ in 0..1 + rng.below(4) {
            let at = rng.below(b.len() as u64 / 4) as usize * 4;
            let v = match rng.below(4) {
                0 => rng.next_u64() as u32,
                1 => u32::MAX - rng.below(3) as u32,
                2 => rng.below(4096) as u32,
                _ => 1 << rng.below(32),
            };
            put32(&mut b, at, v);
        }
        if rng.below(8) == 0 {
            b.truncate(rng.below(b.len() as u64) as usize);
        }
        parsed += usize::from(walk(&b).is_ok());
    }
    eprintln!("20000 mutations of a compact ring: {parsed} still parsed, none panicked");
    assert!(parsed > 1000, "mutations of unused bytes must still parse");
}

#[test]
fn the_committed_fuzz_corpus_replays() {
    let dir = corpus_dir();
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let bytes = std::fs::read(e.unwrap().path()).unwrap();
        let _ = walk(&bytes);
        n += 1;
    }
    assert!(
        dir.join("seed-real").exists() && dir.join("seed-compact").exists(),
        "seeds committed"
    );
    eprintln!("replayed {n} corpus inputs");
}
