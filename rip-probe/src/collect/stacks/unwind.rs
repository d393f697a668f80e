//! User stacks of blocked threads, unwound with framehop from the saved
//! user registers the task iterator reports, the binaries' CFI, and the
//! target's stack memory read with `process_vm_readv`.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
    time::{Duration, Instant},
};

use framehop::{
    ExplicitModuleSectionInfo, FrameAddress, Module, Unwinder,
    x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64},
};
use rip_ebpf::UserRegs;

use super::{
    memory::{CHUNK, Memory},
    modules::{CodeMapping, Modules},
};

/// Frames kept per stack: deeper stacks (runaway recursion) are cut here.
pub const MAX_FRAMES: usize = 128;

/// Least time between two reads of /proc/PID/maps prompted by an address
/// in no known mapping. Garbage addresses (a running thread's stale
/// registers) prompt them too: this bounds what they cost.
const REFRESH_EVERY: Duration = Duration::from_millis(250);

/// The unwinder of one process for one run: its code mappings, the unwind
/// information of its binaries (each parsed once, on first use, and shared
/// by all threads) and a cache of unwind rules by address, which makes
/// the thousandth thread blocked in the same place cheap.
///
/// Its view of the process's mappings is read when it is made, and again
/// (at most every 250 ms) when a stack reaches an address outside them:
/// code loaded since (`dlopen`) is found. Make one per report.
pub struct Stacks {
    modules: Modules,
    unwinder: UnwinderX86_64<Arc<[u8]>>,
    cache: CacheX86_64,
    memory: Memory,
    /// Start addresses of the code mappings already given to the unwinder
    /// (or found unusable).
    added: HashSet<u64>,
    /// Return address → whether it is a signal return trampoline (code
    /// does not change: each address is checked once per run).
    trampolines: HashMap<u64, bool>,
    /// When /proc/PID/maps was last read.
    maps_read: Instant,
    /// Stacks cut short because the CFI parser panicked on the target's
    /// bytes.
    cut: u64,
}

/// Where a signal frame's `struct ucontext` holds the interrupted rbp,
/// rsp and rip (`uc_mcontext` at 40; x86-64 ABI).
const UC_RBP: u64 = 120;
/// See [`UC_RBP`].
const UC_RSP: u64 = 160;
/// See [`UC_RBP`].
const UC_RIP: u64 = 168;

/// Registers to start a walk from (a perf sample's, or a test's).
pub(crate) fn regs(ip: u64, sp: u64, bp: u64) -> UserRegs {
    UserRegs {
        ip,
        sp,
        bp,
        ..UserRegs::default()
    }
}

/// A copy of the top of a stack, from `sp` up.
#[derive(Clone, Copy)]
struct StackCopy<'a> {
    sp: u64,
    bytes: &'a [u8],
}

impl StackCopy<'_> {
    fn read_u64(self, addr: u64) -> Option<u64> {
        let at = usize::try_from(addr.checked_sub(self.sp)?).ok()?;
        let b = self.bytes.get(at..at.checked_add(8)?)?;
        Some(u64::from_le_bytes(b.try_into().ok()?))
    }
}

/// Why a process's stacks cannot be unwound at all.
#[derive(Debug, thiserror::Error)]
pub enum StacksError {
    /// /proc/PID/maps could not be read: the process is gone, or we may not
    /// read it (the report says which).
    #[error("cannot read /proc/{pid}/maps ({source})")]
    Maps {
        /// The process.
        pid: u32,
        /// The error.
        source: std::io::Error,
    },
}

impl Stacks {
    /// How many stacks were cut short because unwinding panicked on the
    /// target's bytes (each such stack keeps the frames found before).
    pub fn cut_stacks(&self) -> u64 {
        self.cut
    }

    /// Reads the process's mappings; binaries are parsed later, when a
    /// stack first reaches them.
    pub fn new(pid: u32) -> Result<Stacks, StacksError> {
        let modules = Modules::new(pid).map_err(|source| StacksError::Maps { pid, source })?;
        Ok(Stacks::with_modules(pid, modules))
    }

    /// As [`Stacks::new`], with the modules given (tests).
    pub(crate) fn with_modules(pid: u32, modules: Modules) -> Stacks {
        Stacks {
            modules,
            unwinder: UnwinderX86_64::new(),
            cache: CacheX86_64::new(),
            memory: Memory::new(pid),
            added: HashSet::new(),
            trampolines: HashMap::new(),
            maps_read: Instant::now(),
            cut: 0,
        }
    }

