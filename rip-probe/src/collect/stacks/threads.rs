//! The user stacks of a report: each blocked thread's stack unwound from
//! the registers the task iterator saved, each running thread's stacks
//! from the samples taken while the session observed. Stacks are interned:
//! 10,000 threads blocked in the same place make one stack, which later
//! stages symbolize once.

use rip_ebpf::UserRegs;

use super::{
    sample::{Sampler, Samples},
    unwind::{Stacks, StacksError},
};

/// Distinct stacks (addresses, innermost first), and which threads have
/// which.
#[derive(Debug, Default)]
pub(crate) struct UserStacks {
    /// Each distinct stack once.
    pub(crate) stacks: Vec<Vec<u64>>,
    /// Per thread id: its stack (blocked) or its sampled stacks.
    pub(crate) threads: crate::util::FastMap<u32, ThreadStacks>,
    /// Things to tell the user (stacks cut short, sampling unavailable).
    pub(crate) warnings: Vec<String>,
}

/// The stacks of one thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ThreadStacks {
    /// Blocked: its stack now, an index into [`UserStacks::stacks`].
    Unwound(usize),
    /// Ran during the window: the stacks its samples had, with how many
    /// samples had each.
    Sampled(Vec<(usize, u64)>),
}

/// Gives each distinct stack one index.
#[derive(Debug, Default)]
pub(crate) struct Interner {
    index: crate::util::FastMap<Vec<u64>, usize>,
    stacks: Vec<Vec<u64>>,
}

impl Interner {
    /// The index of `stack`, added if new.
    pub(crate) fn intern(&mut self, stack: Vec<u64>) -> usize {
        if let Some(&i) = self.index.get(&stack) {
            return i;
        }
        let i = self.stacks.len();
        self.stacks.push(stack.clone());
        self.index.insert(stack, i);
        i
    }

    /// [`Self::intern`] of a borrowed stack: copied only when new.
    pub(crate) fn intern_slice(&mut self, stack: &[u64]) -> usize {
        match self.index.get(stack) {
            Some(&i) => i,
            None => self.intern(stack.to_vec()),
        }
    }

    /// The stacks, by index.
    pub(crate) fn into_stacks(self) -> Vec<Vec<u64>> {
        self.stacks
    }
}

/// Collects the user stacks of one process across a session: the unwinder
/// (binaries parsed once, on first use) is made on the first report and
/// kept for the next ones (`--watch`).
pub(crate) struct Collector {
    pid: u32,
    stacks: Option<Stacks>,
    sampler: Option<Sampler>,
    /// Why sampling could not start, said once in the next report.
    sampling_failed: Option<String>,
}

impl Collector {
    /// A collector for process `pid`; nothing is read yet.
    pub(crate) fn new(pid: u32) -> Collector {
        Collector {
            pid,
            stacks: None,
            sampler: None,
            sampling_failed: None,
        }
    }

    /// Starts sampling the threads that run (once; a failure is told in
    /// the next report, and the report goes on without samples).
    pub(crate) fn start_sampling(&mut self) {
        if self.sampler.is_some() || self.sampling_failed.is_some() {
            return;
        }
        match Sampler::start(self.pid) {
            Ok(s) => self.sampler = Some(s),
            Err(e) => {
                self.sampling_failed = Some(format!(
                    "running threads have no stacks: cannot sample them (perf_event_open: {e}); \
                     rip-probe needs root or CAP_PERFMON"
                ))
            }
        }
    }

    /// Unwinds the samples taken since the last call (the session calls
    /// it as it observes, so that the kernel's rings do not fill up).
    pub(crate) fn drain(&mut self) {
        let Some(sampler) = &mut self.sampler else {
            return;
        };
        if self.stacks.is_none() {
            match Stacks::new(self.pid) {
                Ok(s) => self.stacks = Some(s),
                Err(_) => return,
            }
        }
        if let Some(stacks) = &mut self.stacks {
            sampler.drain(stacks);
        }
    }

    /// The unwinder, made on first use.
    pub(crate) fn unwinder(&mut self) -> Result<&mut Stacks, StacksError> {
        if self.stacks.is_none() {
            self.stacks = Some(Stacks::new(self.pid)?);
        }
        Ok(self.stacks.as_mut().expect("made above"))
    }

