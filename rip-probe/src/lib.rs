//! rip-probe: where is every thread of a process, and why is it not moving.
//!
//! Data flows through the modules in this order:
//! [`discover`] (the target, pinned by a pidfd) → [`collect`] (kernel state
//! through eBPF and /proc; locations from the process's librip ring) →
//! [`correlate`] (joined per thread id into the [`model`]; coroutine and
//! async-task slots become [`tasks`]) → [`symbolize`]
//! (blazesym) → [`render`] (text or JSON). [`session`] drives the whole
//! flow for a live process and is the API other tools use; [`decode`]
//! turns raw syscall registers into names and arguments.

pub mod analyze;
pub mod background;
pub mod cli;
pub mod collect;
pub mod correlate;
pub mod decode;
pub mod discover;
pub mod error;
pub mod model;
pub mod original;
pub mod render;
pub mod session;
pub mod symbolize;
pub mod tasks;
pub mod timing;

pub use error::{Error, Result};
