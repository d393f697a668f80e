//! The audit's attacks on root rip-probe, each reproduced: a sparse ring
//! claiming huge sizes, a ring truncated while being read, FIFOs and
//! symlinks where files are expected, terminal escapes in names, and a
//! slot id above 2^32. (The module offset overflow and the 100k-module
//! scale test are unit tests of rip-probe's symbolizer; the maps parser
//! with "a b" paths is librip's `find` unit test and `a_b_path` below.)

use std::{
    os::unix::fs::FileExt,
    process::Command,
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

use librip::{
    format::hdr,
    reader::{ReadError, RingFile},
};
use rip_tests::{TempDir, rip_probe};

const PROBE: &str = env!("CARGO_BIN_EXE_rip-probe-cli");
const COMPACT: &[u8] = include_bytes!("../../fuzz/corpus/reader/seed-compact");
const REAL: &[u8] = include_bytes!("../../fuzz/corpus/reader/seed-real");

fn put32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

fn put64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

/// Free bytes of the file system holding `path`.
fn free_bytes(path: &std::path::Path) -> u64 {
    let s = rustix::fs::statvfs(path).unwrap();
    s.f_bfree * s.f_frsize
}

/// Runs `cmd` to the end; its exit code and peak RSS in KiB.
#[expect(
    clippy::zombie_processes,
    reason = "reaped by wait4, which also returns its rusage"
)]
fn run_measured(cmd: &mut Command) -> (Option<i32>, u64) {
    let child = cmd
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers; the child is ours and not waited for yet.
    let r = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut ru) };
    assert_eq!(r, child.id() as i32);
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    (code, ru.ru_maxrss as u64)
}

#[test]
fn a_sparse_ring_claiming_huge_sizes_is_refused_without_memory_or_tmpfs() {
    let dir = TempDir::new("/dev/shm", "sparse");
    let path = dir.join("huge.ring");
    // Depth 4096 and 2^24 - 1 used thread slots: a 550 GB claim in 2 KB.
    let mut b = COMPACT.to_vec();
    let depth = 4096u32;
    let (tss, css) = (64 + 8 * depth, 128 + 8 * depth);
    let n = (1u32 << 24) - 1;
    put32(&mut b, hdr::DEPTH, depth);
    put32(&mut b, hdr::THREAD_SLOT_SIZE, tss);
    put32(&mut b, hdr::COROUTINE_SLOT_SIZE, css);
    put32(&mut b, hdr::THREAD_SLOTS, n);
    put32(&mut b, hdr::THREAD_HIGH_WATER, n);
    put32(&mut b, hdr::COROUTINE_SLOTS, 0);
    put32(&mut b, hdr::COROUTINE_HIGH_WATER, 0);
    let size = 1024 + u64::from(n) * u64::from(tss);
    put64(&mut b, hdr::FILE_SIZE, size);
    std::fs::write(&path, &b).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(size)
        .unwrap();

    let free = free_bytes(dir.path());
    let e = RingFile::open(&path).unwrap_err();
    assert!(matches!(e, ReadError::Inconsistent(_)), "{e}");
    assert!(e.to_string().contains("holds only"), "{e}");
    let (code, rss_kib) = run_measured(Command::new(PROBE).args(["dump", path.to_str().unwrap()]));
    assert_eq!(code, Some(1));
    assert!(rss_kib < 64 * 1024, "rip-probe used {rss_kib} KiB");
    let after = free_bytes(dir.path());
    // Other tests share /dev/shm: allow them a little, not gigabytes.
    assert!(
        after + (64 << 20) > free,
        "/dev/shm lost {} bytes",
        free - after
    );
}

