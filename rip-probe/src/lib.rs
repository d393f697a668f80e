//! rip-probe: where is every thread of a process, and why is it not moving.
//!
//! # Using it as a library
//!
//! A [`Session`] attaches to a live process, observes it (an [`Observer`]
//! sees each context switch of its threads) and takes a [`Report`]: every
//! thread's kernel state joined with where its librip ring (or a uprobe, or
//! its saved user pc) says it is, symbolized and grouped. The report's
//! types are in [`model`]; [`render`] writes it as text or JSON.
//! [`collect::kernel::KernelProbe`] is the lower-level API under a
//! session: rip's eBPF programs loaded for one process, read back raw.
//!
//! # How it is built
//!
//! The modules are the pipeline's stages, and each imports only the ones
//! below it (a test, `tests/architecture.rs`, checks it). This table is
//! where the order is stated: symbolize comes before analyze, because
//! analyze judges by names (a lock's data symbol, the runtime functions on
//! a waiter's stack, the stacks it groups and merges), and every address
//! is named once, in the one symbolize pass. analyze computes from what
//! the stages below hand it: it reads no process, no /proc, no symbol
//! table.
//!
//! | layer | module | what it does |
//! | --- | --- | --- |
//! | 0 | `util`, [`model`] | phase timings, helper threads, time formats; the data model |
//! | 1 | [`discover`] | the target process, pinned by a pidfd; why one cannot be observed (its own error) |
//! | 2 | [`collect`] | kernel state through eBPF and /proc; the process's ring; user stacks; lock evidence (lock words, owners, the waiters' waits); each with its own error |
//! | 3 | `correlate`, `error` | joined per thread id: the one place a [`model::Thread`] is built; syscalls decoded. [`Error`]: the stages' errors in one |
//! | 4 | `window` | the observation window: length, ticks, progress, the target's exit, Ctrl-C |
//! | 5 | `symbolize` | addresses to functions and lines (blazesym), data addresses to lock names |
//! | 6 | [`analyze`] | from the model and collect's evidence: groups over typed keys, filters, each thread's stack, who waits for whom, lock contention, off-CPU sums |
//! | 7 | [`render`] | text or JSON: the sentences |
//! | 8 | [`session`] | a live process, each stage once: discover → collect → correlate → symbolize → analyze |
//! | 9 | `commands` | `--pid`, `dump` (and the original librip's rings), `locks` (contention over a window), `offcpu`, `calls`: thin compositions of the stages |
//! | 10 | [`cli`] | argument parsing; the one-line error messages, made from the typed errors in one place |
#![deny(missing_docs)]

pub mod analyze;
pub mod cli;
pub mod collect;
mod commands;
mod correlate;
pub mod discover;
mod error;
pub mod model;
pub mod render;
pub mod session;
mod symbolize;
mod util;
mod window;

pub use discover::{Lost, Target};
pub use error::{Error, Result};
pub use model::Report;
pub use session::{Observer, Session, SessionOptions};
pub use symbolize::stacks::StackSymbolizer;
