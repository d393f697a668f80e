//! Each thread's user stack in the report: a blocked thread's stack as it
//! was unwound; a running thread's hottest stack of the window, with its
//! sample count.
//!
//! Samples of a thread spinning in a loop land on many instructions of
//! the same function, each a different stack by its addresses: samples
//! are counted by their innermost *function* (and the exact return
//! addresses under it), so that the loop is one stack, shown as the
//! most frequent of its exact stacks.

use std::{collections::HashMap, sync::Arc};

use crate::{
    collect::stacks::threads::{ThreadStacks, UserStacks},
    model::{Frame, Report, StackSamples},
};

/// What samples are counted by: the innermost function (its name, else
/// its address), then the return addresses.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Hot<'a> {
    function: Option<&'a str>,
    addrs: Vec<u64>,
}

impl<'a> Hot<'a> {
    fn of(frames: &'a [Frame]) -> Hot<'a> {
        let function = frames.first().and_then(|f| f.function.as_deref());
        // With a name, the innermost address does not count; without one,
        // it is all there is.
        let from = usize::from(function.is_some()).min(frames.len());
        Hot {
            function,
            addrs: frames[from..].iter().map(|f| f.addr).collect(),
        }
    }
}

/// Sets `frames` (and `stack_samples`) of every thread `user` has stacks
/// for; `frames[i]` are the symbolized frames of `user.stacks[i]`.
pub(crate) fn attach(report: &mut Report, user: &UserStacks, frames: &[Arc<[Frame]>]) {
    let get = |i: usize| frames.get(i).cloned().unwrap_or_default();
    for t in &mut report.threads {
        let Some(s) = u32::try_from(t.tid)
            .ok()
            .and_then(|tid| user.threads.get(&tid))
        else {
            continue;
        };
        match s {
            ThreadStacks::Unwound(i) => t.frames = get(*i),
            ThreadStacks::Sampled(counts) => {
                if let Some((i, samples)) = hottest(counts, frames) {
                    t.frames = get(i);
                    t.stack_samples = Some(samples);
                }
            }
        }
    }
    report.warnings.extend(user.warnings.iter().cloned());
}

/// The hottest stack among a thread's samples: the most sampled
/// (function, return addresses), shown as its most frequent exact stack.
fn hottest(counts: &[(usize, u64)], frames: &[Arc<[Frame]>]) -> Option<(usize, StackSamples)> {
    let total = counts.iter().map(|c| c.1).sum();
    // Hot stack → (samples, its most frequent exact stack and its count).
    let mut hot: HashMap<Hot<'_>, (u64, usize, u64)> = HashMap::new();
    for &(i, n) in counts {
        let Some(f) = frames.get(i) else { continue };
        let e = hot.entry(Hot::of(f)).or_insert((0, i, 0));
        e.0 += n;
        if n > e.2 || (n == e.2 && i < e.1) {
            (e.1, e.2) = (i, n);
        }
    }
    hot.into_values()
        .max_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)))
        .map(|(count, i, _)| (i, StackSamples { count, total }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack(leaf: (u64, Option<&str>), rest: &[u64]) -> Arc<[Frame]> {
        std::iter::once(Frame {
            addr: leaf.0,
            function: leaf.1.map(str::to_string),
            ..Frame::default()
        })
        .chain(rest.iter().map(|&addr| Frame {
            addr,
            ..Frame::default()
        }))
        .collect()
    }

    /// A loop sampled at three instructions of `spin` beats a single stack
    /// sampled more often than any one of them, and is shown as its most
    /// frequent instruction.
    #[test]
    fn samples_count_by_function() {
        let frames = vec![
            stack((0x10, Some("spin")), &[0x100, 0x200]),
            stack((0x14, Some("spin")), &[0x100, 0x200]),
            stack((0x18, Some("spin")), &[0x100, 0x200]),
            stack((0x50, Some("other")), &[0x100, 0x200]),
            // spin called from elsewhere: another stack.
            stack((0x10, Some("spin")), &[0x300, 0x200]),
        ];
        let counts = [(0, 2), (1, 3), (2, 2), (3, 4), (4, 1)];
        let (i, s) = hottest(&counts, &frames).unwrap();
        assert_eq!(i, 1);
        assert_eq!(
            s,
            StackSamples {
                count: 7,
                total: 12
            }
        );
        // Unnamed leaves count by address.
        let frames = vec![stack((0x10, None), &[1]), stack((0x14, None), &[1])];
        let (i, s) = hottest(&[(0, 2), (1, 3)], &frames).unwrap();
        assert_eq!((i, s.count, s.total), (1, 3, 5));
        assert_eq!(hottest(&[], &frames), None);
        // An index with no frames (never made) is skipped, not a panic.
        assert_eq!(hottest(&[(9, 1)], &frames).map(|h| h.1.count), None);
    }
}
