//! Coroutines come from runtimes: librip's rings today (its coroutine API,
//! and the tokio tasks `librip::tokio` wraps), and each further runtime — Go's
//! goroutines (`go`), CPython's asyncio tasks (`python`) — is one more module here,
//! implementing [`Runtime`]. A runtime detects itself in a process, reads
//! the process's coroutines into the one model ([`Coroutine`], its
//! [`Origin`] saying which runtime), and names their frames; grouping
//! (`crate::analyze::tasks`) and rendering (`crate::render`) are the same
//! for every origin. Runtimes are read from outside, never by stopping
//! the process.

pub(crate) mod go;
pub(crate) mod librip;
pub(crate) mod python;

use std::collections::HashMap;

use crate::{
    collect::ring::RingView,
    model::{Coroutine, Frame, Origin},
};

/// What a runtime may be detected from: what collection found of the
/// process.
#[derive(Clone, Copy)]
pub(crate) struct Process<'a> {
    /// The process's librip ring, if it has one (for a dump: the ring
    /// alone).
    pub(crate) ring: Option<&'a RingView>,
    /// The goroutines collect read, if the process is a Go program.
    pub(crate) go: Option<&'a go::GoSnapshot>,
    /// The CPython interpreter read, if the process runs one.
    pub(crate) python: Option<&'a python::Snapshot>,
}

/// What coroutine durations are measured up to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Clock {
    /// The process is alive: up to this CLOCK_MONOTONIC time (ns).
    Now(u64),
    /// The process is gone: up to the last time its runtime recorded (the
    /// durations are then lower bounds).
    PostMortem,
}

/// A coroutine runtime found in a process: the seam each runtime's module
/// implements. Its coroutines carry the origins the module answers for in
/// [`native_addrs`] and [`name_frames`].
pub(crate) trait Runtime<'a>: Sized {
    /// The runtime, if the process has it (`None`: it does not, or what
    /// would say so could not be read).
    fn detect(process: Process<'a>) -> Option<Self>;

    /// The process's coroutines of this runtime, sorted by id, their
    /// frames still bare addresses. Durations run up to `clock`;
    /// `history` keeps older locations (oldest first), not only the last.
    fn coroutines(&self, clock: Clock, history: bool) -> Vec<Coroutine>;

    /// The addresses of `c`'s frames that are native code of the process,
    /// for the symbolize stage to name through the process's modules (as
    /// it names threads' addresses, in the same batch).
    fn native_addrs(c: &Coroutine) -> Vec<u64>;

    /// Names `c`'s frames, once the symbolize stage has named the native
    /// addresses ([`Runtime::native_addrs`]) in `native`.
    fn name_frames(c: &mut Coroutine, native: &HashMap<u64, Frame>);
}

/// The coroutines of every runtime found in `process`, runtime after
/// runtime (librip's by id).
pub(crate) fn coroutines(process: Process<'_>, clock: Clock, history: bool) -> Vec<Coroutine> {
    let mut all = Vec::new();
    // A runtime's coroutines are many and large: the first list found is
    // kept as is, not copied into another.
    let mut add = |v: Vec<Coroutine>| {
        if all.is_empty() {
            all = v;
        } else {
            all.extend(v);
        }
    };
    if let Some(r) = librip::Librip::detect(process) {
        add(r.coroutines(clock, history));
    }
    if let Some(r) = go::Go::detect(process) {
        add(r.coroutines(clock, history));
    }
    if let Some(r) = python::Asyncio::detect(process) {
        add(r.coroutines(clock, history));
    }
    all
}

/// The native code addresses of `coroutines`' frames, to symbolize.
pub(crate) fn native_addrs(coroutines: &[Coroutine]) -> Vec<u64> {
    // Goroutines share stacks by the thousand: each is listed once.
    let mut named = go::Named::default();
    let mut all = Vec::new();
    for c in coroutines {
        match c.origin {
            Origin::Librip | Origin::Tokio => all.extend(librip::Librip::native_addrs(c)),
            Origin::Go => go::Go::native_addrs_shared(c, &mut named, &mut all),
            Origin::Asyncio => all.extend(python::Asyncio::native_addrs(c)),
        }
    }
    all
}

/// Names the frames of `coroutines`, each by its runtime, from the native
/// addresses the symbolize stage named.
pub(crate) fn name_frames(coroutines: &mut [Coroutine], native: &HashMap<u64, Frame>) {
    // Goroutines share stacks by the thousand: each is named once.
    let mut named = go::Named::default();
    for c in coroutines {
        match c.origin {
            Origin::Librip | Origin::Tokio => librip::Librip::name_frames(c, native),
            Origin::Go => go::Go::name_shared(c, native, &mut named),
            Origin::Asyncio => python::Asyncio::name_frames(c, native),
        }
    }
}
