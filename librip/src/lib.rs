//! librip: per-thread instruction-pointer snapshots in a shared-memory ring.
//!
//! A process creates one [`Ring`], a file on tmpfs. Each thread registers
//! and gets a slot; each coroutine can have one too. [`snap!`] records the
//! address of its call site into the current slot's small ring of entries,
//! in ten instructions with no call, lock, fence or syscall. The file
//! outlives the process, so the last snaps of every thread and coroutine
//! can be read live or after a crash with [`reader::RingFile`]; the header
//! carries what is needed to symbolize them without the process.
//!
//! ```no_run
//! use librip::{Ring, RingOptions, snap};
//!
//! Ring::create_default(RingOptions::default())?;
//! std::thread::spawn(|| {
//!     librip::register_thread("worker")?;
//!     snap!();
//!     Ok::<_, librip::Error>(())
//! });
//! # Ok::<_, librip::Error>(())
//! ```
//!
//! Async tasks get slots too: with the `tokio` feature, [`tokio`]'s
//! `spawn_traced(name, fut)` and `.traced(name)` give each task its own.
//!
//! The C ABI (`include/librip.h`) keeps the original librip's names:
//! `rip_create_ring`, `rip_init`, `rip_exit`, `rip_snap`. The file format is
//! specified in `docs/FORMAT.md`.

#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
compile_error!("librip supports Linux on x86-64 only");

pub mod alloc;
mod capi;
pub mod coroutine;
mod error;
pub mod format;
pub mod reader;
mod shm;
pub mod sites;
mod snap;
#[cfg(feature = "tokio")]
pub mod tokio;
mod writer;

pub use error::Error;
pub use writer::thread::{exit_thread, register_thread};
pub use writer::{DEFAULT_COROUTINE_SLOTS, Ring, RingOptions};

/// What the `snap!` expansion names; not part of the API.
#[doc(hidden)]
pub mod __private {
    pub use crate::alloc::bench_mean;
    pub use crate::sites::cstr;
    pub use crate::snap::MASK;
}
