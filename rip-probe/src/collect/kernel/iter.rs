//! One pass of a loaded task iterator, read back as fixed-size records.
//!
//! A task iterator visits every task of the host unless its link names
//! one process (`bpf_iter_link_info.task.pid`, Linux 6.1): then the
//! kernel walks that process's thread list alone, instead of looking up
//! every pid of the machine and leaving the program to skip the others.
//! At 100,000 threads that walk was a tenth of a pass. Kernels before
//! 6.1 ignore the field, and the programs still skip other processes
//! themselves, so the answer is the same on every kernel.

use std::{
    fs::File,
    io::Read,
    os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd},
};

use aya::{Ebpf, programs::Iter};
use zerocopy::FromBytes;

use super::{Error, ProgramOp, program};
use crate::collect::Result;

/// `BPF_LINK_CREATE` (uapi/linux/bpf.h).
const BPF_LINK_CREATE: libc::c_long = 28;
/// `BPF_ITER_CREATE`.
const BPF_ITER_CREATE: libc::c_long = 33;
/// `BPF_TRACE_ITER`: the attach type of an iterator's link.
const BPF_TRACE_ITER: u32 = 28;

/// One pass of the (loaded) iterator `prog` of `ebpf`, which writes whole
/// records of type `R` back to back: its records. With `tgid`, the
/// kernel visits only that process's threads (see the module's
/// documentation); `hint` is how many records to expect (room is made
/// for them at once).
pub(crate) fn run<R: FromBytes>(
    ebpf: &mut Ebpf,
    prog: &str,
    tgid: Option<u32>,
    hint: usize,
) -> Result<Vec<R>> {
    let iter: &mut Iter = program(ebpf, prog)?;
    let file = match tgid.and_then(|tgid| open_for_process(iter, tgid)) {
        Some(f) => f,
        None => {
            let id = iter
                .attach()
                .map_err(|e| Error::program(ProgramOp::Attach, "the task iterator", e))?;
            let link = iter
                .take_link(id)
                .map_err(|e| Error::program(ProgramOp::TakeLink, "the task iterator link", e))?;
            link.into_file().map_err(Error::IteratorLink)?
        }
    };
    read_records(file, hint)
}

/// The records of an iterator's file, parsed as they come through a small
/// buffer: reading all of them first would hold every record twice
/// (100,000 threads: twice 50 MB). zerocopy copies each out whatever the
/// buffer's alignment.
fn read_records<R: FromBytes>(mut file: File, hint: usize) -> Result<Vec<R>> {
    let record = std::mem::size_of::<R>();
    let mut out = Vec::with_capacity(hint);
    let mut buf = vec![0u8; 64 * record];
    let mut filled = 0;
    loop {
        let n = match file.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::ReadIterator(e).into()),
        };
        filled += n;
        let whole = filled / record * record;
        out.extend(
            buf[..whole]
                .chunks_exact(record)
                .filter_map(|c| R::read_from_bytes(c).ok()),
        );
        buf.copy_within(whole..filled, 0);
        filled -= whole;
    }
    Ok(out)
}

/// The iterator `iter` linked to process `tgid`'s threads alone, opened
/// for one pass; `None` when the kernel refuses the link (aya's own link
/// then visits every task).
fn open_for_process(iter: &Iter, tgid: u32) -> Option<File> {
    let prog = iter.fd().ok()?.as_fd().as_raw_fd();
    // union bpf_iter_link_info: task { u32 tid; u32 pid; u32 pid_fd; },
    // 16 bytes with the union's other members.
    let info: [u32; 4] = [0, tgid, 0, 0];
    // union bpf_attr's link_create: prog_fd, target_fd, attach_type,
    // flags, then iter_info (u64) and iter_info_len (u32); the rest zero.
    let mut attr = [0u8; 128];
    attr[0..4].copy_from_slice(&(prog as u32).to_ne_bytes());
    attr[8..12].copy_from_slice(&BPF_TRACE_ITER.to_ne_bytes());
    attr[16..24].copy_from_slice(&(info.as_ptr() as u64).to_ne_bytes());
    attr[24..28].copy_from_slice(&(std::mem::size_of_val(&info) as u32).to_ne_bytes());
    let link = bpf(BPF_LINK_CREATE, &mut attr)?;
    // iter_create: link_fd, flags.
    let mut attr = [0u8; 128];
    attr[0..4].copy_from_slice(&(link.as_raw_fd() as u32).to_ne_bytes());
    let fd = bpf(BPF_ITER_CREATE, &mut attr)?;
    // The link may be closed once the iterator's file is open: the file
    // holds the program.
    Some(File::from(fd))
}

/// The `bpf(2)` command `cmd` with attributes `attr`, when it returns a
/// file descriptor.
fn bpf(cmd: libc::c_long, attr: &mut [u8; 128]) -> Option<OwnedFd> {
    // SAFETY: `attr` is a zero-filled union bpf_attr of the size given,
    // with the fields of `cmd` set; the pointer in it (iter_info) is live
    // for the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr.as_mut_ptr(),
            attr.len() as libc::c_uint,
        )
    };
    let fd = i32::try_from(fd).ok().filter(|&fd| fd >= 0)?;
    // SAFETY: the kernel just returned this descriptor, owned by no one
    // else.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}
