//! Stacks of the threads that run: while a session observes, a software
//! cpu-clock event on each CPU samples whatever runs there (perf-event
//! crate), each sample carrying the user registers and a copy of the top
//! of the user stack; samples of the target are unwound from that copy
//! with the same framehop unwinder as blocked threads.
//!
//! One event per CPU, not per thread: 10,000 threads cost two file
//! descriptors here, not 10,000, and threads created during the window are
//! sampled too. The samples of other processes are dropped unread.

use std::{collections::HashMap, io};

use perf_event::{Builder, SampleFlag, data::Record, events::Software};

use super::unwind::{Stacks, regs};

/// Samples per second on each CPU: the usual profiler rate, off the timer
/// tick's multiples so that sampling does not beat with periodic work.
const FREQUENCY: u64 = 99;

/// Bytes of user stack copied into each sample. Most threads' stacks are
/// shallower; a deeper stack is cut where the copy ends.
const STACK_COPY: u32 = 16 << 10;

/// Ring buffer per CPU: at 99 samples a second of ~16 KiB each, 1.6 MB a
/// second, drained every 50 ms as the session observes.
const RING_BYTES: usize = 2 << 20;

/// Samples kept per window (a bound on memory whatever the target does);
/// samples beyond it are counted and dropped.
const MAX_SAMPLES: u64 = 200_000;

/// `PERF_REG_X86_BP`, `_SP`, `_IP` (arch/x86/include/uapi/asm/perf_regs.h):
/// the registers a sample carries, in this order.
const REGS: u64 = 1 << 6 | 1 << 7 | 1 << 8;

/// Per thread id, each stack its samples had and how many had it.
pub(crate) type Samples = HashMap<u32, HashMap<Vec<u64>, u64>>;

/// The per-CPU sampling events of one target.
pub(crate) struct Sampler {
    pid: u32,
    cpus: Vec<perf_event::Sampler>,
    samples: Samples,
    /// Samples of the target in the window.
    taken: u64,
    /// Samples lost: the kernel's ring was full, or past [`MAX_SAMPLES`].
    lost: u64,
}

impl Sampler {
    /// Starts sampling every online CPU for the threads of `pid`.
    pub(crate) fn start(pid: u32) -> io::Result<Sampler> {
        let mut cpus = Vec::new();
        for cpu in online_cpus()? {
            let mut b = Builder::new(Software::CPU_CLOCK);
            b.one_cpu(cpu)
                .any_pid()
                .sample_frequency(FREQUENCY)
                .sample(SampleFlag::TID | SampleFlag::REGS_USER | SampleFlag::STACK_USER)
                .sample_regs_user(REGS)
                .sample_stack_user(STACK_COPY)
                // A thread spinning in system calls is running too: its
                // user registers are those of its last kernel entry.
                .include_kernel()
                .exclude_idle(true)
                .enabled(true);
            cpus.push(b.build()?.sampled(RING_BYTES)?);
        }
        Ok(Sampler {
            pid,
            cpus,
            samples: HashMap::new(),
            taken: 0,
            lost: 0,
        })
    }

    /// Reads the samples the kernel has written, unwinding the target's.
    pub(crate) fn drain(&mut self, stacks: &mut Stacks) {
        for cpu in &mut self.cpus {
            while let Some(rec) = cpu.next_record() {
                let sample = match rec.parse_record() {
                    Ok(Record::Sample(s)) => s,
                    Ok(Record::Lost(l)) => {
                        self.lost += l.lost;
                        continue;
                    }
                    // Other records, and records that do not parse (the
                    // kernel's bytes, bounds-checked by the parser), are
                    // skipped.
                    _ => continue,
                };
                if sample.pid() != Some(self.pid) {
                    continue;
                }
                let (Some(tid), Some(r), Some(stack)) =
                    (sample.tid(), sample.regs_user(), sample.stack_user())
                else {
                    continue;
                };
                // No user registers (a sample in a kernel thread, or while
                // the thread was exiting) give no stack.
                let [bp, sp, ip] = r.regs[..] else { continue };
                if self.taken >= MAX_SAMPLES {
                    self.lost += 1;
                    continue;
                }
                self.taken += 1;
                let addrs = stacks.unwind_copy(&regs(ip, sp, bp), stack);
                if addrs.is_empty() {
                    continue;
                }
                *self
                    .samples
                    .entry(tid)
                    .or_default()
                    .entry(addrs)
                    .or_default() += 1;
            }
        }
    }

    /// The samples of the window so far, and how many were lost; the next
    /// window starts empty.
    pub(crate) fn take(&mut self) -> (Samples, u64) {
        self.taken = 0;
        (
            std::mem::take(&mut self.samples),
            std::mem::take(&mut self.lost),
        )
    }
}

/// The online CPUs, from `/sys/devices/system/cpu/online` (`0-3,6,8-9`).
fn online_cpus() -> io::Result<Vec<usize>> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online")?;
    parse_cpu_list(&text).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "unreadable /sys/devices/system/cpu/online",
        )
    })
}

fn parse_cpu_list(text: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b): (usize, usize) = match part.split_once('-') {
            Some((a, b)) => (a.parse().ok()?, b.parse().ok()?),
            None => {
                let a = part.parse().ok()?;
                (a, a)
            }
        };
        // A machine has at most thousands of CPUs: a longer range is not
        // a CPU list.
        if b < a || b - a > 65_536 {
            return None;
        }
        out.extend(a..=b);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-1\n"), Some(vec![0, 1]));
        assert_eq!(parse_cpu_list("0,2-3,7"), Some(vec![0, 2, 3, 7]));
        assert_eq!(parse_cpu_list("0"), Some(vec![0]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
        assert_eq!(parse_cpu_list("0-99999999"), None);
    }
}
