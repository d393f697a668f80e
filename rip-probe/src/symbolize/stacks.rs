//! Names for the frames of unwound user stacks
//! ([`crate::collect::stacks`]), through the same live symbolizer as
//! single locations: blazesym via `/proc/PID/map_files`, module and file
//! offset where no symbol names an address.

use super::{Symbolizer, UserSpace};
use crate::model::Frame;

/// Symbolizes the stacks of one live process, caching parsed binaries
/// across calls.
pub struct StackSymbolizer {
    pid: u32,
    sym: Symbolizer,
}

impl StackSymbolizer {
    /// A symbolizer for process `pid`, with source lines and inlined
    /// functions where the binaries have DWARF.
    pub fn new(pid: u32) -> StackSymbolizer {
        StackSymbolizer {
            pid,
            sym: Symbolizer::new(),
        }
    }

    /// The frames of one stack as [`crate::collect::stacks::Stacks::unwind`]
    /// returns it.
    pub fn frames(&mut self, stack: &[u64]) -> Vec<Frame> {
        self.frames_of_many(&[stack]).pop().unwrap_or_default()
    }

    /// The frames of many stacks, each distinct address symbolized once.
    ///
    /// The first address of a stack is where the thread is; the others are
    /// return addresses, looked up at `addr - 1` so that the frame shows
    /// the call's line and, when the call ends a function (`noreturn`),
    /// the caller's function rather than the next one. [`Frame::addr`]
    /// keeps the address itself.
    pub fn frames_of_many(&mut self, stacks: &[&[u64]]) -> Vec<Vec<Frame>> {
        let lookup = |i: usize, a: u64| if i == 0 { a } else { a.saturating_sub(1) };
        let addrs: Vec<u64> = stacks
            .iter()
            .flat_map(|s| s.iter().enumerate().map(|(i, &a)| lookup(i, a)))
            .collect();
        let table = self.sym.user(&UserSpace::Live(self.pid), &addrs);
        stacks
            .iter()
            .map(|s| {
                s.iter()
                    .enumerate()
                    .map(|(i, &a)| {
                        let mut f = table.get(&lookup(i, a)).cloned().unwrap_or_default();
                        f.addr = a;
                        f
                    })
                    .collect()
            })
            .collect()
    }
}
