//! The `sampler` check: librip's allocation sampler on this kernel, in a
//! process killed as a crash would end it. The suite runs itself as the
//! workload (`rip-vmcheck --sampled-workload RING`): its global allocator
//! is librip's `Sampled`, which forwards and samples nothing unless a ring
//! with an allocation table is made.
//!
//! The table's pages are reserved in the ring file as sampling reaches
//! them where the kernel can report a full file system as an error
//! (`MADV_POPULATE_WRITE`, Linux 5.14), and all at once with the ring where
//! it cannot: the workload keeps more blocks live than the zones reserved
//! with the ring hold (the first, 64 entries; earlier writers' first
//! three, 448), so it takes one path or the other, and
//! the check says which and that it was the right one for the kernel.

use std::{
    os::unix::fs::MetadataExt,
    path::Path,
    process::{Command, Stdio},
};

use anyhow::{Context, Result, ensure};
use librip::format::alloc;

/// Blocks the workload keeps live, every allocation sampled: more than
/// the zones reserved with the ring hold (64 entries; 448 by earlier
/// writers).
const BLOCKS: usize = 1000;
/// Bytes of each.
const BYTES: usize = 1000;
/// The workload's function that allocates them, as the stacks name it.
const KEEPER: &str = "rip_vmcheck::sampler::keep_sampled_blocks";

/// The workload: samples every allocation into `ring`, keeps [`BLOCKS`]
/// blocks of [`BYTES`] live, and kills itself with SIGKILL.
pub fn workload(ring: &Path) -> ! {
    librip::alloc::sample_allocations(1);
    let opts = librip::RingOptions {
        thread_slots: 64,
        ..librip::RingOptions::default()
    };
    if let Err(e) = librip::Ring::create(ring, opts) {
        eprintln!("rip-vmcheck: cannot make the ring {}: {e}", ring.display());
        std::process::exit(2);
    }
    // The list is allocated here, so that under KEEPER are the blocks alone.
    let mut kept = Vec::with_capacity(BLOCKS);
    keep_sampled_blocks(&mut kept);
    std::mem::forget(std::hint::black_box(kept));
    // SAFETY: a signal to this process; nothing runs after it.
    unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    unreachable!("SIGKILL returned");
}

#[inline(never)]
fn keep_sampled_blocks(kept: &mut Vec<Vec<u8>>) {
    for i in 0..BLOCKS {
        kept.push(std::hint::black_box(vec![i as u8 | 1; BYTES]));
    }
}

/// Whether this kernel is 5.14 or later, where `MADV_POPULATE_WRITE`
/// came: by its release, not by asking it as librip's writer does, so a
/// writer that asks wrongly fails the check.
fn kernel_populates() -> Result<bool> {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease")?;
    let mut parts = release
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>());
    let major = parts.next().context("no kernel release")??;
    let minor = parts.next().context("no kernel minor")??;
    Ok((major, minor) >= (5, 14))
}

/// The check: the workload's blocks all in the ring after the kill, from
/// [`KEEPER`], none dropped, and the table reserved as the kernel allows.
pub fn check(paths: &super::Paths) -> Result<String> {
    let ring = paths
        .dir
        .join(format!("sampled.{}.ring", std::process::id()));
    let _ = std::fs::remove_file(&ring);
    let result = check_ring(paths, &ring);
    let _ = std::fs::remove_file(&ring);
    result
}

fn check_ring(paths: &super::Paths, ring: &Path) -> Result<String> {
    let exe = std::env::current_exe().context("the suite's own executable")?;
    let status = Command::new(&exe)
        .arg("--sampled-workload")
        .arg(ring)
        .stdin(Stdio::null())
        .status()
        .with_context(|| format!("cannot start {}", exe.display()))?;
    {
        use std::os::unix::process::ExitStatusExt;
        ensure!(
            status.signal() == Some(libc::SIGKILL),
            "the sampled workload ended {status}, not by its SIGKILL"
        );
    }

    // The table's size, by librip's reader.
    let capacity = librip::reader::RingFile::open(ring)
        .with_context(|| format!("{}", ring.display()))?
        .allocations()
        .context("the ring has no allocation table")?
        .capacity;
    let size = alloc::region_size(capacity);
    // The pages the file holds, reserved or written (fallocate's count in
    // st_blocks where SEEK_DATA may not see them): the ring's header and
    // its one thread's slot besides the table, a few pages.
    let held = std::fs::metadata(ring)?.blocks() * 512;
    let needed = alloc::region_size(BLOCKS as u32);
    let later = kernel_populates().context("the kernel's release")?;
    if later {
        ensure!(
            held >= needed && held < size,
            "the ring holds {held} bytes, its table {size}: reserving as sampling goes, \
             {BLOCKS} live samples need at least {needed} and not the whole table"
        );
    } else {
        ensure!(
            held >= size,
            "the ring holds {held} bytes, its table {size}: without MADV_POPULATE_WRITE \
             the table is reserved whole with the ring"
        );
    }

    let ring_arg = ring.to_str().context("the ring's path is not UTF-8")?;
    let v = super::probe_json(paths, "sampler", &["leaks", ring_arg, "--json"])?;
    let s = &v["sampler"];
    ensure!(
        s.is_object(),
        "not read as a sampler's ring: {}",
        v["sampler"]
    );
    ensure!(
        s["mean_bytes"] == 1 && s["dropped"] == 0 && s["torn"] == 0,
        "sampler: {s}"
    );
    let (n, b) = super::count_and_bytes(&super::heap_under(&v, KEEPER)?);
    ensure!(
        (n, b) == (BLOCKS as u64, (BLOCKS * BYTES) as u64),
        "under {KEEPER}: {n} blocks, {b} bytes; {BLOCKS} of {BYTES} bytes were live at the kill"
    );
    Ok(format!(
        "{n} blocks live at the SIGKILL under {KEEPER}, none dropped; the ring holds {} KiB, \
         its table of {capacity} entries {} KiB: {}",
        held / 1024,
        size / 1024,
        if later {
            "reserved as sampling reached it"
        } else {
            "reserved whole with the ring (no MADV_POPULATE_WRITE)"
        }
    ))
}
