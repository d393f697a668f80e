//! Whole hash maps read and written a few thousand entries per syscall
//! (`BPF_MAP_LOOKUP_BATCH` and `BPF_MAP_UPDATE_BATCH`, Linux 5.6).
//!
//! aya walks a hash map two syscalls per key (next key, then lookup) and
//! writes one key per syscall: on a process with 100,000 threads, seeding
//! and reading the per-thread table cost 300,000 syscalls and most of a
//! second. aya has no batch operations, so they are issued here directly.

use std::{
    io,
    os::fd::{AsFd, AsRawFd},
};

use aya::{
    Pod,
    maps::{Map, MapData},
};
use aya_obj::generated::{bpf_attr, bpf_cmd};

/// Entries per syscall. A hash map's batch never splits a bucket, and a
/// bucket holds a handful of entries, so any batch this large makes
/// progress.
const CHUNK: usize = 4096;

/// The data of hash map `map`, or `None` if it is of another type.
pub(crate) fn hash_map_data(map: &Map) -> Option<&MapData> {
    match map {
        Map::HashMap(data) => Some(data),
        _ => None,
    }
}

/// The data of array map `map`, or `None` if it is of another type. Its
/// batch reads work as a hash map's, keyed by index.
pub(crate) fn array_data(map: &Map) -> Option<&MapData> {
    match map {
        Map::Array(data) => Some(data),
        _ => None,
    }
}

/// Every `(key, value)` of hash or array map `map`.
pub(crate) fn lookup_all<V: Pod + Default>(map: &MapData) -> io::Result<Vec<(u32, V)>> {
    let mut out = Vec::new();
    let mut keys = vec![0u32; CHUNK];
    let mut values = vec![V::default(); CHUNK];
    // The kernel's position in the map between batches: opaque, at most
    // a key's size (a bucket index for hash maps).
    let mut position = 0u64;
    let mut next = 0u64;
    let mut first = true;
    loop {
        let mut attr = zeroed_attr();
        // SAFETY: `batch` is the member BPF_MAP_LOOKUP_BATCH reads; writing
        // plain integers into a zeroed union is sound.
        let batch = unsafe { &mut attr.batch };
        batch.in_batch = if first { 0 } else { &raw const position as u64 };
        batch.out_batch = &raw mut next as u64;
        batch.keys = keys.as_mut_ptr() as u64;
        batch.values = values.as_mut_ptr() as u64;
        batch.count = CHUNK as u32;
        batch.map_fd = fd(map);
        let done = sys_bpf(bpf_cmd::BPF_MAP_LOOKUP_BATCH, &mut attr);
        // SAFETY: as above; the kernel wrote back how many entries it copied.
        let n = (unsafe { attr.batch.count } as usize).min(CHUNK);
        out.extend(keys[..n].iter().copied().zip(values[..n].iter().copied()));
        match done {
            Ok(_) => {}
            // ENOENT: the walk reached the end (with the last entries in
            // this batch).
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(out),
            Err(e) => return Err(e),
        }
        position = next;
        first = false;
    }
}

fn fd(map: &MapData) -> u32 {
    map.fd().as_fd().as_raw_fd() as u32
}

fn zeroed_attr() -> bpf_attr {
    // SAFETY: bpf_attr is a C union of plain integers: all zeroes is the
    // value the kernel expects in every member not set.
    unsafe { std::mem::zeroed() }
}

/// bpf(2): the one place rip-probe calls it directly (batched map
/// operations here, `uprobe_multi` links), for what aya does not offer.
/// Returns the kernel's non-negative answer (a new descriptor for the
/// commands that make one).
pub(super) fn sys_bpf(cmd: bpf_cmd, attr: &mut bpf_attr) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is a valid bpf_attr of the size passed, and the
    // pointers in it point to live buffers the command reads or fills.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as libc::c_long,
            attr as *mut bpf_attr,
            std::mem::size_of::<bpf_attr>(),
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}
