//! Names for the frames of unwound user stacks
//! ([`crate::collect::stacks`]), through the same live symbolizer as
//! single locations: blazesym via `/proc/PID/map_files`, module and file
//! offset where no symbol names an address.

use std::{collections::HashMap, sync::Arc};

use super::{Resolve, Symbolizer, UserSpace};
use crate::{collect::offcpu::OffCpuData, model::Frame};

/// Symbolizes the stacks of one live process, caching parsed binaries
/// across calls.
pub struct StackSymbolizer {
    pid: u32,
    sym: Symbolizer,
    /// Frames by lookup address, kept across calls: a process's
    /// addresses can be named while it runs and reused after it exits
    /// (live symbolization reads its binaries through /proc/PID).
    cache: std::collections::HashMap<u64, Frame>,
}

impl StackSymbolizer {
    /// A symbolizer for process `pid`, with source lines and inlined
    /// functions where the binaries have DWARF.
    pub fn new(pid: u32) -> StackSymbolizer {
        StackSymbolizer {
            pid,
            sym: Symbolizer::new(),
            cache: std::collections::HashMap::new(),
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
        let space = UserSpace::Live(self.pid);
        let mut cached = Cached {
            sym: &mut self.sym,
            cache: &mut self.cache,
        };
        frames_of(stacks, &space, &mut cached)
            .into_iter()
            .map(|f| f.to_vec())
            .collect()
    }

    /// Names for kernel addresses, from /proc/kallsyms.
    pub fn kernel(&mut self, addrs: &[u64]) -> std::collections::HashMap<u64, Frame> {
        self.sym.kernel(addrs)
    }
}

/// A symbolizer that asks only for the addresses it has not named
/// before.
struct Cached<'a> {
    sym: &'a mut Symbolizer,
    cache: &'a mut std::collections::HashMap<u64, Frame>,
}

impl Resolve for Cached<'_> {
    fn user(
        &mut self,
        space: &UserSpace<'_>,
        addrs: &[u64],
    ) -> std::collections::HashMap<u64, Frame> {
        let missing: Vec<u64> = addrs
            .iter()
            .copied()
            .filter(|a| !self.cache.contains_key(a))
            .collect();
        if !missing.is_empty() {
            self.cache.extend(self.sym.user(space, &missing));
        }
        addrs
            .iter()
            .filter_map(|a| Some((*a, self.cache.get(a)?.clone())))
            .collect()
    }
    fn kernel(&mut self, addrs: &[u64]) -> std::collections::HashMap<u64, Frame> {
        self.sym.kernel(addrs)
    }
    fn take_warnings(&mut self) -> Vec<String> {
        self.sym.take_warnings()
    }
}

/// The address a stack's `i`-th entry is looked up at: the first is where
/// the thread is; the others are return addresses, the instruction after
/// the call.
fn lookup(i: usize, a: u64) -> u64 {
    if i == 0 { a } else { a.saturating_sub(1) }
}