/// An allocation table may be mostly holes (its writer reserves zones as
/// sampling reaches them), so what the file holds does not bound it: a
/// sparse table claiming the largest size a reader accepts (65,536 entries
/// of 1 KiB, 64 MiB), of which the file holds only the region's header
/// (what a reader requires: how much more a writer reserves up front is
/// its own choice), reads as empty, a chunk at a time, without the memory
/// or the file system's room for the rest.
#[test]
fn a_sparse_allocation_table_of_the_largest_size_reads_in_bounded_memory() {
    use librip::format::alloc;
    let dir = TempDir::new("/dev/shm", "sparse-alloc");
    let path = dir.join("table.ring");
    let mut b = COMPACT.to_vec();
    let end = u64::from_le_bytes(b[hdr::FILE_SIZE..hdr::FILE_SIZE + 8].try_into().unwrap());
    let region = end.div_ceil(4096) * 4096;
    let size = u64::from(alloc::HEADER_SIZE) + 65536 * 1024;
    put64(&mut b, hdr::FILE_SIZE, region + size);
    put64(&mut b, hdr::ALLOC_REGION, region);
    put64(&mut b, hdr::ALLOC_REGION_SIZE, size);
    let mut h = vec![0u8; 64];
    h[alloc::hdr::MAGIC..8].copy_from_slice(&alloc::MAGIC);
    put32(&mut h, alloc::hdr::VERSION, alloc::VERSION);
    put32(&mut h, alloc::hdr::ENTRY_SIZE, 1024);
    put32(&mut h, alloc::hdr::CAPACITY, 65536);
    put32(&mut h, alloc::hdr::FRAMES, alloc::FRAMES);
    put64(&mut h, alloc::hdr::MEAN, alloc::DEFAULT_MEAN);
    put32(&mut h, alloc::hdr::PROBE, alloc::PROBE);
    std::fs::write(&path, &b).unwrap();
    let f = std::fs::File::options().write(true).open(&path).unwrap();
    f.set_len(region + size).unwrap();
    // The region's header is held; the entries are a hole.
    let mut prefix = vec![0u8; alloc::HEADER_SIZE as usize];
    prefix[..h.len()].copy_from_slice(&h);
    f.write_all_at(&prefix, region).unwrap();
    drop(f);

    let ring = RingFile::open(&path).unwrap();
    let t = ring.allocations().expect("the table is read");
    assert_eq!((t.capacity, t.live.len(), t.torn), (65536, 0, 0));
    let (code, rss_kib) = run_measured(Command::new(PROBE).args(["leaks", path.to_str().unwrap()]));
    assert_eq!(code, Some(0));
    // The whole table at once would be 64 MiB besides rip-probe's own.
    assert!(rss_kib < 48 * 1024, "rip-probe used {rss_kib} KiB");
}

#[test]
fn truncating_a_ring_while_it_is_read_is_an_error_never_a_signal() {
    let dir = TempDir::new("/dev/shm", "truncate");
    let path = dir.join("t.ring");
    std::fs::write(&path, REAL).unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let f = std::fs::File::options().write(true).open(&path).unwrap();
            while !stop.load(Ordering::Relaxed) {
                f.set_len(4096).unwrap();
                f.set_len(0).unwrap();
                f.write_all_at(REAL, 0).unwrap();
            }
        });
        let (mut ok, mut err) = (0, 0);
        for _ in 0..2000 {
            match RingFile::open(&path) {
                Ok(r) => {
                    ok += 1;
                    let _ = r.slots().count();
                }
                Err(_) => err += 1,
            }
        }
        stop.store(true, Ordering::Relaxed);
        eprintln!("{ok} reads whole, {err} refused");
    });
}

#[test]
fn a_fifo_or_device_as_a_ring_path_fails_at_once() {
    let dir = TempDir::new("/tmp", "fifo");
    let fifo = dir.join("ring");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    for p in [fifo.to_str().unwrap(), "/dev/zero"] {
        let t = Instant::now();
        let (code, _, err) = rip_probe(PROBE, &["dump", p]);
        // Opening a FIFO for reading blocks until a writer comes, which
        // none does: a hang never ends, so any bound tells it from a slow
        // run on a busy machine.
        assert!(t.elapsed() < Duration::from_secs(60), "hung on {p}");
        assert_eq!(code, 1, "{err}");
        assert!(
            err.contains("not a regular file") || err.contains("FIFO") || err.contains("device"),
            "{err}"
        );
    }
}

/// Names with OSC and CSI sequences: escaped in text, exact in JSON.
#[test]
fn terminal_escapes_in_names_are_escaped_in_text_and_exact_in_json() {
    let dir = TempDir::new("/dev/shm", "escapes");
    let path = dir.join("e.ring");
    let evil = "\u{1b}]0;pwned\u{7}\u{1b}[2J\u{9b}x";
    let o = Command::new(env!("CARGO_BIN_EXE_ring-writer"))
        .args(["named", path.to_str().unwrap(), evil])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for view in [&["--exited"][..], &["--exited", "--threads"][..]] {
        let mut args = vec!["dump", path.to_str().unwrap()];
        args.extend(view);
        let (code, out, err) = rip_probe(PROBE, &args);
        assert_eq!(code, 0, "{err}");
        assert!(
            !out.contains('\u{1b}') && !out.contains('\u{7}') && !out.contains('\u{9b}'),
            "{out:?}"
        );
        if view.contains(&"--threads") {
            // Escaped once by the text boundary (the history view then
            // quotes names Debug-style, doubling the backslash).
            assert!(
                out.contains("x1b]0;pwned") && out.contains("u{9b}x"),
                "{out}"
            );
        }
    }
    let (_, json, _) = rip_probe(
        PROBE,
        &["dump", path.to_str().unwrap(), "--exited", "--json"],
    );
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let names: Vec<&str> = v["threads"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&evil), "{names:?}");
}