    /// The file mapped at code address `addr`, as /proc/PID/maps names it.
    pub fn file_of(&self, addr: u64) -> Option<&str> {
        self.modules.mapping_of(addr).map(|m| m.name.as_str())
    }

    /// Binaries whose unwind information was parsed so far.
    pub fn binaries_loaded(&self) -> usize {
        self.modules.binaries_loaded()
    }

    /// `process_vm_readv` calls made so far.
    pub fn memory_reads(&self) -> u64 {
        self.memory.syscalls()
    }

    /// The user stack of thread `tid`, from its saved user registers:
    /// `regs.ip` first, then return addresses, innermost first, at most
    /// [`MAX_FRAMES`]. A return address is the instruction after a call:
    /// symbolize `addr - 1` for the call's line (as
    /// [`super::symbols::StackSymbolizer`] does).
    ///
    /// Unwinding stops, keeping the frames found so far, at the end of the
    /// stack, at memory it cannot read, and at a return address outside
    /// every code mapping (garbage from a frame-pointer guess). Empty when
    /// `regs` holds no user context (a kernel thread, or registers the
    /// probe could not read).
    ///
    /// The thread is not stopped: its stack is read while it runs. Only a
    /// thread off CPU in the kernel (a [`rip_ebpf::TaskRecord`] with
    /// `on_cpu == 0` and a sleeping `state`) has registers and a stack
    /// that agree; for a running thread the saved registers are those of
    /// its last kernel entry and the walk is garbage, cut short by the
    /// checks above.
    pub fn unwind(&mut self, regs: &UserRegs) -> Vec<u64> {
        // Each thread's stack is read fresh: the cache only saves repeated
        // reads within one walk.
        self.memory.clear();
        let mut out = Vec::new();
        self.unwind_over(regs, None, None, &mut out);
        out
    }

    /// [`Stacks::unwind`] of many threads, each stack handed to `each`
    /// with the thread's index in `regs` (a buffer reused from one thread
    /// to the next: copy what is kept). The page each stack pointer is in
    /// is read for hundreds of threads in one system call before they are
    /// walked (a thread blocked in the kernel does not touch its stack);
    /// what a walk needs beyond it is read as it goes.
    pub fn unwind_each(&mut self, regs: &[UserRegs], mut each: impl FnMut(usize, &[u64])) {
        /// Threads whose stack tops are read in one call.
        const BATCH: usize = 512;
        let chunk = CHUNK as usize;
        let mut out = Vec::new();
        let mut tops = Vec::with_capacity(BATCH);
        let mut arena = vec![0u8; BATCH.min(regs.len()) * chunk];
        for (b, part) in regs.chunks(BATCH).enumerate() {
            tops.clear();
            // From the stack pointer to the end of its page: a walk reads
            // nothing below the stack pointer. No registers, no walk:
            // nothing to read for it.
            tops.extend(part.iter().map(|r| {
                let len = if r.ip == 0 || r.sp == 0 {
                    0
                } else {
                    chunk - (r.sp % CHUNK) as usize
                };
                (r.sp, len)
            }));
            let read = crate::collect::memory::read_scattered(
                self.memory.pid(),
                &tops,
                &mut arena[..part.len() * chunk],
            );
            let mut at = 0;
            for (k, r) in part.iter().enumerate() {
                let (sp, len) = tops[k];
                self.memory.clear();
                if read[k] && len > 0 {
                    let base = sp & !(CHUNK - 1);
                    self.memory
                        .keep(base, (sp - base) as usize, &arena[at..at + len]);
                }
                at += len;
                self.unwind_over(r, None, None, &mut out);
                each(b * BATCH + k, &out);
            }
        }
    }

    /// The user stack of a sample: as [`Stacks::unwind`], over `stack`, the
    /// copy of the stack from `regs.sp` up that was taken with the
    /// registers (a perf sample's `PERF_SAMPLE_STACK_USER`). Words beyond
    /// the copy end the walk: the live stack has moved on since.
    pub fn unwind_copy(&mut self, regs: &UserRegs, stack: &[u8]) -> Vec<u64> {
        let mut out = Vec::new();
        self.unwind_over(regs, Some(stack), None, &mut out);
        out
    }

    /// [`Stacks::unwind_copy`], also giving where in the stack each return
    /// address was read: `slots[i]` is the address of the word that became
    /// frame `i + 1`. The off-CPU program hashes the words at those places
    /// to tell stacks apart without unwinding.
    pub fn unwind_copy_slots(
        &mut self,
        regs: &UserRegs,
        stack: &[u8],
        slots: &mut Vec<u64>,
    ) -> Vec<u64> {
        slots.clear();
        let mut out = Vec::new();
        self.unwind_over(regs, Some(stack), Some(&mut *slots), &mut out);
        slots.truncate(out.len().saturating_sub(1));
        out
    }

