//! Collection: the raw facts about a target's threads, from the kernel
//! (eBPF and /proc) and from the process's own ring file.

pub mod kernel;
pub mod locks;
pub mod memory;
pub mod procfs;
pub mod ring;
pub mod stacks;