/// The frames of many stacks (see [`StackSymbolizer::frames_of_many`]):
/// every distinct address of all of them symbolized in one request, each
/// stack's frames made once, whatever the number of threads that share it.
pub(crate) fn frames_of<S: AsRef<[u64]>>(
    stacks: &[S],
    space: &UserSpace<'_>,
    sym: &mut dyn Resolve,
) -> Vec<Arc<[Frame]>> {
    let addrs: Vec<u64> = stacks
        .iter()
        .flat_map(|s| s.as_ref().iter().enumerate().map(|(i, &a)| lookup(i, a)))
        .collect();
    if addrs.is_empty() {
        return stacks.iter().map(|_| Arc::from(Vec::new())).collect();
    }
    let table = sym.user(space, &addrs);
    stacks
        .iter()
        .map(|s| {
            s.as_ref()
                .iter()
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

/// Names for what an off-CPU window gathered: each distinct user stack's
/// frames, each kernel address's, each snap's.
pub(crate) struct OffCpuNames {
    /// Frames by user stack (as [`OffCpuData::user_stack`] gives it).
    pub user: HashMap<Arc<[u64]>, Arc<[Frame]>>,
    /// Kernel frames by address.
    pub kernel: HashMap<u64, Frame>,
    /// Snap frames by address.
    pub snaps: HashMap<u64, Frame>,
}

/// Names every distinct stack, kernel address and snap of `data` once,
/// with `sym` (the process's, which may have named most stacks while it
/// ran).
pub(crate) fn offcpu(sym: &mut StackSymbolizer, data: &OffCpuData) -> OffCpuNames {
    let mut users: Vec<Arc<[u64]>> = data
        .totals
        .iter()
        .map(|(k, _)| data.user_stack(k).0)
        .collect();
    users.sort_unstable();
    users.dedup();
    let refs: Vec<&[u64]> = users.iter().map(|u| &u[..]).collect();
    let user = users
        .iter()
        .cloned()
        .zip(sym.frames_of_many(&refs).into_iter().map(Arc::from))
        .collect();
    let mut kernel_addrs: Vec<u64> = data.kernel_stacks.values().flatten().copied().collect();
    kernel_addrs.sort_unstable();
    kernel_addrs.dedup();
    let kernel = sym.kernel(&kernel_addrs);
    let mut snap_addrs: Vec<u64> = data
        .totals
        .iter()
        .map(|(k, _)| k.snap)
        .filter(|&a| a != 0)
        .collect();
    snap_addrs.sort_unstable();
    snap_addrs.dedup();
    let one: Vec<[u64; 1]> = snap_addrs.iter().map(|&a| [a]).collect();
    let one: Vec<&[u64]> = one.iter().map(|a| &a[..]).collect();
    let snaps = snap_addrs
        .iter()
        .copied()
        .zip(
            sym.frames_of_many(&one)
                .into_iter()
                .map(|mut f| f.pop().unwrap_or_default()),
        )
        .collect();
    OffCpuNames {
        user,
        kernel,
        snaps,
    }
}

#[cfg(test)]
mod tests {
    use rip_ebpf::UserRegs;

    use super::*;
    use crate::collect::stacks::Stacks;

    /// Unwinds the calling thread from registers taken here: the stack
    /// above the point where they were taken stays as it was while this
    /// function runs, so the walk sees a consistent stack.
    #[inline(never)]
    fn unwind_here(stacks: &mut Stacks) -> Vec<u64> {
        let (ip, sp, bp): (u64, u64, u64);
        // SAFETY: reads three registers into outputs; no memory access.
        unsafe {
            std::arch::asm!(
                "lea {ip}, [rip]",
                "mov {sp}, rsp",
                "mov {bp}, rbp",
                ip = out(reg) ip,
                sp = out(reg) sp,
                bp = out(reg) bp,
                options(nomem, nostack, preserves_flags),
            );
        }
        let regs = UserRegs {
            ip,
            sp,
            bp,
            ..UserRegs::default()
        };
        let out = stacks.unwind(&regs);
        std::hint::black_box(out)
    }

    #[inline(never)]
    fn caller_of_unwind_here(stacks: &mut Stacks) -> Vec<u64> {
        let v = unwind_here(stacks);
        std::hint::black_box(v)
    }

    #[test]
    fn our_own_stack_through_our_cfi() {
        let pid = std::process::id();
        let mut stacks = Stacks::new(pid).unwrap();
        let addrs = caller_of_unwind_here(&mut stacks);
        let frames = StackSymbolizer::new(pid).frames(&addrs);
        let names: Vec<&str> = frames
            .iter()
            .map(|f| f.function.as_deref().unwrap_or("?"))
            .collect();
        let pos = |n: &str| names.iter().position(|f| f.ends_with(n));
        let (a, b, c) = (
            pos("::unwind_here"),
            pos("::caller_of_unwind_here"),
            pos("::our_own_stack_through_our_cfi"),
        );
        assert!(
            a.is_some() && a < b && b < c,
            "{a:?} {b:?} {c:?}: {names:#?}"
        );
        // The walk goes on past the test harness, to the thread's start.
        assert!(names.len() > c.unwrap() + 3, "{names:#?}");
    }
}