    /// The walk, into `out` (emptied first).
    fn unwind_over(
        &mut self,
        regs: &UserRegs,
        copy: Option<&[u8]>,
        slots: Option<&mut Vec<u64>>,
        out: &mut Vec<u64>,
    ) {
        out.clear();
        if regs.ip == 0 || regs.sp == 0 {
            return;
        }
        // The CFI parsers see the target's bytes. Known ways to make them
        // panic are closed off when binaries are loaded (see
        // `modules::hdr_is_sound`); should another remain, one thread
        // loses the rest of its stack rather than the report being lost.
        let stack = copy.map(|bytes| StackCopy { sp: regs.sp, bytes });
        let walked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.walk(regs, stack, out, slots)
        }));
        if walked.is_err() {
            self.cut += 1;
            // The rule cache may hold a half-made entry: start afresh.
            self.cache = CacheX86_64::new();
        }
    }

    /// A word of the stack: from the copy when there is one, else read
    /// live.
    fn word(memory: &mut Memory, copy: Option<StackCopy<'_>>, addr: u64) -> Option<u64> {
        match copy {
            Some(c) => c.read_u64(addr),
            None => memory.read_u64(addr).ok(),
        }
    }

    fn walk(
        &mut self,
        regs: &UserRegs,
        copy: Option<StackCopy<'_>>,
        out: &mut Vec<u64>,
        mut slots: Option<&mut Vec<u64>>,
    ) {
        let mut r = UnwindRegsX86_64::new(regs.ip, regs.sp, regs.bp);
        let mut addr = FrameAddress::from_instruction_pointer(regs.ip);
        out.push(regs.ip);
        while out.len() < MAX_FRAMES {
            self.add_module_of(addr.address_for_lookup());
            let memory = &mut self.memory;
            let mut read = |a: u64| Self::word(memory, copy, a).ok_or(());
            let next = match self
                .unwinder
                .unwind_frame(addr, &mut r, &mut self.cache, &mut read)
            {
                Ok(Some(ra)) => ra,
                Ok(None) => break,
                // Unwinding stops where the CFI or the memory gives out.
                Err(_) => break,
            };
            if !self.is_code(next.wrapping_sub(1)) {
                break;
            }
            let Some(ra) = FrameAddress::from_return_address(next) else {
                break;
            };
            out.push(next);
            if let Some(s) = slots.as_deref_mut() {
                // The unwinder read the return address just below the
                // caller's stack pointer (the CFA) on x86-64, by CFI or
                // by frame pointer alike.
                s.push(r.sp().wrapping_sub(8));
            }
            addr = ra;
            if self.is_sigreturn(next) && out.len() < MAX_FRAMES {
                // A signal handler returns to the trampoline, whose CFI
                // (glibc's `__restore_rt`) computes the interrupted
                // frame's CFA with a memory dereference, which framehop
                // does not evaluate. The kernel's frame is at the stack
                // pointer there: `struct ucontext`, whose saved registers
                // (`uc_mcontext`, at 40) hold rbp at 120, rsp at 160 and
                // rip at 168 (x86-64 ABI).
                let uc = r.sp();
                let mut rd = |off: u64| Self::word(&mut self.memory, copy, uc.wrapping_add(off));
                let (Some(bp), Some(sp), Some(ip)) = (rd(UC_RBP), rd(UC_RSP), rd(UC_RIP)) else {
                    break;
                };
                if !self.is_code(ip) {
                    break;
                }
                // The interrupted instruction, not a return address: it
                // is looked up as is (symbolizers see `ip - 1`, which is
                // still in its function unless it was the first one).
                out.push(ip);
                if let Some(s) = slots.as_deref_mut() {
                    s.push(uc.wrapping_add(UC_RIP));
                }
                r = UnwindRegsX86_64::new(ip, sp, bp);
                addr = FrameAddress::from_instruction_pointer(ip);
            }
        }
    }

    /// Whether `addr` is the x86-64 `rt_sigreturn` trampoline (`mov $15,
    /// %rax; syscall`: glibc's and musl's `__restore_rt`) that the kernel
    /// makes a signal handler return to.
    fn is_sigreturn(&mut self, addr: u64) -> bool {
        const CODE: [u8; 9] = [0x48, 0xc7, 0xc0, 0x0f, 0, 0, 0, 0x0f, 0x05];
        if let Some(&known) = self.trampolines.get(&addr) {
            return known;
        }
        let mut code = [0u8; 9];
        let yes = self.memory.read(addr, &mut code).is_ok() && code == CODE;
        self.trampolines.insert(addr, yes);
        yes
    }

    /// Whether `addr` is in a code mapping, reading the maps again if it is
    /// in none and they were not read recently.
    fn is_code(&mut self, addr: u64) -> bool {
        if let Some(known) = self.modules.ask(addr) {
            return known;
        }
        if self.maps_read.elapsed() < REFRESH_EVERY {
            return false;
        }
        self.maps_read = Instant::now();
        self.modules.refresh().is_ok() && self.modules.mapping_of(addr).is_some()
    }

    /// Gives the unwinder the code mapping holding `addr`, the first time
    /// a stack reaches it. A mapping without a usable binary (anonymous
    /// code, a file that is not ELF) is left out, and a binary without CFI
    /// gives a module without unwind data: either way framehop walks frame
    /// pointers there.
    fn add_module_of(&mut self, addr: u64) {
        if !self.is_code(addr) {
            return;
        }
        let Some(m) = self.modules.mapping_of(addr).cloned() else {
            return;
        };
        if !self.added.insert(m.start) {
            return;
        }
        if let Some(module) = self.module(&m) {
            self.unwinder.add_module(module);
        }
    }

    fn module(&mut self, m: &CodeMapping) -> Option<Module<Arc<[u8]>>> {
        let data = self.modules.binary(m)?;
        let bias = data.bias(m)?;
        let info = ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma: data.text.clone(),
            got_svma: data.got.clone(),
            eh_frame_svma: data.eh_frame.as_ref().map(|e| e.0.clone()),
            eh_frame: data.eh_frame.as_ref().map(|e| e.1.clone()),
            eh_frame_hdr_svma: data.eh_frame_hdr.as_ref().map(|e| e.0.clone()),
            eh_frame_hdr: data.eh_frame_hdr.as_ref().map(|e| e.1.clone()),
            debug_frame: data.debug_frame.clone(),
            ..ExplicitModuleSectionInfo::default()
        };
        Some(Module::new(m.name.clone(), m.start..m.end, bias, info))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Code mapped after the unwinder was made is found when a stack
    /// reaches it.
    #[test]
    fn code_mapped_later_is_found() {
        let pid = std::process::id();
        let mut stacks = Stacks::new(pid).unwrap();
        let f = std::fs::File::open("/proc/self/exe").unwrap();
        let p = crate::collect::exec_mapping::ExecMapping::of(&f);
        let mapping = p;
        let p = mapping.addr();
        assert!(stacks.file_of(p).is_none());
        std::thread::sleep(REFRESH_EVERY);
        let stack = [0u64; 16];
        let regs = UserRegs {
            ip: p + 16,
            sp: stack.as_ptr() as u64,
            ..UserRegs::default()
        };
        stacks.unwind(&regs);
        let found = stacks.file_of(p).is_some();
        drop(mapping);
        assert!(found);
    }

    /// Many threads at once give each the stack it gets alone, whatever
    /// its registers (none, garbage, a stack pointer anywhere in a page).
    #[test]
    fn many_walks_at_once_are_each_walk_alone() {
        let pid = std::process::id();
        let garbage: Vec<u64> = (0..4096u64)
            .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15))
            .collect();
        let code = many_walks_at_once_are_each_walk_alone as *const () as u64;
        let top = garbage.as_ptr() as u64;
        let regs: Vec<UserRegs> = (0..700u64)
            .map(|i| UserRegs {
                ip: if i % 7 == 0 { 0 } else { code + i % 5 },
                sp: top + 8 * (i * 13 % 3000),
                bp: garbage[(i % 4096) as usize],
                ..UserRegs::default()
            })
            .collect();
        let mut alone = Stacks::new(pid).unwrap();
        let want: Vec<Vec<u64>> = regs.iter().map(|r| alone.unwind(r)).collect();
        let mut together = Stacks::new(pid).unwrap();
        let mut got = vec![Vec::new(); regs.len()];
        together.unwind_each(&regs, |i, s| got[i] = s.to_vec());
        assert_eq!(got, want);
        assert!(
            together.memory_reads() < alone.memory_reads(),
            "{} reads together, {} alone",
            together.memory_reads(),
            alone.memory_reads()
        );
    }

    #[test]
    fn no_or_garbage_registers_stop_cleanly() {
        let pid = std::process::id();
        let mut stacks = Stacks::new(pid).unwrap();
        assert!(stacks.unwind(&UserRegs::default()).is_empty());
        // A real code address over a stack of garbage words.
        let garbage: Vec<u64> = (0..4096u64)
            .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15))
            .collect();
        let code = no_or_garbage_registers_stop_cleanly as *const () as u64;
        for (ip, sp, bp) in [
            (code, garbage.as_ptr() as u64, garbage[7]),
            (code, 8, 16),
            (code, u64::MAX - 7, u64::MAX),
            (0x10, 0x20, 0x30),
            (u64::MAX, garbage.as_ptr() as u64, 0),
        ] {
            let regs = UserRegs {
                ip,
                sp,
                bp,
                ..UserRegs::default()
            };
            let got = stacks.unwind(&regs);
            assert_eq!(got.first(), Some(&ip));
            assert!(got.len() <= MAX_FRAMES);
        }
    }

    /// Hostile CFI: a copy of libc with bytes of its `.eh_frame` and
    /// `.eh_frame_hdr` overwritten at random, mapped executable, unwound
    /// from many addresses over a stack of garbage: walks end, nothing
    /// panics, nothing reads out of bounds.
    #[test]
    fn corrupted_cfi_never_panics() {
        let Ok(libc) = std::fs::read("/usr/lib/x86_64-linux-gnu/libc.so.6") else {
            eprintln!("no /usr/lib/x86_64-linux-gnu/libc.so.6: nothing to corrupt");
            return;
        };
        let mut frames = 0;
        for seed in 1..=6u64 {
            frames += corrupt_and_walk(libc.clone(), seed);
        }
        // Some walks went past their first frame, through the library.
        assert!(frames > 6 * 2000, "{frames}");
        eprintln!("6 x 2000 walks over corrupted CFI: {frames} frames");
    }

    fn corrupt_and_walk(mut bytes: Vec<u8>, seed: u64) -> usize {
        use object::{Object, ObjectSection};
        let mut ranges = Vec::new();
        let text = {
            let elf = object::File::parse(&bytes[..]).unwrap();
            for name in [".eh_frame", ".eh_frame_hdr"] {
                let s = elf.section_by_name(name).unwrap();
                let (off, len) = s.file_range().unwrap();
                ranges.push(off as usize..(off + len) as usize);
            }
            let (off, len) = elf.section_by_name(".text").unwrap().file_range().unwrap();
            off..off + len
        };
        let mut x = 0x2545_f491_4f6c_dd1du64.wrapping_mul(seed);
        let mut rng = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for r in &ranges {
            for _ in 0..r.len() / 50 {
                let at = r.start + (rng() as usize) % r.len();
                bytes[at] = rng() as u8;
            }
        }
        let path =
            std::env::temp_dir().join(format!("rip-badcfi-{}-{seed}.so", std::process::id()));
        std::fs::write(&path, &bytes).unwrap();
        let f = std::fs::File::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        // SAFETY: a private read-only executable mapping of the whole
        // file; never executed nor dereferenced here, unmapped below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes.len(),
                libc::PROT_READ | libc::PROT_EXEC,
                libc::MAP_PRIVATE,
                std::os::fd::AsRawFd::as_raw_fd(&f),
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED);
        let base = base as u64;
        // Garbage that looks like a stack: code addresses of the corrupted
        // library, pointers into itself, and noise, so that walks go on
        // through the corrupted CFI instead of stopping at once.
        let mut garbage = vec![0u64; 8192];
        let g0 = garbage.as_ptr() as u64;
        for w in garbage.iter_mut() {
            *w = match rng() % 3 {
                0 => base + text.start + rng() % (text.end - text.start),
                1 => g0 + (rng() % 8192) * 8,
                _ => rng(),
            };
        }
        let mut stacks = Stacks::new(std::process::id()).unwrap();
        let mut frames = 0;
        for i in 0..2000u64 {
            let ip = base + text.start + rng() % (text.end - text.start);
            let sp = garbage.as_ptr() as u64 + (i % 4096) * 8;
            let regs = UserRegs {
                ip,
                sp,
                bp: if i % 2 == 0 { rng() } else { sp + 64 },
                ..UserRegs::default()
            };
            let got = stacks.unwind(&regs);
            assert!(!got.is_empty() && got.len() <= MAX_FRAMES);
            frames += got.len();
        }
        // SAFETY: unmapping what we mapped.
        unsafe { libc::munmap(base as *mut libc::c_void, bytes.len()) };
        frames
    }
}
