//! User stacks of every thread of a live process, without stopping it.
//!
//! The task iterator reports each thread's saved user registers (`ip`,
//! `sp`, `bp`); [`Stacks`] walks the thread's stack from them with
//! framehop, using the CFI of the binaries the process mapped (`.eh_frame`,
//! `.eh_frame_hdr`, else `.debug_frame`; frame pointers where a binary has
//! none) and the stack's memory read with `process_vm_readv` — never
//! ptrace, never SIGSTOP. [`crate::StackSymbolizer`] names the frames.
//!
//! ```no_run
//! # fn f(pid: u32, tasks: &[rip_ebpf::TaskRecord]) -> Result<(), Box<dyn std::error::Error>> {
//! use rip_probe::{StackSymbolizer, collect::stacks::Stacks};
//! let mut stacks = Stacks::new(pid)?;
//! let mut names = StackSymbolizer::new(pid);
//! for t in tasks {
//!     let addrs = stacks.unwind(&t.regs);
//!     for f in names.frames(&addrs) {
//!         println!("{}", f.describe());
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! A session collects the stacks of every report through
//! [`threads::Collector`]: blocked threads unwound from their saved
//! registers, running ones from the perf samples of the window.

pub(crate) mod memory;
pub(crate) mod modules;
pub(crate) mod sample;
pub(crate) mod threads;
pub(crate) mod unwind;

pub use unwind::{MAX_FRAMES, Stacks, StacksError};