    /// The stacks of the `blocked` threads (asleep in the kernel, so that
    /// their saved registers and their stack agree: thread id and
    /// registers), read now, while they run on; for the others, the stacks
    /// their samples had in the window.
    pub(crate) fn snapshot(&mut self, blocked: &[(u32, UserRegs)]) -> UserStacks {
        self.drain();
        let (sampled, lost) = match &mut self.sampler {
            Some(s) => s.take(),
            None => Default::default(),
        };
        let mut out = self.build(blocked, sampled);
        if let Some(why) = self.sampling_failed.take() {
            out.warnings.push(why);
        }
        if lost > 0 {
            out.warnings.push(format!(
                "{lost} samples of running threads were lost (the kernel's buffer was full)"
            ));
        }
        out
    }

    /// [`Self::snapshot`] with the samples given.
    fn build(&mut self, blocked: &[(u32, UserRegs)], sampled: Samples) -> UserStacks {
        let mut out = UserStacks::default();
        let mut interner = Interner::default();
        let stacks = match self.unwinder() {
            Ok(s) => Some(s),
            Err(e) => {
                out.warnings.push(format!("no user stacks: {e}"));
                None
            }
        };
        if let Some(stacks) = stacks {
            let cut_before = stacks.cut_stacks();
            let regs: Vec<UserRegs> = blocked.iter().map(|(_, r)| *r).collect();
            out.threads.reserve(blocked.len());
            stacks.unwind_each(&regs, |i, addrs| {
                if !addrs.is_empty() {
                    out.threads.insert(
                        blocked[i].0,
                        ThreadStacks::Unwound(interner.intern_slice(addrs)),
                    );
                }
            });
            let cut = stacks.cut_stacks() - cut_before;
            if cut > 0 {
                out.warnings.push(format!(
                    "{cut} user stacks were cut short: a binary's unwind information could not be read"
                ));
            }
        }
        for (tid, counts) in sampled {
            if out.threads.contains_key(&tid) {
                continue;
            }
            let mut v: Vec<(usize, u64)> = counts
                .into_iter()
                .map(|(s, n)| (interner.intern(s), n))
                .collect();
            v.sort_unstable();
            out.threads.insert(tid, ThreadStacks::Sampled(v));
        }
        out.stacks = interner.into_stacks();
        out
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::collect::stacks::unwind::regs;

    #[test]
    fn identical_stacks_are_one() {
        let mut i = Interner::default();
        let a = i.intern(vec![1, 2, 3]);
        let b = i.intern(vec![4, 5]);
        assert_eq!(i.intern(vec![1, 2, 3]), a);
        assert_ne!(a, b);
        assert_eq!(i.into_stacks(), vec![vec![1, 2, 3], vec![4, 5]]);
    }

    /// Threads of our own process, asleep: each gets a stack, identical
    /// ones share one; a sampled thread that is also blocked keeps its
    /// unwound stack.
    #[test]
    fn a_task_list_with_garbage_and_samples() {
        let pid = std::process::id();
        let mut c = Collector::new(pid);
        let code = identical_stacks_are_one as *const () as u64;
        let stack = [0u64; 64];
        let task = |tid, ip| (tid, regs(ip, stack.as_ptr() as u64, 0));
        let blocked = [task(1, code), task(2, code), task(3, 0)];
        let mut sampled = HashMap::new();
        sampled.insert(4, HashMap::from([(vec![7, 8], 3)]));
        sampled.insert(5, HashMap::from([(vec![7, 8], 3), (vec![9], 1)]));
        let got = c.build(&blocked, sampled);
        let one = got.threads[&1].clone();
        assert_eq!(got.threads[&2], one);
        assert!(!got.threads.contains_key(&3), "no registers, no stack");
        let ThreadStacks::Unwound(i) = one else {
            panic!("{one:?}")
        };
        assert_eq!(got.stacks[i][0], code);
        let ThreadStacks::Sampled(s4) = &got.threads[&4] else {
            panic!()
        };
        let ThreadStacks::Sampled(s5) = &got.threads[&5] else {
            panic!()
        };
        assert_eq!(s4.len(), 1);
        assert_eq!(s5.len(), 2);
        assert!(s5.contains(&(s4[0].0, 3)), "one stack, interned once");
    }
}
