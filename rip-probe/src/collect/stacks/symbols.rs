//! Names for the frames of unwound stacks: blazesym through the live
//! process, as [`crate::symbolize`] does for single locations.

use std::collections::HashMap;

use blazesym::{
    Pid,
    symbolize::{
        Input, Symbolized, Symbolizer,
        source::{Process, Source},
    },
};
use librip::reader::{MapsLine, parse_maps};

use crate::model::{Frame, InlinedFrame};

/// Symbolizes the stacks of one live process, caching parsed binaries
/// across calls.
pub struct StackSymbolizer {
    pid: u32,
    blaze: Symbolizer,
    /// /proc/PID/maps, read the first time an address has no symbol.
    maps: Option<Vec<MapsLine>>,
}

impl StackSymbolizer {
    /// A symbolizer for process `pid`, with source lines and inlined
    /// functions where the binaries have DWARF.
    pub fn new(pid: u32) -> StackSymbolizer {
        StackSymbolizer {
            pid,
            blaze: Symbolizer::builder()
                .enable_code_info(true)
                .enable_inlined_fns(true)
                .enable_demangling(true)
                .build(),
            maps: None,
        }
    }

    /// The frames of one stack as [`super::Stacks::unwind`] returns it.
    pub fn frames(&mut self, stack: &[u64]) -> Vec<Frame> {
        self.frames_of_many(&[stack]).pop().unwrap_or_default()
    }

    /// The frames of many stacks, each distinct address symbolized once.
    ///
    /// The first address of a stack is where the thread is; the others are
    /// return addresses, looked up at `addr - 1` so that the frame shows
    /// the call's line and, when the call ends a function (`noreturn`),
    /// the caller's function rather than the next one. [`Frame::addr`]
    /// keeps the address itself. Functions come from `.symtab`, else
    /// `.dynsym` (stripped binaries); file and line, and inlined frames,
    /// from DWARF where present; otherwise the module and the file offset
    /// of the address looked up (`addr - 1` for a return address: what
    /// `addr2line -e module` wants).
    pub fn frames_of_many(&mut self, stacks: &[&[u64]]) -> Vec<Vec<Frame>> {
        let lookup = |i: usize, a: u64| if i == 0 { a } else { a.saturating_sub(1) };
        let mut distinct: Vec<u64> = stacks
            .iter()
            .flat_map(|s| s.iter().enumerate().map(|(i, &a)| lookup(i, a)))
            .collect();
        distinct.sort_unstable();
        distinct.dedup();
        let table = self.symbolize(&distinct);
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

    fn symbolize(&mut self, addrs: &[u64]) -> HashMap<u64, Frame> {
        let mut p = Process::new(Pid::from(self.pid));
        // As in crate::symbolize: binaries through map_files (the mapped
        // inodes), and never /tmp/perf-PID.map, a file the target writes.
        p.map_files = true;
        p.perf_map = false;
        let src = Source::Process(p);
        let mut out: HashMap<u64, Frame> = match self.blaze.symbolize(&src, Input::AbsAddr(addrs)) {
            Ok(syms) => addrs
                .iter()
                .zip(syms)
                .map(|(&a, s)| (a, to_frame(a, &s)))
                .collect(),
            Err(e) => {
                log::debug!("pid {}: cannot symbolize: {e}", self.pid);
                addrs
                    .iter()
                    .map(|&a| {
                        (
                            a,
                            Frame {
                                addr: a,
                                ..Frame::default()
                            },
                        )
                    })
                    .collect()
            }
        };
        // No symbol: name the module and the offset in its file, so that
        // distinct places stay distinct and `addr2line -e` finds them.
        if out.values().any(|f| f.function.is_none()) {
            let pid = self.pid;
            let maps = self.maps.get_or_insert_with(|| {
                parse_maps(
                    &std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default(),
                )
            });
            for f in out.values_mut().filter(|f| f.function.is_none()) {
                let Some(m) = maps.iter().find(|m| (m.start..m.end).contains(&f.addr)) else {
                    continue;
                };
                if m.inode == 0 {
                    continue;
                }
                f.module = Some(m.name.clone());
                f.module_offset = (f.addr - m.start).checked_add(m.offset);
            }
        }
        out
    }
}

fn to_frame(addr: u64, s: &Symbolized<'_>) -> Frame {
    let Some(sym) = s.as_sym() else {
        return Frame {
            addr,
            ..Frame::default()
        };
    };
    let code = sym.code_info.as_ref();
    Frame {
        addr,
        function: Some(sym.name.to_string()),
        file: code.map(|c| c.to_path().display().to_string()),
        line: code.and_then(|c| c.line),
        module: sym
            .module
            .as_ref()
            .map(|m| m.to_string_lossy().into_owned()),
        module_offset: None,
        inlined: sym
            .inlined
            .iter()
            .map(|i| InlinedFrame {
                function: i.name.to_string(),
                file: i
                    .code_info
                    .as_ref()
                    .map(|c| c.to_path().display().to_string()),
                line: i.code_info.as_ref().and_then(|c| c.line),
            })
            .collect(),
    }
}
