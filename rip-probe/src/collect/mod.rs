//! Collection: the raw facts about a target's threads, from the kernel
//! (eBPF and /proc) and from the process's own ring file.

pub mod cgroup;
pub(crate) mod contention;
mod error;
#[cfg(test)]
mod exec_mapping;
pub mod kernel;
pub mod leaks;
pub mod locks;
pub mod memory;
pub(crate) mod namespaces;
pub mod offcpu;
pub(crate) mod procfs;
pub(crate) mod ring;
pub(crate) mod runtime;
pub mod stacks;

pub use error::{Error, Result};

/// Access to the target that decoding needs.
pub(crate) trait Lookup {
    /// What file descriptor `fd` of the target refers to, e.g.
    /// `pipe:[1234]`, `/var/log/x`, `TCP 127.0.0.1:80 LISTEN`.
    fn fd(&self, fd: i32) -> Option<String>;
    /// Reads `len` bytes of the target's memory at `addr`.
    fn mem(&self, addr: u64, len: usize) -> Option<Vec<u8>>;
}
